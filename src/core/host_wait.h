/* The host's clocks and its ways to wait (host_wait.c): the monotonic and a fast clock, spin steps,
 * deadlines, futex sleeps and bounded thread joins. Signals (signal.h) are built on these. */
#ifndef HCQ_CORE_HOST_WAIT_H
#define HCQ_CORE_HOST_WAIT_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "core/export.h"

HCQ__PRIVATE_EXPORT uint64_t hcq__now_ns(void);

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

/* One step of a spin-wait: a pause instruction at first, then yielding the CPU, so that on a
 * machine with more busy threads than cores a spinner does not starve the thread it waits for. */
HCQ__PRIVATE_EXPORT void hcq__spin_step(unsigned iteration);
/* The same with the number of pause iterations before yielding. */
void hcq__spin_step_after(unsigned iteration, unsigned pauses);

/* now + timeout_ms, saturating; 0 never (forever) results from a finite timeout. */
HCQ__PRIVATE_EXPORT uint64_t hcq__deadline_after_ms(int64_t timeout_ms);

/* Futex helpers on a 32-bit word. */
HCQ__PRIVATE_EXPORT void hcq__futex_wait(_Atomic uint32_t *word, uint32_t expected, uint64_t timeout_ns);
HCQ__PRIVATE_EXPORT void hcq__futex_wake(_Atomic uint32_t *word);

/* Joins t once *exited is set, or detaches it at deadline_ns and returns false (a thread stuck in a
 * kernel is abandoned, never waited for). */
bool hcq__join_by(pthread_t t, _Atomic bool *exited, uint64_t deadline_ns);

#endif
