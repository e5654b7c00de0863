/* hcq fences: a completion the host can wait on or poll, one per replay or per point in eager work.
 *
 * A fence holds a point on the timeline of each device it covers: it is reached once every such
 * device has finished all the work submitted to it up to the moment the fence was armed. Arm it
 * with hcq_graph_submit or hcq_jit_submit (the replay and everything before it on the graph's
 * devices), or with hcq_fence_record (all work so far on the devices given, eager work included).
 * Work submitted later, by this thread or another, does not hold it back, so a loop that keeps
 * several replays in flight can wait for replay i alone and read its output (hcq_buffer_map) while
 * replay i + 1 runs:
 *
 *   hcq_fence_t *done[2];                    // one per replay in flight, created once
 *   for (i = 0; i < n; i++) {
 *     CHECK(hcq_graph_submit(g, NULL, 0, &(hcq_var_value_t){step, i}, 1, done[i % 2]));
 *     if (i > 0) {
 *       CHECK(hcq_fence_wait(done[(i - 1) % 2], HCQ_TIMEOUT_DEFAULT));
 *       use(out[i - 1]);
 *     }
 *   }
 *
 * (examples/c/fences.c in full.) Fences survive timeline wraps (HCQ_TIMELINE_WRAP): a wrap happens
 * only once a device's work has all finished, and a fence armed before one counts as reached. A
 * fence is plain host state: creating one allocates, arming one allocates only when it covers more
 * devices than it ever did, waiting and polling allocate nothing.
 *
 * Threads: arming a fence while another thread waits on or polls the same fence is a data race;
 * different fences are independent. The devices a fence covers must stay open while it is waited on
 * or polled (a closed device is FAILED_PRECONDITION naming it, as for hcq_device_synchronize).
 */
#ifndef HCQ_FENCE_H
#define HCQ_FENCE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "hcq/device.h"

#ifdef __cplusplus
extern "C" {
#endif
#pragma GCC visibility push(default) /* exported from libhcq.so (see hcq.h) */

typedef struct hcq_fence hcq_fence_t;

/* A fence that covers no device yet: it counts as reached until it is armed. */
HCQ_MUST_USE hcq_status_t hcq_fence_create(hcq_fence_t **out_fence);
/* Frees the fence (the work it covers goes on). NULL is accepted. Using it afterwards is undefined
 * behaviour; HCQ_VALIDATE does not check fences. */
void hcq_fence_destroy(hcq_fence_t *fence);

/* Arms the fence at all the work submitted so far to each of the ndevices devices (replacing what
 * it covered before). */
HCQ_MUST_USE hcq_status_t hcq_fence_record(hcq_fence_t *fence, hcq_device_t *const *devices,
                                           size_t ndevices);

/* Waits until the fence is reached. timeout_ms < 0 means the default (HCQ_WAIT_TIMEOUT_MS). A
 * TIMEOUT names the device not done yet, the timeline value waited for and the value seen, with
 * the device's hang report; DEVICE_LOST when a device it covers was lost before it got there (its
 * work was dropped). */
HCQ_MUST_USE hcq_status_t hcq_fence_wait(const hcq_fence_t *fence, int64_t timeout_ms);
/* Never blocks: stores whether the fence is reached in *out_done. DEVICE_LOST (and *out_done
 * false) when a device it covers was lost before it got there. */
HCQ_MUST_USE hcq_status_t hcq_fence_poll(const hcq_fence_t *fence, bool *out_done);

/* The devices the fence covers now (0 until armed). */
size_t hcq_fence_device_count(const hcq_fence_t *fence);

#pragma GCC visibility pop
#ifdef __cplusplus
}
#endif
#endif
