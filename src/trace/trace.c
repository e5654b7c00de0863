/* The profiler: a process-wide ring of slices fed by graph replays and eager work.
 *
 * Locks, always taken in this order: a device's lock (eager hooks run under it) -> a device's
 * profiler state lock (its eager timestamp entries) or a graph entry's lock (its pending replay) ->
 * g_lock (the ring, names, tracks, the session's lists). A flush takes no device lock: it snapshots
 * the session's graphs and device states under g_lock, releases it, then visits each under its own
 * lock, waiting on timestamp flags rather than on device timelines.
 *
 * A session runs from hcq_trace_start to hcq_trace_stop. Graph entries and device states remember
 * the session they were set up in; anything from an older session records nothing.
 *
 * This file records; what is made of the ring (the view, the files written from it) is
 * trace_view.c's, which sees the ring only through hcq__trace_with_view. */
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/queue.h"
#include "trace/trace_model.h"

#define EAGER_ENTRIES \
  256u /* eager operations in flight per device before the oldest is waited for */
#define NO_ENTRY UINT32_MAX
#define MAX_TRACKS 65535u

atomic_bool hcq__trace_recording;
atomic_bool hcq__trace_started;

static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static bool g_active, g_paused, g_atexit_registered;
static uint64_t g_session;
static char *g_path;
static hcq__trace_slice_t *g_ring;
static size_t g_cap, g_head, g_count;
static uint64_t g_dropped;
static HCQ__VEC(char *) g_names;
static uint32_t *g_name_table; /* open addressing: name id + 1, 0 empty */
static size_t g_name_table_size;
static HCQ__VEC(hcq__trace_track_t) g_tracks;
static HCQ__VEC(hcq__trace_graph_t *) g_graphs;
static HCQ__VEC(struct hcq__trace_device *) g_devices;
static uint32_t g_host_threads;
static _Thread_local uint64_t t_host_session;
static _Thread_local uint16_t t_host_track;
/* When this thread last finished aligning a device's clocks: the eager call it did that for starts
 * its host slice there, the alignment having its own slice. */
static _Thread_local uint64_t t_aligned_at;

/* ---- per-device state: clock alignment and eager timestamp entries ---- */

typedef struct pending_op {
  uint64_t session;
  uint64_t bytes;
  uint32_t name;
  uint8_t kind;
  uint8_t queue;
  bool busy;
} pending_op_t;

struct hcq__trace_device {
  pthread_mutex_t lock;
  hcq_device_t *dev; /* NULL once the device is gone */
  int refs;          /* under g_lock: the device's, the session list's, a flush's */
  uint64_t session;  /* clocks, tracks and membership of g_devices belong to this session */
  hcq__mem_t mem;    /* EAGER_ENTRIES start/end pairs, then one pair for clock alignment */
  pending_op_t pend[EAGER_ENTRIES];
  uint32_t next;
  uint32_t staged; /* closed by op_end, waiting for its submit (device lock) */
  pending_op_t staged_op;
  int64_t offset_ns[2];
  uint64_t round_trip_ns[2];
  uint32_t samples[2];
  uint16_t track[2];
};

static hcq__signal_words_t *entry_words(struct hcq__trace_device *st, uint32_t entry, int end) {
  return (hcq__signal_words_t *)st->mem.host + 2 * entry + (uint32_t)end;
}
static uint64_t entry_addr(struct hcq__trace_device *st, uint32_t entry, int end) {
  return st->mem.addr + (2 * (uint64_t)entry + (uint64_t)end) * sizeof(hcq__signal_words_t);
}

/* ---- names, tracks, the ring (g_lock held) ---- */

static uint64_t hash_str(const char *s) {
  uint64_t h = 1469598103934665603ull;
  for (; *s; s++) h = (h ^ (unsigned char)*s) * 1099511628211ull;
  return h;
}

static bool name_table_grow(void) {
  size_t size = g_name_table_size ? 2 * g_name_table_size : 256;
  uint32_t *t = calloc(size, sizeof(*t));
  if (!t) return false;
  for (size_t i = 0; i < g_names.len; i++) {
    size_t at = hash_str(g_names.data[i]) & (size - 1);
    while (t[at]) at = (at + 1) & (size - 1);
    t[at] = (uint32_t)i + 1;
  }
  free(g_name_table);
  g_name_table = t;
  g_name_table_size = size;
  return true;
}

/* The id of name; UINT32_MAX when out of memory. */
static uint32_t intern(const char *name) {
  if ((g_names.len + 1) * 2 > g_name_table_size && !name_table_grow()) return UINT32_MAX;
  size_t at = hash_str(name) & (g_name_table_size - 1);
  for (; g_name_table[at]; at = (at + 1) & (g_name_table_size - 1))
    if (!strcmp(g_names.data[g_name_table[at] - 1], name)) return g_name_table[at] - 1;
  char *copy = strdup(name);
  if (!copy || !hcq__vec_push(&g_names, copy)) {
    free(copy);
    return UINT32_MAX;
  }
  g_name_table[at] = (uint32_t)g_names.len;
  return (uint32_t)g_names.len - 1;
}

static uint16_t device_track(const char *device, unsigned queue) {
  for (size_t i = 0; i < g_tracks.len; i++)
    if (g_tracks.data[i].is_device && g_tracks.data[i].queue == queue &&
        !strcmp(g_tracks.data[i].device, device))
      return (uint16_t)i;
  if (g_tracks.len >= MAX_TRACKS) return UINT16_MAX;
  hcq__trace_track_t t = {.is_device = true, .queue = (uint8_t)queue};
  snprintf(t.device, sizeof(t.device), "%s", device);
  return hcq__vec_push(&g_tracks, t) ? (uint16_t)(g_tracks.len - 1) : UINT16_MAX;
}

static uint16_t host_track(void) {
  if (t_host_session == g_session) return t_host_track;
  if (g_tracks.len >= MAX_TRACKS) return UINT16_MAX;
  hcq__trace_track_t t = {.is_device = false, .host_thread = ++g_host_threads};
  if (!hcq__vec_push(&g_tracks, t)) return UINT16_MAX;
  t_host_session = g_session;
  t_host_track = (uint16_t)(g_tracks.len - 1);
  return t_host_track;
}

static inline void push(const hcq__trace_slice_t *s) {
  if (s->name == UINT32_MAX || s->track == UINT16_MAX) return; /* out of memory: not recorded */
  g_ring[g_head] = *s;
  /* No division: a replay pushes one slice per item, in the replay's critical path. */
  if (++g_head == g_cap) g_head = 0;
  if (g_count < g_cap)
    g_count++;
  else
    g_dropped++;
}

static void update_recording(void) {
  atomic_store(&hcq__trace_started, g_active);
  atomic_store(&hcq__trace_recording, g_active && !g_paused);
}

/* ---- reference counts (g_lock held) ---- */

static void graph_unref(hcq__trace_graph_t *tg) {
  if (--tg->refs > 0) return;
  for (size_t i = 0; tg->items && i < tg->nitems; i++) {
    free(tg->items[i].deps);
    free((void *)tg->items[i].start);
    free((void *)tg->items[i].end);
  }
  free(tg->pending);
  free(tg->pending_replay);
  free(tg->items);
  free(tg->devs);
  free(tg->done);
  free(tg->label);
  pthread_mutex_destroy(&tg->lock);
  free(tg);
}

static void device_unref(struct hcq__trace_device *st) {
  if (--st->refs > 0) return;
  pthread_mutex_destroy(&st->lock);
  free(st);
}

/* ---- start, stop ---- */

static void at_exit_flush(void) {
  pthread_mutex_lock(&g_lock);
  bool write = g_active && g_path;
  pthread_mutex_unlock(&g_lock);
  if (!write) return;
  hcq_status_t st = hcq_trace_flush();
  if (st) fprintf(stderr, "hcq: writing the profile at exit: %s\n", hcq_status_message(st));
  hcq_status_destroy(st);
}

hcq_status_t hcq_trace_start(const hcq_trace_options_t *options) {
  size_t cap =
      options && options->ring_slices ? options->ring_slices : HCQ_TRACE_DEFAULT_RING_SLICES;
  if (cap > (SIZE_MAX / 2) / sizeof(hcq__trace_slice_t))
    return hcq_status_make(HCQ_OUT_OF_RANGE, "hcq_trace_start: a ring of %zu slices is too large",
                           cap);
  hcq__trace_slice_t *ring = calloc(cap, sizeof(*ring));
  char *path = options && options->path ? strdup(options->path) : NULL;
  if (!ring || (options && options->path && !path)) {
    free(ring);
    free(path);
    return hcq_status_make(HCQ_OUT_OF_MEMORY,
                           "out of memory allocating the profiler's ring of %zu slices", cap);
  }
  pthread_mutex_lock(&g_lock);
  if (g_active) {
    pthread_mutex_unlock(&g_lock);
    free(ring);
    free(path);
    return hcq_status_make(HCQ_FAILED_PRECONDITION, "the profiler is on already%s%s",
                           g_path ? "; writing to " : "", g_path ? g_path : "");
  }
  g_session++;
  g_ring = ring;
  g_cap = cap;
  g_head = g_count = 0;
  g_dropped = 0;
  g_path = path;
  g_host_threads = 0;
  g_active = true;
  g_paused = false;
  update_recording();
  bool register_exit = path && !g_atexit_registered;
  g_atexit_registered |= register_exit;
  pthread_mutex_unlock(&g_lock);
  if (register_exit) atexit(at_exit_flush);
  return NULL;
}

void hcq__trace_start_from_env(const char *value) {
  if (!value || !*value || !strcmp(value, "0")) return;
  hcq_trace_options_t o = {.path = strcmp(value, "1") ? value : NULL};
  hcq_status_t st = hcq_trace_start(&o);
  if (st && hcq_status_code(st) != HCQ_FAILED_PRECONDITION)
    fprintf(stderr, "hcq: HCQ_PROFILE=%s: %s\n", value, hcq_status_message(st));
  hcq_status_destroy(st);
}

void hcq_trace_stop(void) {
  pthread_mutex_lock(&g_lock);
  if (!g_active) {
    pthread_mutex_unlock(&g_lock);
    return;
  }
  g_active = false;
  update_recording();
  free(g_ring);
  g_ring = NULL;
  g_cap = g_head = g_count = 0;
  free(g_path);
  g_path = NULL;
  for (size_t i = 0; i < g_names.len; i++) free(g_names.data[i]);
  hcq__vec_free(&g_names);
  free(g_name_table);
  g_name_table = NULL;
  g_name_table_size = 0;
  hcq__vec_free(&g_tracks);
  for (size_t i = 0; i < g_graphs.len; i++) graph_unref(g_graphs.data[i]);
  hcq__vec_free(&g_graphs);
  for (size_t i = 0; i < g_devices.len; i++) device_unref(g_devices.data[i]);
  hcq__vec_free(&g_devices);
  pthread_mutex_unlock(&g_lock);
}

bool hcq_trace_active(void) {
  pthread_mutex_lock(&g_lock);
  bool on = g_active;
  pthread_mutex_unlock(&g_lock);
  return on;
}

void hcq_trace_pause(bool paused) {
  pthread_mutex_lock(&g_lock);
  g_paused = paused;
  update_recording();
  pthread_mutex_unlock(&g_lock);
}

void hcq_trace_stats(hcq_trace_stats_t *out) {
  if (!out) return;
  pthread_mutex_lock(&g_lock);
  *out = (hcq_trace_stats_t){g_active ? g_cap : 0, g_count, g_dropped, g_graphs.len};
  pthread_mutex_unlock(&g_lock);
}

/* ---- clock alignment ---- */

static int cmp_i64(const void *a, const void *b) {
  int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
  return (x > y) - (x < y);
}

/* Device lock held. Submits [timestamp, flag] to the queue of kind HCQ_TRACE_CLOCK_SAMPLES times
 * and keeps the median of (device time - host midpoint). The device's earlier work is waited for
 * first, so the engine is idle and each round trip measures the engine, not the backlog. */
static void align_clock(struct hcq__trace_device *st, hcq_device_t *dev, hcq_queue_kind_t kind) {
  st->offset_ns[kind] = 0;
  st->round_trip_ns[kind] = 0;
  st->samples[kind] = 0;
  hcq_queue_t *q = NULL;
  hcq__signal_words_t *w = entry_words(st, EAGER_ENTRIES, 0);
  uint64_t addr = entry_addr(st, EAGER_ENTRIES, 0);
  hcq_status_t s = hcq__device_wait_timeline(dev, dev->timeline_value - 1);
  if (!s) s = hcq__queue_create(kind, false, &q);
  if (!s) s = hcq_queue_timestamp(q, hcq_imm((int64_t)addr));
  if (!s) s = hcq_queue_signal(q, hcq_imm((int64_t)addr), hcq_imm(1));
  int64_t offsets[HCQ_TRACE_CLOCK_SAMPLES], trips[HCQ_TRACE_CLOCK_SAMPLES];
  unsigned n = 0;
  for (; n < HCQ_TRACE_CLOCK_SAMPLES && !s; n++) {
    atomic_store(&w->value, 0);
    atomic_store(&w->timestamp, 0);
    uint64_t t0 = hcq__now_ns(), seen;
    if ((s = hcq__queue_submit_locked(q, dev, NULL, 0))) break;
    if (hcq__signal_words_wait(w, 1, hcq__deadline_after_ms(HCQ_TIMEOUT_DEFAULT), &dev, 1, &seen) !=
        HCQ__WAIT_REACHED)
      break;
    uint64_t t1 = hcq__now_ns(), ts = atomic_load(&w->timestamp);
    offsets[n] = (int64_t)(ts - (t0 + (t1 - t0) / 2));
    trips[n] = (int64_t)(t1 - t0);
  }
  hcq_status_destroy(s);
  hcq_queue_destroy(q);
  if (!n) return; /* unaligned: offset 0, samples 0 (the written file says so) */
  qsort(offsets, n, sizeof(offsets[0]), cmp_i64);
  qsort(trips, n, sizeof(trips[0]), cmp_i64);
  st->offset_ns[kind] = offsets[n / 2];
  st->round_trip_ns[kind] = (uint64_t)trips[n / 2];
  st->samples[kind] = n;
}

/* Device lock held: dev's state, set up for the current session (clocks aligned, tracks named, on
 * the session's list); NULL when the profiler is off or memory ran out. */
static struct hcq__trace_device *device_state_locked(hcq_device_t *dev) {
  struct hcq__trace_device *st = dev->trace;
  if (!st) {
    st = calloc(1, sizeof(*st));
    if (!st) return NULL;
    if (dev->vt->mem_alloc(dev, (EAGER_ENTRIES + 1) * 2 * sizeof(hcq__signal_words_t),
                           HCQ__MEM_HOST_VISIBLE, &st->mem)) {
      free(st);
      return NULL; /* no memory for entries: this device's eager work is not traced */
    }
    hcq__mem_count(dev, HCQ__MEMC_PROFILE, (int64_t)st->mem.size);
    pthread_mutex_init(&st->lock, NULL);
    st->dev = dev;
    st->refs = 1;
    st->staged = NO_ENTRY;
    dev->trace = st;
  }
  pthread_mutex_lock(&g_lock);
  uint64_t session = g_active ? g_session : 0;
  pthread_mutex_unlock(&g_lock);
  if (!session) return NULL;
  if (st->session == session) return st;

  pthread_mutex_lock(&st->lock);
  for (uint32_t i = 0; i < EAGER_ENTRIES; i++)
    st->pend[i].busy = false; /* an older session's work */
  st->staged = NO_ENTRY;
  uint64_t align_start = hcq__now_ns();
  align_clock(st, dev, HCQ_QUEUE_COMPUTE);
  if (dev->caps & HCQ_CAP_COPY_QUEUE) {
    align_clock(st, dev, HCQ_QUEUE_COPY);
  } else {
    st->offset_ns[1] = st->offset_ns[0], st->round_trip_ns[1] = st->round_trip_ns[0],
    st->samples[1] = st->samples[0];
  }
  t_aligned_at = hcq__now_ns();
  pthread_mutex_lock(&g_lock);
  bool ok = g_active && g_session == session;
  if (ok && !g_paused) {
    char name[96];
    snprintf(name, sizeof(name), "profiler: align %s clocks", dev->name);
    hcq__trace_slice_t s = {
        .start_ns = align_start, .end_ns = t_aligned_at, .kind = HCQ__SLICE_ALIGN};
    s.track = host_track();
    s.name = intern(name);
    push(&s);
  }
  for (int k = 0; k < 2 && ok; k++) {
    st->track[k] = device_track(dev->name, (unsigned)k);
    if (st->track[k] == UINT16_MAX) continue;
    hcq__trace_track_t *t = &g_tracks.data[st->track[k]];
    t->offset_ns = st->offset_ns[k];
    t->round_trip_ns = st->round_trip_ns[k];
    t->samples = st->samples[k];
  }
  ok = ok && hcq__vec_push(&g_devices, st);
  if (ok) {
    st->refs++;
    st->session = session;
  }
  pthread_mutex_unlock(&g_lock);
  pthread_mutex_unlock(&st->lock);
  return ok ? st : NULL;
}

/* ---- eager operations ---- */

/* st->lock held. Reads a finished operation's timestamps into the ring; waits for it when wait is
 * set (the device may still run it), else leaves it pending (or drops it once the device is gone).
 */
static void harvest(struct hcq__trace_device *st, uint32_t entry, bool wait) {
  pending_op_t *p = &st->pend[entry];
  if (!p->busy) return;
  hcq__signal_words_t *s = entry_words(st, entry, 0), *e = entry_words(st, entry, 1);
  if (atomic_load_explicit(&e->value, memory_order_acquire) < 1) {
    uint64_t seen;
    if (!st->dev) {
      p->busy = false;
      return;
    }
    if (!wait) return;
    if (hcq__signal_words_wait(e, 1, hcq__deadline_after_ms(HCQ_TIMEOUT_DEFAULT), &st->dev, 1,
                               &seen) != HCQ__WAIT_REACHED) {
      p->busy = false; /* lost or stuck: the operation never ends */
      return;
    }
  }
  uint64_t t0 = atomic_load_explicit(&s->timestamp, memory_order_acquire);
  uint64_t t1 = atomic_load_explicit(&e->timestamp, memory_order_acquire);
  if (!t0 || !t1) {
    p->busy = false;
    return;
  }
  int64_t off = st->offset_ns[p->queue];
  hcq__trace_slice_t sl = {.start_ns = (uint64_t)((int64_t)t0 - off),
                           .end_ns = (uint64_t)((int64_t)t1 - off),
                           .bytes = p->bytes,
                           .name = p->name,
                           .track = st->track[p->queue],
                           .kind = p->kind};
  pthread_mutex_lock(&g_lock);
  if (g_active && g_session == p->session) push(&sl);
  pthread_mutex_unlock(&g_lock);
  p->busy = false;
}

hcq_status_t hcq__trace_op_begin_slow(hcq__trace_op_t *op, hcq_device_t *dev, hcq_queue_t *q) {
  struct hcq__trace_device *st = device_state_locked(dev);
  if (!st) return NULL;
  pthread_mutex_lock(&st->lock);
  st->staged = NO_ENTRY; /* one staged but never submitted: its submit failed */
  uint32_t entry = st->next;
  harvest(st, entry, true);
  st->next = (entry + 1) % EAGER_ENTRIES;
  atomic_store(&entry_words(st, entry, 0)->timestamp, 0);
  atomic_store(&entry_words(st, entry, 1)->timestamp, 0);
  atomic_store(&entry_words(st, entry, 1)->value, 0);
  pthread_mutex_unlock(&st->lock);
  op->entry = entry;
  op->on = true;
  return hcq_queue_timestamp(q, hcq_imm((int64_t)entry_addr(st, entry, 0)));
}

hcq_status_t hcq__trace_op_end_slow(hcq__trace_op_t *op, hcq_device_t *dev, hcq_queue_t *q,
                                    const char *name, const char *to, uint64_t bytes) {
  struct hcq__trace_device *st = dev->trace;
  uint64_t end = entry_addr(st, op->entry, 1);
  hcq_status_t s = hcq_queue_timestamp(q, hcq_imm((int64_t)end));
  if (!s) s = hcq_queue_signal(q, hcq_imm((int64_t)end), hcq_imm(1));
  if (s) return s;
  char label[160];
  if (to)
    snprintf(label, sizeof(label), "%s -> %s", name, to);
  else
    snprintf(label, sizeof(label), "%s", name);
  pthread_mutex_lock(&st->lock);
  pthread_mutex_lock(&g_lock);
  st->staged_op =
      (pending_op_t){.session = st->session,
                     .bytes = bytes,
                     .name = g_active ? intern(label) : UINT32_MAX,
                     .kind = q->kind == HCQ_QUEUE_COPY ? HCQ__SLICE_COPY : HCQ__SLICE_KERNEL,
                     .queue = (uint8_t)q->kind,
                     .busy = true};
  pthread_mutex_unlock(&g_lock);
  st->staged = op->entry;
  pthread_mutex_unlock(&st->lock);
  return NULL;
}

void hcq__trace_op_submitted_slow(hcq_device_t *dev) {
  struct hcq__trace_device *st = dev->trace;
  if (st->staged == NO_ENTRY) return;
  pthread_mutex_lock(&st->lock);
  st->pend[st->staged] = st->staged_op;
  st->staged = NO_ENTRY;
  pthread_mutex_unlock(&st->lock);
}

void hcq__trace_host_end(uint64_t begin_ns, uint64_t bytes, const char *fmt, ...) {
  if (!begin_ns) return;
  uint64_t end_ns = hcq__now_ns();
  if (t_aligned_at > begin_ns) begin_ns = t_aligned_at;
  char name[160];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(name, sizeof(name), fmt, ap);
  va_end(ap);
  pthread_mutex_lock(&g_lock);
  if (g_active && !g_paused) {
    hcq__trace_slice_t s = {
        .start_ns = begin_ns, .end_ns = end_ns, .bytes = bytes, .kind = HCQ__SLICE_CALL};
    s.track = host_track();
    s.name = intern(name);
    push(&s);
  }
  pthread_mutex_unlock(&g_lock);
}

void hcq__trace_device_gone(hcq_device_t *dev) {
  struct hcq__trace_device *st = dev->trace;
  if (!st) return;
  pthread_mutex_lock(&st->lock);
  for (uint32_t i = 0; i < EAGER_ENTRIES; i++)
    harvest(st, i, false); /* the engines stopped: done is done */
  st->dev = NULL;
  for (uint32_t i = 0; i < EAGER_ENTRIES; i++) harvest(st, i, false);
  hcq__mem_count(dev, HCQ__MEMC_PROFILE, -(int64_t)st->mem.size);
  dev->vt->mem_free(dev, &st->mem);
  pthread_mutex_unlock(&st->lock);
  dev->trace = NULL;
  pthread_mutex_lock(&g_lock);
  for (size_t i = 0; i < g_devices.len; i++) {
    if (g_devices.data[i] != st) continue;
    g_devices.data[i] = g_devices.data[--g_devices.len];
    st->refs--; /* the list's; the device's below */
    break;
  }
  device_unref(st);
  pthread_mutex_unlock(&g_lock);
}

/* ---- graphs ---- */

hcq__trace_graph_t *hcq__trace_graph_register(const char *label,
                                              const hcq__trace_graph_item_t *items, size_t nitems,
                                              size_t ninst, hcq_device_t *const *devs,
                                              hcq__signal_words_t *const *done, size_t ndevs) {
  if (!hcq__trace_on()) return NULL;
  hcq__trace_graph_t *tg = calloc(1, sizeof(*tg));
  if (!tg) return NULL;
  pthread_mutex_init(&tg->lock, NULL);
  tg->refs = 1;
  tg->label = strdup(label);
  tg->items = calloc(nitems, sizeof(*tg->items));
  tg->devs = calloc(ndevs, sizeof(*tg->devs));
  tg->done = calloc(ndevs * ninst, sizeof(*tg->done));
  tg->pending = calloc(ninst, sizeof(*tg->pending));
  tg->pending_replay = calloc(ninst, sizeof(*tg->pending_replay));
  bool ok = tg->label && tg->items && tg->devs && tg->done && tg->pending && tg->pending_replay;
  tg->nitems = nitems;
  tg->ndevs = ndevs;
  tg->ninst = ninst;
  for (size_t d = 0; d < ndevs && ok; d++) tg->devs[d] = devs[d];
  for (size_t k = 0; k < ndevs * ninst && ok; k++) tg->done[k] = done[k];
  for (size_t j = 0; j < nitems && ok; j++) {
    hcq__trace_graph_item_rec_t *r = &tg->items[j];
    r->deps = malloc((items[j].ndeps + 1) * sizeof(*r->deps));
    r->start = calloc(ninst, sizeof(*r->start));
    r->end = calloc(ninst, sizeof(*r->end));
    ok = r->deps && r->start && r->end;
    if (ok) memcpy(r->deps, items[j].deps, items[j].ndeps * sizeof(*r->deps));
    r->ndeps = items[j].ndeps;
    for (size_t k = 0; k < ninst && ok; k++) {
      r->start[k] = items[k * nitems + j].start;
      r->end[k] = items[k * nitems + j].end;
    }
    r->bytes = items[j].bytes;
    r->kind = items[j].queue == HCQ_QUEUE_COPY ? HCQ__SLICE_COPY : HCQ__SLICE_KERNEL;
  }
  /* Each device's clocks (aligned on first sight) and tracks. */
  for (size_t j = 0; j < nitems && ok; j++) {
    hcq_device_t *dev = items[j].dev;
    pthread_mutex_lock(&dev->lock);
    struct hcq__trace_device *st = device_state_locked(dev);
    pthread_mutex_unlock(&dev->lock);
    if (!st) {
      ok = false;
      break;
    }
    tg->items[j].offset_ns = st->offset_ns[items[j].queue];
    tg->items[j].track = st->track[items[j].queue];
  }
  if (ok) {
    pthread_mutex_lock(&g_lock);
    ok = g_active;
    for (size_t j = 0; j < nitems && ok; j++)
      ok = (tg->items[j].name = intern(items[j].name)) != UINT32_MAX;
    if (ok) ok = hcq__vec_push(&g_graphs, tg);
    if (ok) {
      tg->session = g_session;
      tg->index = (uint32_t)g_graphs.len - 1;
      tg->alive = true;
      tg->refs = 2;
    }
    pthread_mutex_unlock(&g_lock);
  }
  if (!ok) {
    pthread_mutex_lock(&g_lock);
    graph_unref(tg);
    pthread_mutex_unlock(&g_lock);
    return NULL;
  }
  return tg;
}

void hcq__trace_graph_submitted(hcq__trace_graph_t *tg, unsigned inst, uint64_t kickoff,
                                uint64_t host_start_ns) {
  uint64_t end_ns = hcq__now_ns();
  pthread_mutex_lock(&tg->lock);
  pthread_mutex_lock(&g_lock);
  if (g_active && !g_paused && tg->session == g_session) {
    tg->pending[inst] = kickoff;
    tg->pending_replay[inst] = ++tg->replays;
    char name[160];
    snprintf(name, sizeof(name), "replay %s", tg->label);
    hcq__trace_slice_t s = {.start_ns = host_start_ns,
                            .end_ns = end_ns,
                            .replay = tg->pending_replay[inst],
                            .graph = tg->index + 1,
                            .kind = HCQ__SLICE_SUBMIT};
    s.track = host_track();
    s.name = intern(name);
    push(&s);
  }
  pthread_mutex_unlock(&g_lock);
  pthread_mutex_unlock(&tg->lock);
}

/* tg->lock held; the instance's replay has finished. One slice per item, pushed together. */
static void read_replay(hcq__trace_graph_t *tg, size_t inst) {
  pthread_mutex_lock(&g_lock);
  if (g_active && tg->session == g_session) {
    for (size_t j = 0; j < tg->nitems; j++) {
      const hcq__trace_graph_item_rec_t *r = &tg->items[j];
      uint64_t t0 = atomic_load_explicit(&((hcq__signal_words_t *)r->start[inst])->timestamp,
                                         memory_order_acquire);
      uint64_t t1 = atomic_load_explicit(&((hcq__signal_words_t *)r->end[inst])->timestamp,
                                         memory_order_acquire);
      if (!t0 || !t1) continue; /* never ran (a lost device) */
      hcq__trace_slice_t s = {.start_ns = (uint64_t)((int64_t)t0 - r->offset_ns),
                              .end_ns = (uint64_t)((int64_t)t1 - r->offset_ns),
                              .bytes = r->bytes,
                              .replay = tg->pending_replay[inst],
                              .name = r->name,
                              .graph = tg->index + 1,
                              .item = (uint32_t)j,
                              .track = r->track,
                              .kind = r->kind};
      push(&s);
    }
  }
  pthread_mutex_unlock(&g_lock);
  tg->pending[inst] = 0;
}

void hcq__trace_graph_collect(hcq__trace_graph_t *tg, unsigned inst) {
  pthread_mutex_lock(&tg->lock);
  if (tg->pending[inst]) read_replay(tg, inst);
  pthread_mutex_unlock(&tg->lock);
}

void hcq__trace_graph_collect_finished(hcq__trace_graph_t *tg, unsigned inst) {
  pthread_mutex_lock(&tg->lock);
  uint64_t k = tg->pending[inst];
  bool done = k != 0;
  for (size_t d = 0; done && d < tg->ndevs; d++)
    done = atomic_load_explicit(&tg->done[inst * tg->ndevs + d]->value, memory_order_acquire) >= k;
  if (done) read_replay(tg, inst);
  pthread_mutex_unlock(&tg->lock);
}

void hcq__trace_graph_unregister(hcq__trace_graph_t *tg) {
  if (!tg) return;
  pthread_mutex_lock(&tg->lock);
  tg->alive = false;
  for (size_t k = 0; k < tg->ninst; k++) tg->pending[k] = 0;
  pthread_mutex_unlock(&tg->lock);
  pthread_mutex_lock(&g_lock);
  graph_unref(tg);
  pthread_mutex_unlock(&g_lock);
}

/* ---- flush: read every pending replay and eager operation ---- */

void hcq__trace_collect_pending(void) {
  HCQ__VEC(hcq__trace_graph_t *) graphs = {0};
  HCQ__VEC(struct hcq__trace_device *) devices = {0};
  pthread_mutex_lock(&g_lock);
  bool ok =
      hcq__vec_reserve_for(&graphs, g_graphs.len) && hcq__vec_reserve_for(&devices, g_devices.len);
  for (size_t i = 0; ok && i < g_graphs.len; i++) {
    graphs.data[graphs.len++] = g_graphs.data[i];
    g_graphs.data[i]->refs++;
  }
  for (size_t i = 0; ok && i < g_devices.len; i++) {
    devices.data[devices.len++] = g_devices.data[i];
    g_devices.data[i]->refs++;
  }
  pthread_mutex_unlock(&g_lock);

  for (size_t i = 0; i < graphs.len; i++) {
    hcq__trace_graph_t *tg = graphs.data[i];
    pthread_mutex_lock(&tg->lock);
    /* Oldest replay first: the instances in the order their replays were submitted. */
    for (;;) {
      size_t inst = tg->ninst;
      for (size_t k = 0; k < tg->ninst; k++)
        if (tg->pending[k] &&
            (inst == tg->ninst || tg->pending_replay[k] < tg->pending_replay[inst]))
          inst = k;
      if (!tg->alive || inst == tg->ninst) break;
      bool done = true;
      for (size_t d = 0; done && d < tg->ndevs; d++) {
        uint64_t seen;
        done = hcq__signal_words_wait(tg->done[inst * tg->ndevs + d], tg->pending[inst],
                                      hcq__deadline_after_ms(HCQ_TIMEOUT_DEFAULT), tg->devs,
                                      tg->ndevs, &seen) == HCQ__WAIT_REACHED;
      }
      if (!done) break;
      read_replay(tg, inst);
    }
    pthread_mutex_unlock(&tg->lock);
  }
  for (size_t i = 0; i < devices.len; i++) {
    struct hcq__trace_device *st = devices.data[i];
    pthread_mutex_lock(&st->lock);
    /* Oldest first: the entry after the newest is the oldest. */
    for (uint32_t k = 0; k < EAGER_ENTRIES; k++) harvest(st, (st->next + k) % EAGER_ENTRIES, true);
    pthread_mutex_unlock(&st->lock);
  }

  pthread_mutex_lock(&g_lock);
  for (size_t i = 0; i < graphs.len; i++) graph_unref(graphs.data[i]);
  for (size_t i = 0; i < devices.len; i++) device_unref(devices.data[i]);
  pthread_mutex_unlock(&g_lock);
  hcq__vec_free(&graphs);
  hcq__vec_free(&devices);
}

hcq_status_t hcq_trace_flush(void) {
  pthread_mutex_lock(&g_lock);
  char *path = g_active && g_path ? strdup(g_path) : NULL;
  bool active = g_active, had_path = g_path != NULL;
  pthread_mutex_unlock(&g_lock);
  if (!active)
    return hcq_status_make(HCQ_FAILED_PRECONDITION, "hcq_trace_flush: the profiler is off");
  if (!had_path)
    return hcq_status_make(
        HCQ_FAILED_PRECONDITION,
        "hcq_trace_flush: the profiler was started without a file (use hcq_trace_write)");
  if (!path) return hcq_status_make(HCQ_OUT_OF_MEMORY, "out of memory flushing the profile");
  hcq_status_t st = hcq_trace_write(path);
  free(path);
  return st;
}

/* ---- the view (trace_view.c numbers its tracks and writes it) ---- */

bool hcq__trace_with_view(void (*fn)(hcq__trace_view_t *v, void *ctx), void *ctx) {
  pthread_mutex_lock(&g_lock);
  bool on = g_active;
  if (on) {
    hcq__trace_view_t v;
    memset(&v, 0, sizeof(v));
    size_t oldest = (g_head + g_cap - g_count) % g_cap;
    v.seg[0] = g_ring + oldest;
    v.seg_len[0] = oldest + g_count <= g_cap ? g_count : g_cap - oldest;
    v.seg[1] = g_ring;
    v.seg_len[1] = g_count - v.seg_len[0];
    v.nslices = g_count;
    v.tracks = g_tracks.data;
    v.ntracks = g_tracks.len;
    v.host_threads = g_host_threads;
    v.names = g_names.data;
    v.graphs = g_graphs.data;
    v.ngraphs = g_graphs.len;
    v.capacity = g_cap;
    v.dropped = g_dropped;
    fn(&v, ctx);
  }
  pthread_mutex_unlock(&g_lock);
  return on;
}
