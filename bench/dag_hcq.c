/* The hand-off DAGs (dag.h) as hcq graphs over CPU:0 and CPU:1 and over CPU:0 alone, against
 * hand-written baselines in the same run: a two-thread pipeline that hands off by spinning on
 * shared words (for the two-device DAGs) and a plain loop on one thread (for the one-device ones).
 * Also: host time of back-to-back wait=false replays, and the CPU an idle process with two open
 * devices burns. Rows as in bench/rows.h.
 *
 *   dag_hcq [REPLAYS]                                  (default 301)
 */
#include <hcq/hcq.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <string.h>
#include <unistd.h>

#include "dag.h"
#include "rows.h"

#define CHECK(call)                                                         \
  do {                                                                      \
    hcq_status_t st_ = (call);                                              \
    if (st_) {                                                              \
      fprintf(stderr, "dag_hcq: %s: %s\n", #call, hcq_status_message(st_)); \
      exit(1);                                                              \
    }                                                                       \
  } while (0)

static int g_replays = 301;

/* ---- kernels (the CPU ABI of hcq/program.h, host function pointers) ---- */
static void k_produce(void *const *b, const int32_t *v, const hcq_launch_t *l) {
  (void)v, (void)l, dag_produce(b[0]);
}
static void k_consume(void *const *b, const int32_t *v, const hcq_launch_t *l) {
  (void)l, dag_consume(b[0], b[1], v[0]);
}
static void k_fanin2(void *const *b, const int32_t *v, const hcq_launch_t *l) {
  (void)l;
  dag_fanin(b[0], b[1], v[0]);
  dag_fanin(b[0], b[2], v[0]);
}
static void k_step(void *const *b, const int32_t *v, const hcq_launch_t *l) {
  (void)v, (void)l, dag_step(b[0], b[1]);
}

/* ---- building graphs ---- */
typedef struct builder {
  hcq_exec_item_t items[2 * DAG_CHAIN];
  hcq_buffer_t *bufs[2 * DAG_CHAIN][3];
  hcq_operand_t vals[2 * DAG_CHAIN][1];
  size_t n;
} builder_t;

static const uint32_t k_out0[1] = {0};
static const hcq_operand_t k_one[3] = {{NULL, 1}, {NULL, 1}, {NULL, 1}};

static void kernel(builder_t *b, hcq_program_t *p, hcq_buffer_t *b0, hcq_buffer_t *b1,
                   hcq_buffer_t *b2, int val) {
  size_t j = b->n++;
  hcq_buffer_t **bufs = b->bufs[j];
  bufs[0] = b0, bufs[1] = b1, bufs[2] = b2;
  b->vals[j][0] = hcq_imm(val);
  b->items[j].kind = HCQ_ITEM_KERNEL;
  b->items[j].kernel = (hcq_kernel_item_t){p,
                                           bufs,
                                           b2   ? 3
                                           : b1 ? 2
                                                : 1,
                                           k_out0,
                                           1,
                                           b->vals[j],
                                           1,
                                           {k_one[0], k_one[1], k_one[2]},
                                           {k_one[0], k_one[1], k_one[2]}};
}

static void copy(builder_t *b, hcq_buffer_t *dst, hcq_buffer_t *src) {
  size_t j = b->n++;
  b->items[j].kind = HCQ_ITEM_TRANSFER;
  b->items[j].transfer = (hcq_transfer_item_t){dst, src, hcq_buffer_size(src)};
}

typedef struct progs {
  hcq_program_t *produce, *consume, *fanin, *step;
} progs_t;

static void make_progs(hcq_device_t *d, progs_t *p) {
  CHECK(hcq_program_create_fn(d, "produce", k_produce, &p->produce));
  CHECK(hcq_program_create_fn(d, "consume", k_consume, &p->consume));
  CHECK(hcq_program_create_fn(d, "fanin", k_fanin2, &p->fanin));
  CHECK(hcq_program_create_fn(d, "step", k_step, &p->step));
}

static void free_progs(progs_t *p) {
  hcq_program_release(p->produce), hcq_program_release(p->consume);
  hcq_program_release(p->fanin), hcq_program_release(p->step);
}

static hcq_buffer_t *buf(hcq_device_t *d, uint64_t bytes, hcq_buffer_t **pool, size_t *npool) {
  hcq_buffer_t *b;
  CHECK(hcq_buffer_create(d, bytes, &b));
  pool[(*npool)++] = b;
  return b;
}

static hcq_buffer_t *view(hcq_buffer_t *base, uint64_t off, hcq_buffer_t **pool, size_t *npool) {
  hcq_buffer_t *b;
  CHECK(hcq_buffer_view_create(base, off, 4, &b));
  pool[(*npool)++] = b;
  return b;
}

/* Median time of one replay, submit to completion. */
static double time_graph(hcq_graph_t *g) {
  double *t = malloc((size_t)g_replays * sizeof(double));
  for (int r = 0; r < 20; r++) CHECK(hcq_graph_run(g, NULL, 0, NULL, 0, true, NULL));
  for (int r = 0; r < g_replays; r++) {
    double t0 = bench_now_s();
    CHECK(hcq_graph_run(g, NULL, 0, NULL, 0, true, NULL));
    t[r] = bench_now_s() - t0;
  }
  double m = bench_median(t, g_replays);
  free(t);
  return m * 1e6;
}

/* The cost of profiling: the same items built into a graph while the profiler records (a start and
 * end timestamp per item on the device, one slice per item read back per replay), against the
 * unprofiled replay measured just before. Two rows in their own section, the unprofiled one the
 * baseline. */
static void profiled_rows(const char *dag, const hcq_exec_item_t *items, size_t n,
                          double unprofiled_us) {
  char section[128], note[160];
  snprintf(section, sizeof(section), "profiling: %s", dag);
  CHECK(hcq_trace_start(NULL));
  hcq_graph_t *g;
  CHECK(hcq_graph_create(items, n, NULL, 0, NULL, 0, NULL, &g));
  double us = time_graph(g);
  CHECK(hcq_graph_destroy(g));
  hcq_trace_stats_t stats;
  hcq_trace_stats(&stats);
  hcq_trace_stop();
  emit_row(section, "hcq graph replay, unprofiled", unprofiled_us, "us", "the replay above");
  snprintf(note, sizeof(note),
           "%.2fx the unprofiled replay; profiler on (hcq_trace_start), %llu slices recorded",
           us / unprofiled_us, (unsigned long long)(stats.slices + stats.dropped));
  if (stats.slices == 0)
    fprintf(stderr, "dag_hcq: the profiled replays recorded nothing\n"), exit(1);
  emit_row(section, "hcq graph replay, profiled", us, "us", note);
}

/* ---- hand-written baselines: two threads handing off through spinning on shared words ---- */
typedef struct spin_pipe {
  _Alignas(64) _Atomic int64_t go;    /* replay number the worker should run */
  _Alignas(64) _Atomic int64_t done1; /* the worker's part of the fan-out finished for replay n */
  _Alignas(64) _Atomic int64_t token; /* chain: index of the next kernel to run */
  _Alignas(64) _Atomic bool stop;
  int dag; /* 0 fan-out/fan-in, 1 chain */
  _Alignas(64) int32_t p, r[DAG_FAN], out, x;
  pthread_t thread;
} spin_pipe_t;

static inline void cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

static void *spin_worker(void *arg) {
  spin_pipe_t *s = arg;
  int64_t seen = 0;
  for (;;) {
    int64_t g;
    while ((g = atomic_load_explicit(&s->go, memory_order_acquire)) == seen) {
      if (atomic_load_explicit(&s->stop, memory_order_relaxed)) return NULL;
      cpu_relax();
    }
    seen = g;
    if (s->dag == 0) {
      for (int i = DAG_FAN / 2; i < DAG_FAN; i++) dag_consume(&s->r[i], &s->p, i);
      atomic_store_explicit(&s->done1, g, memory_order_release);
    } else {
      for (int64_t k = 1; k < DAG_CHAIN; k += 2) {
        while (atomic_load_explicit(&s->token, memory_order_acquire) != k) cpu_relax();
        dag_step(&s->x, &s->x);
        atomic_store_explicit(&s->token, k + 1, memory_order_release);
      }
    }
  }
}

/* One replay on the calling thread (thread 0) with the worker: producer, half the consumers and
 * the fan-in here, the other half there; or the even kernels of the chain here, the odd there. */
static void spin_replay(spin_pipe_t *s, int64_t n) {
  if (s->dag == 0) {
    dag_produce(&s->p);
    atomic_store_explicit(&s->go, n, memory_order_release); /* p is visible to the worker */
    for (int i = 0; i < DAG_FAN / 2; i++) dag_consume(&s->r[i], &s->p, i);
    while (atomic_load_explicit(&s->done1, memory_order_acquire) != n) cpu_relax();
    dag_fanin(&s->out, s->r, DAG_FAN);
  } else {
    atomic_store_explicit(&s->token, 0, memory_order_relaxed);
    atomic_store_explicit(&s->go, n, memory_order_release);
    for (int64_t k = 0; k < DAG_CHAIN; k += 2) {
      while (atomic_load_explicit(&s->token, memory_order_acquire) != k) cpu_relax();
      dag_step(&s->x, &s->x);
      atomic_store_explicit(&s->token, k + 1, memory_order_release);
    }
    while (atomic_load_explicit(&s->token, memory_order_acquire) != DAG_CHAIN) cpu_relax();
  }
}

static double time_spin(int dag) {
  spin_pipe_t *s = aligned_alloc(64, sizeof(spin_pipe_t));
  memset(s, 0, sizeof(*s));
  s->dag = dag;
  pthread_create(&s->thread, NULL, spin_worker, s);
  double *t = malloc((size_t)g_replays * sizeof(double));
  int64_t n = 0;
  for (int r = 0; r < 20; r++) spin_replay(s, ++n);
  for (int r = 0; r < g_replays; r++) {
    double t0 = bench_now_s();
    spin_replay(s, ++n);
    t[r] = bench_now_s() - t0;
  }
  atomic_store(&s->stop, true);
  pthread_join(s->thread, NULL);
  double m = bench_median(t, g_replays);
  free(t);
  free(s);
  return m * 1e6;
}

/* The one-device DAGs as a plain loop of the same kernels through function pointers. */
static double time_loop(int dag) {
  void (*volatile step)(void *const *, const int32_t *, const hcq_launch_t *) = k_step;
  void (*volatile consume)(void *const *, const int32_t *, const hcq_launch_t *) = k_consume;
  int32_t p = 1, r[DAG_FAN], out = 0, x = 0, idx;
  hcq_launch_t l = {{0, 0, 0}, {1, 1, 1}, {1, 1, 1}};
  double *t = malloc((size_t)g_replays * sizeof(double));
  for (int rep = -20; rep < g_replays; rep++) {
    double t0 = bench_now_s();
    if (dag == 0) {
      dag_produce(&p);
      for (int i = 0; i < DAG_FAN; i++) {
        void *b[2] = {&r[i], &p};
        idx = i;
        consume(b, &idx, &l);
      }
      dag_fanin(&out, r, DAG_FAN);
    } else {
      void *b[2] = {&x, &x};
      for (int k = 0; k < DAG_CHAIN; k++) step(b, NULL, &l);
    }
    if (rep >= 0) t[rep] = bench_now_s() - t0;
  }
  double m = bench_median(t, g_replays);
  free(t);
  return m * 1e6;
}

static double process_cpu_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* The hand-written baselines' times (us) and the rows' DAG names. */
typedef struct baselines {
  double spin_fan, spin_chain, loop_fan, loop_chain;
} baselines_t;

static const char *const k_fan2 = "fan-out/fan-in 1->64->1, CPU:0+CPU:1",
                         *const k_chain2 = "chain of 1000, alternating CPU:0/CPU:1";
static const char *const k_fan1 = "fan-out/fan-in 1->64->1, one device",
                         *const k_chain1 = "chain of 1000, one device";

/* What the graph phases share: the builder and the buffers made so far (released at the end). */
typedef struct run {
  builder_t *b;
  hcq_buffer_t *pool[4 * DAG_CHAIN];
  size_t npool;
  baselines_t base;
} run_t;

/* Baselines first, while no hcq device thread exists. */
static baselines_t baseline_rows(void) {
  baselines_t base;
  base.spin_fan = time_spin(0);
  base.spin_chain = time_spin(1);
  base.loop_fan = time_loop(0);
  base.loop_chain = time_loop(1);
  emit_row(k_fan2, "hand-written 2-thread spin pipeline", base.spin_fan, "us",
           "same kernels; hand-off by spinning on a shared word");
  emit_row(k_chain2, "hand-written 2-thread spin pipeline", base.spin_chain, "us",
           "999 cross-core hand-offs");
  emit_row(k_fan1, "plain C loop, one thread", base.loop_fan, "us",
           "same kernels through function pointers");
  emit_row(k_chain1, "plain C loop, one thread", base.loop_chain, "us",
           "same kernels through function pointers");
  return base;
}

/* Times the graph of the builder's items and emits its rows; the graph is the caller's. */
static hcq_graph_t *graph_rows(run_t *r, const char *dag, const char *what, double baseline,
                               const char *against) {
  builder_t *b = r->b;
  hcq_graph_t *g;
  char note[200];
  CHECK(hcq_graph_create(b->items, b->n, NULL, 0, NULL, 0, NULL, &g));
  double us = time_graph(g);
  snprintf(note, sizeof(note), "%zu items%s; %.1fx the %s", b->n, what, us / baseline, against);
  emit_row(dag, "hcq graph replay", us, "us", note);
  profiled_rows(dag, b->items, b->n, us);
  return g;
}

/* One device: 66 items. */
static hcq_graph_t *fan_one_device(run_t *r, hcq_device_t *d0, const progs_t *p0) {
  builder_t *b = r->b;
  hcq_buffer_t *pa = buf(d0, 4, r->pool, &r->npool),
               *res = buf(d0, 4 * DAG_FAN, r->pool, &r->npool);
  hcq_buffer_t *out = buf(d0, 4, r->pool, &r->npool), *empty = buf(d0, 4, r->pool, &r->npool);
  b->n = 0;
  kernel(b, p0->produce, pa, NULL, NULL, 0);
  for (int i = 0; i < DAG_FAN; i++)
    kernel(b, p0->consume, view(res, 4 * (uint64_t)i, r->pool, &r->npool), pa, NULL, i);
  kernel(b, p0->fanin, out, res, empty, DAG_FAN);
  return graph_rows(r, k_fan1, "", r->base.loop_fan, "plain loop");
}

/* One device: a 1000-kernel chain. */
static void chain_one_device(run_t *r, hcq_device_t *d0, const progs_t *p0) {
  builder_t *b = r->b;
  hcq_buffer_t *x = buf(d0, 4, r->pool, &r->npool);
  b->n = 0;
  for (int k = 0; k < DAG_CHAIN; k++) kernel(b, p0->step, x, x, NULL, 0);
  CHECK(hcq_graph_destroy(graph_rows(r, k_chain1, "", r->base.loop_chain, "plain loop")));
}

/* Back-to-back asynchronous replays: what the host pays per call. */
static void async_host_row(hcq_device_t *d0, hcq_graph_t *fan_one) {
  enum { N = 200 };
  double t[N];
  CHECK(hcq_device_synchronize(d0));
  for (int r = 0; r < N; r++) {
    double t0 = bench_now_s();
    CHECK(hcq_graph_run(fan_one, NULL, 0, NULL, 0, false, NULL));
    t[r] = bench_now_s() - t0;
  }
  CHECK(hcq_device_synchronize(d0));
  emit_row(k_fan1, "hcq: host time per back-to-back wait=false replay", bench_median(t, N) * 1e6,
           "us", "no wait between calls: replays queue while earlier ones run");
}

/* 68 items: produce on CPU:0, copy p over, 32 consumers on each device, results copied back,
 * fan-in. */
static void fan_two_devices(run_t *r, hcq_device_t *const d[2], const progs_t p[2]) {
  builder_t *b = r->b;
  hcq_buffer_t **pool = r->pool;
  size_t *npool = &r->npool;
  hcq_buffer_t *pa = buf(d[0], 4, pool, npool), *pb = buf(d[1], 4, pool, npool);
  hcq_buffer_t *ra = buf(d[0], 4 * DAG_FAN / 2, pool, npool),
               *rb = buf(d[1], 4 * DAG_FAN / 2, pool, npool);
  hcq_buffer_t *rb0 = buf(d[0], 4 * DAG_FAN / 2, pool, npool), *out = buf(d[0], 4, pool, npool);
  b->n = 0;
  kernel(b, p[0].produce, pa, NULL, NULL, 0);
  copy(b, pb, pa);
  for (int i = 0; i < DAG_FAN / 2; i++)
    kernel(b, p[1].consume, view(rb, 4 * (uint64_t)i, pool, npool), pb, NULL, i);
  for (int i = 0; i < DAG_FAN / 2; i++)
    kernel(b, p[0].consume, view(ra, 4 * (uint64_t)i, pool, npool), pa, NULL, i);
  copy(b, rb0, rb);
  kernel(b, p[0].fanin, out, ra, rb0, DAG_FAN / 2);
  CHECK(hcq_graph_destroy(
      graph_rows(r, k_fan2, " (66 kernels, 2 copies)", r->base.spin_fan, "spin pipeline")));
}

/* 1000 kernels alternating devices, a 4-byte copy between each. */
static void chain_two_devices(run_t *r, hcq_device_t *const d[2], const progs_t p[2]) {
  builder_t *b = r->b;
  hcq_buffer_t *a[2] = {buf(d[0], 4, r->pool, &r->npool), buf(d[1], 4, r->pool, &r->npool)};
  hcq_buffer_t *in[2] = {buf(d[0], 4, r->pool, &r->npool), buf(d[1], 4, r->pool, &r->npool)};
  b->n = 0;
  for (int k = 0; k < DAG_CHAIN; k++) {
    int i = k % 2;
    kernel(b, p[i].step, a[i], in[i], NULL, 0);
    if (k + 1 < DAG_CHAIN) copy(b, in[1 - i], a[i]);
  }
  CHECK(hcq_graph_destroy(
      graph_rows(r, k_chain2, " (1000 kernels, 999 copies)", r->base.spin_chain, "spin pipeline")));
}

/* Idle: two open devices, nothing queued, for one second (after the workers' spin budget). */
static void idle_row(void) {
  usleep(100000);
  double c0 = process_cpu_s();
  usleep(1000000);
  emit_row("idle process", "hcq: CPU time burnt per second with CPU:0 and CPU:1 open",
           (process_cpu_s() - c0) * 1e3, "ms",
           "engines and helpers sleep on futexes once their spin budget is spent");
}

int main(int argc, char **argv) {
  if (argc > 1) g_replays = atoi(argv[1]);
  if (g_replays < 1) return 2;
  /* As hcq_bench: workers spin for 1 ms before they sleep, so that a sample does not depend on
   * whether a thread happened to fall asleep. HCQ_SPIN_NS set by the caller wins. */
  setenv("HCQ_SPIN_NS", "1000000", 0);
  static run_t r;
  r.base = baseline_rows();
  /* One-device DAGs with only CPU:0 open, then CPU:1 joins for the two-device ones. */
  hcq_device_t *d[2];
  progs_t p[2];
  CHECK(hcq_device_open("CPU:0", &d[0]));
  make_progs(d[0], &p[0]);
  r.b = calloc(1, sizeof(*r.b));
  hcq_graph_t *fan_one = fan_one_device(&r, d[0], &p[0]);
  chain_one_device(&r, d[0], &p[0]);
  async_host_row(d[0], fan_one);
  CHECK(hcq_device_open("CPU:1", &d[1]));
  make_progs(d[1], &p[1]);
  fan_two_devices(&r, d, p);
  chain_two_devices(&r, d, p);
  CHECK(hcq_graph_destroy(fan_one));
  for (size_t i = r.npool; i-- > 0;) hcq_buffer_release(r.pool[i]);
  free(r.b);
  free_progs(&p[0]);
  free_progs(&p[1]);
  idle_row();
  CHECK(hcq_device_close(d[1]));
  CHECK(hcq_device_close(d[0]));
  return 0;
}
