/* The profiler (hcq/trace.h): the Chrome trace of known graphs and eager work, read back with
 * Jansson and checked slice by slice; the ring; sessions; the SVG; the DOT dump of a known graph.
 */
#include <inttypes.h>
#include <jansson.h>
#include <math.h>
#include <pthread.h>
#include <sys/stat.h>

#include "core/device.h"
#include "core/host_wait.h"
#include "world.h"

TestSuite(trace, .timeout = 120);

static hcq_operand_t I(int64_t v) { return hcq_imm(v); }
enum { N = 64 };

static void tmp_path(char *out, size_t size, const char *name) {
  const char *dir = getenv("HCQ_TEST_TMP");
  if (!dir || !*dir) dir = "/tmp";
  mkdir(dir, 0755);
  snprintf(out, size, "%s/trace-%ld-%s", dir, (long)getpid(), name);
}

/* ---- reading a written trace back ---- */

typedef struct slice {
  const char *name, *cat;
  int64_t pid, tid, ts_ns, dur_ns;
  int64_t graph, item, replay, bytes; /* -1 when absent */
  bool eager, has_rate;
} slice_t;

typedef struct flow {
  char ph;
  int64_t id, pid, tid, ts_ns;
} flow_t;

typedef struct trace {
  json_t *root;
  slice_t *slices;
  size_t nslices;
  flow_t *flows;
  size_t nflows;
} trace_t;

/* Microseconds with three decimals back to exact nanoseconds. */
static int64_t ns_of(json_t *v) { return (int64_t)llround(json_number_value(v) * 1000.0); }

static int64_t int_arg(json_t *args, const char *key) {
  json_t *v = args ? json_object_get(args, key) : NULL;
  return json_is_integer(v) ? (int64_t)json_integer_value(v) : -1;
}

static void trace_load(trace_t *t, const char *path) {
  memset(t, 0, sizeof(*t));
  json_error_t err;
  t->root = json_load_file(path, 0, &err);
  cr_assert_not_null(t->root, "%s does not load with Jansson: line %d: %s", path, err.line,
                     err.text);
  json_t *events = json_object_get(t->root, "traceEvents");
  cr_assert(json_is_array(events), "traceEvents is an array");
  size_t n = json_array_size(events);
  t->slices = calloc(n + 1, sizeof(*t->slices));
  t->flows = calloc(n + 1, sizeof(*t->flows));
  for (size_t i = 0; i < n; i++) {
    json_t *e = json_array_get(events, i);
    const char *ph = json_string_value(json_object_get(e, "ph"));
    cr_assert_not_null(ph, "event %zu has a ph", i);
    json_t *pid = json_object_get(e, "pid"), *tid = json_object_get(e, "tid");
    cr_assert(json_is_integer(pid) && json_is_integer(tid), "event %zu: pid and tid are numbers",
              i);
    if (!strcmp(ph, "X")) {
      json_t *args = json_object_get(e, "args");
      slice_t *s = &t->slices[t->nslices++];
      s->name = json_string_value(json_object_get(e, "name"));
      s->cat = json_string_value(json_object_get(e, "cat"));
      s->pid = json_integer_value(pid);
      s->tid = json_integer_value(tid);
      s->ts_ns = ns_of(json_object_get(e, "ts"));
      s->dur_ns = ns_of(json_object_get(e, "dur"));
      s->graph = int_arg(args, "graph");
      s->item = int_arg(args, "item");
      s->replay = int_arg(args, "replay");
      s->bytes = int_arg(args, "bytes");
      s->eager = json_is_true(json_object_get(args, "eager"));
      s->has_rate = json_is_number(json_object_get(args, "GB/s"));
      cr_assert(s->name && s->cat, "slice %zu has a name and a category", i);
    } else if (!strcmp(ph, "s") || !strcmp(ph, "f")) {
      flow_t *f = &t->flows[t->nflows++];
      f->ph = ph[0];
      f->id = json_integer_value(json_object_get(e, "id"));
      f->pid = json_integer_value(pid);
      f->tid = json_integer_value(tid);
      f->ts_ns = ns_of(json_object_get(e, "ts"));
    } else {
      cr_assert_str_eq(ph, "M", "only X, s, f and M events are written");
    }
  }
}

static void trace_free(trace_t *t) {
  json_decref(t->root);
  free(t->slices);
  free(t->flows);
}

/* The name an M event gives (pid, tid); tid 0 asks for the process name. */
static const char *track_name(const trace_t *t, int64_t pid, int64_t tid) {
  json_t *events = json_object_get(t->root, "traceEvents");
  for (size_t i = 0; i < json_array_size(events); i++) {
    json_t *e = json_array_get(events, i);
    const char *ph = json_string_value(json_object_get(e, "ph")),
               *name = json_string_value(json_object_get(e, "name"));
    if (strcmp(ph, "M") || json_integer_value(json_object_get(e, "pid")) != pid) continue;
    if (tid == 0 && !strcmp(name, "process_name"))
      return json_string_value(json_object_get(json_object_get(e, "args"), "name"));
    if (tid != 0 && !strcmp(name, "thread_name") &&
        json_integer_value(json_object_get(e, "tid")) == tid)
      return json_string_value(json_object_get(json_object_get(e, "args"), "name"));
  }
  return "";
}

/* The slice of (pid, tid) whose [ts, ts+dur] holds ts_ns; NULL when none. */
static const slice_t *slice_at(const trace_t *t, int64_t pid, int64_t tid, int64_t ts_ns) {
  for (size_t i = 0; i < t->nslices; i++) {
    const slice_t *s = &t->slices[i];
    if (s->pid == pid && s->tid == tid && s->ts_ns <= ts_ns && ts_ns <= s->ts_ns + s->dur_ns)
      return s;
  }
  return NULL;
}

static int by_track_then_ts(const void *a, const void *b) {
  const slice_t *x = a, *y = b;
  if (x->pid != y->pid) return x->pid < y->pid ? -1 : 1;
  if (x->tid != y->tid) return x->tid < y->tid ? -1 : 1;
  return (x->ts_ns > y->ts_ns) - (x->ts_ns < y->ts_ns);
}

/* Every slice starts before it ends, and slices of one track never overlap (queues run in order;
 * a host thread does one call at a time). */
static void assert_tracks_in_order(const trace_t *t) {
  slice_t *sorted = malloc((t->nslices + 1) * sizeof(*sorted));
  memcpy(sorted, t->slices, t->nslices * sizeof(*sorted));
  qsort(sorted, t->nslices, sizeof(*sorted), by_track_then_ts);
  for (size_t i = 0; i < t->nslices; i++) {
    cr_assert_geq(sorted[i].dur_ns, 0, "%s ends before it starts", sorted[i].name);
    cr_assert_geq(sorted[i].ts_ns, 0);
    if (i && sorted[i].pid == sorted[i - 1].pid && sorted[i].tid == sorted[i - 1].tid)
      cr_assert_leq(sorted[i - 1].ts_ns + sorted[i - 1].dur_ns, sorted[i].ts_ns,
                    "%s (ends %" PRId64 ") overlaps %s (starts %" PRId64 ") on %s",
                    sorted[i - 1].name, sorted[i - 1].ts_ns + sorted[i - 1].dur_ns, sorted[i].name,
                    sorted[i].ts_ns, track_name(t, sorted[i].pid, sorted[i].tid));
  }
  free(sorted);
}

/* ---- a known graph: 6 items over 2 devices and 3 queues, 8 dependencies ----
 *   0 mix a        CPU:0 compute
 *   1 mix b <- a   CPU:0 compute   deps 0
 *   2 copy x <- a  CPU:0 copy      deps 0
 *   3 copy y <- b  CPU:0 copy      deps 1
 *   4 mix x <- y   CPU:1 compute   deps 2 3
 *   5 mix a        CPU:0 compute   deps 0 1 2 (writes a after 1 and 2 read it) */
typedef struct known {
  world_t w;
  world_item_t items[6];
  hcq_exec_item_t its[6];
} known_t;

static const int k_deps[][2] = {{0, 1}, {0, 2}, {1, 3}, {2, 4}, {3, 4}, {0, 5}, {1, 5}, {2, 5}};
enum { K_ITEMS = 6, K_DEPS = 8 };

static void known_open(known_t *k) {
  world_open(&k->w, 2);
  world_t *w = &k->w;
  int a = world_buffer(w, 0, N, 1), b = world_buffer(w, 0, N, 2);
  int x = world_buffer(w, 1, N, 3), y = world_buffer(w, 1, N, 4);
  world_mix(w, &k->items[0], a, a, a, I(2), I(1), I(N), NULL);
  world_mix(w, &k->items[1], b, a, b, I(3), I(1), I(N), NULL);
  world_copy(w, &k->items[2], x, a, N * 4);
  world_copy(w, &k->items[3], y, b, N * 4);
  world_mix(w, &k->items[4], x, x, y, I(1), I(2), I(N), NULL);
  world_mix(w, &k->items[5], a, a, a, I(5), I(1), I(N), NULL);
  for (int j = 0; j < K_ITEMS; j++) k->its[j] = k->items[j].item;
}

static hcq_graph_t *known_graph(known_t *k, bool profile) {
  hcq_graph_options_t o = {.profile = profile};
  hcq_graph_t *g = NULL;
  OK(hcq_graph_create(k->its, K_ITEMS, NULL, 0, NULL, 0, &o, &g));
  return g;
}

static const char *const k_tracks[K_ITEMS] = {"CPU:0 compute queue", "CPU:0 compute queue",
                                              "CPU:0 copy queue",    "CPU:0 copy queue",
                                              "CPU:1 compute queue", "CPU:0 compute queue"};

/* Replays of the known graph the trace of every_replay_of_a_known_graph_... holds. */
enum { K_REPLAYS = 5 };

/* A slice of item s->item of the known graph: on its queue's track, named and categorised as its
 * item, a copy with its bytes and rate. */
static void check_known_item_slice(const trace_t *t, const slice_t *s) {
  cr_assert_eq(s->graph, 0, "one graph: %s", s->name);
  cr_assert(s->item >= 0 && s->item < K_ITEMS && s->replay >= 1 && s->replay <= K_REPLAYS);
  cr_assert_str_eq(track_name(t, s->pid, s->tid), k_tracks[s->item], "item %" PRId64, s->item);
  cr_assert_str_eq(track_name(t, s->pid, 0), s->item == 4 ? "CPU:1" : "CPU:0");
  bool copy = s->item == 2 || s->item == 3;
  cr_assert_str_eq(s->name, copy ? "CPU:0 -> CPU:1" : "mix");
  cr_assert_str_eq(s->cat, copy ? "copy" : "kernel");
  if (copy) {
    cr_assert_eq(s->bytes, N * 4, "a copy carries its bytes");
    cr_assert_eq(s->has_rate, s->dur_ns > 0, "and its rate when it took time");
  }
}

/* One slice per item per replay, one submit per replay, the profiler's two clock alignments, and
 * nothing else; tracks in order. */
static void check_known_slices(const trace_t *t) {
  int per_item[K_ITEMS][K_REPLAYS + 1];
  memset(per_item, 0, sizeof(per_item));
  int submits[K_REPLAYS + 1] = {0}, aligned = 0;
  for (size_t i = 0; i < t->nslices; i++) {
    const slice_t *s = &t->slices[i];
    if (!strcmp(s->cat, "profiler")) {
      /* The profiler's own work, shown: aligning each device's clocks when the graph was built. */
      cr_assert(!strcmp(s->name, "profiler: align CPU:0 clocks") ||
                !strcmp(s->name, "profiler: align CPU:1 clocks"));
      cr_assert_str_eq(track_name(t, s->pid, 0), "host");
      aligned++;
    } else if (!strcmp(s->cat, "replay")) {
      cr_assert_eq(s->graph, 0);
      cr_assert(s->replay >= 1 && s->replay <= K_REPLAYS);
      cr_assert_str_eq(track_name(t, s->pid, 0), "host", "submits are on the host track");
      submits[s->replay]++;
    } else {
      check_known_item_slice(t, s);
      per_item[s->item][s->replay]++;
    }
  }
  for (int j = 0; j < K_ITEMS; j++)
    for (int r = 1; r <= K_REPLAYS; r++)
      cr_assert_eq(per_item[j][r], 1, "item %d of replay %d: %d slices", j, r, per_item[j][r]);
  for (int r = 1; r <= K_REPLAYS; r++) cr_assert_eq(submits[r], 1, "replay %d's submit", r);
  cr_assert_eq(aligned, 2, "each device's clocks are aligned once");
  cr_assert_eq(t->nslices, (size_t)(K_REPLAYS * K_ITEMS + K_REPLAYS + 2), "nothing else ran");
  assert_tracks_in_order(t);
}

/* Flows: one s/f pair per dependency edge per replay, each end inside the slice it names. */
static void check_known_flows(const trace_t *t) {
  cr_assert_eq(t->nflows, (size_t)(2 * K_REPLAYS * K_DEPS));
  int seen[K_ITEMS][K_ITEMS][K_REPLAYS + 1];
  memset(seen, 0, sizeof(seen));
  for (size_t i = 0; i < t->nflows; i++) {
    if (t->flows[i].ph != 's') continue;
    const flow_t *f = NULL;
    for (size_t k2 = 0; k2 < t->nflows; k2++)
      if (t->flows[k2].ph == 'f' && t->flows[k2].id == t->flows[i].id) {
        cr_assert_null(f, "flow id %" PRId64 " finishes twice", t->flows[i].id);
        f = &t->flows[k2];
      }
    cr_assert_not_null(f, "flow %" PRId64 " has no finish", t->flows[i].id);
    const slice_t *src = slice_at(t, t->flows[i].pid, t->flows[i].tid, t->flows[i].ts_ns);
    const slice_t *dst = slice_at(t, f->pid, f->tid, f->ts_ns);
    cr_assert(src && dst && src->item >= 0 && dst->item >= 0, "flow ends bind to item slices");
    cr_assert_eq(src->replay, dst->replay, "a flow stays within one replay");
    seen[src->item][dst->item][src->replay]++;
  }
  for (int r = 1; r <= K_REPLAYS; r++)
    for (int e = 0; e < K_DEPS; e++)
      cr_assert_eq(seen[k_deps[e][0]][k_deps[e][1]][r], 1, "edge %d -> %d in replay %d",
                   k_deps[e][0], k_deps[e][1], r);
}

/* The raw part: ring, clocks, the graph's items and dependencies. */
static void check_known_raw(const trace_t *t) {
  json_t *h = json_object_get(t->root, "hcq");
  cr_assert_eq(json_integer_value(json_object_get(json_object_get(h, "ring"), "dropped")), 0);
  cr_assert_eq(json_integer_value(json_object_get(json_object_get(h, "ring"), "capacity")),
               HCQ_TRACE_DEFAULT_RING_SLICES);
  json_t *clocks = json_object_get(h, "clocks");
  cr_assert_eq(json_array_size(clocks), 4, "CPU:0 and CPU:1, compute and copy");
  for (size_t i = 0; i < json_array_size(clocks); i++) {
    json_t *c = json_array_get(clocks, i);
    cr_assert_eq(json_integer_value(json_object_get(c, "samples")), HCQ_TRACE_CLOCK_SAMPLES);
    /* CPU devices stamp with the host's own clock: the measured offset is only the error. */
    int64_t off = json_integer_value(json_object_get(c, "offset_ns"));
    cr_assert(off > -1000000 && off < 1000000, "offset %" PRId64 " ns for a CPU queue", off);
  }
  json_t *items = json_object_get(json_array_get(json_object_get(h, "graphs"), 0), "items");
  cr_assert_eq(json_array_size(items), K_ITEMS);
  cr_assert_eq(json_integer_value(
                   json_object_get(json_array_get(json_object_get(h, "graphs"), 0), "replays")),
               K_REPLAYS);
  cr_assert_eq(json_array_size(json_object_get(json_array_get(items, 5), "deps")), 3);
}

Test(trace, every_replay_of_a_known_graph_is_traced_with_its_dependencies) {
  known_t k;
  known_open(&k);
  OK(hcq_trace_start(NULL));
  hcq_graph_t *g = known_graph(&k, false); /* the profiler gives it timestamp slots */
  for (int r = 0; r < K_REPLAYS; r++) OK(hcq_graph_run(g, NULL, 0, NULL, 0, r % 2 == 1, NULL));
  char path[512];
  tmp_path(path, sizeof(path), "known.json");
  OK(hcq_trace_write(path)); /* waits for the last replay itself: the graph is still alive */
  OK(hcq_graph_destroy(g));
  hcq_trace_stop();

  trace_t t;
  trace_load(&t, path);
  check_known_slices(&t);
  check_known_flows(&t);
  check_known_raw(&t);
  trace_free(&t);
  remove(path);
  world_close(&k.w);
}

Test(trace, eager_work_lands_on_the_queue_that_ran_it_and_on_the_host_track) {
  hcq_device_t *d0 = test_open("CPU:0"), *d1 = test_open("CPU:1");
  hcq_program_t *fill = test_program(d1, "fill", test_kernels_source);
  hcq_buffer_t *a = test_buffer(d0, 4096), *b = test_buffer(d1, 4096);
  int32_t host[1024];
  for (int i = 0; i < 1024; i++) host[i] = i;
  OK(hcq_trace_start(NULL));
  OK(hcq_buffer_copyin(a, 0, host, sizeof(host)));
  int32_t v[] = {7, 1024};
  hcq_launch_desc_t l = {fill, &b, 1, v, 2, {16, 1, 1}, {64, 1, 1}, NULL, 0};
  OK(hcq_launch(&l));
  OK(hcq_transfer(b, a, 2048));
  OK(hcq_buffer_copyout(b, 0, host, sizeof(host)));
  cr_assert_eq(host[0], 0, "the transfer ran after the fill");
  cr_assert_eq(host[1000], 7);
  char path[512];
  tmp_path(path, sizeof(path), "eager.json");
  OK(hcq_trace_write(path));
  hcq_trace_stop();

  trace_t t;
  trace_load(&t, path);
  struct {
    const char *name, *cat, *track, *process;
    int64_t bytes;
  } want[] = {
      {"host -> CPU:0", "copy", "CPU:0 copy queue", "CPU:0", 4096},
      {"fill", "kernel", "CPU:1 compute queue", "CPU:1", -1},
      {"CPU:0 -> CPU:1", "copy", "CPU:0 copy queue", "CPU:0", 2048},
      {"CPU:1 -> host", "copy", "CPU:1 copy queue", "CPU:1", 4096},
      {"copyin CPU:0", "eager", "host thread 1", "host", 4096},
      {"launch fill", "eager", "host thread 1", "host", -1},
      {"transfer CPU:0 -> CPU:1", "eager", "host thread 1", "host", 2048},
      {"copyout CPU:1", "eager", "host thread 1", "host", 4096},
      {"profiler: align CPU:0 clocks", "profiler", "host thread 1", "host", -1},
      {"profiler: align CPU:1 clocks", "profiler", "host thread 1", "host", -1},
  };
  cr_assert_eq(t.nslices, sizeof(want) / sizeof(want[0]),
               "one device slice and one host slice per call, and the first use of each device");
  int64_t starts[sizeof(want) / sizeof(want[0])];
  for (size_t w = 0; w < sizeof(want) / sizeof(want[0]); w++) {
    const slice_t *s = NULL;
    for (size_t i = 0; i < t.nslices; i++)
      if (!strcmp(t.slices[i].name, want[w].name)) s = &t.slices[i];
    cr_assert_not_null(s, "no slice named %s", want[w].name);
    cr_assert_str_eq(s->cat, want[w].cat, "%s", want[w].name);
    cr_assert_str_eq(track_name(&t, s->pid, s->tid), want[w].track, "%s", want[w].name);
    cr_assert_str_eq(track_name(&t, s->pid, 0), want[w].process, "%s", want[w].name);
    cr_assert_eq(s->bytes, want[w].bytes, "%s", want[w].name);
    cr_assert_eq(s->graph, -1, "%s is no graph item", want[w].name);
    cr_assert_eq(s->eager, w < 4, "device slices of eager work say so");
    starts[w] = s->ts_ns;
  }
  for (int i = 5; i < 8; i++) cr_assert_lt(starts[i - 1], starts[i], "host calls in program order");
  /* The first call on a device aligned its clocks first; the call's own slice starts after that. */
  cr_assert_lt(starts[8], starts[4], "CPU:0 was aligned in the copyin");
  cr_assert_lt(starts[9], starts[5], "CPU:1 in the launch");
  cr_assert_gt(starts[9], starts[4]);
  assert_tracks_in_order(&t);
  cr_assert_eq(t.nflows, 0, "flows join graph items only");
  trace_free(&t);
  remove(path);
  hcq_buffer_release(a);
  hcq_buffer_release(b);
  hcq_program_release(fill);
  test_close(d0);
  test_close(d1);
}

Test(trace, a_full_ring_drops_the_oldest_slices_and_counts_them) {
  hcq_device_t *d = test_open("CPU:0");
  hcq_program_t *fill = test_program(d, "fill", test_kernels_source);
  hcq_buffer_t *b = test_buffer(d, 256);
  hcq_trace_options_t o = {.ring_slices = 16};
  OK(hcq_trace_start(&o));
  int32_t v[] = {1, 64};
  hcq_launch_desc_t l = {fill, &b, 1, v, 2, {1, 1, 1}, {64, 1, 1}, NULL, 0};
  for (int i = 0; i < 30; i++) OK(hcq_launch(&l));
  hcq_trace_stats_t s;
  hcq_trace_stats(&s);
  /* Host slices are recorded at once (the clock alignment's and each call's); device slices when
   * read (their slot is reused, or a flush). */
  cr_assert_eq(s.capacity, 16);
  cr_assert_eq(s.slices, 16);
  cr_assert_eq(s.dropped, 31 - 16);
  char path[512];
  tmp_path(path, sizeof(path), "ring.json");
  OK(hcq_trace_write(path));
  hcq_trace_stats(&s);
  cr_assert_eq(s.slices, 16);
  cr_assert_eq(s.dropped, 61 - 16, "31 host and 30 device slices went through a ring of 16");
  hcq_trace_stop();
  hcq_trace_stats(&s);
  cr_assert_eq(s.capacity, 0, "stopped: nothing kept");

  trace_t t;
  trace_load(&t, path);
  cr_assert_eq(t.nslices, 16);
  for (size_t i = 0; i < t.nslices; i++)
    cr_assert_str_eq(t.slices[i].name, "fill",
                     "the newest (device) slices are kept, the oldest (host) ones dropped");
  json_t *ring = json_object_get(json_object_get(t.root, "hcq"), "ring");
  cr_assert_eq(json_integer_value(json_object_get(ring, "dropped")), 45);
  cr_assert_eq(json_integer_value(json_object_get(ring, "capacity")), 16);
  assert_tracks_in_order(&t);
  trace_free(&t);
  remove(path);
  hcq_buffer_release(b);
  hcq_program_release(fill);
  test_close(d);
}

/* More eager operations than the profiler keeps slots for: the oldest are read as their slots are
 * reused, none is lost. */
Test(trace, more_eager_operations_than_slots_are_all_recorded) {
  hcq_device_t *d = test_open("CPU:0");
  hcq_program_t *fill = test_program(d, "fill", test_kernels_source);
  hcq_buffer_t *b = test_buffer(d, 256);
  OK(hcq_trace_start(NULL));
  int32_t v[] = {1, 64};
  hcq_launch_desc_t l = {fill, &b, 1, v, 2, {1, 1, 1}, {64, 1, 1}, NULL, 0};
  for (int i = 0; i < 700; i++) OK(hcq_launch(&l));
  char path[512];
  tmp_path(path, sizeof(path), "slots.json");
  OK(hcq_trace_write(path));
  hcq_trace_stop();
  trace_t t;
  trace_load(&t, path);
  size_t kernels = 0, calls = 0;
  for (size_t i = 0; i < t.nslices; i++) {
    kernels += !strcmp(t.slices[i].cat, "kernel");
    calls += !strcmp(t.slices[i].cat, "eager");
  }
  cr_assert_eq(kernels, 700);
  cr_assert_eq(calls, 700);
  assert_tracks_in_order(&t);
  trace_free(&t);
  remove(path);
  hcq_buffer_release(b);
  hcq_program_release(fill);
  test_close(d);
}

Test(trace, profiler_off_records_nothing_and_graphs_get_no_timestamps) {
  known_t k;
  known_open(&k);
  cr_assert_not(hcq_trace_active());
  hcq_graph_t *g = known_graph(&k, false);
  for (int r = 0; r < 3; r++) OK(hcq_graph_run(g, NULL, 0, NULL, 0, true, NULL));
  const hcq_profile_event_t *ev = NULL;
  FAILS(hcq_graph_profile(g, &ev), HCQ_FAILED_PRECONDITION, "without profiling");
  int32_t host[N];
  OK(hcq_buffer_copyout(k.w.buf[0], 0, host, sizeof(host)));
  for (int d = 0; d < 2; d++) cr_assert_null(k.w.devs[d]->trace, "no profiler state on CPU:%d", d);
  hcq_trace_stats_t s;
  hcq_trace_stats(&s);
  cr_assert_eq(s.slices + s.capacity + s.dropped + s.graphs, 0);
  char path[512];
  tmp_path(path, sizeof(path), "off.json");
  FAILS(hcq_trace_write(path), HCQ_FAILED_PRECONDITION, "profiler is off");
  FAILS(hcq_trace_flush(), HCQ_FAILED_PRECONDITION, "off");
  OK(hcq_graph_destroy(g));
  world_close(&k.w);
}

Test(trace, sessions_start_once_flush_to_their_file_and_forget_old_graphs) {
  known_t k;
  known_open(&k);
  char path[512], other[512];
  tmp_path(path, sizeof(path), "session.json");
  tmp_path(other, sizeof(other), "session2.json");
  hcq_trace_options_t o = {.path = path};
  OK(hcq_trace_start(&o));
  FAILS(hcq_trace_start(NULL), HCQ_FAILED_PRECONDITION, "on already", path);
  hcq_graph_t *old = known_graph(&k, false);
  OK(hcq_graph_run(old, NULL, 0, NULL, 0, false, NULL));
  OK(hcq_trace_flush());
  hcq_trace_stop();

  trace_t t;
  trace_load(&t, path);
  cr_assert_eq(t.nslices, K_ITEMS + 1 + 2,
               "the replay (read by the flush itself) and 2 clock alignments");
  trace_free(&t);

  /* A new session: the old graph records nothing more, a new one does. */
  OK(hcq_trace_start(NULL));
  FAILS(hcq_trace_flush(), HCQ_FAILED_PRECONDITION, "without a file");
  OK(hcq_graph_run(old, NULL, 0, NULL, 0, true, NULL));
  hcq_graph_t *g = known_graph(&k, false);
  OK(hcq_graph_run(g, NULL, 0, NULL, 0, true, NULL));
  OK(hcq_graph_run(g, NULL, 0, NULL, 0, false, NULL));
  OK(hcq_graph_destroy(g)); /* reads its last replay */
  hcq_trace_pause(true);
  OK(hcq_graph_run(old, NULL, 0, NULL, 0, true, NULL));
  hcq_trace_pause(false);
  OK(hcq_trace_write(other));
  FAILS(hcq_trace_write("/nonexistent-dir/x.json"), HCQ_UNAVAILABLE, "cannot write",
        "/nonexistent-dir/x.json");
  hcq_trace_stop();
  OK(hcq_graph_destroy(old));
  trace_load(&t, other);
  cr_assert_eq(t.nslices, 2 * (K_ITEMS + 1) + 2,
               "two replays of the new graph, nothing of the old one");
  for (size_t i = 0; i < t.nslices; i++)
    if (strcmp(t.slices[i].cat, "profiler"))
      cr_assert_eq(t.slices[i].graph, 0, "the new graph is graph 0 of its session");
  trace_free(&t);
  remove(path);
  remove(other);
  world_close(&k.w);
}

/* Eager work from two threads while a third writes the trace: two host tracks, nothing lost. */
typedef struct worker {
  hcq_device_t *dev;
  hcq_program_t *fill;
  hcq_buffer_t *buf;
} worker_t;

static void *launch_many(void *arg) {
  worker_t *w = arg;
  int32_t v[] = {3, 64};
  hcq_launch_desc_t l = {w->fill, &w->buf, 1, v, 2, {1, 1, 1}, {64, 1, 1}, NULL, 0};
  for (int i = 0; i < 100; i++) {
    hcq_status_t st = hcq_launch(&l);
    if (st) return st;
  }
  return NULL;
}

Test(trace, threads_record_concurrently_with_a_write) {
  worker_t w[2];
  for (int i = 0; i < 2; i++) {
    w[i].dev = test_open(i ? "CPU:1" : "CPU:0");
    w[i].fill = test_program(w[i].dev, "fill", test_kernels_source);
    w[i].buf = test_buffer(w[i].dev, 256);
  }
  OK(hcq_trace_start(NULL));
  pthread_t th[2];
  for (int i = 0; i < 2; i++) cr_assert_eq(pthread_create(&th[i], NULL, launch_many, &w[i]), 0);
  char path[512];
  tmp_path(path, sizeof(path), "threads.json");
  OK(hcq_trace_write(path));
  for (int i = 0; i < 2; i++) {
    void *ret;
    pthread_join(th[i], &ret);
    OK((hcq_status_t)ret);
  }
  OK(hcq_trace_write(path));
  hcq_trace_stop();
  trace_t t;
  trace_load(&t, path);
  size_t kernels[2] = {0}, calls = 0;
  int64_t host_tids[2] = {-1, -1};
  for (size_t i = 0; i < t.nslices; i++) {
    const slice_t *s = &t.slices[i];
    if (!strcmp(s->cat, "kernel")) kernels[!strcmp(track_name(&t, s->pid, 0), "CPU:1")]++;
    if (!strcmp(s->cat, "eager")) {
      calls++;
      if (host_tids[0] < 0 || host_tids[0] == s->tid)
        host_tids[0] = s->tid;
      else
        host_tids[1] = s->tid;
    }
  }
  cr_assert_eq(kernels[0], 100);
  cr_assert_eq(kernels[1], 100);
  cr_assert_eq(calls, 200);
  cr_assert(host_tids[1] >= 0 && host_tids[1] != host_tids[0], "one host track per thread");
  assert_tracks_in_order(&t);
  trace_free(&t);
  remove(path);
  for (int i = 0; i < 2; i++) {
    hcq_buffer_release(w[i].buf);
    hcq_program_release(w[i].fill);
    test_close(w[i].dev);
  }
}

/* ---- the SVG ---- */

static size_t count_occurrences(const char *text, const char *what) {
  size_t n = 0;
  for (const char *p = text; (p = strstr(p, what)); p += strlen(what)) n++;
  return n;
}

static char *read_all(const char *path) {
  FILE *f = fopen(path, "rb");
  cr_assert_not_null(f, "cannot read %s", path);
  fseek(f, 0, SEEK_END);
  long size = ftell(f);
  fseek(f, 0, SEEK_SET);
  char *text = calloc((size_t)size + 1, 1);
  cr_assert_eq(fread(text, 1, (size_t)size, f), (size_t)size);
  fclose(f);
  return text;
}

Test(trace, the_svg_timeline_has_a_box_per_item_per_replay_rows_and_arrows) {
  enum { R = 3 };
  known_t k;
  known_open(&k);
  OK(hcq_trace_start(NULL));
  hcq_graph_t *g = known_graph(&k, false);
  for (int r = 0; r < R; r++) OK(hcq_graph_run(g, NULL, 0, NULL, 0, false, NULL));
  OK(hcq_graph_destroy(g));
  char path[512];
  tmp_path(path, sizeof(path), "timeline.svg");
  OK(hcq_trace_write_svg(path));
  hcq_trace_stop();
  char *svg = read_all(path);
  cr_assert(!strncmp(svg, "<?xml", 5) && strstr(svg, "<svg xmlns=\"http://www.w3.org/2000/svg\""));
  cr_assert_eq(count_occurrences(svg, "<rect class=\"item\""), (size_t)(R * K_ITEMS));
  cr_assert_eq(count_occurrences(svg, "<rect class=\"submit\""), (size_t)R);
  cr_assert_eq(count_occurrences(svg, "<line class=\"dep\""), (size_t)(R * K_DEPS));
  cr_assert_eq(count_occurrences(svg, "<rect class=\"row"), 4,
               "host thread 1, CPU:0 compute and copy, CPU:1 compute");
  cr_assert_not_null(strstr(svg, "CPU:1 compute queue <tspan"));
  cr_assert_not_null(strstr(svg, "time since the first slice"));
  cr_assert_not_null(strstr(svg, "</svg>\n"));
  free(svg);
  remove(path);
  world_close(&k.w);
}

/* ---- the DOT dump ---- */

static bool graphviz_installed(void) { return system("command -v dot >/dev/null 2>&1") == 0; }

/* The known graph's DOT file at path: a node per item, a cluster per queue that has work, the
 * waits kept and dropped by hand from docs/design.md, "The HCQ graph": waits kept where another
 * queue must be waited for; dropped on the same in-order queue, or when the queue already waited
 * for as much (4 on 2: it waits for 3, later on the same copy queue). */
static void check_known_dot(const char *path) {
  char *dot = read_all(path);
  cr_assert(!strncmp(dot, "digraph hcq {", 13));
  for (int j = 0; j < K_ITEMS; j++) {
    char node[32];
    snprintf(node, sizeof(node), "g0_i%d [label=\"%d: ", j, j);
    cr_assert_eq(count_occurrences(dot, node), 1, "node %d", j);
  }
  cr_assert_not_null(strstr(dot, "label=\"CPU:0 compute queue\""));
  cr_assert_not_null(strstr(dot, "label=\"CPU:0 copy queue\""));
  cr_assert_not_null(strstr(dot, "label=\"CPU:1 compute queue\""));
  cr_assert_null(strstr(dot, "CPU:1 copy queue"), "CPU:1 copies nothing");
  cr_assert_not_null(strstr(dot, "g0_i2 [label=\"2: copy CPU:0 -> CPU:1\\nb0 -> b2, 256 bytes"));
  const char *kept[] = {"g0_i0 -> g0_i2 [class=\"wait\"", "g0_i1 -> g0_i3 [class=\"wait\"",
                        "g0_i3 -> g0_i4 [class=\"wait\"", "g0_i2 -> g0_i5 [class=\"wait\""};
  const char *dropped[] = {
      "g0_i0 -> g0_i1 [class=\"dropped\", style=dashed, color=\"#999999\", fontcolor=\"#777777\", "
      "label=\"in order\"",
      "g0_i2 -> g0_i4 [class=\"dropped\", style=dashed, color=\"#999999\", fontcolor=\"#777777\", "
      "label=\"implied\"",
      "g0_i0 -> g0_i5 [class=\"dropped\", style=dashed, color=\"#999999\", fontcolor=\"#777777\", "
      "label=\"in order\"",
      "g0_i1 -> g0_i5 [class=\"dropped\", style=dashed, color=\"#999999\", fontcolor=\"#777777\", "
      "label=\"in order\""};
  for (int i = 0; i < 4; i++) cr_assert_eq(count_occurrences(dot, kept[i]), 1, "%s", kept[i]);
  for (int i = 0; i < 4; i++) cr_assert_eq(count_occurrences(dot, dropped[i]), 1, "%s", dropped[i]);
  cr_assert_eq(count_occurrences(dot, "\n  g0_i"), K_DEPS, "one edge per dependency, nothing else");
  cr_assert_eq(count_occurrences(dot, "class=\"order\""), 0,
               "CPU queues run in order: no queue-order waits");
  free(dot);
}

/* Graphviz is optional: when it is installed, the known graph's file at path must render. */
static void check_known_dot_renders(const char *path) {
  if (!graphviz_installed()) {
    cr_log_info("graphviz is not installed: the DOT file was not rendered");
    return;
  }
  char cmd[1200];
  snprintf(cmd, sizeof(cmd), "dot -Tsvg '%s' -o '%s.svg' 2>&1", path, path);
  cr_assert_eq(system(cmd), 0, "dot -Tsvg failed on %s", path);
  char rendered[600];
  snprintf(rendered, sizeof(rendered), "%s.svg", path);
  char *svg = read_all(rendered);
  cr_assert_eq(count_occurrences(svg, "class=\"node\""), K_ITEMS, "graphviz drew every item");
  free(svg);
  remove(rendered);
}

/* Labels are the user's: quotes and backslashes are escaped, so the file still parses. */
static void check_dot_escapes_labels(known_t *k, hcq_graph_t *g, const char *path) {
  hcq_buffer_set_label(k->w.buf[0], "we\"ird\\<label>");
  OK(hcq_graph_write_dot(&g, 1, path));
  char *dot = read_all(path);
  cr_assert_not_null(
      strstr(dot, "mix(we\\\"ird\\\\<label>*, we\\\"ird\\\\<label>, we\\\"ird\\\\<label>)"), "%s",
      dot);
  if (graphviz_installed()) {
    char cmd[1200];
    snprintf(cmd, sizeof(cmd), "dot -Tsvg '%s' -o /dev/null 2>&1", path);
    cr_assert_eq(system(cmd), 0, "dot rejects the escaped labels");
  }
  free(dot);
}

/* Two graphs in one file (g and another of k's), and no graph at all. */
static void check_dot_of_two_graphs_and_none(known_t *k, hcq_graph_t *g, const char *path) {
  hcq_graph_t *two[2] = {g, known_graph(k, false)};
  OK(hcq_graph_write_dot(two, 2, path));
  char *dot = read_all(path);
  cr_assert_not_null(strstr(dot, "subgraph cluster_g1 {"));
  cr_assert_eq(count_occurrences(dot, "\n  g1_i"), K_DEPS);
  free(dot);
  OK(hcq_graph_write_dot(NULL, 0, path));
  dot = read_all(path);
  cr_assert_str_eq(
      dot,
      "digraph hcq {\n  graph [fontname=\"Helvetica\", rankdir=TB, newrank=true];\n"
      "  node [shape=box, style=\"rounded,filled\", fontname=\"Helvetica\", fontsize=10];\n"
      "  edge [fontname=\"Helvetica\", fontsize=9];\n}\n");
  free(dot);
  OK(hcq_graph_destroy(two[1]));
}

Test(trace, the_dot_dump_of_a_known_graph_has_its_nodes_queues_and_edges) {
  known_t k;
  known_open(&k);
  hcq_graph_t *g = known_graph(&k, false);
  char path[512];
  tmp_path(path, sizeof(path), "known.dot");
  OK(hcq_graph_write_dot(&g, 1, path));
  check_known_dot(path);
  check_known_dot_renders(path);
  check_dot_escapes_labels(&k, g, path);
  check_dot_of_two_graphs_and_none(&k, g, path);
  FAILS(hcq_graph_write_dot(&g, 1, NULL), HCQ_INVALID_ARGUMENT, "no file name");
  FAILS(hcq_graph_write_dot(NULL, 1, path), HCQ_INVALID_ARGUMENT, "NULL");
  FAILS(hcq_graph_write_dot(&g, 1, "/nonexistent-dir/g.dot"), HCQ_UNAVAILABLE,
        "/nonexistent-dir/g.dot");
  remove(path);
  OK(hcq_graph_destroy(g));
  world_close(&k.w);
}

Test(trace, an_empty_trace_is_still_a_valid_file) {
  OK(hcq_trace_start(NULL));
  char path[512], svg_path[512];
  tmp_path(path, sizeof(path), "empty.json");
  tmp_path(svg_path, sizeof(svg_path), "empty.svg");
  OK(hcq_trace_write(path));
  OK(hcq_trace_write_svg(svg_path));
  hcq_trace_stop();
  trace_t t;
  trace_load(&t, path);
  cr_assert_eq(t.nslices, 0);
  cr_assert_eq(t.nflows, 0);
  cr_assert_str_eq(track_name(&t, 1, 0), "host");
  trace_free(&t);
  char *svg = read_all(svg_path);
  cr_assert_not_null(strstr(svg, "0 slices over"));
  cr_assert_not_null(strstr(svg, "</svg>"));
  free(svg);
  remove(path);
  remove(svg_path);
}

/* The CPU engine's timestamp clock (hcq__fast_clock_now) is CLOCK_MONOTONIC read more cheaply: over
 * 40 ms of readings, past its first re-anchoring, it never goes back and stays within 20 us of
 * hcq__now_ns read right around it (device slices are aligned with host slices by it). */
Test(trace, the_engine_timestamp_clock_follows_the_monotonic_clock) {
  hcq__fast_clock_t c;
  memset(&c, 0, sizeof(c));
  uint64_t start = hcq__now_ns(), prev = 0, worst = 0;
  size_t n = 0;
  while (hcq__now_ns() - start < 40000000u) {
    uint64_t before = hcq__now_ns();
    uint64_t t = hcq__fast_clock_now(&c);
    uint64_t after = hcq__now_ns();
    cr_assert_geq(t, prev, "reading %zu went back: %" PRIu64 " after %" PRIu64, n, t, prev);
    uint64_t off = t < before ? before - t : t > after ? t - after : 0;
    if (off > worst) worst = off;
    prev = t;
    n++;
  }
  cr_assert_leq(worst, 20000u,
                "a reading was %" PRIu64 " ns outside the monotonic clock around it (%zu readings)",
                worst, n);
}
