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
  hcq_status_t st =
      (!x || !y) ? hcq_status_make(HCQ_OUT_OF_MEMORY, "out of memory comparing buffers") : NULL;
  if (!st) st = cli_mpi_fetch(a, x, size);
  if (!st) st = cli_mpi_fetch(b, y, size);
  *out = -1;
  for (uint64_t i = 0; !st && cli_mpi_rank() == 0 && i < size; i++)
    if (x[i] != y[i]) {
      *out = (int64_t)i;
      break;
    }
  free(x);
  free(y);
  return st;
}

static hcq_status_t write_outputs(const hcq_graph_file_t *gf, const char *dir) {
  if (cli_mpi_rank() == 0 && mkdir(dir, 0755) != 0 && errno != EEXIST)
    return hcq_status_make(HCQ_UNAVAILABLE, "cannot create %s: %s", dir, strerror(errno));
  for (size_t i = 0; i < hcq_graph_file_buffer_count(gf); i++) {
    hcq_buffer_t *b = hcq_graph_file_buffer(gf, i);
    uint64_t size = hcq_buffer_size(b);
    uint8_t *data = malloc(size);
    if (!data)
      return hcq_status_make(HCQ_OUT_OF_MEMORY, "out of memory writing %s",
                             hcq_graph_file_buffer_name(gf, i));
    hcq_status_t st = cli_mpi_fetch(b, data, size);
    if (!st && cli_mpi_rank() != 0) { /* rank 0 writes every buffer (fetched from its rank) */
      free(data);
      continue;
    }
    char path[PATH_MAX]; /* parse_args checked that it fits */
    snprintf(path, sizeof(path), "%s/%s.bin", dir, hcq_graph_file_buffer_name(gf, i));
    FILE *f = st ? NULL : fopen(path, "wb");
    if (!st && (!f || fwrite(data, 1, size, f) != size))
      st = hcq_status_make(HCQ_UNAVAILABLE, "cannot write %s: %s", path, strerror(errno));
    if (f && fclose(f) != 0 && !st) st = hcq_status_make(HCQ_UNAVAILABLE, "cannot write %s", path);
    free(data);
    if (st) return st;
  }
  return NULL;
}

static int run_plain(const run_args_t *a) {
  world_t w;
  /* Profiled: the runs, not the loading (the graphs are built while the profiler is paused). */
  hcq_status_t st = cli_observe_start(&a->obs, true);
  if (st) return cli_fail(st);
  st = world_open(&w, a, a->graph, a->obs.profile || a->obs.profile_svg);
  hcq_trace_pause(false);
  size_t runs = w.gf ? hcq_graph_file_run_count(w.gf) : 0;
  double t0 = hcq_model_now_ms();
  for (size_t r = 0; r < runs && !st; r++)
    for (unsigned long long k = 0; k < a->repeat && !st; k++) st = world_run(&w, r);
  if (!st) st = cli_sync_file(w.gf);
  double t1 = hcq_model_now_ms();
  if (!st) {
    printf("%s: %zu run%s x %llu of %zu items (%s) in %.3f ms\n", a->file, runs,
           runs == 1 ? "" : "s", a->repeat, hcq_graph_file_item_count(w.gf),
           a->graph ? "graph" : "eager", t1 - t0);
    if (a->graph) printf("%s", hcq_jit_report(w.jit)->text);
  }
  st = st ? st : cli_observe_finish(&a->obs, w.jit, w.gf);
  if (!st && a->out) st = write_outputs(w.gf, a->out);
  /* Said before the teardown, which may wait for the devices again. */
  int rc = st ? cli_fail(st) : HCQ_EXIT_OK;
  world_close(&w);
  cli_observe_abort(&a->obs);
  return rc;
}

/* The sequence twice from the initial contents: eagerly (ground truth) and as graph replays,
 * every buffer compared after each run. */
static int run_check(const run_args_t *a) {
  world_t truth, graph;
  memset(&graph, 0, sizeof(graph));
  hcq_status_t st = world_open(&truth, a, false, false);
  /* Only the graph copy's runs are profiled: the profiler is paused for everything else. */
  if (!st) st = cli_observe_start(&a->obs, true);
  if (!st) st = world_open(&graph, a, a->graph, a->obs.profile || a->obs.profile_svg);
  size_t passed = 0, failed = 0;
  size_t runs = truth.gf ? hcq_graph_file_run_count(truth.gf) : 0;
  for (size_t r = 0; r < runs && !st; r++) {
    for (unsigned long long k = 0; k < a->repeat && !st; k++) {
      if ((st = world_run(&truth, r))) break;
      hcq_trace_pause(false);
      st = world_run(&graph, r);
      hcq_trace_pause(true);
      if (st) break;
      const char *bad = NULL;
      int64_t at = -1;
      /* Under MPI every rank takes part in every buffer's fetch: only rank 0 knows where they
       * differ. */
      for (size_t b = 0;
           b < hcq_graph_file_buffer_count(graph.gf) && !st && (at < 0 || cli_mpi_on()); b++) {
        int64_t here = -1;
        st = first_difference(hcq_graph_file_buffer(graph.gf, b),
                              hcq_graph_file_buffer(truth.gf, b), &here);
        if (here >= 0 && at < 0) at = here, bad = hcq_graph_file_buffer_name(graph.gf, b);
      }
      if (st) break;
      char label[64];
      if (a->repeat > 1)
        snprintf(label, sizeof(label), "run %zu (repeat %llu)", r, k + 1);
      else
        snprintf(label, sizeof(label), "run %zu", r);
      if (at < 0) {
        passed++;
        printf("%s: ok\n", label);
      } else {
        failed++;
        printf("%s: MISMATCH in buffer \"%s\" at byte %" PRId64 "\n", label, bad, at);
      }
    }
  }
  if (!st) printf("%zu passed, %zu failed\n", passed, failed);
  st = st ? st : cli_observe_finish(&a->obs, graph.jit, graph.gf);
  if (!st && a->out) st = write_outputs(graph.gf, a->out);
  int rc = st       ? cli_fail(st)
           : failed ? HCQ_EXIT_CHECK_MISMATCH
                    : HCQ_EXIT_OK; /* before the teardown */
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
  hcq_status_t st = a->out ? check_output(a->out, true) : NULL;
  const char *files[] = {a->obs.profile, a->obs.profile_svg, a->obs.dot};
  for (size_t i = 0; i < sizeof(files) / sizeof(files[0]) && !st; i++)
    if (files[i]) st = check_output(files[i], false);
  return st;
}

int cli_run(int argc, char **argv) {
  run_args_t a;
  int rc = parse_args(argc, argv, &a);
  if (rc >= 0) return rc;
  hcq_status_t st = check_outputs(&a);
  if (st) return cli_fail(st);
  return a.check ? run_check(&a) : run_plain(&a);
}
