#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/backend.h"
#include "core/command.h"
#include "core/device.h"
#include "core/hang_report.h"
#include "core/host_wait.h"
#include "core/limits.h"
#include "core/memory.h"
#include "core/object.h"
#include "core/options.h"
#include "core/program.h"
#include "core/queue.h"
#include "core/remote.h"
#include "core/signal.h"
#include "core/validate.h"
#include "core/vec.h"
#include "trace/trace_internal.h"

/* ---- registry: one device object per name, process wide ---- */

#define MAX_DEVICES 256

static pthread_mutex_t g_registry_lock = PTHREAD_MUTEX_INITIALIZER;
static hcq_device_t *g_devices[MAX_DEVICES];
static uint64_t g_device_order;

/* What a backend abandoned (threads stuck in a kernel may still touch it): kept reachable, never
 * freed, so leak checkers and the stuck threads agree. */
static pthread_mutex_t g_orphan_lock = PTHREAD_MUTEX_INITIALIZER;
static HCQ__VEC(void *) g_orphans;

static void orphan(void *p) {
  if (!p) return;
  pthread_mutex_lock(&g_orphan_lock);
  (void)hcq__vec_push(&g_orphans, p); /* without memory it stays allocated all the same */
  pthread_mutex_unlock(&g_orphan_lock);
}

void hcq__keep(void *p) { orphan(p); }

/* Closed handles. A call given a handle that was closed must not read it (its struct may be freed):
 * the handle is looked up among the open devices first, by address only, and a closed one is named
 * from the tombstone its close left (registry lock). Freed device structs wait in a quarantine
 * before going back to malloc, so the next device opened does not get the address of one just
 * closed (a stale handle would then be that device's). */
#define TOMBSTONES 256
#define QUARANTINE 64
static struct {
  const hcq_device_t *dev;
  char name[32];
} g_tombstones[TOMBSTONES];
static size_t g_tombstone_next;
static pthread_mutex_t g_quarantine_lock = PTHREAD_MUTEX_INITIALIZER;
static hcq_device_t *g_quarantine[QUARANTINE];
static size_t g_quarantine_next;

static void quarantine_free(hcq_device_t *dev) {
  pthread_mutex_lock(&g_quarantine_lock);
  hcq_device_t *old = g_quarantine[g_quarantine_next];
  g_quarantine[g_quarantine_next] = dev;
  g_quarantine_next = (g_quarantine_next + 1) % QUARANTINE;
  pthread_mutex_unlock(&g_quarantine_lock);
  free(old);
}

static bool is_open_locked(const hcq_device_t *dev) {
  for (int i = 0; i < MAX_DEVICES; i++)
    if (g_devices[i] == dev) return true;
  return false;
}

/* Under the registry lock, for a handle that is not open: which device it was, from its tombstone.
 */
static hcq_status_t stale_handle_locked(const hcq_device_t *dev, const char *call) {
  for (size_t k = 0; k < TOMBSTONES; k++) {
    size_t i = (g_tombstone_next + TOMBSTONES - 1 - k) % TOMBSTONES;
    if (g_tombstones[i].dev == dev)
      return hcq_status_make(HCQ_FAILED_PRECONDITION,
                             "%s: device %s was closed; its handle is no longer valid", call,
                             g_tombstones[i].name);
  }
  return hcq_status_make(HCQ_INVALID_ARGUMENT,
                         "%s: %p is not an open device (closed long ago, or never opened)", call,
                         (const void *)dev);
}

hcq_status_t hcq__device_handle_check(const hcq_device_t *dev, const char *call) {
  if (!dev) return hcq_status_make(HCQ_INVALID_ARGUMENT, "%s: device is NULL", call);
  pthread_mutex_lock(&g_registry_lock);
  hcq_status_t st = is_open_locked(dev) ? NULL : stale_handle_locked(dev, call);
  pthread_mutex_unlock(&g_registry_lock);
  return st;
}

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
      return hcq_status_make(
          HCQ_NOT_FOUND, "unknown device \"%s\": the index must be a number from 0 to 1023", name);
    *index = (int)v;
    return NULL;
  }
  char kinds[128] = "";
  size_t used = 0;
  for (int k = 0; k < HCQ_DEVICE_KIND_COUNT && used < sizeof(kinds); k++)
    used += (size_t)snprintf(kinds + used, sizeof(kinds) - used, "%s%s", k ? ", " : "",
                             hcq_device_kind_name((hcq_device_kind_t)k));
  return hcq_status_make(HCQ_NOT_FOUND, "unknown device \"%.64s\" (device kinds: %s)", name, kinds);
}

/* ---- deferred frees: by engine progress, which covers every kind of submission ---- */

static void release_deferred(hcq_device_t *dev, hcq__deferred_t *d) {
  if (d->kind == HCQ__DEFERRED_MEMORY) {
    hcq__mem_count(dev, HCQ__MEMC_DEFERRED, -(int64_t)d->mem.size);
    dev->vt->mem_free(dev, &d->mem);
  } else if (d->kind == HCQ__DEFERRED_PROGRAM) {
    hcq__program_destroy(d->program);
  } else if (d->on_release) {
    d->on_release(d->release_ctx, d->mem.host);
  }
}

static bool fence_passed(hcq_device_t *dev, const uint64_t fence[2]) {
  for (int k = 0; k < 2; k++)
    if (dev->vt->completed(dev, (hcq_queue_kind_t)k) < fence[k]) return false;
  return true;
}

static void defer(hcq_device_t *dev, hcq__deferred_t d) {
  if (d.kind == HCQ__DEFERRED_MEMORY) hcq__mem_count(dev, HCQ__MEMC_DEFERRED, (int64_t)d.mem.size);
  for (int k = 0; k < 2; k++) d.fence[k] = dev->vt->submitted(dev, (hcq_queue_kind_t)k);
  if (fence_passed(dev, d.fence)) {
    release_deferred(dev, &d);
    return;
  }
  pthread_mutex_lock(&dev->defer_lock);
  bool kept = hcq__vec_push(&dev->deferred, d);
  if (kept) atomic_store(&dev->ndeferred, dev->deferred.len);
  pthread_mutex_unlock(&dev->defer_lock);
  if (kept) return;
  /* No memory to remember it: wait for the engines instead (bounded); on timeout leak rather than
   * free memory a kernel may still use. */
  uint64_t deadline = hcq__deadline_after_ms(HCQ_TIMEOUT_DEFAULT);
  for (unsigned i = 0; !fence_passed(dev, d.fence); i++) {
    if (hcq__device_is_lost(dev) || hcq__now_ns() >= deadline) return;
    hcq__spin_step(i);
  }
  release_deferred(dev, &d);
}

void hcq__device_defer_mem(hcq_device_t *dev, hcq__mem_t mem) {
  hcq__deferred_t d = {.kind = HCQ__DEFERRED_MEMORY, .mem = mem};
  defer(dev, d);
}

void hcq__device_defer_program(hcq_device_t *dev, hcq_program_t *program) {
  hcq__deferred_t d = {.kind = HCQ__DEFERRED_PROGRAM, .program = program};
  defer(dev, d);
}

void hcq__device_defer_wrapped(hcq_device_t *dev, void *host, hcq__wrap_release_fn on_release,
                               void *ctx) {
  hcq__deferred_t d = {.kind = HCQ__DEFERRED_WRAPPED,
                       .mem = {.host = host},
                       .on_release = on_release,
                       .release_ctx = ctx};
  defer(dev, d);
}

void hcq__device_reclaim(hcq_device_t *dev) {
  uint64_t done[2];
  for (int k = 0; k < 2; k++) done[k] = dev->vt->completed(dev, (hcq_queue_kind_t)k);
  HCQ__VEC(hcq__deferred_t) ready = {0};
  pthread_mutex_lock(&dev->defer_lock);
  size_t keep = 0;
  for (size_t i = 0; i < dev->deferred.len; i++) {
    hcq__deferred_t d = dev->deferred.data[i];
    if (d.fence[0] > done[0] || d.fence[1] > done[1] || !hcq__vec_push(&ready, d))
      dev->deferred.data[keep++] = d;
  }
  dev->deferred.len = keep;
  atomic_store(&dev->ndeferred, keep);
  pthread_mutex_unlock(&dev->defer_lock);
  for (size_t i = 0; i < ready.len; i++) release_deferred(dev, &ready.data[i]);
  hcq__vec_free(&ready);
}

/* ---- lifetime ---- */

static void destroy_common(hcq_device_t *dev) {
  if (dev->vt && dev->backend && dev->vt->stop(dev)) {
    /* A thread stuck in a kernel may still read or write any of this device's memory: keep all of
     * it (and the device struct the thread points at) reachable, never freed. */
    orphan(dev);
    return;
  }
  for (size_t i = 0; i < dev->deferred.len; i++) release_deferred(dev, &dev->deferred.data[i]);
  hcq__vec_free(&dev->deferred);
  hcq__trace_device_gone(dev);
  if (dev->eager_compute) hcq_queue_destroy(dev->eager_compute);
  if (dev->eager_copy) hcq_queue_destroy(dev->eager_copy);
  if (dev->kernargs.host) dev->vt->mem_free(dev, &dev->kernargs);
  for (int i = 0; i < HCQ__STAGING_BUFFERS; i++)
    if (dev->staging[i].host) dev->vt->mem_free(dev, &dev->staging[i]);
  hcq__signal_destroy_now(dev->timeline);
  hcq__signal_destroy_now(dev->shadow_timeline);
  if (dev->vt && dev->backend) dev->vt->destroy(dev);
  pthread_mutex_destroy(&dev->lock);
  pthread_mutex_destroy(&dev->obj_lock);
  pthread_mutex_destroy(&dev->defer_lock);
  pthread_mutex_destroy(&dev->watch_lock);
  if (hcq__validating) {
    /* Released objects still point here; they report "closed" instead of reading freed memory. */
    atomic_store(&dev->state, HCQ__OBJ_DEAD);
    orphan(dev);
    return;
  }
  quarantine_free(dev);
}

void hcq__device_struct_release(hcq_device_t *dev) {
  if (atomic_fetch_sub_explicit(&dev->struct_refs, 1, memory_order_acq_rel) == 1)
    destroy_common(dev);
}

/* create: a backend constructor other than the kind's own (remote devices, hcq__device_open_with).
 */
static hcq_status_t create_device(hcq_device_kind_t kind, int index,
                                  const hcq_device_options_t *opts,
                                  hcq_status_t (*create)(hcq_device_t *dev, void *ctx), void *ctx,
                                  hcq_device_t **out) {
  hcq_device_t *dev = calloc(1, sizeof(*dev));
  if (!dev) return hcq_status_make(HCQ_OUT_OF_MEMORY, "out of memory opening a device");
  snprintf(dev->name, sizeof(dev->name), "%s:%d", hcq_device_kind_name(kind), index);
  dev->kind = kind;
  dev->index = index;
  dev->isolate = hcq__options()->cpu_isolate || (opts && opts->isolate);
  pthread_mutex_init(&dev->lock, NULL);
  pthread_mutex_init(&dev->obj_lock, NULL);
  pthread_mutex_init(&dev->defer_lock, NULL);
  pthread_mutex_init(&dev->watch_lock, NULL);
  dev->objects.next = dev->objects.prev = &dev->objects;
  atomic_init(&dev->struct_refs, 1);
  atomic_init(&dev->state, HCQ__OBJ_LIVE);
  hcq__limits_unbounded(&dev->limits);
  hcq_status_t st;
  const hcq__backend_t *b = hcq__backend(kind);
  if (create)
    st = create(dev, ctx);
  else
    st = b ? b->open(index, opts, dev)
           : hcq_status_make(HCQ_UNAVAILABLE,
                             "device %s is unavailable: this build has no %s backend", dev->name,
                             hcq_device_kind_name(kind));
  if (st) {
    pthread_mutex_destroy(&dev->lock);
    pthread_mutex_destroy(&dev->obj_lock);
    pthread_mutex_destroy(&dev->defer_lock);
    pthread_mutex_destroy(&dev->watch_lock);
    free(dev);
    return st;
  }
  if (hcq__portable_wanted(opts)) hcq__limits_make_portable(&dev->limits);
  char name[64];
  snprintf(name, sizeof(name), "%s timeline", dev->name);
  if ((st = hcq__signal_create_internal(dev, name, 0, &dev->timeline))) goto fail;
  snprintf(name, sizeof(name), "%s timeline (shadow)", dev->name);
  if ((st = hcq__signal_create_internal(dev, name, 0, &dev->shadow_timeline))) goto fail;
  if ((st = hcq__queue_create(HCQ_QUEUE_COMPUTE, false, &dev->eager_compute))) goto fail;
  if ((st = hcq__queue_create(HCQ_QUEUE_COPY, false, &dev->eager_copy))) goto fail;
  if ((st = dev->vt->mem_alloc(dev, hcq__options()->kernargs_ring, HCQ__MEM_HOST_VISIBLE,
                               &dev->kernargs)))
    goto fail;
  hcq__mem_count(dev, HCQ__MEMC_EAGER, (int64_t)dev->kernargs.size);
  dev->timeline_value = opts && opts->timeline_start ? opts->timeline_start : 1;
  /* Work "before" the first value is complete. */
  hcq__signal_words_set(dev->timeline->words, dev->timeline_value - 1);
  *out = dev;
  return NULL;
fail:
  snprintf(name, sizeof(name), "%s", dev->name);
  destroy_common(dev);
  return hcq_status_annotate(st, "opening %s", name);
}

const hcq__remote_hooks_t *_Atomic hcq__remote;

void hcq__remote_set(const hcq__remote_hooks_t *hooks) { atomic_store(&hcq__remote, hooks); }

static hcq_status_t open_registered(const char *name, hcq_device_kind_t kind, int index,
                                    const hcq_device_options_t *options,
                                    hcq_status_t (*create)(hcq_device_t *dev, void *ctx), void *ctx,
                                    hcq_device_t **out_device);

hcq_status_t hcq_device_open_ex(const char *name, const hcq_device_options_t *options,
                                hcq_device_t **out_device) {
  if (!out_device)
    return hcq_status_make(HCQ_INVALID_ARGUMENT, "hcq_device_open: out_device is NULL");
  *out_device = NULL;
  if (name && strchr(name, '/')) { /* "R/KIND:N": the MPI layer's (docs/mpi.md) */
    const hcq__remote_hooks_t *hooks = atomic_load(&hcq__remote);
    if (hooks) return hooks->open(name, options, out_device);
    return hcq_status_make(
        HCQ_NOT_FOUND,
        "unknown device \"%.64s\": a rank-qualified name (R/KIND:N) needs the MPI "
        "layer running (hcq_mpi_init, or the hcq tool started under mpirun)",
        name);
  }
  hcq_device_kind_t kind = HCQ_DEVICE_KIND_COUNT;
  int index = 0;
  hcq_status_t st = parse_name(name, &kind, &index);
  if (st) return st;
  return open_registered(name, kind, index, options, NULL, NULL, out_device);
}

hcq_status_t hcq__device_open_with(const char *name, hcq_device_kind_t kind, int index,
                                   hcq_status_t (*create)(hcq_device_t *dev, void *ctx), void *ctx,
                                   hcq_device_t **out) {
  *out = NULL;
  return open_registered(name, kind, index, NULL, create, ctx, out);
}

static hcq_status_t open_registered(const char *name, hcq_device_kind_t kind, int index,
                                    const hcq_device_options_t *options,
                                    hcq_status_t (*create)(hcq_device_t *dev, void *ctx), void *ctx,
                                    hcq_device_t **out_device) {
  hcq_status_t st = NULL;
  if (options && options->timeline_start >= (UINT64_C(1) << 32))
    return hcq_status_make(HCQ_OUT_OF_RANGE,
                           "device %s: timeline_start %" PRIu64 " must be below 2^32", name,
                           options->timeline_start);
  bool has_options = options && (options->timeline_start || options->isolate || options->threads);
  pthread_mutex_lock(&g_registry_lock);
  hcq_device_t *dev = NULL;
  int free_slot = -1;
  for (int i = 0; i < MAX_DEVICES; i++) {
    if (g_devices[i] && (create ? !strcmp(g_devices[i]->name, name)
                                : g_devices[i]->kind == kind && g_devices[i]->index == index &&
                                      !hcq__device_is_remote(g_devices[i])))
      dev = g_devices[i];
    if (!g_devices[i] && free_slot < 0) free_slot = i;
  }
  if (dev) {
    if (has_options)
      st = hcq_status_make(HCQ_FAILED_PRECONDITION,
                           "device %s is already open: options apply only to the first open",
                           dev->name);
    else
      dev->open_refs++;
  } else if (free_slot < 0) {
    st = hcq_status_make(HCQ_UNAVAILABLE, "cannot open %s: %d devices are open already", name,
                         MAX_DEVICES);
  } else if (!(st = create_device(kind, index, options, create, ctx, &dev))) {
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

/* The at-exit leak report (core/object.h): at exit other threads may still hold the locks, so it
 * only tries them, and says what it could not list. */
void hcq__devices_report_leaks_at_exit(void) {
  long total = hcq__obj_live_count();
  if (total <= 0) return; /* a clean shutdown */
  fprintf(stderr, "hcq: %ld object%s still alive at exit (%s):\n", total, total == 1 ? "" : "s",
          hcq__validating ? "HCQ_VALIDATE=1" : "HCQ_LEAK_REPORT");
  long listed = 0, budget = 200;
  if (pthread_mutex_trylock(&g_registry_lock) == 0) {
    for (int i = 0; i < MAX_DEVICES; i++) {
      hcq_device_t *dev = g_devices[i];
      if (!dev || pthread_mutex_trylock(&dev->obj_lock) != 0) continue;
      listed += hcq__obj_print_locked(dev, stderr, &budget);
      pthread_mutex_unlock(&dev->obj_lock);
    }
    pthread_mutex_unlock(&g_registry_lock);
  }
  long printed = 200 - budget;
  if (listed > printed) fprintf(stderr, "  and %ld more\n", listed - printed);
  if (total > listed)
    fprintf(
        stderr,
        "  and %ld not listed (of devices closed while lost, or busy in another thread at exit)\n",
        total - listed);
  fprintf(
      stderr,
      "hcq: release each (hcq_buffer_release, hcq_program_release, hcq_signal_destroy, "
      "hcq_graph_destroy, "
      "hcq_jit_destroy) before closing its device%s\n",
      hcq__leak_report_env() == 2 ? "" : "; HCQ_LEAK_REPORT=backtrace shows where each was made");
}

/* FAILED_PRECONDITION naming the live objects of dev that block its close. */
static hcq_status_t still_alive(hcq_device_t *dev, long live) {
  /* Names them all within reason: 32 by default, more when a leak report was asked for. */
  size_t size = hcq__leak_reporting() ? 32768 : 4096;
  char *names = malloc(size);
  if (!names)
    return hcq_status_make(HCQ_FAILED_PRECONDITION,
                           "cannot close %s: %ld object%s of it %s still alive", dev->name, live,
                           live == 1 ? "" : "s", live == 1 ? "is" : "are");
  hcq__obj_describe(dev, names, size, hcq__leak_reporting() ? 256 : 32);
  hcq_status_t st =
      hcq_status_make(HCQ_FAILED_PRECONDITION,
                      "cannot close %s: %ld object%s of it %s still alive: %s; release them first",
                      dev->name, live, live == 1 ? "" : "s", live == 1 ? "is" : "are", names);
  free(names);
  return st;
}

/* Waits for dev's work before it closes (nothing for a lost device); called without the registry
 * lock, so that other devices open and close meanwhile. */
static hcq_status_t finish_before_close(hcq_device_t *dev) {
  if (hcq__device_is_lost(dev)) return NULL;
  pthread_mutex_lock(&dev->lock);
  /* A timed-out timeline wait carries the hang report already; the engines' own wait does not. */
  hcq_status_t st = hcq__device_synchronize_locked(dev);
  bool reported = st != NULL;
  if (!st)
    st = dev->vt->wait_idle ? dev->vt->wait_idle(dev, hcq__options()->wait_timeout_ms)
                            : hcq__device_wait_engines(dev, hcq__options()->wait_timeout_ms);
  pthread_mutex_unlock(&dev->lock);
  if (st && !reported && hcq_status_code(st) == HCQ_TIMEOUT)
    st = hcq__device_annotate_report(st, &dev, 1);
  return st;
}

/* Takes dev out of the registry, leaving a tombstone that names it to stale handles. */
static void unregister_locked(hcq_device_t *dev) {
  dev->open_refs = 0;
  for (int i = 0; i < MAX_DEVICES; i++)
    if (g_devices[i] == dev) g_devices[i] = NULL;
  g_tombstones[g_tombstone_next].dev = dev;
  snprintf(g_tombstones[g_tombstone_next].name, sizeof(g_tombstones[0].name), "%s", dev->name);
  g_tombstone_next = (g_tombstone_next + 1) % TOMBSTONES;
}

hcq_status_t hcq_device_close(hcq_device_t *dev) {
  if (!dev) return NULL;
  pthread_mutex_lock(&g_registry_lock);
  if (!is_open_locked(dev)) { /* closed already: dev may point at freed memory */
    hcq_status_t st = stale_handle_locked(dev, "hcq_device_close");
    pthread_mutex_unlock(&g_registry_lock);
    return st;
  }
  if (dev->closing) {
    pthread_mutex_unlock(&g_registry_lock);
    return hcq_status_make(HCQ_FAILED_PRECONDITION, "cannot close %s: another thread is closing it",
                           dev->name);
  }
  if (dev->open_refs > 1) {
    dev->open_refs--;
    pthread_mutex_unlock(&g_registry_lock);
    return NULL;
  }
  if (dev->open_refs < 1) {
    pthread_mutex_unlock(&g_registry_lock);
    return hcq_status_make(HCQ_FAILED_PRECONDITION, "hcq_device_close: device %s is not open",
                           dev->name);
  }
  pthread_mutex_lock(&dev->obj_lock);
  long live = dev->nobjects;
  pthread_mutex_unlock(&dev->obj_lock);
  if (live > 0 && !hcq__device_is_lost(dev)) {
    pthread_mutex_unlock(&g_registry_lock);
    return still_alive(dev, live);
  }
  if (live > 0)
    hcq__leak_report_device(dev, "as it closes (lost: they stay valid handles until released)");
  dev->closing = true;
  pthread_mutex_unlock(&g_registry_lock);
  hcq_status_t st = finish_before_close(dev);
  pthread_mutex_lock(&g_registry_lock);
  dev->closing = false;
  if (st && hcq__device_is_lost(dev)) {
    hcq_status_destroy(st); /* lost while we waited: a lost device closes */
    st = NULL;
  }
  if (st) {
    pthread_mutex_unlock(&g_registry_lock);
    return hcq_status_annotate(
        st, "cannot close %s: its work did not finish (declare it lost to close it anyway)",
        dev->name);
  }
  if (dev->open_refs > 1) { /* opened again while we waited */
    dev->open_refs--;
    pthread_mutex_unlock(&g_registry_lock);
    return NULL;
  }
  unregister_locked(dev);
  pthread_mutex_unlock(&g_registry_lock);
  dev->closed = true;
  /* Objects still alive (lost device) keep the struct; the last one to go destroys it. */
  hcq__device_struct_release(dev);
  return NULL;
}

const char *hcq_device_name(const hcq_device_t *dev) { return dev ? dev->name : ""; }
const hcq__backend_t *hcq__backend(hcq_device_kind_t kind) {
  for (const hcq__backend_t *const *b = hcq__backends; *b; b++)
    if ((*b)->kind == kind) return *b;
  return NULL;
}

hcq_device_kind_t hcq_device_kind(const hcq_device_t *dev) {
  return dev ? dev->kind : HCQ_DEVICE_KIND_COUNT;
}
uint32_t hcq_device_kind_kernel_caps(hcq_device_kind_t kind) {
  const hcq__backend_t *b = (unsigned)kind < HCQ_DEVICE_KIND_COUNT ? hcq__backend(kind) : NULL;
  return b ? b->kernel_caps : 0;
}

uint32_t hcq_device_caps(const hcq_device_t *dev) {
  return dev ? dev->caps & ~HCQ__CAP_ENGINE_REMOTE_COPY : 0;
}
unsigned hcq_device_thread_count(const hcq_device_t *dev) { return dev ? dev->threads : 0; }

void hcq_device_timeline(hcq_device_t *dev, hcq_signal_t **out_signal, uint64_t *out_next_value) {
  if (!dev) {
    if (out_signal) *out_signal = NULL;
    if (out_next_value) *out_next_value = 0;
    return;
  }
  pthread_mutex_lock(&dev->lock);
  if (out_signal) *out_signal = dev->timeline;
  if (out_next_value) *out_next_value = dev->timeline_value;
  pthread_mutex_unlock(&dev->lock);
}

size_t hcq_device_query(hcq_device_info_t *out_infos, size_t cap) {
  size_t n = 0;
  for (const hcq__backend_t *const *b = hcq__backends; *b; b++, n++) {
    if (!out_infos || n >= cap) continue;
    hcq_device_info_t info;
    memset(&info, 0, sizeof(info));
    info.kind = (*b)->kind;
    (*b)->query(&info);
    out_infos[n] = info;
  }
  return n;
}

/* ---- lost devices ---- */

hcq_status_t hcq__device_check(hcq_device_t *dev) {
  if (hcq__validating && atomic_load(&dev->state) != HCQ__OBJ_LIVE)
    return hcq_status_make(HCQ_FAILED_PRECONDITION, "device %s was closed (HCQ_VALIDATE)",
                           dev->name);
  if (hcq__device_is_lost(dev))
    return hcq_status_make(HCQ_DEVICE_LOST, "device %s is lost: %s", dev->name, dev->lost_reason);
  if (dev->closed)
    return hcq_status_make(HCQ_FAILED_PRECONDITION, "device %s was closed", dev->name);
  return NULL;
}

void hcq__device_mark_lost(hcq_device_t *dev, const char *fmt, ...) {
  pthread_mutex_lock(&dev->watch_lock);
  if (!hcq__device_is_lost(dev)) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(dev->lost_reason, sizeof(dev->lost_reason), fmt, ap);
    va_end(ap);
    atomic_store_explicit(&dev->lost, true, memory_order_seq_cst);
    if (hcq__device_is_remote(dev))
      atomic_fetch_add_explicit(&hcq__remote_lost, 1, memory_order_seq_cst);
  }
  pthread_mutex_unlock(&dev->watch_lock);
  if (dev->vt->lost) dev->vt->lost(dev);
  hcq__signal_wake_all();
}

void hcq__device_lose_if_orphaned(hcq_device_t *dev) {
  if (!atomic_load_explicit(&hcq__remote_lost, memory_order_acquire) || hcq__device_is_lost(dev))
    return;
  for (int k = 0; k < 2; k++) {
    hcq__engine_snapshot_t snap = {0};
    dev->vt->snapshot(dev, (hcq_queue_kind_t)k, &snap);
    char why[400];
    if (snap.present && snap.cur && HCQ__HDR_OP(snap.cur[0]) == HCQ__OP_WAIT &&
        hcq__wait_is_orphaned(snap.cur, why, sizeof(why))) {
      hcq__device_mark_lost(dev, "its %s queue can never move: %s", k ? "copy" : "compute", why);
      return;
    }
  }
}

hcq_status_t hcq_device_declare_lost(hcq_device_t *dev, const char *reason) {
  hcq_status_t st = hcq__device_handle_check(dev, "hcq_device_declare_lost");
  if (st) return st;
  hcq__device_mark_lost(dev, "%s", reason && *reason ? reason : "declared lost by the application");
  return NULL;
}

hcq_status_t hcq_device_health(const hcq_device_t *dev) {
  hcq_status_t st = hcq__device_handle_check(dev, "hcq_device_health");
  return st ? st : hcq__device_check((hcq_device_t *)dev);
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
  return hcq__wait_signal(dev->timeline, value, HCQ_TIMEOUT_DEFAULT, &dev, 1);
}

hcq_status_t hcq__device_wait_engines(hcq_device_t *dev, int64_t timeout_ms) {
  uint64_t deadline = hcq__deadline_after_ms(timeout_ms), nap_ns = 10000;
  for (int k = 0; k < 2; k++) {
    uint64_t want = dev->vt->submitted(dev, (hcq_queue_kind_t)k);
    while (dev->vt->completed(dev, (hcq_queue_kind_t)k) < want) {
      if (dev->vt->poll) dev->vt->poll(dev);
      hcq_status_t st = hcq__device_check(dev);
      if (st) return st;
      if (hcq__now_ns() >= deadline)
        return hcq_status_make(HCQ_TIMEOUT,
                               "%s: its %s queue still has work after %" PRId64
                               " ms (waiting on a signal?)",
                               dev->name, k == HCQ_QUEUE_COMPUTE ? "compute" : "copy", timeout_ms);
      /* Short naps first: the work is usually nearly done when a close or drain asks. */
      struct timespec ts = {0, (long)nap_ns};
      nanosleep(&ts, NULL);
      if (nap_ns < 1000000) nap_ns *= 2;
    }
  }
  return NULL;
}

/* The one place the timeline moves forward: every submitter (eager work, each graph runner) calls
 * it once the work that signals the current value is submitted, so wraps and fences see one order.
 */

static void wrap_timeline(hcq_device_t *dev) {
  atomic_fetch_add_explicit(&dev->timeline_epoch, 1, memory_order_release);
  hcq_signal_t *t = dev->timeline;
  dev->timeline = dev->shadow_timeline;
  dev->shadow_timeline = t;
  /* The live timeline keeps the plain name in messages. */
  hcq__signal_swap_names(dev->timeline, dev->shadow_timeline);
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
  hcq_status_t st = hcq__device_check(dev);
  if (st) return st;
  if (atomic_load_explicit(&dev->ndeferred, memory_order_relaxed) >= 64) hcq__device_reclaim(dev);
  if (dev->timeline_value > HCQ_TIMELINE_WRAP) return hcq__device_synchronize_locked(dev);
  return NULL;
}

hcq_status_t hcq_device_synchronize(hcq_device_t *dev) {
  hcq_status_t st = hcq__device_handle_check(dev, "synchronize");
  if (st) return st;
  st = hcq__device_check(dev);
  if (st) return hcq_status_annotate(st, "synchronize");
  pthread_mutex_lock(&dev->lock);
  st = hcq__device_synchronize_locked(dev);
  pthread_mutex_unlock(&dev->lock);
  return st;
}
