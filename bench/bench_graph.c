/* Graph benchmarks: replay host cost as the graph grows, device time per item, replay vs eager. */
#include "bench.h"

/* A chain of n empty one-group kernels on one queue; item 0 takes the graph's input. The items
 * point at *input and *other, which must outlive them. */
static hcq_graph_t *chain(hcq_program_t *empty, hcq_buffer_t *const *input,
                          hcq_buffer_t *const *other, size_t n, hcq_exec_item_t **out_items) {
  hcq_exec_item_t *items = calloc(n, sizeof(*items));
  static uint32_t outs[1] = {0};
  for (size_t j = 0; j < n; j++) {
    hcq_kernel_item_t k = {empty,
                           j == 0 ? input : other,
                           1,
                           outs,
                           1,
                           NULL,
                           0,
                           {hcq_imm(1), hcq_imm(1), hcq_imm(1)},
                           {hcq_imm(1), hcq_imm(1), hcq_imm(1)}};
    items[j].kind = HCQ_ITEM_KERNEL;
    items[j].kernel = k;
  }
  hcq_graph_t *g;
  CHECK(hcq_graph_create(items, n, input, 1, NULL, 0, NULL, &g));
  *out_items = items;
  return g;
}

/* The floor a replay's per-item cost is measured against (issue 42): the same n calls from a
 * prebuilt array of function pointers and argument pointers, one entry per item as the graph has
 * them (each item's own buffer-pointer block, a launch record), called in a plain loop. */
typedef struct floor_call {
  hcq_cpu_kernel_fn fn;
  void *const *bufs;
  const int32_t *vals;
  const hcq_launch_t *launch;
} floor_call_t;

static double plain_array_floor(size_t n) {
  floor_call_t *calls = calloc(n, sizeof(*calls));
  void **args = calloc(n, sizeof(*args));
  static const hcq_launch_t one = {{0, 0, 0}, {1, 1, 1}, {1, 1, 1}};
  if (!calls || !args) exit(1);
  for (size_t j = 0; j < n; j++)
    calls[j] = (floor_call_t){bench_empty_kernel, &args[j], NULL, &one};
  /* The compiler must not see through the array to a direct call of a known function. */
  __asm__ volatile("" : : "r"(calls) : "memory");
  double per[REPS];
  for (int r = 0; r < REPS; r++) {
    double t0 = now_ns();
    for (size_t j = 0; j < n; j++) calls[j].fn(calls[j].bufs, calls[j].vals, calls[j].launch);
    per[r] = (now_ns() - t0) / (double)n;
  }
  free(calls);
  free(args);
  return median(per, REPS);
}

/* The 10000 items against the floor, and run eagerly, one hcq_exec_item_run each. */
static void per_item_rows(hcq_device_t *dev, const hcq_exec_item_t *items, size_t n,
                          double completion) {
  double eager[REPS];
  for (int r = 0; r < REPS; r++) {
    double t0 = now_ns();
    for (size_t j = 0; j < n; j++) CHECK(hcq_exec_item_run(&items[j], NULL, 0));
    CHECK(hcq_device_synchronize(dev));
    eager[r] = (now_ns() - t0) / n;
  }
  double floor_ns = plain_array_floor(n);
  row("graph of 10000 items: device time per item (replay to completion)", completion / n, "ns");
  row("the same 10000 calls from a prebuilt array of fn + arg pointers (floor)", floor_ns, "ns");
  row("graph of 10000 items: replay per item / the floor (issue 42: <= 1.5)",
      completion / n / floor_ns, "x");
  row("the same 10000 items run eagerly to completion, per item", median(eager, REPS), "ns");
}

/* Host time of one replay as the chain grows, its input swapped each time. */
static void replay_rows(hcq_device_t *dev, hcq_program_t *empty, hcq_buffer_t *const in[2],
                        hcq_buffer_t *const *other) {
  size_t sizes[] = {10, 100, 1000, 10000};
  for (size_t s = 0; s < 4; s++) {
    size_t n = sizes[s];
    hcq_exec_item_t *items;
    hcq_graph_t *g = chain(empty, &in[0], other, n, &items);
    enum { R = 301 };
    double submit[R], total[R];
    for (int r = 0; r < R; r++) {
      CHECK(hcq_device_synchronize(dev)); /* the previous replay is done: only this one is timed */
      double t0 = now_ns();
      CHECK(hcq_graph_run(g, &in[r % 2], 1, NULL, 0, false, NULL));
      double t1 = now_ns();
      CHECK(hcq_device_synchronize(dev));
      submit[r] = t1 - t0;
      total[r] = now_ns() - t0;
    }
    char what[96];
    snprintf(what, sizeof(what), "graph of %5zu items: host time of one replay (input swapped)", n);
    row(what, median(submit, R), "ns");
    if (n == 10000) per_item_rows(dev, items, n, median(total, R));
    CHECK(hcq_graph_destroy(g));
    free(items);
  }
}

/* Launch + wait of a small graph: about one thread hand-off. */
static void latency_row(hcq_program_t *empty, hcq_buffer_t *const *in, hcq_buffer_t *const *other) {
  hcq_exec_item_t *items;
  hcq_graph_t *g = chain(empty, in, other, 3, &items);
  enum { R = 2001 };
  double lat[R];
  for (int r = 0; r < R; r++) {
    double t0 = now_ns();
    CHECK(hcq_graph_run(g, in, 1, NULL, 0, true, NULL));
    lat[r] = now_ns() - t0;
  }
  row("graph of 3 items: replay + wait (latency)", median(lat, R), "ns");
  CHECK(hcq_graph_destroy(g));
  free(items);
}

/* The read loop's graph, its two outputs (mapped), a fence each, and the medians it measures. */
typedef struct read_loop {
  hcq_device_t *dev;
  hcq_graph_t *g;
  hcq_buffer_t *out[2];
  hcq_fence_t *done[2];
  volatile const uint32_t *host[2];
  uint32_t sink;
} read_loop_t;

enum { LOOP = 400 };

/* Replay, wait, copy out each time; per replay. */
static double read_waited(read_loop_t *l) {
  uint32_t word;
  double t0 = now_ns();
  for (int i = 0; i < LOOP; i++) {
    CHECK(hcq_graph_run(l->g, &l->out[i % 2], 1, NULL, 0, true, NULL));
    CHECK(hcq_buffer_copyout(l->out[i % 2], 0, &word, 4));
    l->sink += word;
  }
  return (now_ns() - t0) / LOOP;
}

/* Two replays in flight, a fence each, the output read through the mapping; per replay. */
static double read_fenced(read_loop_t *l) {
  double t0 = now_ns();
  for (int i = 0; i <= LOOP; i++) {
    if (i < LOOP) CHECK(hcq_graph_submit(l->g, &l->out[i % 2], 1, NULL, 0, l->done[i % 2]));
    if (i > 0) {
      CHECK(hcq_fence_wait(l->done[(i - 1) % 2], HCQ_TIMEOUT_DEFAULT));
      l->sink += l->host[(i - 1) % 2][0];
    }
  }
  return (now_ns() - t0) / LOOP;
}

/* host cost of queuing alone: hcq_graph_submit with its fence against hcq_graph_run(wait=false) */
static void queue_cost(read_loop_t *l, double *submit_ns, double *run_ns) {
  double a[64], b[64];
  for (int i = 0; i < 64; i++) {
    CHECK(hcq_device_synchronize(l->dev));
    double s0 = now_ns();
    CHECK(hcq_graph_submit(l->g, &l->out[0], 1, NULL, 0, l->done[0]));
    a[i] = now_ns() - s0;
    CHECK(hcq_device_synchronize(l->dev));
    s0 = now_ns();
    CHECK(hcq_graph_run(l->g, &l->out[0], 1, NULL, 0, false, NULL));
    b[i] = now_ns() - s0;
  }
  *submit_ns = median(a, 64);
  *run_ns = median(b, 64);
}

/* A loop that reads every replay's output (a token, a residual): replay, wait, copy out each time,
 * against two replays in flight with a fence each and the output read through hcq_buffer_map. */
static void read_loop_rows(hcq_device_t *dev, hcq_program_t *empty, hcq_buffer_t *const *other) {
  read_loop_t l = {.dev = dev};
  for (int k = 0; k < 2; k++) {
    CHECK(hcq_buffer_create_mapped(dev, 64, &l.out[k]));
    void *p;
    CHECK(hcq_buffer_map(l.out[k], &p));
    l.host[k] = p;
    CHECK(hcq_fence_create(&l.done[k]));
  }
  hcq_exec_item_t *items;
  l.g = chain(empty, &l.out[0], other, 100, &items);
  double waited[REPS], fenced[REPS], submit_ns[REPS], run_ns[REPS];
  for (int rep = 0; rep < REPS; rep++) {
    waited[rep] = read_waited(&l);
    fenced[rep] = read_fenced(&l);
    queue_cost(&l, &submit_ns[rep], &run_ns[rep]);
  }
  CHECK(hcq_device_synchronize(dev));
  if (l.sink == 1) fprintf(stderr, " "); /* keeps the reads */
  row("graph of 100 items, each replay's output read: run + wait + copyout, per replay",
      median(waited, REPS), "ns");
  row("the same, two replays in flight, a fence each, read through hcq_buffer_map",
      median(fenced, REPS), "ns");
  row("graph of 100 items: host time of hcq_graph_run (no wait)", median(run_ns, REPS), "ns");
  row("graph of 100 items: host time of hcq_graph_submit with a fence", median(submit_ns, REPS),
      "ns");
  CHECK(hcq_graph_destroy(l.g));
  free(items);
  for (int k = 0; k < 2; k++) {
    hcq_fence_destroy(l.done[k]);
    hcq_buffer_release(l.out[k]);
  }
}

void bench_graph(hcq_device_t *dev, hcq_program_t *empty) {
  hcq_buffer_t *in[2], *other;
  CHECK(hcq_buffer_create(dev, 64, &in[0]));
  CHECK(hcq_buffer_create(dev, 64, &in[1]));
  CHECK(hcq_buffer_create(dev, 64, &other));
  replay_rows(dev, empty, in, &other);
  latency_row(empty, &in[0], &other);
  read_loop_rows(dev, empty, &other);
  hcq_buffer_release(in[0]);
  hcq_buffer_release(in[1]);
  hcq_buffer_release(other);
}
