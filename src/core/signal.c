#include <errno.h>
#include <inttypes.h>
#include <linux/futex.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "core/internal.h"

uint64_t hcq__now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

void hcq__spin_step(unsigned iteration) {
  if (iteration < 512) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield");
#endif
  } else {
    sched_yield();
  }
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

/* The futex word is the low half of the value: every change of the value below 2^32 steps changes it. */
static inline _Atomic uint32_t *value_futex(hcq__signal_words_t *s) {
  return (_Atomic uint32_t *)(void *)&s->value;
}

/* Sleepers per bucket of signal addresses. A setter reads its bucket after the store, never the
 * signal memory; a collision only costs a spurious wake, which waiters tolerate. */
#define PARK_BUCKETS 512
static _Atomic uint32_t g_parked[PARK_BUCKETS];

static inline _Atomic uint32_t *parked(const hcq__signal_words_t *s) {
  uint64_t a = (uint64_t)(uintptr_t)s;
  return &g_parked[((a >> 4) * UINT64_C(0x9E3779B97F4A7C15)) >> (64 - 9)];
}

void hcq__signal_words_set(hcq__signal_words_t *s, uint64_t value) {
  _Atomic uint32_t *count = parked(s);
  atomic_store_explicit(&s->value, value, memory_order_seq_cst);
  /* futex_wake only hashes the address; it does not touch the (possibly freed) memory. */
  if (atomic_load_explicit(count, memory_order_seq_cst)) hcq__futex_wake(value_futex(s));
}

bool hcq__signal_words_wait(hcq__signal_words_t *s, uint64_t want, uint64_t deadline_ns, uint64_t *seen) {
  uint64_t v = atomic_load_explicit(&s->value, memory_order_acquire);
  if (v >= want) return true;
  const uint64_t spin_ns = hcq__options()->spin_ns;
  uint64_t start = hcq__now_ns();
  for (unsigned i = 1;; i++) {
    hcq__spin_step(i);
    v = atomic_load_explicit(&s->value, memory_order_acquire);
    if (v >= want) return true;
    if ((i & 63) == 0 && hcq__now_ns() - start >= spin_ns) break;
  }
  _Atomic uint32_t *count = parked(s);
  for (;;) {
    uint64_t timeout = 0;
    if (deadline_ns) {
      uint64_t now = hcq__now_ns();
      if (now >= deadline_ns) {
        *seen = atomic_load_explicit(&s->value, memory_order_acquire);
        return *seen >= want;
      }
      timeout = deadline_ns - now;
    }
    atomic_fetch_add_explicit(count, 1, memory_order_seq_cst);
    v = atomic_load_explicit(&s->value, memory_order_seq_cst);
    if (v < want) hcq__futex_wait(value_futex(s), (uint32_t)v, timeout);
    atomic_fetch_sub_explicit(count, 1, memory_order_seq_cst);
    v = atomic_load_explicit(&s->value, memory_order_acquire);
    if (v >= want) return true;
  }
}

/* ---- public signal objects ---- */

hcq_status_t hcq__signal_create_internal(hcq_device_t *dev, const char *name, uint64_t value, hcq_signal_t **out) {
  hcq_signal_t *sig = calloc(1, sizeof(*sig));
  if (!sig) return hcq_status_make(HCQ_OUT_OF_MEMORY, "out of memory creating a signal on %s", dev->name);
  hcq_status_t st = dev->vt->mem_alloc(dev, sizeof(hcq__signal_words_t), &sig->mem);
  if (st) {
    free(sig);
    return hcq_status_annotate(st, "signal on %s", dev->name);
  }
  sig->dev = dev;
  sig->words = sig->mem.host;
  atomic_store_explicit(&sig->words->value, value, memory_order_release);
  snprintf(sig->name, sizeof(sig->name), "%s", name);
  *out = sig;
  return NULL;
}

void hcq__signal_free_internal(hcq_signal_t *sig) {
  if (!sig) return;
  sig->dev->vt->mem_free(sig->dev, &sig->mem);
  free(sig);
}

hcq_status_t hcq_signal_create(hcq_device_t *device, const char *name, uint64_t initial_value,
                               hcq_signal_t **out_signal) {
  if (!out_signal) return hcq_status_make(HCQ_INVALID_ARGUMENT, "hcq_signal_create: out_signal is NULL");
  *out_signal = NULL;
  if (!device) return hcq_status_make(HCQ_INVALID_ARGUMENT, "hcq_signal_create: device is NULL");
  static atomic_ulong counter;
  char fallback[64];
  if (!name || !*name) {
    snprintf(fallback, sizeof(fallback), "signal#%lu on %s", atomic_fetch_add(&counter, 1) + 1, device->name);
    name = fallback;
  }
  hcq_status_t st = hcq__signal_create_internal(device, name, initial_value, out_signal);
  if (!st) atomic_fetch_add(&device->live, 1);
  return st;
}

void hcq_signal_free(hcq_signal_t *signal) {
  if (!signal) return;
  hcq_device_t *dev = signal->dev;
  hcq__signal_free_internal(signal);
  atomic_fetch_sub(&dev->live, 1);
}

uint64_t hcq_signal_value(const hcq_signal_t *signal) {
  return signal ? atomic_load_explicit(&signal->words->value, memory_order_acquire) : 0;
}

uint64_t hcq_signal_timestamp(const hcq_signal_t *signal) {
  return signal ? atomic_load_explicit(&signal->words->timestamp, memory_order_acquire) : 0;
}

void hcq_signal_set(hcq_signal_t *signal, uint64_t value) {
  if (signal) hcq__signal_words_set(signal->words, value);
}

hcq_status_t hcq_signal_wait(const hcq_signal_t *signal, uint64_t value, int64_t timeout_ms) {
  if (!signal) return hcq_status_make(HCQ_INVALID_ARGUMENT, "hcq_signal_wait: signal is NULL");
  if (timeout_ms < 0) timeout_ms = hcq__options()->wait_timeout_ms;
  uint64_t deadline = hcq__now_ns() + (uint64_t)timeout_ms * 1000000ull;
  uint64_t seen = 0;
  if (hcq__signal_words_wait(signal->words, value, deadline, &seen)) return NULL;
  return hcq_status_make(HCQ_TIMEOUT,
                         "timed out after %" PRId64 " ms waiting for signal \"%s\" to reach %" PRIu64
                         " (value seen: %" PRIu64 ")",
                         timeout_ms, signal->name, value, seen);
}

uint64_t hcq_signal_address(const hcq_signal_t *signal) { return signal ? signal->mem.addr : 0; }
const char *hcq_signal_name(const hcq_signal_t *signal) { return signal ? signal->name : ""; }
hcq_device_t *hcq_signal_device(const hcq_signal_t *signal) { return signal ? signal->dev : NULL; }
