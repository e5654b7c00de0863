/* Fences (hcq/fence.h): per device, the timeline signal and value of the last work submitted when
 * the fence was armed, and the timeline's epoch then. The signal is kept rather than looked up at
 * wait time: a wrap swaps the live timeline for its shadow and restarts at 1, so the live signal
 * would never reach a value from before the wrap, while the one kept still holds it (a wrap waits
 * for all work first). An epoch that moved on means exactly that: reached. */
#include <inttypes.h>
#include <stdlib.h>

#include "core/device.h"
#include "core/fence.h"
#include "core/host_wait.h"
#include "core/options.h"
#include "core/signal.h"
#include "hcq/fence.h"

typedef struct fence_point {
  hcq_device_t *dev;
  const hcq_signal_t *timeline;
  uint64_t epoch, value;
} fence_point_t;

struct hcq_fence {
  fence_point_t *at;
  size_t n, cap;
};

hcq_status_t hcq_fence_create(hcq_fence_t **out_fence) {
  if (!out_fence)
    return hcq_status_make(HCQ_INVALID_ARGUMENT, "hcq_fence_create: out_fence is NULL");
  *out_fence = calloc(1, sizeof(hcq_fence_t));
  return *out_fence ? NULL : hcq_status_make(HCQ_OUT_OF_MEMORY, "out of memory creating a fence");
}

void hcq_fence_destroy(hcq_fence_t *fence) {
  if (!fence) return;
  free(fence->at);
  free(fence);
}

size_t hcq_fence_device_count(const hcq_fence_t *fence) { return fence ? fence->n : 0; }

hcq_status_t hcq__fence_reserve(hcq_fence_t *fence, size_t ndevices) {
  if (ndevices <= fence->cap) return NULL;
  fence_point_t *at = realloc(fence->at, ndevices * sizeof(*at));
  if (!at)
    return hcq_status_make(HCQ_OUT_OF_MEMORY, "out of memory arming a fence for %zu devices",
                           ndevices);
  fence->at = at;
  fence->cap = ndevices;
  return NULL;
}

void hcq__fence_arm(hcq_fence_t *fence, hcq_device_t *const *devices, size_t ndevices) {
  fence->n = 0;
  for (size_t i = 0; i < ndevices && i < fence->cap; i++) {
    hcq_device_t *dev = devices[i];
    pthread_mutex_lock(&dev->lock);
    fence->at[fence->n++] = (fence_point_t){
        dev, dev->timeline, atomic_load_explicit(&dev->timeline_epoch, memory_order_relaxed),
        dev->timeline_value - 1};
    pthread_mutex_unlock(&dev->lock);
  }
}

hcq_status_t hcq_fence_record(hcq_fence_t *fence, hcq_device_t *const *devices, size_t ndevices) {
  if (!fence) return hcq_status_make(HCQ_INVALID_ARGUMENT, "hcq_fence_record: fence is NULL");
  if (ndevices && !devices)
    return hcq_status_make(HCQ_INVALID_ARGUMENT, "hcq_fence_record: devices is NULL");
  for (size_t i = 0; i < ndevices; i++) {
    hcq_status_t st = hcq__device_handle_check(devices[i], "hcq_fence_record");
    if (st) return hcq_status_annotate(st, "devices[%zu]", i);
  }
  hcq_status_t st = hcq__fence_reserve(fence, ndevices);
  if (st) return st;
  hcq__fence_arm(fence, devices, ndevices);
  return NULL;
}

static bool point_reached(const fence_point_t *p) {
  if (atomic_load_explicit(&p->dev->timeline_epoch, memory_order_acquire) != p->epoch) return true;
  return hcq_signal_value(p->timeline) >= p->value;
}

/* The fence's work on a lost device was dropped: it will never be reached. */
static hcq_status_t lost(const fence_point_t *p) {
  hcq_status_t st = hcq__device_check(p->dev);
  return st ? hcq_status_annotate(st,
                                  "fence at timeline value %" PRIu64 " of %s: its work was dropped",
                                  p->value, p->dev->name)
            : NULL;
}

hcq_status_t hcq_fence_poll(const hcq_fence_t *fence, bool *out_done) {
  if (!out_done) return hcq_status_make(HCQ_INVALID_ARGUMENT, "hcq_fence_poll: out_done is NULL");
  *out_done = false;
  if (!fence) return hcq_status_make(HCQ_INVALID_ARGUMENT, "hcq_fence_poll: fence is NULL");
  for (size_t i = 0; i < fence->n; i++) {
    const fence_point_t *p = &fence->at[i];
    hcq_status_t st = hcq__device_handle_check(p->dev, "hcq_fence_poll");
    if (st) return st;
    if (point_reached(p)) continue;
    if (p->dev->vt->poll)
      p->dev->vt->poll(p->dev); /* finds a failed kernel, as a sleeping wait would */
    if (hcq__device_is_lost(p->dev) && (st = lost(p))) return st;
    return NULL;
  }
  *out_done = true;
  return NULL;
}

hcq_status_t hcq_fence_wait(const hcq_fence_t *fence, int64_t timeout_ms) {
  if (!fence) return hcq_status_make(HCQ_INVALID_ARGUMENT, "hcq_fence_wait: fence is NULL");
  if (timeout_ms < 0) timeout_ms = hcq__options()->wait_timeout_ms;
  uint64_t start = hcq__now_ns();
  for (size_t i = 0; i < fence->n; i++) {
    const fence_point_t *p = &fence->at[i];
    hcq_status_t st = hcq__device_handle_check(p->dev, "hcq_fence_wait");
    if (st) return st;
    if (point_reached(p)) continue;
    /* One timeout for the whole fence, not one per device. */
    int64_t spent_ms = (int64_t)((hcq__now_ns() - start) / 1000000);
    int64_t left_ms = timeout_ms > spent_ms ? timeout_ms - spent_ms : 0;
    hcq_device_t *dev = p->dev;
    st = hcq__wait_signal(p->timeline, p->value, left_ms, &dev, 1);
    if (st && hcq_status_code(st) == HCQ_DEVICE_LOST && point_reached(p)) {
      hcq_status_destroy(st); /* finished just before the loss */
      continue;
    }
    if (st) return hcq_status_annotate(st, "fence on %s", dev->name);
  }
  return NULL;
}
