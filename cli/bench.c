/* hcq bench FILE: eager execution against graph replay of the same file, medians after warm-up. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli/cli.h"
#include "model_status.h"
#include "model_time.h"

static double now_us(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1e6 + ts.tv_nsec / 1e3;
}

static double median(double *v, size_t n) {
  qsort(v, n, sizeof(double), hcq_model_cmp_double);
  return v[n / 2];
}

#define MAX_REPS 201
#define BUDGET_US 400000.0 /* per measurement */

typedef struct sample {
  double v[MAX_REPS];
  size_t n;
} sample_t;

/* Runs run 0 of the file through jit: submit, then (when done) wait. */
static hcq_status_t one(hcq_jit_t *jit, const hcq_graph_file_t *gf, double *submit_us,
                        double *total_us) {
  hcq_buffer_t *const *inputs;
  const hcq_var_value_t *vals;
  hcq_graph_file_run(gf, 0, &inputs, &vals);
  TRY(cli_sync_file(gf));
  double t0 = now_us();
  TRY(hcq_jit_run(jit, inputs, hcq_graph_file_input_count(gf), vals, hcq_graph_file_var_count(gf),
                  false, NULL));
  double t1 = now_us();
  TRY(cli_sync_file(gf));
  *submit_us = t1 - t0;
  *total_us = now_us() - t0;
  return NULL;
}

static hcq_status_t measure(hcq_jit_t *jit, const hcq_graph_file_t *gf, sample_t *submit,
                            sample_t *total) {
  double s, t, spent = 0;
  for (int warm = 0; warm < 3; warm++) TRY(one(jit, gf, &s, &t));
  submit->n = total->n = 0;
  while (total->n < MAX_REPS && (total->n < 5 || spent < BUDGET_US)) {
    TRY(one(jit, gf, &s, &t));
    submit->v[submit->n++] = s;
    total->v[total->n++] = t;
    spent += t;
  }
  return NULL;
}

/* Driver parameter updates of the jit's graphs (CUDA graphs count them; others report 0). */
static void graph_updates(const hcq_jit_t *jit, uint64_t *replays, uint64_t *updates,
                          const char **kind) {
  *replays = *updates = 0;
  for (size_t i = 0; i < hcq_jit_graph_count(jit); i++) {
    hcq_graph_stats_t st;
    hcq_graph_stats(hcq_jit_graph(jit, i), &st);
    *replays += st.replays;
    *updates += st.total_updates;
    if (i == 0) *kind = hcq_graph_kind(hcq_jit_graph(jit, i));
  }
}

/* Replays alternating the file's first two runs: how many parameter updates a replay whose inputs
 * or values change costs (per replay). */
static hcq_status_t alternating_updates(hcq_jit_t *jit, const hcq_graph_file_t *gf, double *out) {
  size_t runs = hcq_graph_file_run_count(gf);
  uint64_t r0, u0, r1, u1;
  const char *kind = "";
  graph_updates(jit, &r0, &u0, &kind);
  for (int i = 1; i <= 10; i++) {
    hcq_buffer_t *const *inputs;
    const hcq_var_value_t *vals;
    hcq_graph_file_run(gf, i % 2 && runs > 1 ? 1 : 0, &inputs, &vals);
    TRY(hcq_jit_run(jit, inputs, hcq_graph_file_input_count(gf), vals, hcq_graph_file_var_count(gf),
                    true, NULL));
  }
  graph_updates(jit, &r1, &u1, &kind);
  *out = hcq_jit_graph_count(jit) && r1 > r0
             ? (double)(u1 - u0) * (double)hcq_jit_graph_count(jit) / (double)(r1 - r0)
             : 0;
  return NULL;
}

typedef struct bench_args {
  const char *file, *device_map;
  bool json;
} bench_args_t;

/* -1 when the arguments parse, else the exit status. */
static int parse_args(int argc, char **argv, bench_args_t *a) {
  *a = (bench_args_t){0};
  for (int i = 0; i < argc; i++) {
    if (!strcmp(argv[i], "--device-map")) {
      if (i + 1 >= argc) return cli_usage_error("--device-map needs a map such as CPU=CUDA");
      a->device_map = argv[++i];
    } else if (!strcmp(argv[i], "--json"))
      a->json = true;
    else if (argv[i][0] == '-' && argv[i][1])
      return cli_usage_error("unknown option \"%s\" for bench", argv[i]);
    else if (!a->file)
      a->file = argv[i];
    else
      return cli_usage_error("bench takes one graph file");
  }
  if (!a->file) return cli_usage_error("usage: hcq bench FILE [--json] [--device-map CPU=CUDA]");
  return -1;
}

/* The measurements: eager and replayed runs, the graphs' parameter updates before and after. */
typedef struct bench_result {
  size_t n; /* the file's items */
  sample_t es, et, gs, gt;
  uint64_t r0, u0, r1, u1;
  const char *kind;
  double alternating;
} bench_result_t;

/* The file's items through a jit that runs them eagerly and one that captures them. */
static hcq_status_t make_jits(const hcq_graph_file_t *gf, hcq_jit_t **eager, hcq_jit_t **graph) {
  hcq_jit_options_t eager_opts = {.eager_only = true};
  size_t n = hcq_graph_file_item_count(gf);
  TRY(hcq_jit_create(hcq_graph_file_items(gf), n, hcq_graph_file_inputs(gf),
                     hcq_graph_file_input_count(gf), hcq_graph_file_vars(gf),
                     hcq_graph_file_var_count(gf), &eager_opts, eager));
  return hcq_jit_create(hcq_graph_file_items(gf), n, hcq_graph_file_inputs(gf),
                        hcq_graph_file_input_count(gf), hcq_graph_file_vars(gf),
                        hcq_graph_file_var_count(gf), NULL, graph);
}

static hcq_status_t run_bench(hcq_jit_t *eager, hcq_jit_t *graph, const hcq_graph_file_t *gf,
                              bench_result_t *r) {
  r->n = hcq_graph_file_item_count(gf);
  r->kind = "none";
  TRY(measure(eager, gf, &r->es, &r->et));
  graph_updates(graph, &r->r0, &r->u0, &r->kind);
  TRY(measure(graph, gf, &r->gs, &r->gt));
  graph_updates(graph, &r->r1, &r->u1, &r->kind);
  return alternating_updates(graph, gf, &r->alternating);
}

static void print_result(const bench_args_t *a, const hcq_jit_t *graph, bench_result_t *r) {
  size_t n = r->n, ngraphs = hcq_jit_graph_count(graph);
  double per_replay = ngraphs && r->r1 > r->r0
                          ? (double)(r->u1 - r->u0) * (double)ngraphs / (double)(r->r1 - r->r0)
                          : 0;
  double eager_us = median(r->et.v, r->et.n), graph_us = median(r->gt.v, r->gt.n),
         submit_us = median(r->gs.v, r->gs.n);
  const hcq_jit_report_t *rep = hcq_jit_report(graph);
  if (a->json) {
    printf(
        "{\"items\": %zu, \"eager_us_per_run\": %.3f, \"graph_us_per_run\": %.3f, "
        "\"graph_submit_us\": %.3f, "
        "\"per_item_graph_ns\": %.3f, \"per_item_eager_ns\": %.3f, \"speedup\": %.3f, "
        "\"graphs\": %zu, "
        "\"eager_items\": %zu, \"repetitions\": %zu, \"graph_kind\": \"%s\", "
        "\"graph_updates_per_replay\": %.3f, "
        "\"graph_updates_alternating_runs\": %.3f}\n",
        n, eager_us, graph_us, submit_us, graph_us * 1e3 / (double)n, eager_us * 1e3 / (double)n,
        graph_us > 0 ? eager_us / graph_us : 0.0, rep->batches, rep->eager_items, r->gt.n, r->kind,
        per_replay, r->alternating);
    return;
  }
  printf("%s: %zu items (%zu graphs, %zu eager items), medians after warm-up\n", a->file, n,
         rep->batches, rep->eager_items);
  printf("  eager, one run to completion   %12.3f us  (%8.1f ns per item)\n", eager_us,
         eager_us * 1e3 / (double)n);
  printf("  graph, one replay to completion %11.3f us  (%8.1f ns per item)\n", graph_us,
         graph_us * 1e3 / (double)n);
  printf("  graph, submit alone            %12.3f us\n", submit_us);
  printf("  speedup                        %12.2f x\n", graph_us > 0 ? eager_us / graph_us : 0.0);
  /* Only a backend's own graph runner (the CUDA graph, the Metal graph) updates driver
   * parameters; the HCQ graph patches its own words. */
  if (strcmp(r->kind, "hcq") && strcmp(r->kind, "none"))
    printf("  graph kind %s: %.2f parameter updates per unchanged replay, %.2f alternating runs\n",
           r->kind, per_replay, r->alternating);
}

int cli_bench(int argc, char **argv) {
  bench_args_t a;
  int rc = parse_args(argc, argv, &a);
  if (rc >= 0) return rc;
  hcq_graph_file_t *gf = NULL;
  hcq_jit_t *eager = NULL, *graph = NULL;
  hcq_graph_file_options_t fo = {.device_map = a.device_map};
  static bench_result_t r;
  hcq_status_t st;
  if ((st = hcq_graph_file_load(a.file, &fo, &gf))) goto done;
  if ((st = make_jits(gf, &eager, &graph))) goto done;
  if ((st = run_bench(eager, graph, gf, &r))) goto done;
  print_result(&a, graph, &r);
done:
  rc = st ? cli_fail(st) : HCQ_EXIT_OK; /* before the teardown, which may wait again */
  if (eager) hcq_status_destroy(hcq_jit_destroy(eager));
  if (graph) hcq_status_destroy(hcq_jit_destroy(graph));
  if (gf) {
    hcq_status_destroy(cli_sync_file(gf));
    hcq_graph_file_destroy(gf);
  }
  return rc;
}
