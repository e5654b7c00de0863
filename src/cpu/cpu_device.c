/* The CPU device: host memory, one engine thread that interprets the command words of both queue
 * kinds (compute and copy) from their rings, and helper threads that share the work-groups of big
 * launches.
 *
 * Threads. The CPU devices open in one process share the machine's cores without oversubscribing
 * them (cpu_layout.c): each device gets its own cores where there are enough, its engine pinned to
 * the first and its active helpers to the others. One engine serves both queues of its device, so a
 * device never has more busy threads than it has cores.
 *
 * The engine runs each queue's commands until the queue is empty or blocked at a wait, then turns
 * to the other queue; when neither can move it spins (pause) while work is in flight, then sleeps
 * on the signal it waits for (or its doorbell). A bound graph queue reaches it as one CALL; each
 * EXEC of a one-group launch costs a decode and an indirect call.
 *
 * For hang reports each queue publishes the command it is at (cur) and the one before (prev) with
 * two relaxed stores per command. A lost device makes the engine drop what is queued. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <time.h>

#include "core/backend.h"
#include "core/cmd_cursor.h"
#include "core/command.h"
#include "core/device.h"
#include "core/hang_report.h"
#include "core/host_wait.h"
#include "core/options.h"
#include "core/remote.h"
#include "core/signal.h"
#include "cpu/cpu_internal.h"

#define RING_WORDS (UINT64_C(1) << 18)
/* Work-items (groups x group size) one launch may have: more would keep a device busy for days. */
#define CPU_MAX_WORK_ITEMS (UINT64_C(1) << 40)
/* How long a blocked engine spins while work is in flight before it sleeps: long enough for any
 * hand-off between cores, short next to a kernel worth sleeping through. */
#define CPU_INFLIGHT_SPIN_NS (UINT64_C(200000))
/* Chunks of work-groups per thread that the pool splits a launch into, and the fewest work-items
 * a chunk has (see pool_run). */
#define CPU_CHUNKS_PER_THREAD 8
#define CPU_MIN_CHUNK_ITEMS 2048

/* One queue kind's ring and the engine's place in it. Producer-written and consumer-written fields
 * sit on separate cache lines. */
typedef struct cpu_queue {
  uint32_t *ring; /* RING_WORDS words */
  _Alignas(64) _Atomic uint64_t head; /* words published by the producer */
  _Alignas(64) _Atomic uint64_t tail; /* words of entries completed */
  _Atomic uint32_t tail_seq;          /* bumped when tail moves while a producer waits for space */
  _Atomic uint32_t space_waiters;
  /* Written per command by the engine (its cursor fields read only by reports): a line of its own. */
  _Alignas(64) hcq__cmd_cursor_t c;
  uint64_t pos; /* ring position of the current entry (c.w NULL: no entry) */
  uint32_t entry_len;
  void *remote_op;                     /* the MPI request of the cross-rank COPY at w (NULL: none) */
} cpu_queue_t;

/* A launch's work-groups shared between the engine and helper threads. The job fields are written
 * only while no helper is inside (active == 0, gen odd), published by an even gen. */
typedef struct cpu_pool {
  hcq_device_t *dev;
  struct cpu_engine *engine;
  uint64_t min_parallel; /* work-items below which a launch runs on the engine alone */
  pthread_t threads[HCQ__CPU_MAX_HELPERS];
  void *altstacks[HCQ__CPU_MAX_HELPERS];
  _Atomic bool helper_exited[HCQ__CPU_MAX_HELPERS];
  unsigned created;           /* helper threads started (layout lock) */
  _Atomic uint32_t nactive;   /* helpers that take part: the layout's budget */
  _Atomic uint32_t layout_seq; /* parked helpers sleep here until the budget changes */
  _Atomic uint32_t gen;
  _Atomic uint32_t active;
  _Atomic uint32_t helpers_sleeping;
  _Atomic uint64_t next_group;
  _Atomic uint64_t remaining;
  _Atomic uint32_t done_seq;
  _Atomic uint32_t worker_sleeping;
  _Atomic bool stop;
  hcq_cpu_kernel_fn fn;
  void *const *bufs;
  const int32_t *vals;
  uint32_t gsz[3], lsz[3];
  uint64_t total, chunk;
} cpu_pool_t;

typedef struct cpu_engine {
  hcq_device_t *dev;
  pthread_t thread;
  bool started;
  hcq__cpu_fault_ctx_t fault;
  void *altstack;
  cpu_queue_t q[2]; /* by hcq_queue_kind_t */
  _Alignas(64) cpu_queue_t *running; /* the queue whose command runs (for the fault handler) */
  _Alignas(64) _Atomic uint32_t doorbell;  /* where an idle engine sleeps */
  _Atomic(_Atomic uint32_t *) sleep_word;  /* where the engine sleeps now (NULL: awake) */
  _Atomic bool stop;
  _Atomic bool exited;
  _Atomic uint32_t barrier_word;
  cpu_pool_t pool;
  hcq__fast_clock_t clock; /* the engine thread's, for timestamps */
  hcq__cpu_share_t share;  /* its cores (cpu_layout.c) */
  uint64_t remote_since;   /* when the engine began polling for a cross-rank COPY (0: it is not) */
  unsigned remote_polls;
  bool remote_spinning;    /* within the layer's spin budget: poll back to back */
  /* Who runs the queues now (OWN_*): the engine, or a host thread waiting for their work that runs
   * them itself (cpu_host_run). The engine sleeps on defer_word while such hosts count in helpers. */
  _Alignas(64) _Atomic int owner;
  _Atomic unsigned helpers;
  _Atomic uint32_t defer_word;
  _Atomic bool deferring;
  bool on_host;      /* the queues run on a waiting host: it stops at a kernel (left to the engine) */
  bool kernel_ahead; /* ... and it stopped at one */
  _Atomic uint64_t host_passes; /* passes of a waiting host that moved a queue (tests) */
  _Atomic uint64_t host_handbacks; /* hosts that left with a cross-rank transfer in flight (tests) */
} cpu_engine_t;

enum { OWN_FREE, OWN_ENGINE, OWN_HOST };

static const hcq__device_vtable_t cpu_vtable;

static cpu_engine_t *engine_of(hcq_device_t *dev) { return dev->backend; }

hcq__cpu_share_t *hcq__cpu_share(hcq_device_t *dev) { return &engine_of(dev)->share; }

/* How long the engine naps between looks while host threads run its queues: it wakes by itself
 * after that, so a host never has to pay a wake-up call on its way out. */
#define CPU_DEFER_NAP_NS UINT64_C(100000)

static bool take_queues(cpu_engine_t *e, int who) {
  int expected = OWN_FREE;
  return atomic_compare_exchange_strong_explicit(&e->owner, &expected, who, memory_order_acquire,
                                                 memory_order_relaxed);
}

static void give_queues(cpu_engine_t *e) { atomic_store_explicit(&e->owner, OWN_FREE, memory_order_release); }

/* Spins (pause, then yield) until ready(ctx) or budget_ns have passed; true when ready. */
static bool spin_until(bool (*ready)(const void *ctx), const void *ctx, uint64_t budget_ns) {
  uint64_t start = 0;
  for (unsigned i = 1;; i++) {
    if (ready(ctx)) return true;
    hcq__spin_step(i);
    if ((i & 63) == 0) {
      uint64_t now = hcq__now_ns();
      if (!start)
        start = now;
      else if (now - start >= budget_ns)
        return false;
    }
  }
}

typedef struct {
  _Atomic uint32_t *word;
  uint32_t seen;
} word_watch_t;

static bool word_changed(const void *ctx) {
  const word_watch_t *w = ctx;
  return atomic_load_explicit(w->word, memory_order_acquire) != w->seen;
}

/* Spins until *word != seen or budget_ns have passed; true when it changed. */
static bool spin_while_equal32_for(_Atomic uint32_t *word, uint32_t seen, uint64_t budget_ns) {
  word_watch_t w = {word, seen};
  return spin_until(word_changed, &w, budget_ns);
}

/* The same for the spin budget (HCQ_SPIN_NS). */
static bool spin_while_equal32(_Atomic uint32_t *word, uint32_t seen) {
  return spin_while_equal32_for(word, seen, hcq__options()->spin_ns);
}

static const uint32_t *engine_current_command(const hcq__cpu_fault_ctx_t *ctx) {
  const cpu_engine_t *e = ctx->owner;
  const cpu_queue_t *q = e->running;
  return q ? atomic_load_explicit(&q->c.cur, memory_order_relaxed) : NULL;
}

/* ---- running groups ---- */

static inline void run_groups(hcq_cpu_kernel_fn fn, void *const *bufs, const int32_t *vals, const uint32_t gsz[3],
                              const uint32_t lsz[3], uint64_t first, uint64_t count) {
  hcq_launch_t l;
  for (int i = 0; i < 3; i++) l.gsz[i] = gsz[i], l.lsz[i] = lsz[i];
  uint64_t plane = (uint64_t)gsz[0] * gsz[1];
  for (uint64_t g = first; g < first + count; g++) {
    l.gid[2] = (uint32_t)(g / plane);
    uint64_t r = g % plane;
    l.gid[1] = (uint32_t)(r / gsz[0]);
    l.gid[0] = (uint32_t)(r % gsz[0]);
    fn(bufs, vals, &l);
  }
}

/* Takes chunks of the current job until none are left. */
static void pool_work(cpu_pool_t *p) {
  for (;;) {
    uint64_t first = atomic_fetch_add_explicit(&p->next_group, p->chunk, memory_order_relaxed);
    if (first >= p->total) return;
    uint64_t count = p->total - first < p->chunk ? p->total - first : p->chunk;
    run_groups(p->fn, p->bufs, p->vals, p->gsz, p->lsz, first, count);
    if (atomic_fetch_sub_explicit(&p->remaining, count, memory_order_acq_rel) == count) {
      atomic_fetch_add_explicit(&p->done_seq, 1, memory_order_seq_cst);
      if (atomic_load_explicit(&p->worker_sleeping, memory_order_seq_cst)) hcq__futex_wake(&p->done_seq);
    }
  }
}

/* A fault inside a kernel with isolation on comes back here: the device is lost. */
static void isolated_fault(hcq__cpu_fault_ctx_t *ctx) {
  char what[400];
  hcq__cpu_fault_describe(ctx, ctx->fault_signal, ctx->fault_addr, what, sizeof(what));
  hcq__device_mark_lost(ctx->device, "%s", what);
}

static __attribute__((noinline)) void pool_work_isolated(cpu_pool_t *p, hcq__cpu_fault_ctx_t *ctx) {
  sigjmp_buf jump;
  if (sigsetjmp(jump, 0) == 0) {
    ctx->jump = &jump;
    pool_work(p);
  } else {
    isolated_fault(ctx);
  }
  ctx->jump = NULL;
}

static uint64_t spin_budget_after_job(void) {
  uint64_t ns = hcq__options()->spin_ns;
  return ns == 0 || ns > CPU_INFLIGHT_SPIN_NS ? ns : CPU_INFLIGHT_SPIN_NS; /* 0: spinning is off */
}

typedef struct helper_arg {
  cpu_pool_t *pool;
  unsigned index;
} helper_arg_t;

static void *helper_main(void *arg) {
  cpu_pool_t *p = ((helper_arg_t *)arg)->pool;
  unsigned index = ((helper_arg_t *)arg)->index;
  free(arg);
  void *altstack = p->altstacks[index];
  hcq__cpu_fault_thread_init(altstack);
  hcq__cpu_fault_ctx_t ctx = {p->dev, engine_current_command, p->engine, NULL, 0, 0};
  hcq__cpu_fault_ctx = &ctx;
  /* The generation before any job (jobs are 2, 4, ...): a job published before this thread first
   * ran (a launch right after the device opened, on a loaded machine) is still taken. Starting from
   * the current generation made every helper skip it, and the engine ran that launch alone. */
  uint32_t seen = 0;
  bool fresh = true; /* no job yet: sleep at once instead of spinning for one */
  for (;;) {
    if (atomic_load_explicit(&p->stop, memory_order_acquire)) break;
    /* A helper outside the budget stays parked: it takes no jobs and burns nothing. */
    if (index >= atomic_load_explicit(&p->nactive, memory_order_acquire)) {
      uint32_t ls = atomic_load_explicit(&p->layout_seq, memory_order_seq_cst);
      if (index >= atomic_load_explicit(&p->nactive, memory_order_seq_cst) && !atomic_load(&p->stop))
        hcq__futex_wait(&p->layout_seq, ls, 0);
      seen = atomic_load_explicit(&p->gen, memory_order_acquire);
      continue;
    }
    uint32_t g = atomic_load_explicit(&p->gen, memory_order_acquire);
    if (g == seen || (g & 1)) {
      /* After a job the next one is usually near: a step's launches follow each other, with
       * engine-only ones (too small to share) in between that can take tens of microseconds. A
       * helper that slept through them would be woken for every big launch, and a wake-up on a VM
       * costs about as much as a small launch. It spins as long as a blocked engine does. */
      uint64_t budget = spin_budget_after_job();
      if (fresh || !spin_while_equal32_for(&p->gen, g, budget)) {
        atomic_fetch_add_explicit(&p->helpers_sleeping, 1, memory_order_seq_cst);
        if (atomic_load_explicit(&p->gen, memory_order_seq_cst) == g && !atomic_load(&p->stop))
          hcq__futex_wait(&p->gen, g, 0);
        atomic_fetch_sub_explicit(&p->helpers_sleeping, 1, memory_order_seq_cst);
      }
      continue;
    }
    /* Enter, then confirm the job did not change meanwhile (the publisher waits for active == 0). */
    atomic_fetch_add_explicit(&p->active, 1, memory_order_seq_cst);
    if (atomic_load_explicit(&p->gen, memory_order_seq_cst) == g && !hcq__device_is_lost(p->dev)) {
      if (p->dev->isolate)
        pool_work_isolated(p, &ctx);
      else
        pool_work(p);
    }
    atomic_fetch_sub_explicit(&p->active, 1, memory_order_seq_cst);
    seen = g;
    fresh = false;
  }
  hcq__cpu_fault_ctx = NULL;
  hcq__cpu_fault_thread_exit(altstack);
  atomic_store(&p->helper_exited[index], true);
  return NULL;
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
  uint64_t min_items = p->min_parallel / 4 < CPU_MIN_CHUNK_ITEMS ? p->min_parallel / 4 : CPU_MIN_CHUNK_ITEMS;
  uint64_t min_chunk = (min_items + group_items - 1) / group_items;
  if (chunk < min_chunk) chunk = min_chunk;
  p->chunk = chunk ? chunk : 1;
  atomic_store_explicit(&p->next_group, 0, memory_order_relaxed);
  atomic_store_explicit(&p->remaining, total, memory_order_relaxed);
  uint32_t done = atomic_load_explicit(&p->done_seq, memory_order_relaxed);
  atomic_store_explicit(&p->gen, g + 2, memory_order_seq_cst); /* even: published */
  if (atomic_load_explicit(&p->helpers_sleeping, memory_order_seq_cst)) hcq__futex_wake(&p->gen);
  atomic_fetch_add_explicit(&p->active, 1, memory_order_seq_cst);
  pool_work(p);
  atomic_fetch_sub_explicit(&p->active, 1, memory_order_seq_cst);
  while (atomic_load_explicit(&p->remaining, memory_order_acquire)) {
    /* A helper that faulted (isolation) never finishes its chunk: the device is lost then. */
    if (hcq__device_is_lost(p->dev)) return;
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
  const int32_t *vals = (const int32_t *)(const void *)((const char *)bufs + (size_t)w[HCQ__EXEC_NBUFS] * 8);
  const uint32_t *gsz = w + HCQ__EXEC_GLOBAL, *lsz = w + HCQ__EXEC_LOCAL;
  /* Launches are validated on record, but a patched dim may still make the grid absurd. */
  uint64_t plane = (uint64_t)gsz[0] * gsz[1], total;
  if (__builtin_mul_overflow(plane, (uint64_t)gsz[2], &total)) return;
  if (total == 0 || lsz[0] == 0 || lsz[1] == 0 || lsz[2] == 0) return; /* an empty launch runs nothing */
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

/* With isolation, a fault in the kernel returns here through the handler; false then (device lost). */
static __attribute__((noinline)) bool exec_isolated(cpu_engine_t *e, const uint32_t *w) {
  sigjmp_buf jump;
  if (sigsetjmp(jump, 0) == 0) {
    e->fault.jump = &jump;
    exec_command(e, w);
    e->fault.jump = NULL;
    return true;
  }
  e->fault.jump = NULL;
  isolated_fault(&e->fault);
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
 * until the request completed (the bytes are in place, or may be reused); the other queue runs on. */
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
        hcq__cursor_stamp(&q->c, w, engine_clock(e));
        if (e->dev->isolate) {
          if (!exec_isolated(e, w)) return RUN_LOST;
        } else {
          exec_command(e, w);
        }
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
        memmove((void *)(uintptr_t)dst, (const void *)(uintptr_t)src, (size_t)hcq__rd64(w + HCQ__COPY_SIZE));
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
  if (q->c.w && HCQ__HDR_OP(q->c.w[0]) != HCQ__OP_WAIT) return true; /* a kernel a waiting host left */
  if (q->c.w) {
    const hcq__signal_words_t *s = (const hcq__signal_words_t *)(uintptr_t)hcq__rd64(q->c.w + HCQ__WAIT_ADDR);
    return atomic_load_explicit(&s->value, memory_order_acquire) >= q->c.w[HCQ__WAIT_VALUE];
  }
  return atomic_load_explicit(&q->head, memory_order_acquire) != q->pos;
}

static bool engine_ready(cpu_engine_t *e) {
  return queue_ready(&e->q[0]) || queue_ready(&e->q[1]) || hcq__device_is_lost(e->dev) ||
         atomic_load_explicit(&e->stop, memory_order_acquire);
}

static bool engine_ready_ctx(const void *ctx) { return engine_ready((cpu_engine_t *)(uintptr_t)ctx); }

/* Host threads are waiting and run the queues themselves (cpu_host_run): the engine, which has let
 * go of the queues, naps, so each rank keeps one thread busy on the work, not two taking turns for a core. */
static void defer_to_hosts(cpu_engine_t *e) {
  uint32_t seq = atomic_load_explicit(&e->defer_word, memory_order_seq_cst);
  atomic_store_explicit(&e->deferring, true, memory_order_seq_cst);
  if (atomic_load_explicit(&e->helpers, memory_order_seq_cst) && !atomic_load_explicit(&e->stop, memory_order_acquire))
    hcq__futex_wait(&e->defer_word, seq, CPU_DEFER_NAP_NS);
  else
    hcq__spin_step(1); /* a host is finishing its last pass */
  atomic_store_explicit(&e->deferring, false, memory_order_seq_cst);
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
  if (spin_until(engine_ready_ctx, e, budget)) return;
  if (nblocked && (hcq__device_lose_if_orphaned(e->dev), hcq__device_is_lost(e->dev))) return;
  hcq__park_t park;
  _Atomic uint32_t *word = &e->doorbell;
  uint32_t seq = atomic_load_explicit(&e->doorbell, memory_order_seq_cst);
  if (nblocked) {
    hcq__park_begin((const hcq__signal_words_t *)(uintptr_t)hcq__rd64(blocked[0]->c.w + HCQ__WAIT_ADDR), &park);
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

static void wake_engine(cpu_engine_t *e) {
  _Atomic uint32_t *word = atomic_load_explicit(&e->sleep_word, memory_order_seq_cst);
  if (!word) return;
  atomic_fetch_add_explicit(word, 1, memory_order_seq_cst);
  hcq__futex_wake(word);
}

/* A host thread waiting for a signal these queues will set (internal.h, host_run). It runs their
 * waits, signals and copies (a cross-rank transfer's MPI polling) on its own thread and stops at
 * the first kernel, which stays with the engine (and with the engine's fault handling). */
static int cpu_host_run(hcq_device_t *dev, int step) {
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
      if (e->q[0].remote_op || e->q[1].remote_op) atomic_fetch_add_explicit(&e->host_handbacks, 1, memory_order_relaxed);
      give_queues(e);
      if (left && atomic_load_explicit(&e->deferring, memory_order_seq_cst)) {
        atomic_fetch_add_explicit(&e->defer_word, 1, memory_order_seq_cst);
        hcq__futex_wake(&e->defer_word);
      }
    }
    return 0;
  }
  if (hcq__device_is_lost(dev) || atomic_load_explicit(&e->stop, memory_order_acquire) || !take_queues(e, OWN_HOST))
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
    idle &= !e->q[k].c.w && e->q[k].pos == atomic_load_explicit(&e->q[k].head, memory_order_acquire);
  bool kernel = e->kernel_ahead, remote = e->q[0].remote_op || e->q[1].remote_op;
  e->on_host = false;
  if (moved) atomic_fetch_add_explicit(&e->host_passes, 1, memory_order_relaxed);
  e->running = NULL;
  give_queues(e);
  /* A kernel ahead ends the host's turn: kernels run on the engine, on the cores the device's
   * layout gave it and its helpers (the waiter hands back and the engine is woken). */
  return kernel ? -1 : moved ? 1 : idle ? -1 : remote ? 2 : 0;
}

uint64_t hcq__cpu_host_passes(hcq_device_t *dev) {
  return dev && dev->vt == &cpu_vtable ? atomic_load(&engine_of(dev)->host_passes) : 0;
}

uint64_t hcq__cpu_host_handbacks(hcq_device_t *dev) {
  return dev && dev->vt == &cpu_vtable ? atomic_load(&engine_of(dev)->host_handbacks) : 0;
}

static void *engine_main(void *arg) {
  cpu_engine_t *e = arg;
  hcq__cpu_fault_thread_init(e->altstack);
  hcq__cpu_fault_ctx = &e->fault;
  for (;;) {
    /* The engine lets go of the queues only to sleep or to defer (wait_for_work). */
    if (atomic_load_explicit(&e->owner, memory_order_relaxed) != OWN_ENGINE && !take_queues(e, OWN_ENGINE)) {
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
      e->remote_since = 0;
      continue;
    }
    if (atomic_load_explicit(&e->stop, memory_order_acquire) && (e->q[0].remote_op || e->q[1].remote_op)) {
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

/* ---- producers ---- */

/* Waits until the ring has need free words; under the device lock, so one producer at a time. */
static hcq_status_t wait_for_space(hcq_device_t *dev, cpu_queue_t *q, hcq_queue_kind_t kind, uint64_t head,
                                   uint64_t need) {
  uint64_t deadline = 0;
  for (;;) {
    uint32_t seq = atomic_load_explicit(&q->tail_seq, memory_order_seq_cst);
    if (RING_WORDS - (head - atomic_load_explicit(&q->tail, memory_order_acquire)) >= need) return NULL;
    hcq_status_t st = hcq__device_check(dev);
    if (st) return st;
    uint64_t now = hcq__now_ns();
    if (!deadline) deadline = hcq__deadline_after_ms(HCQ_TIMEOUT_DEFAULT);
    if (now >= deadline) {
      st = hcq_status_make(HCQ_TIMEOUT, "%s: the %s queue ring stayed full (is its work waiting on a signal that is never set?)",
                           dev->name, kind == HCQ_QUEUE_COMPUTE ? "compute" : "copy");
      return hcq__device_annotate_report(st, &dev, 1);
    }
    atomic_fetch_add_explicit(&q->space_waiters, 1, memory_order_seq_cst);
    if (RING_WORDS - (head - atomic_load_explicit(&q->tail, memory_order_seq_cst)) < need)
      hcq__futex_wait(&q->tail_seq, seq, deadline - now < 1000000 ? deadline - now : 1000000);
    atomic_fetch_sub_explicit(&q->space_waiters, 1, memory_order_seq_cst);
  }
}

/* Ring words a submission takes: bound lists travel as one CALL. */
static size_t ring_words(size_t nwords, bool bound) { return bound ? HCQ__LEN_CALL : nwords; }


static hcq_status_t cpu_reserve(hcq_device_t *dev, hcq_queue_kind_t kind, size_t nwords, bool bound) {
  cpu_queue_t *q = &engine_of(dev)->q[kind];
  nwords = ring_words(nwords, bound);
  if (nwords > RING_WORDS / 2)
    return hcq_status_make(HCQ_INVALID_ARGUMENT, "%s: a queue of %zu words is larger than half the ring (%" PRIu64
                           " words): bind it first", dev->name, nwords, RING_WORDS / 2);
  uint64_t head = atomic_load_explicit(&q->head, memory_order_relaxed);
  uint64_t pos = head & (RING_WORDS - 1);
  uint64_t pad = pos + nwords > RING_WORDS ? RING_WORDS - pos : 0;
  return wait_for_space(dev, q, kind, head, pad + nwords);
}

static hcq_status_t cpu_submit(hcq_device_t *dev, hcq_queue_kind_t kind, const uint32_t *words, size_t nwords,
                               bool bound) {
  hcq_status_t st = cpu_reserve(dev, kind, nwords, bound);
  if (st) return st;
  cpu_engine_t *e = engine_of(dev);
  cpu_queue_t *q = &e->q[kind];
  uint32_t call[HCQ__LEN_CALL];
  if (bound) {
    hcq__encode_call(call, words, nwords);
    words = call;
    nwords = HCQ__LEN_CALL;
  }
  uint64_t head = atomic_load_explicit(&q->head, memory_order_relaxed);
  uint64_t pos = head & (RING_WORDS - 1);
  if (pos + nwords > RING_WORDS) {
    q->ring[pos] = HCQ__HDR(JUMP);
    head += RING_WORDS - pos;
  }
  memcpy(q->ring + (head & (RING_WORDS - 1)), words, nwords * sizeof(uint32_t));
  atomic_store_explicit(&q->head, head + nwords, memory_order_seq_cst);
  wake_engine(e);
  return NULL;
}

static uint64_t cpu_submitted(hcq_device_t *dev, hcq_queue_kind_t kind) {
  return atomic_load_explicit(&engine_of(dev)->q[kind].head, memory_order_acquire);
}

static uint64_t cpu_completed(hcq_device_t *dev, hcq_queue_kind_t kind) {
  return atomic_load_explicit(&engine_of(dev)->q[kind].tail, memory_order_acquire);
}

static void cpu_snapshot(hcq_device_t *dev, hcq_queue_kind_t kind, hcq__engine_snapshot_t *out) {
  cpu_queue_t *q = &engine_of(dev)->q[kind];
  out->submitted = atomic_load_explicit(&q->head, memory_order_acquire);
  out->completed = atomic_load_explicit(&q->tail, memory_order_acquire);
  hcq__cursor_snapshot(&q->c, out);
}

static void cpu_lost(hcq_device_t *dev) {
  cpu_engine_t *e = engine_of(dev);
  wake_engine(e);
  atomic_fetch_add(&e->pool.done_seq, 1);
  hcq__futex_wake(&e->pool.done_seq);
}

/* ---- threads and their placement ---- */

/* "hcq3.e" (engine of CPU:3), "hcq3.h1" (its second helper): visible in top, gdb and /proc. */
static void name_thread(pthread_t t, const hcq_device_t *dev, const char *role, unsigned n) {
  char name[16];
  snprintf(name, sizeof(name), "hcq%d.%s%u", dev->index % 10000, role, n);
  pthread_setname_np(t, name);
}

static void pin(pthread_t t, const int *cores, unsigned n) {
  if (!n) return;
  cpu_set_t set;
  CPU_ZERO(&set);
  for (unsigned i = 0; i < n; i++) CPU_SET(cores[i], &set);
  pthread_setaffinity_np(t, sizeof(set), &set);
}

void hcq__cpu_apply_layout(hcq_device_t *dev, const int *cores, unsigned ncores) {
  cpu_engine_t *e = engine_of(dev);
  cpu_pool_t *p = &e->pool;
  unsigned want = ncores > 1 ? ncores - 1 : 0;
  if (want > HCQ__CPU_MAX_HELPERS) want = HCQ__CPU_MAX_HELPERS;
  while (p->created < want) {
    unsigned i = p->created;
    helper_arg_t *arg = malloc(sizeof(*arg));
    if (!p->altstacks[i]) p->altstacks[i] = hcq__cpu_fault_stack_alloc();
    if (!arg) break;
    *arg = (helper_arg_t){p, i};
    if (pthread_create(&p->threads[i], NULL, helper_main, arg)) {
      free(arg);
      break;
    }
    name_thread(p->threads[i], dev, "h", i + 1);
    p->created++;
  }
  if (want > p->created) want = p->created;
  /* The engine on the share's first core, each helper on one of the others. (An application thread
   * that waits on the engine's core costs every replay two context switches: see docs/cpu-device.md.) */
  pin(e->thread, cores, ncores ? 1 : 0);
  for (unsigned i = 0; i < want; i++) pin(p->threads[i], &cores[i + 1], 1);
  atomic_store_explicit(&p->nactive, want, memory_order_seq_cst);
  /* Parked helpers wake to see whether they are in the budget now. */
  atomic_fetch_add_explicit(&p->layout_seq, 1, memory_order_seq_cst);
  hcq__futex_wake(&p->layout_seq);
  /* Helpers leaving the budget may sleep on the job word: wake them (without a new job, so that no
   * helper spins for one) to park. */
  hcq__futex_wake(&p->gen);
  dev->threads = 1 + want;
}

/* ---- lifecycle ---- */

static bool cpu_stop(hcq_device_t *dev) {
  cpu_engine_t *e = engine_of(dev);
  hcq__cpu_layout_remove(dev);
  /* A healthy device has no work left; a lost one drops it at once. Only a kernel that never
   * returns keeps a thread past this. */
  uint64_t deadline = hcq__now_ns() + (hcq__device_is_lost(dev) ? 500 : 10000) * UINT64_C(1000000);
  bool abandoned = false;
  if (e->started) {
    atomic_store(&e->stop, true);
    atomic_fetch_add(&e->doorbell, 1);
    hcq__futex_wake(&e->doorbell);
    atomic_fetch_add(&e->defer_word, 1);
    hcq__futex_wake(&e->defer_word);
    wake_engine(e);
    if (!hcq__join_by(e->thread, &e->exited, deadline)) abandoned = true;
    e->started = false;
  }
  cpu_pool_t *p = &e->pool;
  atomic_store(&p->stop, true);
  atomic_fetch_add(&p->gen, 2);
  hcq__futex_wake(&p->gen);
  atomic_fetch_add(&p->layout_seq, 1);
  hcq__futex_wake(&p->layout_seq);
  for (unsigned i = 0; i < p->created; i++)
    if (!hcq__join_by(p->threads[i], &p->helper_exited[i], deadline)) abandoned = true;
  p->created = 0;
  return abandoned;
}

static void cpu_destroy(hcq_device_t *dev) {
  cpu_engine_t *e = engine_of(dev);
  if (!e) return;
  for (int k = 0; k < 2; k++) free(e->q[k].ring);
  free(e->altstack);
  for (unsigned i = 0; i < HCQ__CPU_MAX_HELPERS; i++) free(e->pool.altstacks[i]);
  free(e);
  dev->backend = NULL;
}

static const hcq__device_vtable_t cpu_vtable = {
    .destroy = cpu_destroy,
    .stop = cpu_stop,
    .mem_alloc = hcq__cpu_mem_alloc,
    .mem_free = hcq__cpu_mem_free,
    .reserve = cpu_reserve,
    .submit = cpu_submit,
    .submitted = cpu_submitted,
    .completed = cpu_completed,
    .snapshot = cpu_snapshot,
    .memory_info = hcq__cpu_memory_info,
    .lost = cpu_lost,
    .host_run = cpu_host_run,
    .program_compile = hcq__cpu_compile,
    .program_unload = hcq__cpu_unload,
    .waiter_on_engine_core = hcq__cpu_waiter_on_engine_core,
};

static hcq_status_t cpu_device_create(int index, const hcq_device_options_t *opts, hcq_device_t *dev) {
  (void)index;
  hcq__cpu_fault_install();
  /* Producer and consumer fields sit on separate cache lines: 64-byte aligned. */
  cpu_engine_t *e = aligned_alloc(64, (sizeof(*e) + 63) & ~(size_t)63);
  if (!e) return hcq_status_make(HCQ_OUT_OF_MEMORY, "out of memory creating %s", dev->name);
  memset(e, 0, sizeof(*e));
  dev->vt = &cpu_vtable;
  dev->backend = e;
  dev->caps = HCQ_CAP_IN_ORDER_QUEUES | HCQ_CAP_COPY_QUEUE | HCQ_CAP_HOST_CALLABLE | HCQ_CAP_COMPILE_C | HCQ_CAP_HOST_MEMORY |
              HCQ__CAP_ENGINE_REMOTE_COPY;
  dev->threads = 1;
  dev->max_work_items = CPU_MAX_WORK_ITEMS;
  e->dev = dev;
  e->share.threads_asked = opts ? opts->threads : 0;
  e->pool.dev = dev;
  e->pool.engine = e;
  e->pool.min_parallel = hcq__options()->cpu_min_parallel;
  e->fault = (hcq__cpu_fault_ctx_t){dev, engine_current_command, e, NULL, 0, 0};
  e->altstack = hcq__cpu_fault_stack_alloc();
  for (int k = 0; k < 2; k++) {
    e->q[k].ring = calloc(RING_WORDS, sizeof(uint32_t));
    if (!e->q[k].ring) {
      cpu_destroy(dev);
      return hcq_status_make(HCQ_OUT_OF_MEMORY, "out of memory creating %s", dev->name);
    }
  }
  if (pthread_create(&e->thread, NULL, engine_main, e)) {
    cpu_destroy(dev);
    return hcq_status_make(HCQ_UNAVAILABLE, "%s: cannot start its engine thread", dev->name);
  }
  e->started = true;
  name_thread(e->thread, dev, "e", 0);
  hcq__cpu_layout_add(dev);
  return NULL;
}

static void cpu_query(hcq_device_info_t *info) {
  const hcq__options_t *o = hcq__options();
  info->available = true;
  info->count = 1;
  size_t ncores = hcq__cpu_core_count();
  char threads[96];
  if (o->cpu_threads)
    snprintf(threads, sizeof(threads), "%u threads per device (HCQ_CPU_THREADS)", o->cpu_threads);
  else
    snprintf(threads, sizeof(threads), "%zu cores split between the open devices (1 device: %zu threads, 2: %zu each)",
             ncores, ncores, ncores >= 2 ? ncores / 2 : 1);
  snprintf(info->description, sizeof(info->description),
           "CPU:N (any N): %s, C kernels compiled by %.64s, function-pointer kernels, copy queue", threads,
           o->cc ? o->cc : "cc");
}

const hcq__backend_t hcq__cpu_backend = {
    .kind = HCQ_DEVICE_CPU,
    .source_key = "c",
    .query = cpu_query,
    .open = cpu_device_create,
    /* No binary formats: a shared object would be machine code hcq cannot check, run in-process,
     * and tied to one OS, libc and CPU; C source through the kernel cache gives the same reuse. */
    .binary_formats = 0,
    .kernel_caps = HCQ_CAP_HOST_CALLABLE | HCQ_CAP_COMPILE_C,
    .no_compile_why = "CPU devices load no precompiled kernels; their kernels come from C source "
                      "(hcq_program_create), compiled once into the kernel cache",
};
