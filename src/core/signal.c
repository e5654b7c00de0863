/* Signals and the host's waits on them (core/signal.h). */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>

#include "core/backend.h"
#include "core/command.h"
#include "core/device.h"
#include "core/hang_report.h"
#include "core/host_wait.h"
#include "core/memory.h"
#include "core/object.h"
#include "core/options.h"
#include "core/remote.h"
#include "core/signal.h"

/* Sleepers wait on a per-bucket sequence word outside signal memory, never on the signal itself:
 * a setter may be the last to touch a signal (the waiter frees it when it sees the value), and a
 * 64-bit value can change without its low half changing. A setter bumps the bucket's sequence only
 * when someone sleeps there; a bucket shared by two signals costs a spurious wake. */
#define PARK_BUCKETS 512
typedef struct {
  _Alignas(64) _Atomic uint32_t sleepers;
  _Atomic uint32_t seq;
} park_bucket_t;
static park_bucket_t g_park[PARK_BUCKETS];

static inline park_bucket_t *bucket_of(const hcq__signal_words_t *s) {
  uint64_t a = (uint64_t)(uintptr_t)s;
  return &g_park[((a >> 4) * UINT64_C(0x9E3779B97F4A7C15)) >> (64 - 9)];
}

void hcq__signal_words_set(hcq__signal_words_t *s, uint64_t value) {
  park_bucket_t *b = bucket_of(s);
  atomic_store_explicit(&s->value, value, memory_order_seq_cst);
  if (atomic_load_explicit(&b->sleepers, memory_order_seq_cst)) {
    atomic_fetch_add_explicit(&b->seq, 1, memory_order_seq_cst);
    hcq__futex_wake(&b->seq);
  }
}

void hcq__park_begin(const hcq__signal_words_t *s, hcq__park_t *p) {
  park_bucket_t *b = bucket_of(s);
  p->sleepers = &b->sleepers;
  p->word = &b->seq;
  atomic_fetch_add_explicit(&b->sleepers, 1, memory_order_seq_cst);
  p->seq = atomic_load_explicit(&b->seq, memory_order_seq_cst);
}

void hcq__park_end(hcq__park_t *p) {
  atomic_fetch_sub_explicit(p->sleepers, 1, memory_order_seq_cst);
}

void hcq__signal_wake_all(void) {
  for (size_t i = 0; i < PARK_BUCKETS; i++) {
    atomic_fetch_add_explicit(&g_park[i].seq, 1, memory_order_seq_cst);
    if (atomic_load_explicit(&g_park[i].sleepers, memory_order_seq_cst))
      hcq__futex_wake(&g_park[i].seq);
  }
}

static bool any_lost(hcq_device_t *const *watch, size_t nwatch) {
  for (size_t i = 0; i < nwatch; i++)
    if (watch[i] && hcq__device_is_lost(watch[i])) return true;
  return false;
}

/* ---- signals written by device hardware ---- */

static atomic_int g_device_writers;

void hcq__signal_device_writers_add(int delta) {
  atomic_fetch_add_explicit(&g_device_writers, delta, memory_order_seq_cst);
}

/* A GPU's write wakes nobody: while such a device is open, a sleeper looks again after poll_ns
 * (which grows up to 1 ms per wait) and lets the watched devices report asynchronous failures. */
static uint64_t poll_step(hcq_device_t *const *watch, size_t nwatch, uint64_t *poll_ns) {
  if (!atomic_load_explicit(&g_device_writers, memory_order_relaxed)) return 0;
  for (size_t i = 0; i < nwatch; i++)
    if (watch[i] && watch[i]->vt && watch[i]->vt->poll) watch[i]->vt->poll(watch[i]);
  uint64_t step = *poll_ns;
  *poll_ns = step >= 500000 ? 1000000 : step * 2;
  return step;
}

/* Under the MPI layer's engine-run transfers, a host waiting for work of devices that can run their
 * queues on the caller's thread (host_run) runs them itself, up to their first kernel: ranks
 * sharing a machine's cores then keep one busy thread each instead of a host and an engine taking
 * turns for a core on every hand-off (docs/mpi.md). Only for as long as a host spins (HCQ_SPIN_NS),
 * or polls a transfer in flight (HCQ_MPI_SPIN_NS): longer work goes back to the engine, which has a
 * core of its own (cpu_layout.c) where an unbound host thread may end up sharing one with another
 * rank's. True when the signal was reached. */
static bool run_while_waiting(hcq__signal_words_t *s, uint64_t want, uint64_t deadline_ns,
                              hcq_device_t *const *watch, size_t nwatch, uint64_t *seen) {
  const hcq__remote_hooks_t *hooks = atomic_load_explicit(&hcq__remote, memory_order_acquire);
  if (!hooks || !hooks->host_runs) return false;
  enum { MAX_RUN = 8 };
  hcq_device_t *run[MAX_RUN];
  size_t n = 0;
  for (size_t i = 0; i < nwatch && n < MAX_RUN; i++)
    if (watch[i] && watch[i]->vt && watch[i]->vt->host_run) run[n++] = watch[i];
  if (!n) return false;
  for (size_t i = 0; i < n; i++) run[i]->vt->host_run(run[i], HCQ__HOST_BEGIN);
  uint64_t start = hcq__now_ns(), window = hcq__options()->spin_ns;
  /* While a transfer to or from another rank is in flight, the host polls it as long as the engine
   * it stands in for would (HCQ_MPI_SPIN_NS): handing a transfer back mid-flight costs the engine's
   * wake-up, and over TCP a round trip outlasts HCQ_SPIN_NS, so every replay paid one. */
  uint64_t remote_window = hooks->copy_spin_ns > window ? hooks->copy_spin_ns : window;
  bool reached = false, remote = false;
  for (unsigned i = 1;; i++) {
    bool moved = false, none_left = true, polled = false;
    for (size_t k = 0; k < n; k++) {
      int r = run[k]->vt->host_run(run[k], HCQ__HOST_RUN);
      moved |= r == 1, none_left &= r < 0, polled |= r == 2;
    }
    /* In flight until a pass moves on (a pass that found the engine at the queues says nothing). */
    if (polled)
      remote = true;
    else if (moved || none_left)
      remote = false;
    uint64_t v = atomic_load_explicit(&s->value, memory_order_acquire);
    if (v >= want) {
      *seen = v;
      reached = true;
      break;
    }
    if (none_left) break; /* the rest is kernels (the engine's) or another device's or thread's */
    if ((i & 15) == 0) {
      uint64_t now = hcq__now_ns();
      if (now - start >= (remote ? remote_window : window) || (deadline_ns && now >= deadline_ns))
        break;
    }
    if (moved) continue;
    hcq__spin_step_after(i, 512);
  }
  for (size_t i = 0; i < n; i++) run[i]->vt->host_run(run[i], HCQ__HOST_END);
  return reached;
}

/* On a contended host (more runnable threads than cores) every thread gets its share of a core
 * whatever it does, so a waiter that sleeps gives its share to other processes: one waiting for a
 * device that can use it (backend assist: a CPU device's shared launches, which also judges whether
 * the host is contended) works on the device's launches instead, between looks at the signal. A
 * replay then runs on the engine, its helpers and the waiting thread; eager launches leave the host
 * less time to lend. True when the signal was reached; false when the device declines, the deadline
 * passed or a device was lost (the caller's sleep then sees which). */
static bool assist_while_waiting(hcq__signal_words_t *s, uint64_t want, uint64_t deadline_ns,
                                 hcq_device_t *const *watch, size_t nwatch, uint64_t *seen) {
  hcq_device_t *dev = NULL;
  for (size_t i = 0; i < nwatch && !dev; i++)
    if (watch[i] && watch[i]->vt->assist) dev = watch[i];
  for (int r = 0; dev && r >= 0;) {
    uint64_t v = atomic_load_explicit(&s->value, memory_order_acquire);
    *seen = v;
    if (v >= want) return true;
    if ((deadline_ns && hcq__now_ns() >= deadline_ns) || any_lost(watch, nwatch)) return false;
    /* A signal set while this thread sleeps for the next launch is seen within a millisecond: the
     * waits this serves (a token whose next step is already queued) have work queued behind them.
     */
    r = dev->vt->assist(dev, s, want, UINT64_C(1000000));
  }
  return false;
}

int hcq__signal_words_wait(hcq__signal_words_t *s, uint64_t want, uint64_t deadline_ns,
                           hcq_device_t *const *watch, size_t nwatch, uint64_t *seen) {
  uint64_t v = atomic_load_explicit(&s->value, memory_order_acquire);
  *seen = v;
  if (v >= want) return HCQ__WAIT_REACHED;
  if (run_while_waiting(s, want, deadline_ns, watch, nwatch, seen)) return HCQ__WAIT_REACHED;
  /* A host thread on the core an engine it waits for is pinned to would only take turns with it,
   * and one waiting for a GPU emulated on the host's cores (lavapipe) would take a core from the
   * driver's threads: it sleeps at once. Elsewhere it spins for a while, yielding early. */
  bool sleep_at_once = false;
  for (size_t i = 0; i < nwatch && !sleep_at_once; i++)
    sleep_at_once = watch[i] && watch[i]->vt->waiter_sleeps_at_once &&
                    watch[i]->vt->waiter_sleeps_at_once(watch[i]);
  const uint64_t spin_ns = sleep_at_once ? 0 : hcq__options()->spin_ns;
  uint64_t start = hcq__now_ns();
  for (unsigned i = 1; spin_ns; i++) {
    hcq__spin_step_after(i, 8);
    v = atomic_load_explicit(&s->value, memory_order_acquire);
    if (v >= want) {
      *seen = v;
      return HCQ__WAIT_REACHED;
    }
    if ((i & 63) == 0 && hcq__now_ns() - start >= spin_ns) break;
  }
  if (assist_while_waiting(s, want, deadline_ns, watch, nwatch, seen)) return HCQ__WAIT_REACHED;
  park_bucket_t *b = bucket_of(s);
  hcq__device_touch_watch(watch, nwatch);
  uint64_t poll_ns = 8000;
  for (;;) {
    uint64_t timeout = 0;
    if (deadline_ns) {
      uint64_t now = hcq__now_ns();
      if (now >= deadline_ns) {
        *seen = atomic_load_explicit(&s->value, memory_order_acquire);
        if (*seen >= want) return HCQ__WAIT_REACHED;
        /* Lost while we waited (and slow to say so on a busy machine): that is the real reason. */
        return any_lost(watch, nwatch) ? HCQ__WAIT_LOST : HCQ__WAIT_TIMEOUT;
      }
      timeout = deadline_ns - now;
      /* A relative futex timeout beyond a day is no different from a day, and stays far from any
       * time_t limit. */
      if (timeout > UINT64_C(86400000000000)) timeout = UINT64_C(86400000000000);
    }
    uint64_t poll = poll_step(watch, nwatch, &poll_ns);
    if (poll && (!timeout || poll < timeout)) timeout = poll;
    atomic_fetch_add_explicit(&b->sleepers, 1, memory_order_seq_cst);
    uint32_t seq = atomic_load_explicit(&b->seq, memory_order_seq_cst);
    v = atomic_load_explicit(&s->value, memory_order_seq_cst);
    bool lost = v < want && any_lost(watch, nwatch);
    if (v < want && !lost) hcq__futex_wait(&b->seq, seq, timeout);
    atomic_fetch_sub_explicit(&b->sleepers, 1, memory_order_seq_cst);
    v = atomic_load_explicit(&s->value, memory_order_acquire);
    *seen = v;
    if (v >= want) return HCQ__WAIT_REACHED;
    if (lost || any_lost(watch, nwatch)) return HCQ__WAIT_LOST;
  }
}

/* ---- the registry: every signal by address, so reports can name what a queue waits for ---- */

static pthread_mutex_t g_reg_lock = PTHREAD_MUTEX_INITIALIZER;
static hcq_signal_t *g_reg_head;

static void reg_add(hcq_signal_t *sig) {
  pthread_mutex_lock(&g_reg_lock);
  sig->reg_prev = NULL;
  sig->reg_next = g_reg_head;
  if (g_reg_head) g_reg_head->reg_prev = sig;
  g_reg_head = sig;
  pthread_mutex_unlock(&g_reg_lock);
}

static void reg_remove(hcq_signal_t *sig) {
  pthread_mutex_lock(&g_reg_lock);
  if (sig->reg_prev)
    sig->reg_prev->reg_next = sig->reg_next;
  else
    g_reg_head = sig->reg_next;
  if (sig->reg_next) sig->reg_next->reg_prev = sig->reg_prev;
  pthread_mutex_unlock(&g_reg_lock);
}

bool hcq__signal_lookup(uint64_t addr, char *name, size_t name_size, uint64_t *value,
                        hcq_device_t **dev) {
  pthread_mutex_lock(&g_reg_lock);
  hcq_signal_t *s = g_reg_head;
  while (s && s->mem.addr != addr) s = s->reg_next;
  if (s) {
    snprintf(name, name_size, "%s", s->name);
    *value = atomic_load_explicit(&s->words->value, memory_order_acquire);
    if (dev) *dev = s->dev;
  }
  pthread_mutex_unlock(&g_reg_lock);
  return s != NULL;
}

_Atomic unsigned hcq__remote_lost;

bool hcq__wait_is_orphaned(const uint32_t *cmd, char *why, size_t why_size) {
  if (!atomic_load_explicit(&hcq__remote_lost, memory_order_acquire)) return false;
  char name[80];
  uint64_t value = 0;
  hcq_device_t *owner = NULL;
  if (!hcq__signal_lookup(hcq__rd64(cmd + HCQ__WAIT_ADDR), name, sizeof(name), &value, &owner) ||
      !owner || !hcq__device_is_remote(owner) || !hcq__device_is_lost(owner))
    return false;
  snprintf(why, why_size,
           "it waits for signal \"%s\" >= %" PRIu32 " (value %" PRIu64
           "), which only %s sets, and %s is lost: %s",
           name, cmd[HCQ__WAIT_VALUE], value, owner->name, owner->name, owner->lost_reason);
  return true;
}

/* ---- public signal objects ---- */

hcq_status_t hcq__signal_create_internal(hcq_device_t *dev, const char *name, uint64_t value,
                                         hcq_signal_t **out) {
  hcq_signal_t *sig = calloc(1, sizeof(*sig));
  if (!sig)
    return hcq_status_make(HCQ_OUT_OF_MEMORY, "out of memory creating a signal on %s", dev->name);
  hcq_status_t st =
      dev->vt->mem_alloc(dev, sizeof(hcq__signal_words_t), HCQ__MEM_HOST_VISIBLE, &sig->mem);
  if (st) {
    free(sig);
    return hcq_status_annotate(st, "signal on %s", dev->name);
  }
  sig->dev = dev;
  sig->words = sig->mem.host;
  atomic_store_explicit(&sig->words->value, value, memory_order_release);
  snprintf(sig->name, sizeof(sig->name), "%s", name);
  reg_add(sig);
  *out = sig;
  return NULL;
}

void hcq__signal_abandon(hcq_signal_t *sig) {
  if (!sig) return;
  reg_remove(sig);
  hcq__keep(sig->mem.host);
  hcq__keep(sig);
}

void hcq__signal_destroy_now(hcq_signal_t *sig) {
  if (!sig) return;
  reg_remove(sig);
  sig->dev->vt->mem_free(sig->dev, &sig->mem);
  free(sig);
}

void hcq__signal_free_internal(hcq_signal_t *sig) {
  if (!sig) return;
  reg_remove(sig);
  /* A queue may still wait on it or set it: the memory goes once the engines are past their work.
   */
  hcq__device_defer_mem(sig->dev, sig->mem);
  free(sig);
}

hcq_status_t hcq_signal_create(hcq_device_t *device, const char *name, uint64_t initial_value,
                               hcq_signal_t **out_signal) {
  if (!out_signal)
    return hcq_status_make(HCQ_INVALID_ARGUMENT, "hcq_signal_create: out_signal is NULL");
  *out_signal = NULL;
  hcq_status_t st = hcq__device_handle_check(device, "hcq_signal_create");
  if (st) return st;
  static atomic_ulong counter;
  char fallback[64];
  if (!name || !*name) {
    snprintf(fallback, sizeof(fallback), "signal#%lu on %s", atomic_fetch_add(&counter, 1) + 1,
             device->name);
    name = fallback;
  }
  st = hcq__device_check(device);
  if (st) return hcq_status_annotate(st, "hcq_signal_create");
  st = hcq__signal_create_internal(device, name, initial_value, out_signal);
  if (!st) {
    (*out_signal)->is_public = true;
    hcq__obj_add(device, &(*out_signal)->obj, HCQ__OBJ_SIGNAL, (*out_signal)->name);
  }
  return st;
}

void hcq_signal_destroy(hcq_signal_t *signal) {
  if (!signal || hcq__obj_released_again(&signal->obj, "hcq_signal_destroy")) return;
  hcq_device_t *dev = signal->dev;
  reg_remove(signal);
  hcq__device_defer_mem(dev, signal->mem);
  hcq__obj_remove(&signal->obj);
  if (hcq__validating)
    hcq__keep(signal);
  else
    free(signal);
  hcq__device_struct_release(dev);
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

hcq_status_t hcq__wait_signal(const hcq_signal_t *signal, uint64_t value, int64_t timeout_ms,
                              hcq_device_t *const *devs, size_t ndevs) {
  if (timeout_ms < 0) timeout_ms = hcq__options()->wait_timeout_ms;
  uint64_t seen = 0;
  int r = hcq__signal_words_wait(signal->words, value, hcq__deadline_after_ms(timeout_ms), devs,
                                 ndevs, &seen);
  if (r == HCQ__WAIT_REACHED) return NULL;
  if (r == HCQ__WAIT_LOST) {
    for (size_t i = 0; i < ndevs; i++) {
      hcq_status_t st = hcq__device_check(devs[i]);
      if (st)
        return hcq_status_annotate(st, "waiting for signal \"%s\" to reach %" PRIu64, signal->name,
                                   value);
    }
  }
  hcq_status_t st =
      hcq_status_make(HCQ_TIMEOUT,
                      "timed out after %" PRId64 " ms waiting for signal \"%s\" to reach %" PRIu64
                      " (value seen: %" PRIu64 ")",
                      timeout_ms, signal->name, value, seen);
  return hcq__device_annotate_report(st, devs, ndevs);
}

hcq_status_t hcq_signal_wait(const hcq_signal_t *signal, uint64_t value, int64_t timeout_ms) {
  if (!signal) return hcq_status_make(HCQ_INVALID_ARGUMENT, "hcq_signal_wait: signal is NULL");
  hcq_status_t st = hcq__obj_check(&signal->obj, HCQ__OBJ_SIGNAL, "hcq_signal_wait: signal");
  if (st) return st;
  hcq_device_t *dev = signal->dev;
  return hcq__wait_signal(signal, value, timeout_ms, &dev, 1);
}

uint64_t hcq_signal_address(const hcq_signal_t *signal) { return signal ? signal->mem.addr : 0; }
const char *hcq_signal_name(const hcq_signal_t *signal) { return signal ? signal->name : ""; }
hcq_device_t *hcq_signal_device(const hcq_signal_t *signal) { return signal ? signal->dev : NULL; }

void hcq__signal_swap_names(hcq_signal_t *a, hcq_signal_t *b) {
  char t[sizeof(a->name)];
  pthread_mutex_lock(&g_reg_lock);
  memcpy(t, a->name, sizeof(t));
  memcpy(a->name, b->name, sizeof(t));
  memcpy(b->name, t, sizeof(t));
  pthread_mutex_unlock(&g_reg_lock);
}
