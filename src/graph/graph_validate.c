/* HCQ_VALIDATE=1 graph replays (include/hcq/graph.h, "Validation"): a replay of a graph with a kernel
 * item whose outs leave some of its buffers undeclared runs item by item, eagerly, each kernel
 * checked by hcq_launch's write check (core/validate.c).
 *
 * Why not the graph itself: an undeclared write is a missing dependency, and what it breaks is the
 * graph's ordering, by chance (a race on the device). Comparing a graph replay's buffers after the
 * fact cannot tell which item wrote what; running the same items eagerly, in order, with the
 * replay's inputs and values, can, on every backend, every time. The replay's results are those of
 * the eager run (the ground truth), and the graph's own queues do not run. */
#include <inttypes.h>
#include <stdio.h>

#include "graph/graph_internal.h"

static const hcq_buffer_t *base_of(const hcq_buffer_t *b) { return b->base ? b->base : b; }

/* A kernel item that declares outs and takes a buffer outside their bases. */
static bool has_undeclared(const hcq_kernel_item_t *k) {
  if (!k->outs) return false;
  for (size_t i = 0; i < k->nbufs; i++) {
    bool declared = false;
    for (size_t o = 0; o < k->nouts && !declared; o++) declared = base_of(k->bufs[k->outs[o]]) == base_of(k->bufs[i]);
    if (!declared) return true;
  }
  return false;
}

bool hcq__graph_validates_writes(const hcq_graph_t *g) {
  if (!hcq__validating) return false;
  const hcq__runner_t *r = &g->runner;
  for (size_t j = 0; j < r->nitems; j++)
    if (r->items[j].kind == HCQ_ITEM_KERNEL && has_undeclared(&r->items[j].kernel)) return true;
  return false;
}

hcq_status_t hcq__graph_run_validated(hcq_graph_t *g, bool wait, uint64_t *out_elapsed_ns) {
  uint64_t start = hcq__now_ns();
  hcq__runner_t *r = &g->runner;
  hcq_var_value_t *vals = r->eval_vals; /* scratch of the runner: one entry per variable */
  for (size_t i = 0; i < r->vars.len; i++) vals[i].value = r->pending_values[i];
  hcq_buffer_t *bufs[HCQ_MAX_KERNEL_BUFS];
  hcq_status_t st = NULL;
  size_t s = 0; /* slots are in item order */
  /* These launches are the graph's, not the application's: a capture records them no more than it
   * records a graph replay. */
  const hcq__recorder_t *rec = hcq__recorder;
  hcq__recorder = NULL;
  for (size_t j = 0; j < r->nitems && !st; j++) {
    size_t from = s;
    while (s < r->slots.len && r->slots.data[s].item == j) s++;
    hcq_exec_item_t it = hcq__runner_item_with_inputs(r, j, from, s, bufs);
    st = hcq_exec_item_run(&it, vals, r->vars.len);
    if (st)
      st = hcq_status_annotate(st, "item %zu (%s; HCQ_VALIDATE runs the replay item by item)", j,
                               it.kind == HCQ_ITEM_KERNEL ? it.kernel.program->name : "transfer");
  }
  hcq__recorder = rec;
  if (st) return st;
  hcq__runner_commit(r);
  for (size_t d = 0; wait && d < r->ndevices && !st; d++) st = hcq_device_synchronize(r->devices[d]);
  if (!st && wait && out_elapsed_ns) *out_elapsed_ns = hcq__now_ns() - start;
  return st;
}
