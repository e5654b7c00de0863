/* Signals (signal.c): 64-bit values in device memory that engines set and wait for, and the host's
 * waits on them (spinning, then sleeping on a futex bucket outside signal memory). */
#ifndef HCQ_CORE_SIGNAL_H
#define HCQ_CORE_SIGNAL_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/export.h"
#include "core/memory.h"
#include "core/object.h"
#include "hcq/signal.h"

typedef struct hcq__signal_words {
  _Atomic uint64_t value;
  _Atomic uint64_t timestamp;
} hcq__signal_words_t;

/* Stores value and wakes sleepers. The store is its last access to *s: a waiter that sees the value
 * may free the signal at once, so sleepers are counted in a table outside signal memory. */
HCQ__PRIVATE_EXPORT void hcq__signal_words_set(hcq__signal_words_t *s, uint64_t value);
/* Waits until value >= want, spinning then sleeping; deadline_ns 0 means forever. Returns
 * HCQ__WAIT_REACHED, HCQ__WAIT_TIMEOUT, or HCQ__WAIT_LOST when one of the watched devices (may be
 * NULL/0) is declared lost meanwhile; *seen is the last value read. */
enum { HCQ__WAIT_REACHED, HCQ__WAIT_TIMEOUT, HCQ__WAIT_LOST };
int hcq__signal_words_wait(hcq__signal_words_t *s, uint64_t want, uint64_t deadline_ns,
                           hcq_device_t *const *watch, size_t nwatch, uint64_t *seen);
/* Sleeping on a signal's bucket while also waiting for something else (an engine serving two
 * queues): begin registers as a sleeper and reads the bucket's sequence; sleep with
 * hcq__futex_wait(p.word, p.seq, ...) after re-checking every condition; end unregisters. Anyone
 * may bump *p.word and wake it to end the sleep early. */
typedef struct hcq__park {
  _Atomic uint32_t *word, *sleepers;
  uint32_t seq;
} hcq__park_t;
HCQ__PRIVATE_EXPORT void hcq__park_begin(const hcq__signal_words_t *s, hcq__park_t *p);
HCQ__PRIVATE_EXPORT void hcq__park_end(hcq__park_t *p);
/* Wakes every sleeping waiter in the process, so each re-checks its condition (device lost). */
void hcq__signal_wake_all(void);
/* Devices whose hardware writes signals without waking host sleepers (a GPU writing host memory)
 * count themselves here while open (+1 on create, -1 on destroy). While any is open, sleeping
 * waiters wake at least every millisecond (sooner at first) to look again, and call the vtable's
 * poll for the devices they watch. */
void hcq__signal_device_writers_add(int delta);

struct hcq_signal {
  hcq__obj_t obj; /* public signals only (internal ones are not on the device's list) */
  struct hcq_signal *reg_prev, *reg_next; /* process-wide registry, for naming signals by address */
  bool is_public;
  hcq_device_t *dev;
  hcq__mem_t mem;
  hcq__signal_words_t *words;
  char name[64];
};

/* A signal the core uses itself (timelines, graphs): not on the device's object list. */
HCQ_MUST_USE hcq_status_t hcq__signal_create_internal(hcq_device_t *dev, const char *name,
                                                      uint64_t value, hcq_signal_t **out);
/* Keeps a signal (and its memory) for the rest of the process: queues of other devices may still
 * wait on it and nothing tells when they stop (a graph destroyed while one of its devices is lost).
 */
void hcq__signal_abandon(hcq_signal_t *sig);
/* Frees a signal now (device destroy: nothing runs any more). */
void hcq__signal_destroy_now(hcq_signal_t *sig);
/* Frees a signal once the device's engines finished their work (a queue may still wait on it). */
void hcq__signal_free_internal(hcq_signal_t *sig);
/* Swaps two signals' names (the timeline and its shadow on a wrap: the live one keeps its name). */
void hcq__signal_swap_names(hcq_signal_t *a, hcq_signal_t *b);
/* The registered signal whose value word is at addr: copies its name and value; false if none. */
bool hcq__signal_lookup(uint64_t addr, char *name, size_t name_size, uint64_t *value,
                        hcq_device_t **dev);
/* Host wait for a signal on behalf of devs: a timeout carries their hang report, a lost device
 * ends it with DEVICE_LOST. timeout_ms < 0: the default. */
HCQ_MUST_USE hcq_status_t hcq__wait_signal(const hcq_signal_t *sig, uint64_t value,
                                           int64_t timeout_ms, hcq_device_t *const *devs,
                                           size_t ndevs);

#endif
