/* Fences (fence.c): points on device timelines that a host call waits for. */
#ifndef HCQ_CORE_FENCE_H
#define HCQ_CORE_FENCE_H

#include <stddef.h>

#include "hcq/fence.h"

/* Room for ndevices points, then arming (which cannot fail after the reserve). */
HCQ_MUST_USE hcq_status_t hcq__fence_reserve(hcq_fence_t *fence, size_t ndevices);
void hcq__fence_arm(hcq_fence_t *fence, hcq_device_t *const *devices, size_t ndevices);

#endif
