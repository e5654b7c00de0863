/* The device struct and what the core does with it (device.c): the registry of open devices, their
 * locks, the timeline every submission signals, deferred frees, and lost devices. */
#ifndef HCQ_CORE_DEVICE_H
#define HCQ_CORE_DEVICE_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/backend.h"
#include "core/export.h"
#include "core/memory.h"
#include "core/object.h"
#include "core/vec.h"
#include "hcq/device.h"

/* What a deferred release frees. */
typedef enum hcq__deferred_kind {
  HCQ__DEFERRED_MEMORY,  /* device memory (mem) */
  HCQ__DEFERRED_PROGRAM, /* a program */
  HCQ__DEFERRED_WRAPPED, /* wrapped memory handed back to its owner (on_release) */
} hcq__deferred_kind_t;

typedef struct hcq__deferred {
  uint64_t
      fence[2]; /* submitted() of each queue kind when released: unused once completed() passes */
  hcq__deferred_kind_t kind;
  hcq__mem_t mem;
  hcq_program_t *program;
  hcq__wrap_release_fn on_release; /* HCQ__DEFERRED_WRAPPED */
  void *release_ctx;
} hcq__deferred_t;

#define HCQ__KERNARGS_SEGMENTS 16
#define HCQ__STAGING_BUFFERS 2

struct hcq_device {
  const hcq__device_vtable_t *vt;
  void *backend;
  char name[32];
  hcq_device_kind_t kind;
  int index;
  uint64_t order; /* creation order: devices are locked in this order */
  uint32_t caps;
  unsigned threads;
  /* What launches and buffers are checked against (hcq_device_limits): the backend's open sets what
   * it knows over hcq__limits_unbounded; portable mode then lowers them to the portable set. */
  hcq_device_limits_t limits;
  int open_refs;       /* registry references, under the registry lock */
  bool closing;        /* a close is waiting for the work (registry lock) */
  _Atomic bool closed; /* closed while lost, with objects still alive: freed when the last goes */
  _Atomic uint32_t state;  /* HCQ__OBJ_LIVE while open; HCQ__OBJ_DEAD once closed (validation) */
  atomic_uint struct_refs; /* the registry's + one per live object: the struct outlives close */

  pthread_mutex_t obj_lock; /* the object list */
  hcq__obj_t objects;       /* list head (circular) */
  long nobjects;

  _Atomic bool lost;
  char lost_reason[512]; /* written once, before lost is set */

  /* Hang-report watch: when each engine's current command was first seen unchanged. */
  pthread_mutex_t watch_lock;
  const uint32_t *watch_cmd[2];
  uint64_t watch_completed[2], watch_since[2];

  bool isolate;         /* a faulting kernel marks the device lost (HCQ_CPU_ISOLATE / options) */
  pthread_mutex_t lock; /* submissions, the timeline, the eager state below */
  pthread_mutex_t defer_lock; /* deferred */
  atomic_size_t ndeferred;
  hcq_signal_t *timeline, *shadow_timeline;
  uint64_t timeline_value;
  /* Wraps so far (written under the lock, read without it): a fence armed in an older epoch has
   * been reached, since a wrap waits for all work first (fence.c). */
  _Atomic uint64_t timeline_epoch;

  hcq_queue_t *eager_compute, *eager_copy; /* scratch queues, rebuilt per eager command */
  hcq__mem_t kernargs;
  uint64_t kernargs_head;
  uint64_t kernargs_fence[HCQ__KERNARGS_SEGMENTS];
  hcq__mem_t staging[HCQ__STAGING_BUFFERS];
  uint64_t staging_fence[HCQ__STAGING_BUFFERS];
  unsigned staging_next;
  HCQ__VEC(hcq__deferred_t) deferred;

  _Atomic int64_t
      mem_bytes[HCQ__MEMC_COUNT];  /* memory accounting, bytes per class (hcq/memory.h) */
  struct hcq__trace_device *trace; /* profiler state (trace.c); NULL until profiled */
};

static inline void hcq__mem_count(hcq_device_t *dev, int mem_class, int64_t delta) {
  atomic_fetch_add_explicit(&dev->mem_bytes[mem_class], delta, memory_order_relaxed);
}

/* Device state. NULL when dev is usable; DEVICE_LOST naming it (and why) when it was declared lost;
 * FAILED_PRECONDITION when closed. */
HCQ_MUST_USE hcq_status_t hcq__device_check(hcq_device_t *dev);
static inline bool hcq__device_is_lost(const hcq_device_t *dev) {
  return atomic_load_explicit(&dev->lost, memory_order_acquire);
}
/* Declares dev lost (first reason wins); engines drop their work, waiters wake. */
HCQ__PRIVATE_EXPORT void hcq__device_mark_lost(hcq_device_t *dev, const char *fmt, ...)
    HCQ_PRINTF(2, 3);
/* For calls given a device handle by the application: NULL when it is an open device; else, without
 * reading *dev, FAILED_PRECONDITION naming the device it was when it was closed (the last 256
 * closes are remembered), or INVALID_ARGUMENT. call names the caller in the message. */
HCQ_MUST_USE hcq_status_t hcq__device_handle_check(const hcq_device_t *dev, const char *call);
/* Drops a struct reference; the last one frees the device (closed devices only). */
void hcq__device_struct_release(hcq_device_t *dev);
/* Keeps p allocated and reachable for the rest of the process (validation quarantine, abandoned
 * memory). */
void hcq__keep(void *p);

/* Locks several devices, always in creation order. */
void hcq__device_lock_many(hcq_device_t *const *devs, size_t n);
void hcq__device_unlock_many(hcq_device_t *const *devs, size_t n);

/* ---- the timeline ---- */
/* Under the device lock: wraps the timeline when due (waiting for all work first). */
HCQ_MUST_USE hcq_status_t hcq__device_prepare_submit(hcq_device_t *dev);
/* Under the device lock: waits until the device timeline reached value. */
HCQ_MUST_USE hcq_status_t hcq__device_wait_timeline(hcq_device_t *dev, uint64_t value);
/* The default wait_idle (see the vtable): polls completed() up to what submitted() said, calling
 * poll() between naps; TIMEOUT names the queue (closing adds the hang report). */
HCQ_MUST_USE hcq_status_t hcq__device_wait_engines(hcq_device_t *dev, int64_t timeout_ms);
/* Under the device lock, after submitting work that signals the timeline's current value: the
 * next work signals the next one. The only writer of timeline_value besides open and wrap. */
static inline void hcq__timeline_advance(hcq_device_t *dev) { dev->timeline_value++; }
/* Under the device lock: waits for all submitted work and wraps the timeline when due. */
HCQ_MUST_USE hcq_status_t hcq__device_synchronize_locked(hcq_device_t *dev);

/* ---- deferred frees ---- */
/* Frees memory / unloads a program once every engine of the device finished what it was given. */
void hcq__device_defer_mem(hcq_device_t *dev, hcq__mem_t mem);
/* Calls on_release(ctx, host) once the device's work submitted so far has finished. */
void hcq__device_defer_wrapped(hcq_device_t *dev, void *host, hcq__wrap_release_fn on_release,
                               void *ctx);
void hcq__device_defer_program(hcq_device_t *dev, hcq_program_t *program);
/* Reclaims deferred objects whose fence has passed (device lock held). */
void hcq__device_reclaim(hcq_device_t *dev);

#endif
