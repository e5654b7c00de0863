/* The CPU device's engine: one thread that interprets the command words of both queue kinds
 * (compute and copy) from their rings, and runs each launch's work-groups, alone or shared with the
 * helper threads of its pool (cpu_pool.c).
 *
 * The engine runs each queue's commands until the queue is empty or blocked at a wait, then turns
 * to the other queue; when neither can move it spins (pause) while work is in flight, then sleeps
 * on the signal it waits for (or its doorbell). A bound graph queue reaches it as one CALL; each
 * EXEC of a one-group launch costs a decode and an indirect call.
 *
 * For hang reports each queue publishes the command it is at (cur) and the one before (prev) with
 * two relaxed stores per command. A lost device makes the engine drop what is queued. */
#include <inttypes.h>
#include <setjmp.h>
#include <string.h>

#include "core/backend.h"
#include "core/cmd_cursor.h"
#include "core/command.h"
#include "core/device.h"
#include "core/host_wait.h"
#include "core/object.h"
#include "core/options.h"
#include "core/remote.h"
#include "core/signal.h"
#include "cpu/cpu_engine.h"
#include "cpu/cpu_internal.h"

/* Chunks of work-groups per thread that the pool splits a launch into, and the fewest work-items
 * a chunk has (see pool_run). */
#define CPU_CHUNKS_PER_THREAD 8
#define CPU_MIN_CHUNK_ITEMS 2048

/* How long the engine naps between looks while host threads run its queues: it wakes by itself
 * after that, so a host never has to pay a wake-up call on its way out. */
#define CPU_DEFER_NAP_NS UINT64_C(100000)

static bool take_queues(cpu_engine_t *e, int who) {
  int expected = OWN_FREE;
  return atomic_compare_exchange_strong_explicit(&e->owner, &expected, who, memory_order_acquire,
                                                 memory_order_relaxed);
}

static void give_queues(cpu_engine_t *e) {
  atomic_store_explicit(&e->owner, OWN_FREE, memory_order_release);
}

const uint32_t *hcq__cpu_engine_current_command(const hcq__cpu_fault_ctx_t *ctx) {
  const cpu_engine_t *e = ctx->owner;
  const cpu_queue_t *q = e->running;
  return q ? atomic_load_explicit(&q->c.cur, memory_order_relaxed) : NULL;
}

/* ---- running groups ---- */

/* After a fault lost the device mid-job: no more chunks are taken (hcq__cpu_pool_work checks), and
 * the helpers still inside one are waited for, so that the job's buffers, which the user may free
 * as soon as the device reports lost, are not written after that. A helper stuck in a kernel is
 * waited for no longer than CPU_POOL_QUIESCE_MS: it is abandoned, as a stuck kernel is at close. */
#define CPU_POOL_QUIESCE_MS 2000
static void pool_quiesce(cpu_pool_t *p) {
  atomic_store_explicit(&p->next_group, p->total, memory_order_seq_cst);
  uint64_t deadline = hcq__deadline_after_ms(CPU_POOL_QUIESCE_MS);
  for (unsigned i = 0; atomic_load_explicit(&p->active, memory_order_seq_cst); i++) {
    if (hcq__now_ns() >= deadline) return;
    hcq__spin_step(i);
  }
}

/* The engine's own share of a job, when faults come back (HCQ_CPU_ISOLATE, HCQ_VALIDATE): a fault
 * jumps back here rather than past pool_run, which must still leave the job and wait for the
 * helpers in it. False when the share faulted (the device is lost then). */
static __attribute__((noinline)) bool pool_share_isolated(cpu_pool_t *p,
                                                          hcq__cpu_fault_ctx_t *ctx) {
  sigjmp_buf jump, *outer = ctx->jump;
  bool ok = true;
  if (sigsetjmp(jump, 0) == 0) {
    ctx->jump = &jump;
    hcq__cpu_pool_work(p);
  } else {
    ok = false;
    hcq__cpu_isolated_fault(ctx);
  }
  ctx->jump = outer;
  return ok;
}

static void pool_run(cpu_pool_t *p, hcq_cpu_kernel_fn fn, void *const *bufs, const int32_t *vals,
                     const uint32_t gsz[3], const uint32_t lsz[3], uint64_t total) {
  /* Even: the last job's generation (odd only if a lost device interrupted a publish). */
  uint32_t g = atomic_load_explicit(&p->gen, memory_order_relaxed) & ~1u;
  atomic_store_explicit(&p->gen, g + 1, memory_order_seq_cst); /* odd: job being written */
  for (unsigned i = 0; atomic_load_explicit(&p->active, memory_order_seq_cst); i++) {
    if (hcq__device_is_lost(p->dev)) return; /* a helper stuck in a kernel never leaves */
    hcq__spin_step(i);
  }
  p->fn = fn, p->bufs = bufs, p->vals = vals, p->total = total;
  for (int i = 0; i < 3; i++) p->gsz[i] = gsz[i], p->lsz[i] = lsz[i];
  /* Several chunks per thread: a thread that the scheduler takes off its core mid-launch (other
   * processes on a shared machine) holds up the others by one chunk at most. A chunk is still
   * worth the two atomic operations on a line shared between cores that taking it costs. */
  uint64_t chunk = total / ((uint64_t)(atomic_load(&p->nactive) + 1) * CPU_CHUNKS_PER_THREAD);
  /* Never coarser than a quarter of the launch size that pays for helpers (HCQ_CPU_MIN_PARALLEL):
   * a launch big enough to share is always split. */
  uint64_t group_items = (uint64_t)lsz[0] * lsz[1] * lsz[2];
  uint64_t min_items =
      p->min_parallel / 4 < CPU_MIN_CHUNK_ITEMS ? p->min_parallel / 4 : CPU_MIN_CHUNK_ITEMS;
  uint64_t min_chunk = (min_items + group_items - 1) / group_items;
  if (chunk < min_chunk) chunk = min_chunk;
  p->chunk = chunk ? chunk : 1;
  atomic_store_explicit(&p->next_group, 0, memory_order_relaxed);
  atomic_store_explicit(&p->remaining, total, memory_order_relaxed);
  uint32_t done = atomic_load_explicit(&p->done_seq, memory_order_relaxed);
  atomic_store_explicit(&p->gen, g + 2, memory_order_seq_cst); /* even: published */
  if (atomic_load_explicit(&p->helpers_sleeping, memory_order_seq_cst)) hcq__futex_wake(&p->gen);
  wake_assisting_hosts(p, true);
  atomic_fetch_add_explicit(&p->active, 1, memory_order_seq_cst);
  hcq__cpu_fault_ctx_t *ctx = hcq__cpu_fault_ctx;
  if (ctx && ctx->jump)
    (void)pool_share_isolated(p, ctx);
  else
    hcq__cpu_pool_work(p);
  atomic_fetch_sub_explicit(&p->active, 1, memory_order_seq_cst);
  while (atomic_load_explicit(&p->remaining, memory_order_acquire)) {
    /* A thread that faulted (isolation) never finishes its chunk: the device is lost then. */
    if (hcq__device_is_lost(p->dev)) {
      pool_quiesce(p);
      return;
    }
    if (spin_while_equal32(&p->done_seq, done)) continue;
    atomic_store_explicit(&p->worker_sleeping, 1, memory_order_seq_cst);
    if (atomic_load_explicit(&p->remaining, memory_order_seq_cst) && !hcq__device_is_lost(p->dev))
      hcq__futex_wait(&p->done_seq, done, 0);
    atomic_store_explicit(&p->worker_sleeping, 0, memory_order_seq_cst);
  }
}

static inline void exec_command(cpu_engine_t *e, const uint32_t *w) {
  hcq_cpu_kernel_fn fn = (hcq_cpu_kernel_fn)(uintptr_t)hcq__rd64(w + HCQ__EXEC_FN);
  void *const *bufs = (void *const *)(uintptr_t)hcq__rd64(w + HCQ__EXEC_ARGS);
  const int32_t *vals =
      (const int32_t *)(const void *)((const char *)bufs + (size_t)w[HCQ__EXEC_NBUFS] * 8);
  const uint32_t *gsz = w + HCQ__EXEC_GLOBAL, *lsz = w + HCQ__EXEC_LOCAL;
  /* Launches are validated on record, but a patched dim may still make the grid absurd. */
  uint64_t plane = (uint64_t)gsz[0] * gsz[1], total;
  if (__builtin_mul_overflow(plane, (uint64_t)gsz[2], &total)) return;
  if (total == 0 || lsz[0] == 0 || lsz[1] == 0 || lsz[2] == 0)
    return; /* an empty launch runs nothing */
  if (total == 1) {
    hcq_launch_t l = {{0, 0, 0}, {1, 1, 1}, {lsz[0], lsz[1], lsz[2]}};
    fn(bufs, vals, &l);
  } else if (atomic_load_explicit(&e->pool.nactive, memory_order_relaxed) &&
             (unsigned __int128)total * lsz[0] * lsz[1] * lsz[2] >= e->pool.min_parallel) {
    /* Small launches stay on the engine: waking helpers costs more than they save. */
    pool_run(&e->pool, fn, bufs, vals, gsz, lsz, total);
  } else {
    run_groups(fn, bufs, vals, gsz, lsz, 0, total);
  }
}

/* With isolation, a fault in the kernel returns here through the handler; false then (device lost).
 */
static __attribute__((noinline)) bool exec_isolated(cpu_engine_t *e, const uint32_t *w) {
  sigjmp_buf jump;
  if (sigsetjmp(jump, 0) == 0) {
    e->fault.jump = &jump;
    exec_command(e, w);
    e->fault.jump = NULL;
    return true;
  }
  e->fault.jump = NULL;
  hcq__cpu_isolated_fault(&e->fault);
  return false;
}

/* ---- the engine: both queues, one thread ---- */

static inline void full_barrier(cpu_engine_t *e) {
#if defined(__SANITIZE_THREAD__)
  /* ThreadSanitizer does not model fences; a sequentially consistent read-modify-write is one. */
  atomic_fetch_add_explicit(&e->barrier_word, 0, memory_order_seq_cst);
#else
  (void)e;
  atomic_thread_fence(memory_order_seq_cst);
#endif
}

enum { RUN_DONE, RUN_BLOCKED, RUN_LOST };

/* A COPY with one end on another rank (docs/mpi.md): the MPI layer posts its send or receive and
 * this thread polls it, so a hop between ranks crosses no thread here. The queue stays at the COPY
 * until the request completed (the bytes are in place, or may be reused); the other queue runs on.
 */
static int remote_copy(cpu_engine_t *e, cpu_queue_t *q, const uint32_t *w) {
  const hcq__remote_hooks_t *hooks = atomic_load_explicit(&hcq__remote, memory_order_acquire);
  if (!hooks || !hooks->copy_start) {
    hcq__device_mark_lost(e->dev, "a copy to or from another rank, with the MPI layer stopped");
    return RUN_LOST;
  }
  if (!q->remote_op && !(q->remote_op = hooks->copy_start(e->dev, w))) return RUN_LOST;
  int r = hooks->copy_poll(e->dev, q->remote_op);
  if (r == 0) return RUN_BLOCKED;
  q->remote_op = NULL;
  return r > 0 ? RUN_DONE : RUN_LOST;
}

static uint64_t engine_clock(void *e) { return hcq__fast_clock_now(&((cpu_engine_t *)e)->clock); }

/* ---- runs of kernels ---- */

/* Reading the clock costs several times an empty kernel (rdtsc: ~8 ns here), so a run of kernels
 * stamps (hcq__cursor_stamp, for hang reports) its first kernel, the next, and then one in a window
 * that doubles up to CPU_STAMP_WINDOW_MAX while the kernels since the last read took under
 * CPU_SLOW_KERNEL_NS each, and falls back to 1 (every kernel) when they took longer: a slow or
 * stuck kernel is timed from its start. One not stamped leaves a report to its own first look,
 * which is later: "for at least N ms" stays true, only less. */
#define CPU_STAMP_WINDOW_MAX 256u
#define CPU_SLOW_KERNEL_NS UINT64_C(500)

typedef struct cpu_kernel_stamps {
  const uint32_t *last_w; /* the kernel the clock was last read for in this run (NULL: none yet) */
  uint64_t last_ns;
  unsigned window;
} cpu_kernel_stamps_t;

/* Reads the clock for the kernel at w and stamps it. Returns how many kernels from w on to run
 * before the next read. */
static __attribute__((noinline)) unsigned stamp_kernel(cpu_engine_t *e, hcq__cmd_cursor_t *c,
                                                       const uint32_t *w, cpu_kernel_stamps_t *ks) {
  uint64_t now = engine_clock(e);
  if (ks->last_w) {
    uint64_t kernels = (uint64_t)(w - ks->last_w) / HCQ__LEN_EXEC;
    bool slow = now - ks->last_ns > kernels * CPU_SLOW_KERNEL_NS;
    ks->window = slow                                ? 1
                 : ks->window < CPU_STAMP_WINDOW_MAX ? 2 * ks->window
                                                     : CPU_STAMP_WINDOW_MAX;
  }
  ks->last_w = w, ks->last_ns = now;
  hcq__cursor_stamp(c, w, now);
  /* The engine is the only writer: no read-modify-write needed. */
  atomic_store_explicit(&e->kernel_stamps,
                        atomic_load_explicit(&e->kernel_stamps, memory_order_relaxed) + 1,
                        memory_order_relaxed);
  return ks->window;
}

/* A launch of one work-group of a non-empty size: the common case, called straight from the words.
 * The grid's first two words are read as one, and two 32-bit sizes multiply exactly in 64 bits. */
static inline bool one_group(const uint32_t *gsz, const uint32_t *lsz) {
  return hcq__rd64(gsz) == ((UINT64_C(1) << 32) | 1) && gsz[2] == 1 &&
         (uint64_t)lsz[0] * lsz[1] != 0 && lsz[2] != 0;
}

/* Runs the EXEC at w (published as the queue's current command); false when the device was lost. */
static inline bool run_kernel(cpu_engine_t *e, hcq__cmd_cursor_t *c, const uint32_t *w,
                              const _Atomic bool *lost) {
  atomic_store_explicit(&c->cur, w, memory_order_relaxed);
  const uint32_t *gsz = w + HCQ__EXEC_GLOBAL, *lsz = w + HCQ__EXEC_LOCAL;
  if (__builtin_expect(one_group(gsz, lsz), 1)) {
    hcq_cpu_kernel_fn fn = (hcq_cpu_kernel_fn)(uintptr_t)hcq__rd64(w + HCQ__EXEC_FN);
    void *const *bufs = (void *const *)(uintptr_t)hcq__rd64(w + HCQ__EXEC_ARGS);
    const int32_t *vals =
        (const int32_t *)(const void *)((const char *)bufs + (size_t)w[HCQ__EXEC_NBUFS] * 8);
    hcq_launch_t l = {{0, 0, 0}, {1, 1, 1}, {lsz[0], lsz[1], lsz[2]}};
    fn(bufs, vals, &l);
  } else {
    exec_command(e, w);
  }
  return !atomic_load_explicit(lost, memory_order_acquire);
}

static inline bool exec_follows(const uint32_t *w, const uint32_t *end) {
  return w < end && HCQ__HDR_OP(w[0]) == HCQ__OP_EXEC;
}

/* Runs the EXECs from c->w while they follow one another (the engine's own, neither isolated nor
 * validated): per kernel, the words are read where they lie (patched in place), the kernel called,
 * two relaxed stores tell hang reports where the queue is, and one load whether the device was
 * lost. The first kernel of each window is stamped (stamp_kernel); a window never reaches past the
 * list's end, so inside one only the next header is looked at. RUN_DONE with c->w past the run, or
 * RUN_LOST at the kernel that lost the device. */
static int run_kernels(cpu_engine_t *e, cpu_queue_t *q) {
  hcq__cmd_cursor_t *c = &q->c;
  const uint32_t *w = c->w, *end = c->end;
  const _Atomic bool *lost = &e->dev->lost;
  if (!exec_follows(w + HCQ__LEN_EXEC, end)) {
    /* A lone kernel (an eager launch): stamped, with no window to size. */
    hcq__cursor_stamp(c, w, engine_clock(e));
    bool alive = run_kernel(e, c, w, lost);
    hcq__cursor_unstamp(c);
    if (!alive) return RUN_LOST;
    atomic_store_explicit(&c->prev, w, memory_order_relaxed);
    c->w = w + HCQ__LEN_EXEC;
    return RUN_DONE;
  }
  cpu_kernel_stamps_t ks = {NULL, 0, 1};
  bool alive = true;
  do {
    size_t fit = (size_t)(end - w) / HCQ__LEN_EXEC; /* >= 1: the EXEC at w is whole */
    unsigned n = stamp_kernel(e, c, w, &ks);
    if (n > fit) n = (unsigned)fit;
    alive = run_kernel(e, c, w, lost);
    hcq__cursor_unstamp(c);
    while (alive) {
      atomic_store_explicit(&c->prev, w, memory_order_relaxed);
      w += HCQ__LEN_EXEC;
      if (--n == 0 || HCQ__HDR_OP(w[0]) != HCQ__OP_EXEC) break;
      alive = run_kernel(e, c, w, lost);
    }
  } while (alive && exec_follows(w, end));
  c->w = w; /* a lost device leaves it at the kernel that lost it */
  return alive ? RUN_DONE : RUN_LOST;
}

/* Runs q's current entry until it ends, blocks at a wait, or the device is lost. */
static int run_entry(cpu_engine_t *e, cpu_queue_t *q) {
  e->running = q;
  for (;;) {
    if (q->c.w == q->c.end) {
      if (!hcq__cursor_return(&q->c)) return RUN_DONE;
      continue;
    }
    int ran = hcq__cursor_run_signal_op(&q->c, engine_clock, e);
    if (ran == HCQ__CMD_BLOCKED) return RUN_BLOCKED;
    if (ran == HCQ__CMD_RAN) continue;
    const uint32_t *w = q->c.w;
    switch (HCQ__HDR_OP(w[0])) {
      case HCQ__OP_BARRIER: full_barrier(e); break;
      case HCQ__OP_EXEC:
        if (e->on_host) {
          e->kernel_ahead = true; /* the queue waits here for the engine, like at a WAIT */
          return RUN_BLOCKED;
        }
        if (!e->dev->isolate && !hcq__validating) {
          int r = run_kernels(e, q);
          if (r != RUN_DONE) return r;
          continue;
        }
        hcq__cursor_stamp(&q->c, w, engine_clock(e));
        /* HCQ_VALIDATE arms the jump too: a kernel meeting a guard page loses its device, not the
         * process. */
        if (e->dev->isolate || hcq__validating) {
          if (!exec_isolated(e, w)) return RUN_LOST;
        } else {
          exec_command(e, w);
        }
        if (__builtin_expect(hcq__validating, 0) && !hcq__cpu_bounds_check(e->dev, w))
          return RUN_LOST;
        if (hcq__device_is_lost(e->dev)) return RUN_LOST;
        break;
      case HCQ__OP_COPY: {
        uint64_t dst = hcq__rd64(w + HCQ__COPY_DST), src = hcq__rd64(w + HCQ__COPY_SRC);
        if (!q->c.stamped) hcq__cursor_stamp(&q->c, w, engine_clock(e));
        if (__builtin_expect(hcq__addr_is_remote(dst) || hcq__addr_is_remote(src), 0)) {
          int r = remote_copy(e, q, w);
          if (r != RUN_DONE) return r;
          break;
        }
        memmove((void *)(uintptr_t)dst, (const void *)(uintptr_t)src,
                (size_t)hcq__rd64(w + HCQ__COPY_SIZE));
        break;
      }
      case HCQ__OP_CALL: hcq__cursor_call(&q->c, w); continue;
      default: break;
    }
    hcq__cursor_advance(&q->c, w);
  }
}

static void publish_tail(cpu_queue_t *q, uint64_t tail) {
  atomic_store_explicit(&q->tail, tail, memory_order_seq_cst);
  if (atomic_load_explicit(&q->space_waiters, memory_order_seq_cst)) {
    atomic_fetch_add_explicit(&q->tail_seq, 1, memory_order_seq_cst);
    hcq__futex_wake(&q->tail_seq);
  }
}

/* Drops everything queued (lost device): the completion counter jumps to what was submitted. */
static void drop_queue(cpu_queue_t *q) {
  if (q->remote_op) {
    const hcq__remote_hooks_t *hooks = atomic_load_explicit(&hcq__remote, memory_order_acquire);
    if (hooks) hooks->copy_drop(q->remote_op);
    q->remote_op = NULL;
  }
  hcq__cursor_clear(&q->c);
  q->pos = atomic_load_explicit(&q->head, memory_order_acquire);
  publish_tail(q, q->pos);
}

/* Runs q until it is empty or blocked; true when it got anywhere. */
static bool run_queue(cpu_engine_t *e, cpu_queue_t *q) {
  bool moved = false;
  for (;;) {
    if (!q->c.w) {
      uint64_t head = atomic_load_explicit(&q->head, memory_order_acquire);
      if (q->pos == head) {
        atomic_store_explicit(&q->c.cur, NULL, memory_order_relaxed);
        return moved;
      }
      uint64_t at = q->pos & (RING_WORDS - 1);
      const uint32_t *w = q->ring + at;
      if (HCQ__HDR_OP(w[0]) == HCQ__OP_JUMP) {
        q->pos += RING_WORDS - at;
        publish_tail(q, q->pos);
        continue;
      }
      q->entry_len = HCQ__HDR_LEN(w[0]);
      hcq__cursor_enter(&q->c, w, q->entry_len, NULL);
    }
    int r = run_entry(e, q);
    if (r == RUN_BLOCKED) return moved;
    moved = true;
    if (r == RUN_LOST) {
      drop_queue(q);
      return true;
    }
    q->c.w = q->c.end = NULL;
    q->pos += q->entry_len;
    publish_tail(q, q->pos);
    /* a host asleep in assist may wait for what it signalled */
    wake_assisting_hosts(&e->pool, false);
  }
}

/* One pass over both queues, compute first; true when an entry of either ended. */
static bool run_queues(cpu_engine_t *e) {
  bool moved = run_queue(e, &e->q[HCQ_QUEUE_COMPUTE]);
  moved |= run_queue(e, &e->q[HCQ_QUEUE_COPY]);
  return moved;
}

/* True when q could move now: it is blocked at a wait that is satisfied, or it has a new entry. */
static bool queue_ready(cpu_queue_t *q) {
  if (q->remote_op) return true; /* only polling MPI moves it (wait_for_work) */
  if (q->c.w && HCQ__HDR_OP(q->c.w[0]) != HCQ__OP_WAIT)
    return true; /* a kernel a waiting host left */
  if (q->c.w) {
    const hcq__signal_words_t *s =
        (const hcq__signal_words_t *)(uintptr_t)hcq__rd64(q->c.w + HCQ__WAIT_ADDR);
    return atomic_load_explicit(&s->value, memory_order_acquire) >= q->c.w[HCQ__WAIT_VALUE];
  }
  return atomic_load_explicit(&q->head, memory_order_acquire) != q->pos;
}

static bool engine_ready(cpu_engine_t *e) {
  return queue_ready(&e->q[0]) || queue_ready(&e->q[1]) || hcq__device_is_lost(e->dev) ||
         atomic_load_explicit(&e->stop, memory_order_acquire);
}

static bool engine_ready_ctx(const void *ctx) {
  return engine_ready((cpu_engine_t *)(uintptr_t)ctx);
}

/* Host threads are waiting and run the queues themselves (hcq__cpu_host_run): the engine, which has
 * let go of the queues, naps, so each rank keeps one thread busy on the work, not two taking turns
 * for a core. */
static void defer_to_hosts(cpu_engine_t *e) {
  uint32_t seq = atomic_load_explicit(&e->defer_word, memory_order_seq_cst);
  atomic_store_explicit(&e->deferring, true, memory_order_seq_cst);
  if (atomic_load_explicit(&e->helpers, memory_order_seq_cst) &&
      !atomic_load_explicit(&e->stop, memory_order_acquire))
    hcq__futex_wait(&e->defer_word, seq, CPU_DEFER_NAP_NS);
  else
    hcq__spin_step(1); /* a host is finishing its last pass */
  atomic_store_explicit(&e->deferring, false, memory_order_seq_cst);
}

/* Work that comes back at a steady cadence (a decode loop whose host queues the next step soon
 * after the last one ran dry, an application's launches between short host computations): after
 * an idle spell of at most CPU_CADENCE_SPIN_MAX_NS the engine spins up to twice as long as that
 * before it sleeps, so the next submit finds it awake and queues with a store, not a futex wake (a
 * system call and, on a VM, an interrupt to the sleeping core: 5-15 us). A longer spell (an idle
 * process) keeps the plain budget; HCQ_SPIN_NS=0 still turns spinning off, and a contended machine
 * still cuts every spin short (hcq__spin_until_with). */
#define CPU_CADENCE_SPIN_MAX_NS UINT64_C(1000000)

static uint64_t cadence_budget(cpu_engine_t *e, uint64_t budget) {
  uint64_t gap = e->idle_gap_ns;
  if (gap && gap <= CPU_CADENCE_SPIN_MAX_NS && 2 * gap > budget) {
    atomic_store_explicit(&e->cadence_spins,
                          atomic_load_explicit(&e->cadence_spins, memory_order_relaxed) + 1,
                          memory_order_relaxed);
    return 2 * gap;
  }
  return budget;
}

/* The engine is about to sleep after spinning spun_ns with both queues empty: the idle spell began
 * about then. Only a spell that outlasted the spin is timed: one that ended during it needs no
 * longer spin, and timing it would read the clock twice per launch of a busy eager loop. */
static inline void idle_spell_sleeps(cpu_engine_t *e, uint64_t spun_ns) {
  if (!e->idle_since_ns) e->idle_since_ns = hcq__now_ns() - spun_ns;
}

/* New work ended an idle spell the engine slept in: note how long it was. */
static inline void idle_spell_ended(cpu_engine_t *e) {
  if (!e->idle_since_ns) return;
  e->idle_gap_ns = hcq__now_ns() - e->idle_since_ns;
  e->idle_since_ns = 0;
}

/* Neither queue can move: spin while work is in flight (a hand-off from another core is near),
 * then sleep on what one queue waits for, or on the doorbell when both are empty. */
static void wait_for_work(cpu_engine_t *e) {
  if (atomic_load_explicit(&e->helpers, memory_order_seq_cst)) {
    e->remote_since = 0;
    give_queues(e);
    defer_to_hosts(e);
    return;
  }
  if (e->q[0].remote_op || e->q[1].remote_op) {
    /* A message in flight completes only inside an MPI call: poll back to back for the layer's
     * spin budget (the peer's reply is usually that near), then every ~20 us. */
    const hcq__remote_hooks_t *hooks = atomic_load_explicit(&hcq__remote, memory_order_acquire);
    unsigned polls = e->remote_polls++;
    /* The clock is read every 64 polls: it costs more than a poll. */
    if (!e->remote_since || (polls & 63) == 0) {
      uint64_t now = hcq__now_ns();
      if (!e->remote_since) e->remote_since = now, e->remote_polls = 1, polls = 0;
      e->remote_spinning = hooks && now - e->remote_since < hooks->copy_spin_ns;
    }
    if (e->remote_spinning) {
      hcq__spin_step(polls);
    } else {
      uint32_t seq = atomic_load_explicit(&e->doorbell, memory_order_seq_cst);
      give_queues(e);
      hcq__futex_wait(&e->doorbell, seq, UINT64_C(20000));
    }
    return;
  }
  e->remote_since = 0;
  cpu_queue_t *blocked[2];
  int nblocked = 0;
  for (int k = 0; k < 2; k++)
    if (e->q[k].c.w && HCQ__HDR_OP(e->q[k].c.w[0]) == HCQ__OP_WAIT) blocked[nblocked++] = &e->q[k];
  uint64_t budget = nblocked ? CPU_INFLIGHT_SPIN_NS : hcq__options()->spin_ns;
  if (budget < hcq__options()->spin_ns) budget = hcq__options()->spin_ns;
  if (!nblocked && hcq__options()->spin_ns) budget = cadence_budget(e, budget);
  if (spin_until(engine_ready_ctx, e, budget)) return;
  if (!nblocked) idle_spell_sleeps(e, budget);
  if (nblocked && (hcq__device_lose_if_orphaned(e->dev), hcq__device_is_lost(e->dev))) return;
  hcq__park_t park;
  _Atomic uint32_t *word = &e->doorbell;
  uint32_t seq = atomic_load_explicit(&e->doorbell, memory_order_seq_cst);
  if (nblocked) {
    hcq__park_begin(
        (const hcq__signal_words_t *)(uintptr_t)hcq__rd64(blocked[0]->c.w + HCQ__WAIT_ADDR), &park);
    word = park.word, seq = park.seq;
  }
  atomic_store_explicit(&e->sleep_word, word, memory_order_seq_cst);
  /* Two blocked queues wait on two signals; a sleep on one is bounded so the other is seen. */
  if (!engine_ready(e)) {
    give_queues(e);
    hcq__futex_wait(word, seq, nblocked == 2 ? UINT64_C(1000000) : 0);
  }
  atomic_store_explicit(&e->sleep_word, NULL, memory_order_seq_cst);
  if (nblocked) hcq__park_end(&park);
}

/* A host thread waiting for a signal these queues will set (core/backend.h, host_run). It runs
 * their waits, signals and copies (a cross-rank transfer's MPI polling) on its own thread and stops
 * at the first kernel, which stays with the engine (and with the engine's fault handling). */
int hcq__cpu_host_run(hcq_device_t *dev, int step) {
  cpu_engine_t *e = engine_of(dev);
  if (step == HCQ__HOST_BEGIN) {
    atomic_fetch_add_explicit(&e->helpers, 1, memory_order_seq_cst);
    return 0;
  }
  if (step == HCQ__HOST_END) {
    atomic_fetch_sub_explicit(&e->helpers, 1, memory_order_seq_cst);
    /* Work left behind (the wait was for an earlier signal) goes back to the engine at once. */
    if (take_queues(e, OWN_HOST)) {
      bool left = engine_ready(e);
      if (e->q[0].remote_op || e->q[1].remote_op)
        atomic_fetch_add_explicit(&e->host_handbacks, 1, memory_order_relaxed);
      give_queues(e);
      if (left && atomic_load_explicit(&e->deferring, memory_order_seq_cst)) {
        atomic_fetch_add_explicit(&e->defer_word, 1, memory_order_seq_cst);
        hcq__futex_wake(&e->defer_word);
      }
    }
    return 0;
  }
  if (hcq__device_is_lost(dev) || atomic_load_explicit(&e->stop, memory_order_acquire) ||
      !take_queues(e, OWN_HOST))
    return 0;
  e->on_host = true, e->kernel_ahead = false;
  /* Progress inside one entry (a bound graph's CALL is one) counts too: the caller's patience
   * restarts whenever a command ran. */
  const uint32_t *w0 = e->q[0].c.w, *w1 = e->q[1].c.w;
  uint64_t p0 = e->q[0].pos, p1 = e->q[1].pos;
  while (run_queues(e) && !hcq__device_is_lost(dev)) {
    /* as the engine loops: again while an entry ends */
  }
  bool moved = e->q[0].c.w != w0 || e->q[1].c.w != w1 || e->q[0].pos != p0 || e->q[1].pos != p1;
  bool idle = true;
  for (int k = 0; k < 2; k++)
    idle &=
        !e->q[k].c.w && e->q[k].pos == atomic_load_explicit(&e->q[k].head, memory_order_acquire);
  bool kernel = e->kernel_ahead, remote = e->q[0].remote_op || e->q[1].remote_op;
  e->on_host = false;
  if (moved) atomic_fetch_add_explicit(&e->host_passes, 1, memory_order_relaxed);
  e->running = NULL;
  give_queues(e);
  /* A kernel ahead ends the host's turn: kernels run on the engine, on the cores the device's
   * layout gave it and its helpers (the waiter hands back and the engine is woken). */
  return kernel ? -1 : moved ? 1 : idle ? -1 : remote ? 2 : 0;
}
void *hcq__cpu_engine_main(void *arg) {
  cpu_engine_t *e = arg;
  hcq__cpu_fault_thread_init(e->altstack);
  hcq__cpu_fault_ctx = &e->fault;
  for (;;) {
    /* The engine lets go of the queues only to sleep or to defer (wait_for_work). */
    if (atomic_load_explicit(&e->owner, memory_order_relaxed) != OWN_ENGINE &&
        !take_queues(e, OWN_ENGINE)) {
      defer_to_hosts(e);
      continue;
    }
    if (hcq__device_is_lost(e->dev)) {
      drop_queue(&e->q[0]);
      drop_queue(&e->q[1]);
    }
    bool moved = run_queues(e);
    e->running = NULL;
    if (moved) {
      idle_spell_ended(e);
      e->remote_since = 0;
      continue;
    }
    if (atomic_load_explicit(&e->stop, memory_order_acquire) &&
        (e->q[0].remote_op || e->q[1].remote_op)) {
      /* Closed while a peer has not answered: that transfer cannot finish any more. */
      hcq__device_mark_lost(e->dev, "closed with a transfer to or from another rank in flight");
      continue;
    }
    if (atomic_load_explicit(&e->stop, memory_order_acquire) && !e->q[0].c.w && !e->q[1].c.w &&
        atomic_load(&e->q[0].head) == e->q[0].pos && atomic_load(&e->q[1].head) == e->q[1].pos)
      break;
    if (atomic_load_explicit(&e->stop, memory_order_acquire) && hcq__device_is_lost(e->dev)) break;
    wait_for_work(e);
  }
  hcq__cpu_fault_ctx = NULL;
  hcq__cpu_fault_thread_exit(e->altstack);
  atomic_store(&e->exited, true);
  return NULL;
}
