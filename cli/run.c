/* hcq run FILE: the file's runs as graph replays (or eagerly), optionally checked against eager
 * execution, profiled, and written out. */
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "cli/cli.h"
#include "model_status.h"
#include "model_time.h"

typedef struct run_args {
  const char *file, *device_map, *out;
  bool graph, check;
  unsigned long long repeat;
  cli_observe_t obs;
} run_args_t;

static int parse_args(int argc, char **argv, run_args_t *a) {
  memset(a, 0, sizeof(*a));
  a->graph = true;
  a->repeat = 1;
  for (int i = 0; i < argc; i++) {
    const char *arg = argv[i];
    bool has_value = i + 1 < argc;
    if (!strcmp(arg, "--check")) {
      a->check = true;
    } else if (!strcmp(arg, "--mode")) {
      if (!has_value) return cli_usage_error("--mode needs graph or eager");
      const char *m = argv[++i];
      if (!strcmp(m, "graph"))
        a->graph = true;
      else if (!strcmp(m, "eager"))
        a->graph = false;
      else
        return cli_usage_error("--mode must be graph or eager, not \"%s\"", m);
    } else if (!strcmp(arg, "--repeat")) {
      if (!has_value || !cli_parse_uint(argv[i + 1], 1, 1000000000, &a->repeat))
        return cli_usage_error("--repeat needs a whole number from 1 to 1000000000");
      i++;
    } else if (!strcmp(arg, "--profile")) {
      if (!has_value) return cli_usage_error("--profile needs an output file");
      a->obs.profile = argv[++i];
    } else if (!strcmp(arg, "--profile-svg")) {
      if (!has_value) return cli_usage_error("--profile-svg needs an output file");
      a->obs.profile_svg = argv[++i];
    } else if (!strcmp(arg, "--dot")) {
      if (!has_value) return cli_usage_error("--dot needs an output file");
      a->obs.dot = argv[++i];
    } else if (!strcmp(arg, "-v") || !strcmp(arg, "--verbose")) {
      a->obs.verbose = true;
    } else if (!strcmp(arg, "--device-map")) {
      if (!has_value) return cli_usage_error("--device-map needs a map such as CPU=CUDA");
      a->device_map = argv[++i];
    } else if (!strcmp(arg, "--out")) {
      if (!has_value) return cli_usage_error("--out needs a directory");
      a->out = argv[++i];
    } else if (arg[0] == '-' && arg[1]) {
      return cli_usage_error("unknown option \"%s\" for run", arg);
    } else if (!a->file) {
      a->file = arg;
    } else {
      return cli_usage_error("run takes one graph file (got \"%s\" and \"%s\")", a->file, arg);
    }
  }
  if (!a->file)
    return cli_usage_error(
        "usage: hcq run FILE [--mode graph|eager] [--check] [--profile OUT.json] "
        "[--profile-svg OUT.svg] [--dot OUT.dot] [-v] [--device-map CPU=CUDA] "
        "[--repeat N] [--out DIR]");
  if (a->obs.profile && !a->graph)
    return cli_usage_error("--profile records graph replays: it needs --mode graph");
  if (a->obs.profile_svg && !a->graph)
    return cli_usage_error("--profile-svg draws graph replays: it needs --mode graph");
  if (a->obs.dot && !a->graph)
    return cli_usage_error("--dot draws the built graphs: it needs --mode graph");
  /* DIR/NAME.bin must fit PATH_MAX for the longest name (64 bytes): checked before anything runs.
   */
  if (a->out && strlen(a->out) + 1 + 64 + 4 >= PATH_MAX)
    return cli_usage_error(
        "--out \"%.80s...\" is too long: %zu bytes, the limit for a folder is %d", a->out,
        strlen(a->out), PATH_MAX - 1 - 1 - 64 - 4);
  return -1;
}

/* A loaded file with the replayable object that runs it. */
typedef struct world {
  hcq_graph_file_t *gf;
  hcq_jit_t *jit;
} world_t;

static hcq_status_t world_open(world_t *w, const run_args_t *a, bool graph, bool profile) {
  memset(w, 0, sizeof(*w));
  hcq_graph_file_options_t fo = {.device_map = a->device_map};
  hcq_status_t st = hcq_graph_file_load(a->file, &fo, &w->gf);
  if (st) return st;
  hcq_jit_options_t jo = {.profile = profile, .eager_only = !graph};
  const hcq_graph_file_t *gf = w->gf;
  return hcq_jit_create(hcq_graph_file_items(gf), hcq_graph_file_item_count(gf),
                        hcq_graph_file_inputs(gf), hcq_graph_file_input_count(gf),
                        hcq_graph_file_vars(gf), hcq_graph_file_var_count(gf), &jo, &w->jit);
}

static void world_close(world_t *w) {
  if (w->jit) hcq_status_destroy(hcq_jit_destroy(w->jit));
  if (w->gf) {
    hcq_status_destroy(cli_sync_file(w->gf));
    hcq_graph_file_destroy(w->gf);
  }
}

static hcq_status_t world_run(world_t *w, size_t r) {
  hcq_buffer_t *const *inputs;
  const hcq_var_value_t *vals;
  hcq_graph_file_run(w->gf, r, &inputs, &vals);
  return hcq_jit_run(w->jit, inputs, hcq_graph_file_input_count(w->gf), vals,
                     hcq_graph_file_var_count(w->gf), false, NULL);
}

/* First differing byte of two buffers of the same size, or -1. */
static hcq_status_t first_difference(hcq_buffer_t *a, hcq_buffer_t *b, int64_t *out) {
  uint64_t size = hcq_buffer_size(a);
  uint8_t *x = malloc(size), *y = malloc(size);
  hcq_status_t st = NULL;
  *out = -1;
  if (!x || !y) {
    st = hcq_status_make(HCQ_OUT_OF_MEMORY, "out of memory comparing buffers");
    goto done;
  }
  if ((st = cli_mpi_fetch(a, x, size))) goto done;
  if ((st = cli_mpi_fetch(b, y, size))) goto done;
  for (uint64_t i = 0; cli_mpi_rank() == 0 && i < size; i++)
    if (x[i] != y[i]) {
      *out = (int64_t)i;
      break;
    }
done:
  free(x);
  free(y);
  return st;
}

static hcq_status_t write_file(const char *path, const uint8_t *data, uint64_t size) {
  FILE *f = fopen(path, "wb");
  if (!f || fwrite(data, 1, size, f) != size) {
    hcq_status_t st =
        hcq_status_make(HCQ_UNAVAILABLE, "cannot write %s: %s", path, strerror(errno));
    if (f) fclose(f);
    return st;
  }
  if (fclose(f) != 0) return hcq_status_make(HCQ_UNAVAILABLE, "cannot write %s", path);
  return NULL;
}

/* Buffer i as DIR/NAME.bin: rank 0 writes every buffer (fetched from its rank). */
static hcq_status_t write_buffer(const hcq_graph_file_t *gf, size_t i, const char *dir) {
  hcq_buffer_t *b = hcq_graph_file_buffer(gf, i);
  uint64_t size = hcq_buffer_size(b);
  uint8_t *data = malloc(size);
  if (!data)
    return hcq_status_make(HCQ_OUT_OF_MEMORY, "out of memory writing %s",
                           hcq_graph_file_buffer_name(gf, i));
  char path[PATH_MAX]; /* parse_args checked that it fits */
  snprintf(path, sizeof(path), "%s/%s.bin", dir, hcq_graph_file_buffer_name(gf, i));
  hcq_status_t st;
  if ((st = cli_mpi_fetch(b, data, size)) || cli_mpi_rank() != 0) goto done;
  st = write_file(path, data, size);
done:
  free(data);
  return st;
}

static hcq_status_t write_outputs(const hcq_graph_file_t *gf, const char *dir) {
  if (cli_mpi_rank() == 0 && mkdir(dir, 0755) != 0 && errno != EEXIST)
    return hcq_status_make(HCQ_UNAVAILABLE, "cannot create %s: %s", dir, strerror(errno));
  for (size_t i = 0; i < hcq_graph_file_buffer_count(gf); i++) TRY(write_buffer(gf, i, dir));
  return NULL;
}

/* After the runs: the observer's files, then --out's buffers. */
static hcq_status_t finish(const run_args_t *a, const world_t *w) {
  TRY(cli_observe_finish(&a->obs, w->jit, w->gf));
  if (a->out) TRY(write_outputs(w->gf, a->out));
  return NULL;
}

/* Every run --repeat times, waited for, and the time they took. */
static hcq_status_t time_runs(world_t *w, const run_args_t *a) {
  size_t runs = hcq_graph_file_run_count(w->gf);
  double t0 = hcq_model_now_ms();
  for (size_t r = 0; r < runs; r++)
    for (unsigned long long k = 0; k < a->repeat; k++) TRY(world_run(w, r));
  TRY(cli_sync_file(w->gf));
  double t1 = hcq_model_now_ms();
  printf("%s: %zu run%s x %llu of %zu items (%s) in %.3f ms\n", a->file, runs, runs == 1 ? "" : "s",
         a->repeat, hcq_graph_file_item_count(w->gf), a->graph ? "graph" : "eager", t1 - t0);
  if (a->graph) printf("%s", hcq_jit_report(w->jit)->text);
  return NULL;
}

static int run_plain(const run_args_t *a) {
  world_t w;
  int rc;
  /* Profiled: the runs, not the loading (the graphs are built while the profiler is paused). */
  hcq_status_t st = cli_observe_start(&a->obs, true);
  if (st) return cli_fail(st);
  st = world_open(&w, a, a->graph, a->obs.profile || a->obs.profile_svg);
  hcq_trace_pause(false);
  if (st) goto done;
  if ((st = time_runs(&w, a))) goto done;
  st = finish(a, &w);
done:
  /* Said before the teardown, which may wait for the devices again. */
  rc = st ? cli_fail(st) : HCQ_EXIT_OK;
  world_close(&w);
  cli_observe_abort(&a->obs);
  return rc;
}

/* Run r (repeat k) of both copies, every buffer compared: its line, ok or MISMATCH. */
static hcq_status_t check_run(world_t *truth, world_t *graph, const run_args_t *a, size_t r,
                              unsigned long long k, size_t *failed) {
  TRY(world_run(truth, r));
  hcq_trace_pause(false);
  hcq_status_t st = world_run(graph, r);
  hcq_trace_pause(true);
  if (st) return st;
  const char *bad = NULL;
  int64_t at = -1;
  /* Under MPI every rank takes part in every buffer's fetch: only rank 0 knows where they
   * differ. */
  for (size_t b = 0; b < hcq_graph_file_buffer_count(graph->gf) && (at < 0 || cli_mpi_on()); b++) {
    int64_t here = -1;
    TRY(first_difference(hcq_graph_file_buffer(graph->gf, b), hcq_graph_file_buffer(truth->gf, b),
                         &here));
    if (here >= 0 && at < 0) at = here, bad = hcq_graph_file_buffer_name(graph->gf, b);
  }
  char label[64];
  if (a->repeat > 1)
    snprintf(label, sizeof(label), "run %zu (repeat %llu)", r, k + 1);
  else
    snprintf(label, sizeof(label), "run %zu", r);
  if (at < 0) {
    printf("%s: ok\n", label);
  } else {
    ++*failed;
    printf("%s: MISMATCH in buffer \"%s\" at byte %" PRId64 "\n", label, bad, at);
  }
  return NULL;
}

static hcq_status_t check_runs(world_t *truth, world_t *graph, const run_args_t *a,
                               size_t *failed) {
  size_t runs = hcq_graph_file_run_count(truth->gf), checked = 0;
  for (size_t r = 0; r < runs; r++)
    for (unsigned long long k = 0; k < a->repeat; k++, checked++)
      TRY(check_run(truth, graph, a, r, k, failed));
  printf("%zu passed, %zu failed\n", checked - *failed, *failed);
  return NULL;
}

/* The eager copy, then the graph copy: only its runs are profiled (the profiler is paused for
 * everything else). */
static hcq_status_t open_worlds(world_t *truth, world_t *graph, const run_args_t *a) {
  TRY(world_open(truth, a, false, false));
  TRY(cli_observe_start(&a->obs, true));
  return world_open(graph, a, a->graph, a->obs.profile || a->obs.profile_svg);
}

/* The sequence twice from the initial contents: eagerly (ground truth) and as graph replays,
 * every buffer compared after each run. */
static int run_check(const run_args_t *a) {
  world_t truth, graph;
  memset(&graph, 0, sizeof(graph));
  size_t failed = 0;
  int rc;
  hcq_status_t st;
  if ((st = open_worlds(&truth, &graph, a))) goto done;
  if ((st = check_runs(&truth, &graph, a, &failed))) goto done;
  st = finish(a, &graph);
done:
  rc = st ? cli_fail(st) : failed ? HCQ_EXIT_CHECK_MISMATCH : HCQ_EXIT_OK; /* before the teardown */
  world_close(&graph);
  world_close(&truth);
  cli_observe_abort(&a->obs);
  return rc;
}

/* Whether path (a folder when dir) could be written: it exists as such and is writable, or it does
 * not exist and its folder is. Said before the runs rather than after them. */
static hcq_status_t check_output(const char *path, bool dir) {
  const char *verb = dir ? "cannot create" : "cannot write";
  struct stat sb;
  if (stat(path, &sb) == 0) {
    if (dir != S_ISDIR(sb.st_mode))
      return hcq_status_make(HCQ_UNAVAILABLE, "%s %s: %s", verb, path,
                             dir ? "it is not a folder" : "it is a folder");
    if (access(path, dir ? W_OK | X_OK : W_OK) != 0)
      return hcq_status_make(HCQ_UNAVAILABLE, "%s %s: %s", verb, path, strerror(errno));
    return NULL;
  }
  if (errno != ENOENT)
    return hcq_status_make(HCQ_UNAVAILABLE, "%s %s: %s", verb, path, strerror(errno));
  char parent[PATH_MAX];
  size_t len = strlen(path);
  while (len > 1 && path[len - 1] == '/') len--; /* "out/" names the folder out */
  while (len > 0 && path[len - 1] != '/') len--;
  if (len >= sizeof(parent))
    return hcq_status_make(HCQ_UNAVAILABLE, "%s %s: the path is too long", verb, path);
  if (len == 0)
    snprintf(parent, sizeof(parent), ".");
  else
    snprintf(parent, sizeof(parent), "%.*s", (int)len, path);
  if (access(parent, W_OK | X_OK) != 0)
    return hcq_status_make(HCQ_UNAVAILABLE, "%s %s: %s", verb, path, strerror(errno));
  return NULL;
}

/* Under MPI rank 0 writes, on its own machine, and every rank must take part in the runs: there
 * the writes report their own failures. */
static hcq_status_t check_outputs(const run_args_t *a) {
  if (cli_mpi_on()) return NULL;
  if (a->out) TRY(check_output(a->out, true));
  const char *files[] = {a->obs.profile, a->obs.profile_svg, a->obs.dot};
  for (size_t i = 0; i < sizeof(files) / sizeof(files[0]); i++)
    if (files[i]) TRY(check_output(files[i], false));
  return NULL;
}

int cli_run(int argc, char **argv) {
  run_args_t a;
  int rc = parse_args(argc, argv, &a);
  if (rc >= 0) return rc;
  hcq_status_t st = check_outputs(&a);
  if (st) return cli_fail(st);
  return a.check ? run_check(&a) : run_plain(&a);
}
