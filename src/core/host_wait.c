/* The host's clocks and ways to wait (core/host_wait.h). */
#include <linux/futex.h>
#include <sched.h>
#include <stdio.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "core/host_wait.h"
#include "core/options.h"

#if defined(__x86_64__)
#include <x86intrin.h>

/* The kernel keeps time with the TSC (so it is invariant and synchronised across cores). */
static bool tsc_is_clocksource(void) {
  FILE *f = fopen("/sys/devices/system/clocksource/clocksource0/current_clocksource", "r");
  char name[32] = "";
  if (f) {
    if (!fgets(name, sizeof(name), f)) name[0] = '\0';
    fclose(f);
  }
  return !strncmp(name, "tsc", 3) && (name[3] == '\n' || name[3] == '\0');
}

static uint64_t fast_clock_anchor(hcq__fast_clock_t *c) {
  if (c->state == HCQ__FAST_CLOCK_UNKNOWN)
    c->state = tsc_is_clocksource() ? HCQ__FAST_CLOCK_USABLE : HCQ__FAST_CLOCK_UNUSABLE;
  uint64_t now = hcq__now_ns();
  if (c->state == HCQ__FAST_CLOCK_UNUSABLE) return now;
  uint64_t t = __rdtsc();
  if (!c->tsc0) {
    c->tsc0 = t, c->ns0 = now;
  } else if (now - c->ns0 >= 10000000u && t > c->tsc0) {
    /* Measured from the first anchor: the longer the baseline, the smaller the error. */
    c->ns_per_tick = (double)(now - c->ns0) / (double)(t - c->tsc0);
    c->span = (uint64_t)(1e6 / c->ns_per_tick); /* ~1 ms */
  }
  c->tsc = t, c->ns = now;
  if (now > c->last) c->last = now;
  return c->last;
}

uint64_t hcq__fast_clock_now(hcq__fast_clock_t *c) {
  if (c->ns_per_tick > 0) {
    uint64_t d = __rdtsc() - c->tsc;
    if (d < c->span) {
      uint64_t v = c->ns + (uint64_t)((double)d * c->ns_per_tick);
      /* Between anchors the scale's error could step back by a few ns at the next anchor. */
      if (v > c->last) c->last = v;
      return c->last;
    }
  }
  return fast_clock_anchor(c);
}
#else
uint64_t hcq__fast_clock_now(hcq__fast_clock_t *c) {
  (void)c;
  return hcq__now_ns();
}
#endif

bool hcq__join_by(pthread_t t, _Atomic bool *exited, uint64_t deadline_ns) {
  while (!atomic_load(exited)) {
    if (hcq__now_ns() >= deadline_ns) {
      pthread_detach(t);
      return false;
    }
    struct timespec ts = {0, 200000};
    nanosleep(&ts, NULL);
  }
  pthread_join(t, NULL);
  return true;
}

void hcq__futex_wait(_Atomic uint32_t *word, uint32_t expected, uint64_t timeout_ns) {
  struct timespec ts, *tsp = NULL;
  if (timeout_ns) {
    ts.tv_sec = (time_t)(timeout_ns / 1000000000ull);
    ts.tv_nsec = (long)(timeout_ns % 1000000000ull);
    tsp = &ts;
  }
  syscall(SYS_futex, (uint32_t *)word, FUTEX_WAIT_PRIVATE, expected, tsp, NULL, 0);
}

void hcq__futex_wake(_Atomic uint32_t *word) {
  syscall(SYS_futex, (uint32_t *)word, FUTEX_WAKE_PRIVATE, INT32_MAX, NULL, NULL, 0);
}

uint64_t hcq__deadline_after_ms(int64_t timeout_ms) {
  if (timeout_ms < 0) timeout_ms = hcq__options()->wait_timeout_ms;
  uint64_t now = hcq__now_ns();
  /* A huge timeout means "that long": saturate instead of wrapping past now. */
  if ((uint64_t)timeout_ms > (UINT64_MAX - now) / 1000000u) return UINT64_MAX;
  uint64_t d = now + (uint64_t)timeout_ms * 1000000u;
  return d ? d : 1;
}

hcq__spin_policy_t hcq__host_spin_policy;

bool hcq__host_contended_now(void) {
  return atomic_load_explicit(&hcq__host_spin_policy.contended_until_ns, memory_order_relaxed) &&
         hcq__spin_policy_contended(&hcq__host_spin_policy, hcq__now_ns());
}

bool hcq__spin_policy_observe(hcq__spin_policy_t *p, uint64_t gap_ns, uint64_t now_ns) {
  if (gap_ns <= HCQ__SPIN_GAP_NS) return hcq__spin_policy_contended(p, now_ns);
  uint64_t before = atomic_exchange_explicit(&p->last_gap_ns, now_ns, memory_order_relaxed);
  /* One gap may be an interrupt or a kernel thread; a second soon after is other work on the cores.
   */
  bool close = before && now_ns >= before && now_ns - before <= HCQ__SPIN_GAP_WINDOW_NS;
  if (!close) return hcq__spin_policy_contended(p, now_ns);
  uint64_t until = now_ns + HCQ__SPIN_CONTENDED_HOLD_NS;
  uint64_t old = atomic_load_explicit(&p->contended_until_ns, memory_order_relaxed);
  if (old <= now_ns) atomic_fetch_add_explicit(&p->contended_spells, 1, memory_order_relaxed);
  while (old < until &&
         !atomic_compare_exchange_weak_explicit(&p->contended_until_ns, &old, until,
                                                memory_order_relaxed, memory_order_relaxed)) {}
  return true;
}
