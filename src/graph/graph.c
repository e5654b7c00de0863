/* The public graph API: argument checks and the common runner, then the graph kind's vtable. */
#include <stdlib.h>

#include "graph/graph_internal.h"

hcq_status_t hcq_graph_create(const hcq_exec_item_t *items, size_t nitems, hcq_buffer_t *const *inputs, size_t ninputs,
                              const hcq_var_value_t *vals, size_t nvals, const hcq_graph_options_t *options,
                              hcq_graph_t **out_graph) {
  if (!out_graph) return hcq_status_make(HCQ_INVALID_ARGUMENT, "hcq_graph_create: out_graph is NULL");
  *out_graph = NULL;
  hcq__runner_t runner;
  hcq_status_t st = hcq__runner_init(&runner, items, nitems, inputs, ninputs, vals, nvals);
  if (st) return st;
  const char *env = getenv("HCQ_PROFILE");
  bool profile = (options && options->profile) || (env && *env && *env != '0');
  /* Every device kind hcq drives today runs the HCQ graph. */
  st = hcq__hcq_graph_create(&runner, profile, out_graph);
  if (st) hcq__runner_deinit(&runner);
  return st;
}

hcq_status_t hcq_graph_run(hcq_graph_t *g, hcq_buffer_t *const *inputs, size_t ninputs, const hcq_var_value_t *vals,
                           size_t nvals, bool wait, uint64_t *out_elapsed_ns) {
  if (!g) return hcq_status_make(HCQ_INVALID_ARGUMENT, "hcq_graph_run: graph is NULL");
  hcq_status_t st = hcq__runner_stage(&g->runner, inputs, ninputs, vals, nvals);
  if (!st) st = g->vt->run(g, wait, out_elapsed_ns);
  return st ? hcq_status_annotate(st, "graph replay") : NULL;
}

hcq_status_t hcq_graph_destroy(hcq_graph_t *g) {
  if (!g) return NULL;
  hcq__runner_t runner = g->runner;
  hcq_status_t st = g->vt->destroy(g);
  if (!st) hcq__runner_deinit(&runner);
  return st;
}

size_t hcq_graph_item_count(const hcq_graph_t *g) { return g ? g->runner.nitems : 0; }
size_t hcq_graph_var_count(const hcq_graph_t *g) { return g ? g->runner.vars.len : 0; }
const hcq_expr_t *hcq_graph_var(const hcq_graph_t *g, size_t i) {
  return g && i < g->runner.vars.len ? g->runner.vars.data[i] : NULL;
}
size_t hcq_graph_device_count(const hcq_graph_t *g) { return g ? g->runner.ndevices : 0; }
hcq_device_t *hcq_graph_device(const hcq_graph_t *g, size_t i) {
  return g && i < g->runner.ndevices ? g->runner.devices[i] : NULL;
}
const char *hcq_graph_kind(const hcq_graph_t *g) { return g ? g->vt->kind : ""; }

hcq_status_t hcq_graph_item_schedule(const hcq_graph_t *g, size_t i, hcq_graph_item_schedule_t *out) {
  if (!g || !out) return hcq_status_make(HCQ_INVALID_ARGUMENT, "hcq_graph_item_schedule: graph or output is NULL");
  if (i >= g->runner.nitems)
    return hcq_status_make(HCQ_OUT_OF_RANGE, "item %zu: the graph has %zu items", i, g->runner.nitems);
  if (!g->vt->item_schedule)
    return hcq_status_make(HCQ_FAILED_PRECONDITION, "a %s graph has no queue schedule", g->vt->kind);
  return g->vt->item_schedule(g, i, out);
}

const hcq_queue_t *hcq_graph_queue(const hcq_graph_t *g, uint32_t queue) {
  return g && g->vt->queue ? g->vt->queue(g, queue) : NULL;
}

hcq_status_t hcq_graph_profile(hcq_graph_t *g, const hcq_profile_event_t **out) {
  if (!g || !out) return hcq_status_make(HCQ_INVALID_ARGUMENT, "hcq_graph_profile: graph or output is NULL");
  *out = NULL;
  if (!g->vt->profile) return hcq_status_make(HCQ_FAILED_PRECONDITION, "a %s graph keeps no profile", g->vt->kind);
  return g->vt->profile(g, out);
}
