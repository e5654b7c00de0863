/* The CPU device's engine, its two queues and the pool of helper threads that shares big launches,
 * for the files that make it up: cpu_device.c (producers and lifecycle), cpu_engine.c (the engine
 * thread) and cpu_pool.c (the helper threads and where threads run). The small helpers here are
 * static inline because the engine, its helpers and producers call them on their hot paths. */
#ifndef HCQ_CPU_ENGINE_H
#define HCQ_CPU_ENGINE_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "core/cmd_cursor.h"
#include "core/device.h"
#include "core/host_wait.h"
#include "core/options.h"
#include "cpu/cpu_internal.h"
#include "hcq/program.h"

#define RING_WORDS (UINT64_C(1) << 18)
/* How long a blocked engine spins while work is in flight before it sleeps: long enough for any
 * hand-off between cores, short next to a kernel worth sleeping through. */
#define CPU_INFLIGHT_SPIN_NS (UINT64_C(200000))

/* One queue kind's ring and the engine's place in it. Producer-written and consumer-written fields
 * sit on separate cache lines. */
typedef struct cpu_queue {
  uint32_t *ring;                     /* RING_WORDS words */
  _Alignas(64) _Atomic uint64_t head; /* words published by the producer */
  _Alignas(64) _Atomic uint64_t tail; /* words of entries completed */
  _Atomic uint32_t tail_seq;          /* bumped when tail moves while a producer waits for space */
  _Atomic uint32_t space_waiters;
  /* Written per command by the engine (its cursor fields read only by reports): a line of its own.
   */
  _Alignas(64) hcq__cmd_cursor_t c;
  uint64_t pos; /* ring position of the current entry (c.w NULL: no entry) */
  uint32_t entry_len;
  void *remote_op; /* the MPI request of the cross-rank COPY at w (NULL: none) */
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
  unsigned created;            /* helper threads started (layout lock) */
  _Atomic uint32_t nactive;    /* helpers that take part: the layout's budget */
  _Atomic uint32_t layout_seq; /* parked helpers sleep here until the budget changes */
  _Atomic uint32_t gen;
  _Atomic uint32_t active;
  _Atomic uint32_t helpers_sleeping;
  _Atomic uint64_t next_group;
  _Atomic uint64_t remaining;
  _Atomic uint32_t done_seq;
  _Atomic uint32_t worker_sleeping;
  _Atomic bool stop;
  _Atomic uint64_t
      assisted; /* launches a waiting host thread took part in (hcq__cpu_pool_assist) */
  _Atomic uint32_t hosts_assisting; /* host threads asleep in hcq__cpu_pool_assist */
  _Atomic uint32_t assist_seq;      /* ... sleep on this word: bumped by wake_assisting_hosts */
  /* What the last of them waits for (NULL: not known): an entry's end wakes them only once it is
   * set, not at every entry of every queue (each wake is a system call and a context switch). */
  _Atomic(const hcq__signal_words_t *) assist_signal;
  _Atomic uint32_t
      assist_peeking; /* engines reading *assist_signal: the host leaves once none is */
  /* host sleeps in assist, and those a wake ended (tests) */
  _Atomic uint64_t assist_sleeps, assist_woken;
  _Atomic uint64_t assist_want;
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
  cpu_queue_t q[2];                       /* by hcq_queue_kind_t */
  _Alignas(64) cpu_queue_t *running;      /* the queue whose command runs (for the fault handler) */
  _Alignas(64) _Atomic uint32_t doorbell; /* where an idle engine sleeps */
  _Atomic(_Atomic uint32_t *) sleep_word; /* where the engine sleeps now (NULL: awake) */
  _Atomic bool stop;
  _Atomic bool exited;
  _Atomic uint32_t barrier_word;
  cpu_pool_t pool;
  hcq__fast_clock_t clock; /* the engine thread's, for timestamps */
  _Atomic uint64_t
      kernel_stamps; /* kernels stamped by run_kernels (tests: hcq__cpu_kernel_stamps) */
  /* The engine thread's: when the idle spell it sleeps in began (0: none), and how long the last
   * one it slept in lasted until new work came (wait_for_work then spins through a short one). */
  uint64_t idle_since_ns, idle_gap_ns;
  _Atomic uint64_t cadence_spins; /* idle spins that a short last gap lengthened (tests) */
  hcq__cpu_share_t share;         /* its cores (cpu_layout.c) */
  uint64_t remote_since; /* when the engine began polling for a cross-rank COPY (0: it is not) */
  unsigned remote_polls;
  bool remote_spinning; /* within the layer's spin budget: poll back to back */
  /* Who runs the queues now (OWN_*): the engine, or a host thread waiting for their work that runs
   * them itself (hcq__cpu_host_run). The engine sleeps on defer_word while such hosts count in
   * helpers. */
  _Alignas(64) _Atomic int owner;
  _Atomic unsigned helpers;
  _Atomic uint32_t defer_word;
  _Atomic bool deferring;
  bool on_host; /* the queues run on a waiting host: it stops at a kernel (left to the engine) */
  bool kernel_ahead;            /* ... and it stopped at one */
  _Atomic uint64_t host_passes; /* passes of a waiting host that moved a queue (tests) */
  _Atomic uint64_t
      host_handbacks; /* hosts that left with a cross-rank transfer in flight (tests) */
} cpu_engine_t;

enum { OWN_FREE, OWN_ENGINE, OWN_HOST };

static inline cpu_engine_t *engine_of(hcq_device_t *dev) { return dev->backend; }

static inline void wake_engine(cpu_engine_t *e) {
  _Atomic uint32_t *word = atomic_load_explicit(&e->sleep_word, memory_order_seq_cst);
  if (!word) return;
  atomic_fetch_add_explicit(word, 1, memory_order_seq_cst);
  hcq__futex_wake(word);
}

/* Spins (pause, then yield) until ready(ctx) or budget_ns have passed; true when ready. On a
 * contended host it stops early (core/host_wait.h: hcq__spin_until_with). */
static inline bool spin_until(bool (*ready)(const void *ctx), const void *ctx, uint64_t budget_ns) {
  return hcq__spin_until_with(&hcq__host_spin_policy, ready, ctx, budget_ns);
}

typedef struct {
  _Atomic uint32_t *word;
  uint32_t seen;
} cpu_word_watch_t;

static inline bool word_changed(const void *ctx) {
  const cpu_word_watch_t *w = ctx;
  return atomic_load_explicit(w->word, memory_order_acquire) != w->seen;
}

/* Spins until *word != seen or budget_ns have passed; true when it changed. */
static inline bool spin_while_equal32_for(_Atomic uint32_t *word, uint32_t seen,
                                          uint64_t budget_ns) {
  cpu_word_watch_t w = {word, seen};
  return spin_until(word_changed, &w, budget_ns);
}

/* The same for the spin budget (HCQ_SPIN_NS). */
static inline bool spin_while_equal32(_Atomic uint32_t *word, uint32_t seen) {
  return spin_while_equal32_for(word, seen, hcq__options()->spin_ns);
}

static inline void run_groups(hcq_cpu_kernel_fn fn, void *const *bufs, const int32_t *vals,
                              const uint32_t gsz[3], const uint32_t lsz[3], uint64_t first,
                              uint64_t count) {
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

/* ---- across the device's files ---- */

/* cpu_engine.c: the engine thread; the device's host_run (core/backend.h); what a kernel thread
 * runs, for the fault handler (cpu_internal.h). */
void *hcq__cpu_engine_main(void *arg);
int hcq__cpu_host_run(hcq_device_t *dev, int step);
const uint32_t *hcq__cpu_engine_current_command(const hcq__cpu_fault_ctx_t *ctx);

/* cpu_pool.c: takes chunks of the pool's current job until none are left; marks the device lost
 * after a fault in a kernel with isolation on; names a thread of the device. */
void hcq__cpu_pool_work(cpu_pool_t *p);
/* A waiting host thread on a contended machine takes chunks of the published job (core/backend.h,
 * assist): 1 when it ran some, 0 when it waited for one, -1 when the host is not contended. */
int hcq__cpu_pool_assist(cpu_pool_t *p, const hcq__signal_words_t *s, uint64_t want,
                         uint64_t max_ns);

/* Wakes host threads that sleep in hcq__cpu_pool_assist: always when a job was published
 * (any_job), else (an entry of a queue ended) when what they wait for is set, or not known. */
static inline void wake_assisting_hosts(cpu_pool_t *p, bool any_job) {
  uint32_t hosts = atomic_load_explicit(&p->hosts_assisting, memory_order_seq_cst);
  if (!hosts) return;
  if (!any_job && hosts == 1) {
    /* counted while the signal is read: the host that set it may free it once it has left, so it
     * leaves only when no engine is between reading the pointer and the value
     * (hcq__cpu_pool_assist) */
    atomic_fetch_add_explicit(&p->assist_peeking, 1, memory_order_seq_cst);
    const hcq__signal_words_t *s = atomic_load_explicit(&p->assist_signal, memory_order_seq_cst);
    bool not_yet = s && atomic_load_explicit(&s->value, memory_order_seq_cst) <
                            atomic_load_explicit(&p->assist_want, memory_order_seq_cst);
    atomic_fetch_sub_explicit(&p->assist_peeking, 1, memory_order_seq_cst);
    if (not_yet) return;
  }
  atomic_fetch_add_explicit(&p->assist_seq, 1, memory_order_seq_cst);
  hcq__futex_wake(&p->assist_seq);
}
void hcq__cpu_isolated_fault(hcq__cpu_fault_ctx_t *ctx);
void hcq__cpu_name_thread(pthread_t t, const hcq_device_t *dev, const char *role, unsigned n);

#endif
