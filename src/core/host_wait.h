/* The host's clocks and its ways to wait (host_wait.c): the monotonic and a fast clock, spin steps,
 * deadlines, futex sleeps and bounded thread joins. Signals (signal.h) are built on these. */
#ifndef HCQ_CORE_HOST_WAIT_H
#define HCQ_CORE_HOST_WAIT_H

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <time.h>

#include "core/export.h"

/* CLOCK_MONOTONIC in ns. Inline, as the spin steps below: waiters call them in their spin loops. */
static inline uint64_t hcq__now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* A cheaper hcq__now_ns for device timestamps (the CPU engine takes one per profiled item): the
 * time-stamp counter scaled to CLOCK_MONOTONIC, re-anchored on the real clock every ~1 ms, where
 * the kernel keeps time with an invariant TSC; hcq__now_ns elsewhere. One per thread;
 * zero-initialised. */
/* Whether the fast clock can be used here. */
typedef enum hcq__fast_clock_state {
  HCQ__FAST_CLOCK_UNKNOWN, /* not checked yet */
  HCQ__FAST_CLOCK_USABLE,
  HCQ__FAST_CLOCK_UNUSABLE, /* not usable here */
} hcq__fast_clock_state_t;

typedef struct hcq__fast_clock {
  uint64_t tsc0, ns0;  /* first anchor: the scale is measured from it */
  uint64_t tsc, ns;    /* last anchor */
  uint64_t span, last; /* ticks between anchors; the last value returned (never goes back) */
  double ns_per_tick;  /* 0 until measured over >= 10 ms */
  hcq__fast_clock_state_t state;
} hcq__fast_clock_t;
uint64_t hcq__fast_clock_now(hcq__fast_clock_t *c);

/* True while the process's spins are cut short (hcq__host_spin_policy, below). A function, not an
 * inline reading the policy: the MPI layer's spins call it from libhcq_mpi.so, and libhcq.so
 * exports functions only. */
HCQ__PRIVATE_EXPORT bool hcq__host_contended_now(void);

/* One step of a spin-wait with pauses pause instructions before it yields the CPU, so that on a
 * machine with more busy threads than cores a spinner does not starve the thread it waits for. On a
 * contended host (below) it sleeps a microsecond instead of yielding: the scheduler (EEVDF, Linux
 * 6.6 on) moves a yielding thread's deadline a slice later at every yield, so a thread that yields
 * in a loop falls behind every busy process on its core and stays there once its work comes, where
 * a sleep is placed afresh when it wakes. */
static inline void hcq__spin_step_after(unsigned iteration, unsigned pauses) {
  if (iteration < pauses) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield");
#endif
  } else if (hcq__host_contended_now()) {
    struct timespec us = {0, 1000};
    nanosleep(&us, NULL);
  } else {
    sched_yield();
  }
}
/* The same with 64 pauses. */
static inline void hcq__spin_step(unsigned iteration) { hcq__spin_step_after(iteration, 64); }

/* ---- spinning on a busy host (docs/cpu-device.md, "Waiting on a busy machine") ----
 * A spin-wait pays when the thread it waits for runs on another core. With more runnable threads
 * than cores it does not: the spinner's sched_yield hands its core to another process for a whole
 * time slice (milliseconds), and the time it spins counts against its fair share, so it is behind
 * when its work comes. A spin that sees itself taken off its core (two clock reads 64 steps apart
 * further apart than HCQ__SPIN_GAP_NS) twice within HCQ__SPIN_GAP_WINDOW_NS marks the host
 * contended for HCQ__SPIN_CONTENDED_HOLD_NS: until then spins stop after their first 64 pauses
 * (no yield) and the waiter sleeps on its futex, whose wake-up the scheduler serves first. When the
 * hold ends, spins go back to their budget and the next gaps renew it. */
#define HCQ__SPIN_GAP_NS UINT64_C(500000)
#define HCQ__SPIN_GAP_WINDOW_NS UINT64_C(100000000)
#define HCQ__SPIN_CONTENDED_HOLD_NS UINT64_C(250000000)

/* What the spinners of a process observed. A pure state machine of its inputs (tests drive it with
 * made-up times); hcq__host_spin_policy is the process's. Any thread may call these. */
typedef struct hcq__spin_policy {
  _Atomic uint64_t last_gap_ns;        /* when a spin last saw itself descheduled (0: never) */
  _Atomic uint64_t contended_until_ns; /* spins are cut short until then */
  _Atomic uint64_t contended_spells;   /* how often the host was found contended (tests, reports) */
} hcq__spin_policy_t;
extern hcq__spin_policy_t hcq__host_spin_policy;

/* A spin saw gap_ns between two of its clock reads, at now_ns. True when that made (or kept) the
 * host contended: the spinner should sleep now. */
bool hcq__spin_policy_observe(hcq__spin_policy_t *p, uint64_t gap_ns, uint64_t now_ns);
/* True while spins are cut short. */
static inline bool hcq__spin_policy_contended(hcq__spin_policy_t *p, uint64_t now_ns) {
  return now_ns < atomic_load_explicit(&p->contended_until_ns, memory_order_relaxed);
}

/* Spins (64 pauses, then yields) until ready(ctx) or budget_ns have passed, as policy p allows;
 * true when ready. The clock is read every 64 steps: it costs more than a step. */
static inline bool hcq__spin_until_with(hcq__spin_policy_t *p, bool (*ready)(const void *ctx),
                                        const void *ctx, uint64_t budget_ns) {
  uint64_t start = 0, last = 0;
  for (unsigned i = 1;; i++) {
    if (ready(ctx)) return true;
    if ((i & 63) == 0) {
      uint64_t now = hcq__now_ns();
      if (!start) {
        if (hcq__spin_policy_contended(p, now)) return false; /* the pauses so far, then sleep */
        start = now;
      } else if (now - last > HCQ__SPIN_GAP_NS && hcq__spin_policy_observe(p, now - last, now)) {
        return false;
      } else if (now - start >= budget_ns) {
        return false;
      }
      last = now;
    }
    hcq__spin_step(i);
  }
}

/* now + timeout_ms, saturating; 0 never (forever) results from a finite timeout. */
HCQ__PRIVATE_EXPORT uint64_t hcq__deadline_after_ms(int64_t timeout_ms);

/* Futex helpers on a 32-bit word. */
HCQ__PRIVATE_EXPORT void hcq__futex_wait(_Atomic uint32_t *word, uint32_t expected,
                                         uint64_t timeout_ns);
HCQ__PRIVATE_EXPORT void hcq__futex_wake(_Atomic uint32_t *word);

/* Joins t once *exited is set, or detaches it at deadline_ns and returns false (a thread stuck in a
 * kernel is abandoned, never waited for). */
bool hcq__join_by(pthread_t t, _Atomic bool *exited, uint64_t deadline_ns);

#endif
