/* The Vulkan backend's hooks for tests: what it did, and a control to slow it (builds without
 * Vulkan have them too: vk_absent.c). Production code never includes this header (vk_device.c and
 * vk_engine.c define them). */
#ifndef HCQ_VK_TESTING_H
#define HCQ_VK_TESTING_H

#include <stdbool.h>
#include <stdint.h>

#include "hcq/device.h"
#include "hcq/queue.h"

/* Since the device opened: command buffers recorded for runs of bound command lists, runs recorded
 * again because a word they baked in changed, vkQueueSubmit calls, WAITs the engines resolved on
 * the host, WAITs that became timeline-semaphore waits, and SIGNALs handed to the completion
 * threads; sched_yield calls and sleeps of VK_INFLIGHT_POLL_NS the engines made while waiting for
 * work with work of theirs on the device, and submits that found the engine asleep and had to wake
 * it (vk_engine.c). */
typedef struct hcq__vk_counters {
  uint64_t records, rerecords, submits, host_waits, semaphore_waits, signals;
  uint64_t inflight_yields, inflight_polls, wake_calls;
} hcq__vk_counters_t;

/* Fills out for a Vulkan device; false (and zeros) for any other device or without Vulkan. */
bool hcq__vk_counters(hcq_device_t *dev, hcq__vk_counters_t *out);

/* For tests of the engines' ordering: the completion thread of dev's queue kind (HCQ_QUEUE_COMPUTE
 * or HCQ_QUEUE_COPY) sleeps ns before each piece of bookkeeping it takes up, as a thread the
 * scheduler left behind would. False for any other device or without Vulkan. */
bool hcq__vk_slow_completion(hcq_device_t *dev, hcq_queue_kind_t kind, uint64_t ns);

#endif
