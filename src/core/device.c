#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/internal.h"

/* ---- registry: one device object per name, process wide ---- */

#define MAX_DEVICES 256

static pthread_mutex_t g_registry_lock = PTHREAD_MUTEX_INITIALIZER;
static hcq_device_t *g_devices[MAX_DEVICES];
static uint64_t g_device_order;

const char *hcq_device_kind_name(hcq_device_kind_t kind) {
  static const char *const names[] = {
#define HCQ__DEVICE_KIND_NAME(name, text) text,
      HCQ_DEVICE_KINDS(HCQ__DEVICE_KIND_NAME)
#undef HCQ__DEVICE_KIND_NAME
  };
  return (unsigned)kind < HCQ_DEVICE_KIND_COUNT ? names[kind] : "UNKNOWN";
}

/* "CPU" -> (CPU, 0); "cuda:1" -> (CUDA, 1). */
static hcq_status_t parse_name(const char *name, hcq_device_kind_t *kind, int *index) {
  if (!name) return hcq_status_make(HCQ_INVALID_ARGUMENT, "device name is NULL");
  const char *colon = strchr(name, ':');
  size_t klen = colon ? (size_t)(colon - name) : strlen(name);
  for (int k = 0; k < HCQ_DEVICE_KIND_COUNT; k++) {
    const char *kn = hcq_device_kind_name((hcq_device_kind_t)k);
    if (strlen(kn) != klen || strncasecmp(kn, name, klen) != 0) continue;
    *kind = (hcq_device_kind_t)k;
    if (!colon) {
      *index = 0;
      return NULL;
    }
    const char *p = colon + 1;
    char *end;
    errno = 0;
    long v = strtol(p, &end, 10);
    if (!isdigit((unsigned char)*p) || *end || errno || v < 0 || v >= 1024)
      return hcq_status_make(HCQ_NOT_FOUND, "unknown device \"%s\": the index must be a number from 0 to 1023", name);
    *index = (int)v;
    return NULL;
  }
  return hcq_status_make(HCQ_NOT_FOUND, "unknown device \"%.64s\" (device kinds: CPU, CUDA, METAL)", name);
}

static void release_deferred(hcq_device_t *dev, hcq__deferred_t *d) {
  if (d->kind == 0) {
    dev->vt->mem_free(dev, &d->mem);
  } else {
    hcq__program_destroy(d->program);
  }
}

static void destroy_common(hcq_device_t *dev) {
  for (size_t i = 0; i < dev->deferred.len; i++) release_deferred(dev, &dev->deferred.data[i]);
  hcq__vec_free(&dev->deferred);
  if (dev->eager_compute) hcq_queue_free(dev->eager_compute);
  if (dev->eager_copy) hcq_queue_free(dev->eager_copy);
  if (dev->kernargs.host) dev->vt->mem_free(dev, &dev->kernargs);
  for (int i = 0; i < HCQ__STAGING_SLOTS; i++)
    if (dev->staging[i].host) dev->vt->mem_free(dev, &dev->staging[i]);
  hcq__signal_free_internal(dev->timeline);
  hcq__signal_free_internal(dev->shadow_timeline);
  if (dev->vt) dev->vt->destroy(dev);
  pthread_mutex_destroy(&dev->lock);
  free(dev);
}

static hcq_status_t create_device(hcq_device_kind_t kind, int index, const hcq_device_options_t *opts,
                                  hcq_device_t **out) {
  hcq_device_t *dev = calloc(1, sizeof(*dev));
  if (!dev) return hcq_status_make(HCQ_OUT_OF_MEMORY, "out of memory opening a device");
  snprintf(dev->name, sizeof(dev->name), "%s:%d", hcq_device_kind_name(kind), index);
  dev->kind = kind;
  dev->index = index;
  pthread_mutex_init(&dev->lock, NULL);
  hcq_status_t st;
  switch (kind) {
    case HCQ_DEVICE_CPU: st = hcq__cpu_device_create(index, dev); break;
    case HCQ_DEVICE_CUDA: st = hcq__cuda_device_create(index, dev); break;
    default:
      st = hcq_status_make(HCQ_UNAVAILABLE, "device %s is unavailable: Metal exists on macOS only", dev->name);
      break;
  }
  if (st) {
    pthread_mutex_destroy(&dev->lock);
    free(dev);
    return st;
  }
  char name[64];
  snprintf(name, sizeof(name), "%s timeline", dev->name);
  if (!st) st = hcq__signal_create_internal(dev, name, 0, &dev->timeline);
  snprintf(name, sizeof(name), "%s timeline (shadow)", dev->name);
  if (!st) st = hcq__signal_create_internal(dev, name, 0, &dev->shadow_timeline);
  if (!st) st = hcq__queue_create(HCQ_QUEUE_COMPUTE, false, &dev->eager_compute);
  if (!st) st = hcq__queue_create(HCQ_QUEUE_COPY, false, &dev->eager_copy);
  if (!st) st = dev->vt->mem_alloc(dev, hcq__options()->kernargs_ring, &dev->kernargs);
  if (st) {
    snprintf(name, sizeof(name), "%s", dev->name);
    destroy_common(dev);
    return hcq_status_annotate(st, "opening %s", name);
  }
  dev->timeline_value = opts && opts->timeline_start ? opts->timeline_start : 1;
  /* Work "before" the first value is complete. */
  hcq__signal_words_set(dev->timeline->words, dev->timeline_value - 1);
  *out = dev;
  return NULL;
}

hcq_status_t hcq_device_open_ex(const char *name, const hcq_device_options_t *options, hcq_device_t **out_device) {
  if (!out_device) return hcq_status_make(HCQ_INVALID_ARGUMENT, "hcq_device_open: out_device is NULL");
  *out_device = NULL;
  hcq_device_kind_t kind = HCQ_DEVICE_CPU;
  int index = 0;
  hcq_status_t st = parse_name(name, &kind, &index);
  if (st) return st;
  if (options && options->timeline_start >= (UINT64_C(1) << 32))
    return hcq_status_make(HCQ_OUT_OF_RANGE, "device %s: timeline_start %" PRIu64 " must be below 2^32", name,
                           options->timeline_start);
  pthread_mutex_lock(&g_registry_lock);
  hcq_device_t *dev = NULL;
  int free_slot = -1;
  for (int i = 0; i < MAX_DEVICES; i++) {
    if (g_devices[i] && g_devices[i]->kind == kind && g_devices[i]->index == index) dev = g_devices[i];
    if (!g_devices[i] && free_slot < 0) free_slot = i;
  }
  if (dev) {
    if (options && options->timeline_start)
      st = hcq_status_make(HCQ_FAILED_PRECONDITION, "device %s is already open: options apply only to the first open",
                           dev->name);
    else
      dev->open_refs++;
  } else if (free_slot < 0) {
    st = hcq_status_make(HCQ_UNAVAILABLE, "cannot open %s: %d devices are open already", name, MAX_DEVICES);
  } else if (!(st = create_device(kind, index, options, &dev))) {
    dev->open_refs = 1;
    dev->order = g_device_order++;
    g_devices[free_slot] = dev;
  }
  pthread_mutex_unlock(&g_registry_lock);
  if (!st) *out_device = dev;
  return st;
}

hcq_status_t hcq_device_open(const char *name, hcq_device_t **out_device) {
  return hcq_device_open_ex(name, NULL, out_device);
}

hcq_status_t hcq_device_close(hcq_device_t *dev) {
  if (!dev) return NULL;
  pthread_mutex_lock(&g_registry_lock);
  hcq_status_t st = NULL;
  if (dev->open_refs > 1) {
    dev->open_refs--;
    pthread_mutex_unlock(&g_registry_lock);
    return NULL;
  }
  long live = atomic_load(&dev->live);
  if (live > 0) {
    st = hcq_status_make(HCQ_FAILED_PRECONDITION,
                         "cannot close %s: %ld buffers, programs, signals or graphs of it are still alive", dev->name,
                         live);
  } else {
    pthread_mutex_lock(&dev->lock);
    st = hcq__device_synchronize_locked(dev);
    if (!st) st = dev->vt->wait_idle(dev, hcq__options()->wait_timeout_ms);
    pthread_mutex_unlock(&dev->lock);
    if (st) st = hcq_status_annotate(st, "cannot close %s: its work did not finish", dev->name);
  }
  if (!st) {
    for (int i = 0; i < MAX_DEVICES; i++)
      if (g_devices[i] == dev) g_devices[i] = NULL;
  }
  pthread_mutex_unlock(&g_registry_lock);
  if (!st) destroy_common(dev);
  return st;
}

const char *hcq_device_name(const hcq_device_t *dev) { return dev ? dev->name : ""; }
hcq_device_kind_t hcq_device_kind(const hcq_device_t *dev) { return dev->kind; }
uint32_t hcq_device_caps(const hcq_device_t *dev) { return dev ? dev->caps : 0; }
unsigned hcq_device_thread_count(const hcq_device_t *dev) { return dev ? dev->threads : 0; }

void hcq_device_timeline(hcq_device_t *dev, hcq_signal_t **out_signal, uint64_t *out_next_value) {
  pthread_mutex_lock(&dev->lock);
  if (out_signal) *out_signal = dev->timeline;
  if (out_next_value) *out_next_value = dev->timeline_value;
  pthread_mutex_unlock(&dev->lock);
}

size_t hcq_device_query(hcq_device_info_t *out_infos, size_t cap) {
  hcq_device_info_t infos[2];
  memset(infos, 0, sizeof(infos));
  const hcq__options_t *o = hcq__options();
  infos[0].kind = HCQ_DEVICE_CPU;
  infos[0].available = true;
  infos[0].count = 1;
  snprintf(infos[0].description, sizeof(infos[0].description),
           "CPU:N (any N): %u threads per device, C kernels compiled by %.64s, function-pointer kernels, copy queue",
           o->cpu_threads, o->cc);
  infos[1].kind = HCQ_DEVICE_CUDA;
  hcq__cuda_query(&infos[1]);
  for (size_t i = 0; i < 2 && i < cap && out_infos; i++) out_infos[i] = infos[i];
  return 2;
}

/* ---- locking several devices: always in creation order ---- */

void hcq__device_lock_many(hcq_device_t *const *devs, size_t n) {
  uint64_t last = 0;
  bool first = true;
  for (size_t done = 0; done < n; done++) {
    size_t pick = n;
    for (size_t i = 0; i < n; i++) {
      if (!first && devs[i]->order <= last) continue;
      if (pick == n || devs[i]->order < devs[pick]->order) pick = i;
    }
    if (pick == n) break; /* duplicates */
    pthread_mutex_lock(&devs[pick]->lock);
    last = devs[pick]->order;
    first = false;
  }
}

void hcq__device_unlock_many(hcq_device_t *const *devs, size_t n) {
  for (size_t i = 0; i < n; i++) {
    bool dup = false;
    for (size_t k = 0; k < i; k++) dup |= devs[k] == devs[i];
    if (!dup) pthread_mutex_unlock(&devs[i]->lock);
  }
}

/* ---- timeline ---- */

hcq_status_t hcq__device_wait_timeline(hcq_device_t *dev, uint64_t value) {
  return hcq_signal_wait(dev->timeline, value, HCQ_TIMEOUT_DEFAULT);
}

static void wrap_timeline(hcq_device_t *dev) {
  hcq_signal_t *t = dev->timeline;
  dev->timeline = dev->shadow_timeline;
  dev->shadow_timeline = t;
  hcq__signal_words_set(dev->timeline->words, 0);
  dev->timeline_value = 1;
  /* Every fence refers to the old signal, and all of its work is done. */
  memset(dev->kernargs_fence, 0, sizeof(dev->kernargs_fence));
  memset(dev->staging_fence, 0, sizeof(dev->staging_fence));
}

hcq_status_t hcq__device_synchronize_locked(hcq_device_t *dev) {
  hcq_status_t st = hcq__device_wait_timeline(dev, dev->timeline_value - 1);
  if (st) return st;
  hcq__device_reclaim(dev);
  if (dev->timeline_value > HCQ_TIMELINE_WRAP) wrap_timeline(dev);
  return NULL;
}

hcq_status_t hcq__device_prepare_submit(hcq_device_t *dev) {
  if (dev->deferred.len >= 64) hcq__device_reclaim(dev);
  if (dev->timeline_value > HCQ_TIMELINE_WRAP) return hcq__device_synchronize_locked(dev);
  return NULL;
}

hcq_status_t hcq_device_synchronize(hcq_device_t *dev) {
  if (!dev) return hcq_status_make(HCQ_INVALID_ARGUMENT, "synchronize: device is NULL");
  pthread_mutex_lock(&dev->lock);
  hcq_status_t st = hcq__device_synchronize_locked(dev);
  pthread_mutex_unlock(&dev->lock);
  return st;
}

/* ---- deferred frees ---- */

static void defer(hcq_device_t *dev, hcq__deferred_t d) {
  pthread_mutex_lock(&dev->lock);
  d.fence = dev->timeline_value - 1;
  bool done = hcq_signal_value(dev->timeline) >= d.fence;
  if (!done && !hcq__vec_push(&dev->deferred, d)) {
    /* No memory to remember it: wait instead (bounded by the timeout; on timeout leak rather than
     * free memory a kernel may still use). */
    hcq_status_t st = hcq__device_wait_timeline(dev, d.fence);
    done = st == NULL;
    hcq_status_free(st);
    if (!done) {
      pthread_mutex_unlock(&dev->lock);
      return;
    }
  }
  pthread_mutex_unlock(&dev->lock);
  if (done) release_deferred(dev, &d);
}

void hcq__device_defer_mem(hcq_device_t *dev, hcq__mem_t mem) {
  hcq__deferred_t d = {0, 0, mem, NULL};
  defer(dev, d);
}

void hcq__device_defer_program(hcq_device_t *dev, hcq_program_t *program) {
  hcq__deferred_t d = {0, 1, {0}, program};
  defer(dev, d);
}

void hcq__device_reclaim(hcq_device_t *dev) {
  uint64_t reached = hcq_signal_value(dev->timeline);
  size_t keep = 0;
  for (size_t i = 0; i < dev->deferred.len; i++) {
    hcq__deferred_t d = dev->deferred.data[i];
    if (d.fence > reached) {
      dev->deferred.data[keep++] = d;
      continue;
    }
    release_deferred(dev, &d);
  }
  dev->deferred.len = keep;
}
