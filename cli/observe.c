/* What hcq shows about a run besides its results: the profile (--profile, --profile-svg), the
 * built graphs (--dot) and memory (-v, and hcq info). */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>

#include "cli/cli.h"
#include "model_status.h"

static bool wants_profile(const cli_observe_t *o) { return o->profile || o->profile_svg; }

hcq_status_t cli_observe_start(const cli_observe_t *o, bool paused) {
  if (!wants_profile(o)) return NULL;
  hcq_status_t st = hcq_trace_start(NULL);
  if (st && hcq_status_code(st) == HCQ_FAILED_PRECONDITION) {
    /* HCQ_PROFILE started it already: this run's files take over. */
    hcq_status_destroy(st);
    hcq_trace_stop();
    st = hcq_trace_start(NULL);
  }
  if (!st && paused) hcq_trace_pause(true);
  return st;
}

void cli_observe_abort(const cli_observe_t *o) {
  if (wants_profile(o)) hcq_trace_stop();
}

/* "1.5 MiB" */
static void format_bytes(uint64_t n, char *out, size_t size) {
  if (n >= (UINT64_C(1) << 30))
    snprintf(out, size, "%.1f GiB", (double)n / (double)(UINT64_C(1) << 30));
  else if (n >= (UINT64_C(1) << 20))
    snprintf(out, size, "%.1f MiB", (double)n / (double)(UINT64_C(1) << 20));
  else if (n >= 1024)
    snprintf(out, size, "%.1f KiB", (double)n / 1024.0);
  else
    snprintf(out, size, "%" PRIu64 " B", n);
}

static hcq_status_t print_memory(hcq_device_t *dev, const char *what) {
  hcq_memory_usage_t m;
  hcq_status_t st = hcq_device_memory_usage(dev, &m);
  if (st) return st;
  char b[6][24];
  format_bytes(m.buffers, b[0], sizeof(b[0]));
  format_bytes(m.graph_kernargs, b[1], sizeof(b[1]));
  format_bytes(m.graph_commands, b[2], sizeof(b[2]));
  format_bytes(m.graph_profile, b[3], sizeof(b[3]));
  format_bytes(m.eager, b[4], sizeof(b[4]));
  format_bytes(m.deferred, b[5], sizeof(b[5]));
  printf(
      "memory %s%s: buffers %s, graph kernargs %s, graph commands %s, profile slots %s, eager "
      "rings %s, "
      "waiting to be freed %s\n",
      hcq_device_name(dev), what, b[0], b[1], b[2], b[3], b[4], b[5]);
  return NULL;
}

static void print_kernel_cache(void) {
  uint64_t bytes, files;
  const char *dir;
  hcq_kernel_cache_usage(&bytes, &files, &dir);
  char b[24];
  format_bytes(bytes, b, sizeof(b));
  printf("kernel cache %s: %" PRIu64 " compiled kernel%s, %s on disk\n", dir, files,
         files == 1 ? "" : "s", b);
}

/* The jit's graphs as one Graphviz file. */
static hcq_status_t write_dot(const char *path, hcq_jit_t *jit) {
  size_t n = jit ? hcq_jit_graph_count(jit) : 0;
  hcq_graph_t **graphs = calloc(n + 1, sizeof(*graphs));
  if (!graphs) return hcq_status_make(HCQ_OUT_OF_MEMORY, "out of memory writing %s", path);
  for (size_t i = 0; i < n; i++) graphs[i] = hcq_jit_graph(jit, i);
  hcq_status_t st = hcq_graph_write_dot(graphs, n, path);
  free(graphs);
  return st;
}

/* The files asked for, then with --verbose the devices' memory and the kernel cache. */
static hcq_status_t write_outputs(const cli_observe_t *o, hcq_jit_t *jit,
                                  const hcq_graph_file_t *gf) {
  if (o->profile) TRY(hcq_trace_write(o->profile));
  if (o->profile_svg) TRY(hcq_trace_write_svg(o->profile_svg));
  if (o->dot) TRY(write_dot(o->dot, jit));
  if (o->verbose && gf) {
    for (size_t i = 0; i < hcq_graph_file_device_count(gf); i++)
      TRY(print_memory(hcq_graph_file_device(gf, i), ""));
    print_kernel_cache();
  }
  return NULL;
}

hcq_status_t cli_observe_finish(const cli_observe_t *o, hcq_jit_t *jit,
                                const hcq_graph_file_t *gf) {
  hcq_status_t st = write_outputs(o, jit, gf);
  cli_observe_abort(o);
  return st;
}

/* What the first device of each kind present has, as its driver or the host says. */
static void print_device_memory(void) {
  hcq_device_info_t infos[HCQ_DEVICE_KIND_COUNT];
  size_t n = hcq_device_query(infos, HCQ_DEVICE_KIND_COUNT);
  for (size_t i = 0; i < n && i < HCQ_DEVICE_KIND_COUNT; i++) {
    if (!infos[i].available) continue;
    char name[32];
    snprintf(name, sizeof(name), "%s:0", hcq_device_kind_name(infos[i].kind));
    hcq_device_t *dev = NULL;
    hcq_device_memory_t m;
    hcq_status_t st;
    if ((st = hcq_device_open(name, &dev)) || (st = hcq_device_memory(dev, &m))) {
      printf("device memory %s: unknown (%s)\n", name, hcq_status_message(st));
    } else {
      char total[24], avail[24];
      format_bytes(m.total, total, sizeof(total));
      format_bytes(m.available, avail, sizeof(avail));
      printf("device memory %s: %s, %s available (%s)\n", name, m.total ? total : "size unknown",
             m.available ? avail : "unknown", m.source);
    }
    hcq_status_destroy(st);
    if (dev) hcq_status_destroy(hcq_device_close(dev));
  }
}

void cli_info_memory(void) {
  print_kernel_cache();
  hcq_device_t *dev = NULL;
  hcq_status_t st;
  if ((st = hcq_device_open("CPU:0", &dev)) || (st = print_memory(dev, " (just opened)")))
    printf("memory CPU:0: unknown (%s)\n", hcq_status_message(st));
  hcq_status_destroy(st);
  hcq_status_destroy(hcq_device_close(dev));
  print_device_memory();
}
