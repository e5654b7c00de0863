/* hcq signals: two 64-bit words (value, timestamp) in memory that host and device both reach.
 *
 * Queue commands wait until value >= v, set value = v, or write the current time (nanoseconds of
 * CLOCK_MONOTONIC on CPU devices) into the timestamp. The host reads and sets the value and waits
 * with a timeout. A waiting CPU thread spins briefly (HCQ_SPIN_NS) and then sleeps on a futex, so
 * idle waits cost no CPU.
 *
 * A signal lives in the memory of the device it is created on; queues of any device may wait on or
 * set it by its address (hcq_signal_address). Freeing a signal that queued commands still use is
 * the caller's error, like freeing memory a kernel still reads.
 */
#ifndef HCQ_SIGNAL_H
#define HCQ_SIGNAL_H

#include <stdint.h>

#include "hcq/device.h"

#ifdef __cplusplus
extern "C" {
#endif
#pragma GCC visibility push(default) /* exported from libhcq.so (see hcq.h) */

/* Default host wait timeout; HCQ_WAIT_TIMEOUT_MS overrides it. */
#define HCQ_DEFAULT_WAIT_TIMEOUT_MS 30000
/* Pass as timeout_ms to use the default (or HCQ_WAIT_TIMEOUT_MS). */
#define HCQ_TIMEOUT_DEFAULT (-1)

/* Creates a signal on device with the given initial value. name (may be NULL) appears in error
 * messages; it is copied. */
HCQ_MUST_USE hcq_status_t hcq_signal_create(hcq_device_t *device, const char *name,
                                            uint64_t initial_value, hcq_signal_t **out_signal);
/* Frees the signal. Using it afterwards (a wait, a queue that waits on it, a second free) is
 * undefined behaviour that may return OK, unless HCQ_VALIDATE=1 (hcq.h), which reports it by name.
 */
void hcq_signal_destroy(hcq_signal_t *signal);

uint64_t hcq_signal_value(const hcq_signal_t *signal);
uint64_t hcq_signal_timestamp(const hcq_signal_t *signal);
/* Sets the value (release ordering) and wakes waiters. */
void hcq_signal_set(hcq_signal_t *signal, uint64_t value);
/* Waits until value >= value. timeout_ms < 0 means the default. A timeout is TIMEOUT with a message
 * naming the signal, the value waited for and the value seen. */
HCQ_MUST_USE hcq_status_t hcq_signal_wait(const hcq_signal_t *signal, uint64_t value,
                                          int64_t timeout_ms);

/* The device address of the value word, for queue commands. */
uint64_t hcq_signal_address(const hcq_signal_t *signal);
const char *hcq_signal_name(const hcq_signal_t *signal);
hcq_device_t *hcq_signal_device(const hcq_signal_t *signal);

#pragma GCC visibility pop
#ifdef __cplusplus
}
#endif
#endif
