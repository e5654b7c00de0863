/* The CPU device: host memory, one engine thread per queue kind that interprets command words from
 * a ring, and helper threads that share the work-groups of one launch.
 *
 * The engine loop is the replay hot path: a bound graph queue reaches it as one CALL, and each EXEC
 * of a one-group launch costs a decode and an indirect call. Engines and helpers spin for
 * HCQ_SPIN_NS after their last work, then sleep on a futex.
 *
 * For hang reports an engine publishes the command it is at (cur) and the one before (prev) with
 * two relaxed stores per command; nothing else is measured on the hot path. A lost device makes
 * the engines drop what is queued and return from waits. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <time.h>

#include "core/internal.h"
#include "cpu/cpu_internal.h"

#define RING_WORDS (UINT64_C(1) << 18)
/* Work-items (groups x group size) one launch may have: more would keep a device busy for days. */
#define CPU_MAX_WORK_ITEMS (UINT64_C(1) << 40)
/* Allocations from this size on are mapped: untouched pages stay unbacked. */
#define CPU_MMAP_THRESHOLD (UINT64_C(256) << 10)

/* Producer-written and consumer-written fields sit on separate cache lines: the engine spins on
 * head while the host writes it, and tail moves once per command. */
typedef struct cpu_engine {
  hcq_device_t *dev;
  pthread_t thread;
  bool started;
  uint32_t *ring; /* RING_WORDS words */
  struct cpu_pool *pool; /* compute engine only */
  hcq__cpu_fault_ctx_t fault;
  void *altstack;
  _Alignas(64) _Atomic uint64_t head; /* words published by the producer */
  _Atomic uint32_t doorbell;          /* futex word: bumped only to wake a sleeping engine */
  _Atomic bool stop;
  _Atomic bool exited;
  _Alignas(64) _Atomic uint64_t tail; /* words consumed */
  _Atomic uint32_t sleeping;
  _Atomic uint32_t tail_seq;      /* bumped when tail moves while a producer waits for space */
  _Atomic(const uint32_t *) cur;  /* command being run (NULL: idle) */
  _Atomic(const uint32_t *) prev; /* the command before it in the same list */
  _Atomic(const uint32_t *) call_base; /* the bound list being run (NULL: the ring) */
  _Alignas(64) _Atomic uint32_t space_waiters;
} cpu_engine_t;

/* A launch's work-groups shared between the compute engine and helper threads. The job fields are
 * written only while no helper is inside (active == 0, gen odd), published by an even gen. */
typedef struct cpu_pool {
  hcq_device_t *dev;
  struct cpu_engine *engine;
  unsigned nhelpers;
  uint64_t min_parallel; /* work-items below which a launch runs on the engine alone */
  pthread_t *threads;
  _Atomic bool *helper_exited;
  void **altstacks;
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

typedef struct cpu_device {
  cpu_engine_t engines[2]; /* by hcq_queue_kind_t */
  cpu_pool_t pool;
} cpu_device_t;


/* Spins until *word != seen or the spin budget is spent; true when it changed. */
#define DEFINE_SPIN(name, type)                                        \
  static bool name(type *word, uint64_t seen) {                        \
    uint64_t budget = hcq__options()->spin_ns, start = 0;              \
    for (unsigned i = 1;; i++) {                                       \
      if (atomic_load_explicit(word, memory_order_acquire) != seen) return true; \
      hcq__spin_step(i);                                               \
      if ((i & 63) == 0) {                                             \
        uint64_t now = hcq__now_ns();                                  \
        if (!start)                                                    \
          start = now;                                                 \
        else if (now - start >= budget)                                \
          return false;                                                \
      }                                                                \
    }                                                                  \
  }
DEFINE_SPIN(spin_while_equal32, _Atomic uint32_t)
DEFINE_SPIN(spin_while_equal64, _Atomic uint64_t)

static const uint32_t *engine_current_command(const hcq__cpu_fault_ctx_t *ctx) {
  const cpu_engine_t *e = ctx->owner;
  return atomic_load_explicit(&e->cur, memory_order_relaxed);
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
  uint32_t seen = atomic_load_explicit(&p->gen, memory_order_acquire);
  for (;;) {
    uint32_t g = atomic_load_explicit(&p->gen, memory_order_acquire);
    if (g == seen || (g & 1)) {
      if (atomic_load_explicit(&p->stop, memory_order_acquire)) break;
      if (!spin_while_equal32(&p->gen, g)) {
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
  uint64_t chunk = total / ((uint64_t)(p->nhelpers + 1) * 4);
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
  /* Each factor is below 2^32: the group count cannot overflow in two steps of 64 x 32 bits only
   * when checked; launches are validated on record, but a patched dim may still make it absurd. */
  uint64_t plane = (uint64_t)gsz[0] * gsz[1], total;
  if (__builtin_mul_overflow(plane, (uint64_t)gsz[2], &total)) return;
  if (total == 0 || lsz[0] == 0 || lsz[1] == 0 || lsz[2] == 0) return; /* an empty launch runs nothing */
  if (total == 1) {
    hcq_launch_t l = {{0, 0, 0}, {1, 1, 1}, {lsz[0], lsz[1], lsz[2]}};
    fn(bufs, vals, &l);
  } else if (e->pool && e->pool->nhelpers &&
             (unsigned __int128)total * lsz[0] * lsz[1] * lsz[2] >= e->pool->min_parallel) {
    /* Small launches stay on the engine: handing groups to helpers costs more than they save. */
    pool_run(e->pool, fn, bufs, vals, gsz, lsz, total);
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

/* Runs a command list; false when the device was lost in the middle (the rest is dropped). */
static bool run_words(cpu_engine_t *e, const uint32_t *w, size_t n) {
  const uint32_t *end = w + n;
  while (w < end) {
    uint32_t h = w[0];
    atomic_store_explicit(&e->cur, w, memory_order_relaxed);
    switch (HCQ__HDR_OP(h)) {
      case HCQ__OP_WAIT: {
        hcq__signal_words_t *s = (hcq__signal_words_t *)(uintptr_t)hcq__rd64(w + HCQ__WAIT_ADDR);
        uint64_t seen;
        if (atomic_load_explicit(&s->value, memory_order_acquire) < w[HCQ__WAIT_VALUE] &&
            hcq__signal_words_wait(s, w[HCQ__WAIT_VALUE], 0, &e->dev, 1, &seen) != HCQ__WAIT_REACHED)
          return false;
        break;
      }
      case HCQ__OP_SIGNAL:
        hcq__signal_words_set((hcq__signal_words_t *)(uintptr_t)hcq__rd64(w + HCQ__SIGNAL_ADDR), w[HCQ__SIGNAL_VALUE]);
        break;
      case HCQ__OP_TIMESTAMP: {
        hcq__signal_words_t *s = (hcq__signal_words_t *)(uintptr_t)hcq__rd64(w + HCQ__TIMESTAMP_ADDR);
        atomic_store_explicit(&s->timestamp, hcq__now_ns(), memory_order_release);
        break;
      }
      case HCQ__OP_BARRIER: atomic_thread_fence(memory_order_seq_cst); break;
      case HCQ__OP_EXEC:
        if (e->dev->isolate) {
          if (!exec_isolated(e, w)) return false;
        } else {
          exec_command(e, w);
        }
        if (hcq__device_is_lost(e->dev)) return false;
        break;
      case HCQ__OP_COPY:
        memmove((void *)(uintptr_t)hcq__rd64(w + HCQ__COPY_DST), (const void *)(uintptr_t)hcq__rd64(w + HCQ__COPY_SRC),
                (size_t)hcq__rd64(w + HCQ__COPY_SIZE));
        break;
      case HCQ__OP_CALL: {
        const uint32_t *list = (const uint32_t *)(uintptr_t)hcq__rd64(w + HCQ__CALL_PTR);
        atomic_store_explicit(&e->call_base, list, memory_order_relaxed);
        bool ok = run_words(e, list, w[HCQ__CALL_LEN]);
        atomic_store_explicit(&e->call_base, NULL, memory_order_relaxed);
        if (!ok) return false;
        break;
      }
      default: break;
    }
    atomic_store_explicit(&e->prev, w, memory_order_relaxed);
    w += HCQ__HDR_LEN(h);
  }
  return true;
}

static void publish_tail(cpu_engine_t *e, uint64_t tail) {
  atomic_store_explicit(&e->tail, tail, memory_order_seq_cst);
  if (atomic_load_explicit(&e->space_waiters, memory_order_seq_cst)) {
    atomic_fetch_add_explicit(&e->tail_seq, 1, memory_order_seq_cst);
    hcq__futex_wake(&e->tail_seq);
  }
}

static void *engine_main(void *arg) {
  cpu_engine_t *e = arg;
  void *altstack = e->altstack;
  hcq__cpu_fault_thread_init(altstack);
  hcq__cpu_fault_ctx = &e->fault;
  uint64_t tail = 0;
  for (;;) {
    uint64_t head = atomic_load_explicit(&e->head, memory_order_acquire);
    if (head != tail && hcq__device_is_lost(e->dev)) {
      /* A lost device drops what is queued: its completion counters jump to what was submitted. */
      tail = head;
      atomic_store_explicit(&e->cur, NULL, memory_order_relaxed);
      publish_tail(e, tail);
      continue;
    }
    if (head == tail) {
      atomic_store_explicit(&e->cur, NULL, memory_order_relaxed);
      if (atomic_load_explicit(&e->stop, memory_order_acquire)) break;
      if (spin_while_equal64(&e->head, tail)) continue;
      uint32_t bell = atomic_load_explicit(&e->doorbell, memory_order_acquire);
      atomic_store_explicit(&e->sleeping, 1, memory_order_seq_cst);
      if (atomic_load_explicit(&e->head, memory_order_seq_cst) == tail && !atomic_load(&e->stop))
        hcq__futex_wait(&e->doorbell, bell, 0);
      atomic_store_explicit(&e->sleeping, 0, memory_order_seq_cst);
      continue;
    }
    while (tail != head) {
      uint64_t pos = tail & (RING_WORDS - 1);
      const uint32_t *w = e->ring + pos;
      uint32_t len = HCQ__HDR_LEN(w[0]);
      if (HCQ__HDR_OP(w[0]) == HCQ__OP_JUMP) {
        len = (uint32_t)(RING_WORDS - pos);
      } else {
        atomic_store_explicit(&e->prev, NULL, memory_order_relaxed);
        if (!run_words(e, w, len)) {
          tail = head; /* lost: the rest of what was queued is dropped too */
          break;
        }
      }
      tail += len;
      publish_tail(e, tail);
    }
    publish_tail(e, tail);
  }
  hcq__cpu_fault_ctx = NULL;
  hcq__cpu_fault_thread_exit(altstack);
  atomic_store(&e->exited, true);
  return NULL;
}

/* Waits until the ring has need free words; under the device lock, so one producer at a time. */
static hcq_status_t wait_for_space(hcq_device_t *dev, cpu_engine_t *e, uint64_t head, uint64_t need) {
  uint64_t deadline = 0;
  for (;;) {
    uint32_t seq = atomic_load_explicit(&e->tail_seq, memory_order_seq_cst);
    if (RING_WORDS - (head - atomic_load_explicit(&e->tail, memory_order_acquire)) >= need) return NULL;
    hcq_status_t st = hcq__device_check(dev);
    if (st) return st;
    uint64_t now = hcq__now_ns();
    if (!deadline) deadline = hcq__deadline_after_ms(HCQ_TIMEOUT_DEFAULT);
    if (now >= deadline) {
      st = hcq_status_make(HCQ_TIMEOUT, "%s: the %s queue ring stayed full (is its work waiting on a signal that is never set?)",
                           dev->name, e == &((cpu_device_t *)dev->backend)->engines[HCQ_QUEUE_COMPUTE] ? "compute" : "copy");
      return hcq__device_annotate_report(st, &dev, 1);
    }
    atomic_fetch_add_explicit(&e->space_waiters, 1, memory_order_seq_cst);
    if (RING_WORDS - (head - atomic_load_explicit(&e->tail, memory_order_seq_cst)) < need)
      hcq__futex_wait(&e->tail_seq, seq, deadline - now < 1000000 ? deadline - now : 1000000);
    atomic_fetch_sub_explicit(&e->space_waiters, 1, memory_order_seq_cst);
  }
}

/* Ring words a submission takes: bound lists travel as one CALL. */
static size_t ring_words(size_t nwords, bool bound) { return bound ? HCQ__LEN_CALL : nwords; }

static hcq_status_t cpu_reserve(hcq_device_t *dev, hcq_queue_kind_t kind, size_t nwords, bool bound) {
  cpu_engine_t *e = &((cpu_device_t *)dev->backend)->engines[kind];
  nwords = ring_words(nwords, bound);
  if (nwords > RING_WORDS / 2)
    return hcq_status_make(HCQ_INVALID_ARGUMENT, "%s: a queue of %zu words is larger than half the ring (%" PRIu64
                           " words): bind it first", dev->name, nwords, RING_WORDS / 2);
  uint64_t head = atomic_load_explicit(&e->head, memory_order_relaxed);
  uint64_t pos = head & (RING_WORDS - 1);
  uint64_t pad = pos + nwords > RING_WORDS ? RING_WORDS - pos : 0;
  return wait_for_space(dev, e, head, pad + nwords);
}

static hcq_status_t cpu_submit(hcq_device_t *dev, hcq_queue_kind_t kind, const uint32_t *words, size_t nwords,
                               bool bound) {
  hcq_status_t st = cpu_reserve(dev, kind, nwords, bound);
  if (st) return st;
  cpu_engine_t *e = &((cpu_device_t *)dev->backend)->engines[kind];
  uint32_t call[HCQ__LEN_CALL];
  if (bound) {
    call[0] = HCQ__HDR(CALL);
    hcq__wr64(call + HCQ__CALL_PTR, (uint64_t)(uintptr_t)words);
    call[HCQ__CALL_LEN] = (uint32_t)nwords;
    words = call;
    nwords = HCQ__LEN_CALL;
  }
  uint64_t head = atomic_load_explicit(&e->head, memory_order_relaxed);
  uint64_t pos = head & (RING_WORDS - 1);
  if (pos + nwords > RING_WORDS) {
    e->ring[pos] = HCQ__HDR(JUMP);
    head += RING_WORDS - pos;
  }
  memcpy(e->ring + (head & (RING_WORDS - 1)), words, nwords * sizeof(uint32_t));
  atomic_store_explicit(&e->head, head + nwords, memory_order_seq_cst);
  if (atomic_load_explicit(&e->sleeping, memory_order_seq_cst)) {
    atomic_fetch_add_explicit(&e->doorbell, 1, memory_order_seq_cst);
    hcq__futex_wake(&e->doorbell);
  }
  return NULL;
}

static uint64_t cpu_submitted(hcq_device_t *dev, hcq_queue_kind_t kind) {
  return atomic_load_explicit(&((cpu_device_t *)dev->backend)->engines[kind].head, memory_order_acquire);
}

static uint64_t cpu_completed(hcq_device_t *dev, hcq_queue_kind_t kind) {
  return atomic_load_explicit(&((cpu_device_t *)dev->backend)->engines[kind].tail, memory_order_acquire);
}

static hcq_status_t cpu_wait_idle(hcq_device_t *dev, int64_t timeout_ms) {
  cpu_device_t *cd = dev->backend;
  uint64_t deadline = hcq__deadline_after_ms(timeout_ms);
  for (int k = 0; k < 2; k++) {
    cpu_engine_t *e = &cd->engines[k];
    uint64_t head = atomic_load_explicit(&e->head, memory_order_acquire);
    while (atomic_load_explicit(&e->tail, memory_order_acquire) < head) {
      hcq_status_t st = hcq__device_check(dev);
      if (st) return st;
      if (hcq__now_ns() >= deadline)
        return hcq_status_make(HCQ_TIMEOUT, "%s: its %s queue still has work after %" PRId64 " ms (waiting on a signal?)",
                               dev->name, k == HCQ_QUEUE_COMPUTE ? "compute" : "copy", timeout_ms);
      struct timespec ts = {0, 100000};
      nanosleep(&ts, NULL);
    }
  }
  return NULL;
}

static void cpu_snapshot(hcq_device_t *dev, hcq_queue_kind_t kind, hcq__engine_snapshot_t *out) {
  cpu_engine_t *e = &((cpu_device_t *)dev->backend)->engines[kind];
  out->present = true;
  out->submitted = atomic_load_explicit(&e->head, memory_order_acquire);
  out->completed = atomic_load_explicit(&e->tail, memory_order_acquire);
  out->cur = atomic_load_explicit(&e->cur, memory_order_relaxed);
  out->prev = atomic_load_explicit(&e->prev, memory_order_relaxed);
  out->call_base = atomic_load_explicit(&e->call_base, memory_order_relaxed);
  if (out->completed >= out->submitted) out->cur = out->prev = NULL;
}

static void wake_engines(cpu_device_t *cd) {
  for (int k = 0; k < 2; k++) {
    atomic_fetch_add(&cd->engines[k].doorbell, 1);
    hcq__futex_wake(&cd->engines[k].doorbell);
  }
  atomic_fetch_add(&cd->pool.done_seq, 1);
  hcq__futex_wake(&cd->pool.done_seq);
}

static void cpu_lost(hcq_device_t *dev) { wake_engines(dev->backend); }

/* ---- memory ---- */

static hcq_status_t cpu_mem_alloc(hcq_device_t *dev, uint64_t size, uint32_t flags, hcq__mem_t *out) {
  (void)flags; /* all CPU memory is host memory */
  uint64_t rounded = (size + 63) & ~UINT64_C(63);
  if (rounded < size || rounded > (UINT64_C(1) << 46))
    return hcq_status_make(HCQ_OUT_OF_MEMORY, "%s: cannot allocate %" PRIu64 " bytes", dev->name, size);
  void *p;
  if (rounded >= CPU_MMAP_THRESHOLD) {
    /* Anonymous pages are zero and unbacked until touched; the kernel refuses what cannot fit. */
    p = mmap(NULL, (size_t)rounded, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED)
      return hcq_status_make(HCQ_OUT_OF_MEMORY, "%s: out of memory allocating %" PRIu64 " bytes (%s)", dev->name, size,
                             strerror(errno));
    out->handle = (void *)(uintptr_t)rounded;
  } else {
    p = aligned_alloc(64, (size_t)rounded);
    if (!p) return hcq_status_make(HCQ_OUT_OF_MEMORY, "%s: out of memory allocating %" PRIu64 " bytes", dev->name, size);
    memset(p, 0, (size_t)rounded);
    out->handle = NULL;
  }
  out->host = p;
  out->addr = (uint64_t)(uintptr_t)p;
  out->size = size;
  return NULL;
}

static void cpu_mem_free(hcq_device_t *dev, hcq__mem_t *mem) {
  (void)dev;
  if (mem->handle)
    munmap(mem->host, (size_t)(uintptr_t)mem->handle);
  else
    free(mem->host);
  mem->host = NULL;
}

/* ---- lifecycle ---- */

/* Joins a thread that is expected to leave by deadline; false if it did not (it is detached). */
static bool join_by(pthread_t t, _Atomic bool *exited, uint64_t deadline) {
  while (!atomic_load(exited)) {
    if (hcq__now_ns() >= deadline) {
      pthread_detach(t);
      return false;
    }
    struct timespec ts = {0, 200000};
    nanosleep(&ts, NULL);
  }
  pthread_join(t, NULL);
  return true;
}

static bool cpu_stop(hcq_device_t *dev) {
  cpu_device_t *cd = dev->backend;
  /* A healthy device has no work left; a lost one drops it at once. Only a kernel that never
   * returns keeps a thread past this. */
  uint64_t deadline = hcq__now_ns() + (hcq__device_is_lost(dev) ? 500 : 10000) * UINT64_C(1000000);
  bool abandoned = false;
  for (int k = 0; k < 2; k++) {
    cpu_engine_t *e = &cd->engines[k];
    if (!e->started) continue;
    atomic_store(&e->stop, true);
    atomic_fetch_add(&e->doorbell, 1);
    hcq__futex_wake(&e->doorbell);
    if (!join_by(e->thread, &e->exited, deadline)) abandoned = true;
    e->started = false;
  }
  cpu_pool_t *p = &cd->pool;
  atomic_store(&p->stop, true);
  atomic_fetch_add(&p->gen, 2);
  hcq__futex_wake(&p->gen);
  for (unsigned i = 0; i < p->nhelpers; i++)
    if (!join_by(p->threads[i], &p->helper_exited[i], deadline)) abandoned = true;
  p->nhelpers = 0;
  return abandoned;
}

static void cpu_destroy(hcq_device_t *dev) {
  cpu_device_t *cd = dev->backend;
  if (!cd) return;
  for (int k = 0; k < 2; k++) {
    free(cd->engines[k].ring);
    free(cd->engines[k].altstack);
  }
  for (unsigned i = 0; cd->pool.altstacks && i + 1 < dev->threads; i++) free(cd->pool.altstacks[i]);
  free(cd->pool.altstacks);
  free(cd->pool.threads);
  free((void *)cd->pool.helper_exited);
  free(cd);
  dev->backend = NULL;
}

static const hcq__device_vtable_t cpu_vtable = {
    .destroy = cpu_destroy,
    .stop = cpu_stop,
    .mem_alloc = cpu_mem_alloc,
    .mem_free = cpu_mem_free,
    .reserve = cpu_reserve,
    .submit = cpu_submit,
    .submitted = cpu_submitted,
    .completed = cpu_completed,
    .wait_idle = cpu_wait_idle,
    .snapshot = cpu_snapshot,
    .lost = cpu_lost,
    .program_compile = hcq__cpu_compile,
    .program_unload = hcq__cpu_unload,
};

hcq_status_t hcq__cpu_device_create(int index, hcq_device_t *dev) {
  (void)index;
  hcq__cpu_fault_install();
  /* Its engines keep producer and consumer fields on separate cache lines: 64-byte aligned. */
  cpu_device_t *cd = aligned_alloc(64, (sizeof(*cd) + 63) & ~(size_t)63);
  if (cd) memset(cd, 0, sizeof(*cd));
  if (!cd) return hcq_status_make(HCQ_OUT_OF_MEMORY, "out of memory creating %s", dev->name);
  dev->vt = &cpu_vtable;
  dev->backend = cd;
  dev->caps = HCQ_CAP_IN_ORDER_QUEUES | HCQ_CAP_COPY_QUEUE | HCQ_CAP_HOST_CALLABLE | HCQ_CAP_COMPILE_C | HCQ_CAP_HOST_MEMORY;
  dev->threads = hcq__options()->cpu_threads;
  dev->max_work_items = CPU_MAX_WORK_ITEMS;
  cpu_pool_t *p = &cd->pool;
  p->dev = dev;
  p->engine = &cd->engines[HCQ_QUEUE_COMPUTE];
  p->min_parallel = hcq__options()->cpu_min_parallel;
  if (dev->threads > 1) {
    p->threads = calloc(dev->threads - 1, sizeof(pthread_t));
    p->helper_exited = calloc(dev->threads - 1, sizeof(*p->helper_exited));
    p->altstacks = calloc(dev->threads - 1, sizeof(*p->altstacks));
    if (!p->threads || !p->helper_exited || !p->altstacks) goto oom;
    for (unsigned i = 0; i + 1 < dev->threads; i++) {
      p->altstacks[i] = hcq__cpu_fault_stack_alloc();
      helper_arg_t *arg = malloc(sizeof(*arg));
      if (!arg) break;
      *arg = (helper_arg_t){p, i};
      if (pthread_create(&p->threads[i], NULL, helper_main, arg)) {
        free(arg);
        break;
      }
      p->nhelpers++;
    }
  }
  for (int k = 0; k < 2; k++) {
    cpu_engine_t *e = &cd->engines[k];
    e->dev = dev;
    e->pool = k == HCQ_QUEUE_COMPUTE ? p : NULL;
    e->fault = (hcq__cpu_fault_ctx_t){dev, engine_current_command, e, NULL, 0, 0};
    e->ring = calloc(RING_WORDS, sizeof(uint32_t));
    e->altstack = hcq__cpu_fault_stack_alloc();
    if (!e->ring) goto oom;
    if (pthread_create(&e->thread, NULL, engine_main, e)) {
      cpu_stop(dev);
      cpu_destroy(dev);
      return hcq_status_make(HCQ_UNAVAILABLE, "%s: cannot start a worker thread", dev->name);
    }
    e->started = true;
  }
  return NULL;
oom:
  cpu_stop(dev);
  cpu_destroy(dev);
  return hcq_status_make(HCQ_OUT_OF_MEMORY, "out of memory creating %s", dev->name);
}
