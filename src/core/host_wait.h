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
 * time-stamp counter scaled to CLOCK_MONOTONIC, re-anchored on the real clock every ~1 ms, where the
 * kernel keeps time with an invariant TSC; hcq__now_ns elsewhere. One per thread; zero-initialised. */
typedef struct hcq__fast_clock {
  uint64_t tsc0, ns0;    /* first anchor: the scale is measured from it */
  uint64_t tsc, ns;      /* last anchor */
  uint64_t span, last;   /* ticks between anchors; the last value returned (never goes back) */
  double ns_per_tick;    /* 0 until measured over >= 10 ms */
  int state;             /* 0 unknown, 1 usable, -1 not usable here */
} hcq__fast_clock_t;
uint64_t hcq__fast_clock_now(hcq__fast_clock_t *c);

/* One step of a spin-wait with pauses pause instructions before it yields the CPU, so that on a
 * machine with more busy threads than cores a spinner does not starve the thread it waits for. */
static inline void hcq__spin_step_after(unsigned iteration, unsigned pauses) {
  if (iteration < pauses) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield");
#endif
  } else {
    sched_yield();
  }
}
/* The same with 64 pauses. */
static inline void hcq__spin_step(unsigned iteration) { hcq__spin_step_after(iteration, 64); }

/* now + timeout_ms, saturating; 0 never (forever) results from a finite timeout. */
HCQ__PRIVATE_EXPORT uint64_t hcq__deadline_after_ms(int64_t timeout_ms);

/* Futex helpers on a 32-bit word. */
HCQ__PRIVATE_EXPORT void hcq__futex_wait(_Atomic uint32_t *word, uint32_t expected, uint64_t timeout_ns);
HCQ__PRIVATE_EXPORT void hcq__futex_wake(_Atomic uint32_t *word);

/* Joins t once *exited is set, or detaches it at deadline_ns and returns false (a thread stuck in a
 * kernel is abandoned, never waited for). */
bool hcq__join_by(pthread_t t, _Atomic bool *exited, uint64_t deadline_ns);

#endif
