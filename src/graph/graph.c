/* The public graph API: argument checks and the common runner, then the graph kind's vtable. */
#include <stdlib.h>
#include <string.h>

#include "core/backend.h"
#include "core/capture.h"
#include "core/fence.h"
#include "core/options.h"
#include "core/remote.h"
#include "core/status.h"
#include "graph/graph_internal.h"
#include "trace/trace_internal.h"

/* The graph of runner's items on the runner its devices take: a backend with its own graph runner
 * (the CUDA graph, docs/design.md, "Graph runners") holds only devices of that runner; the rest run
 * the queue graph. */
static hcq_status_t create_runner_graph(hcq__runner_t *runner, bool profile, unsigned inflight,
                                        hcq_graph_t **out_graph) {
  hcq_device_t *own = NULL, *other = NULL;
  const hcq__backend_t *ok = NULL;
  for (size_t d = 0; d < runner->ndevices && !own; d++)
    if ((ok = hcq__graph_kind(runner->devices[d]->kind))) own = runner->devices[d];
  for (size_t d = 0; own && d < runner->ndevices && !other; d++)
    if (hcq__graph_kind(runner->devices[d]->kind) != ok) other = runner->devices[d];
  if (own && other)
    return hcq_status_make(HCQ_INVALID_ARGUMENT,
                           "a graph cannot mix %s devices with others (%s and %s): split the items "
                           "by device kind (the JIT does), or transfer eagerly",
                           hcq_device_kind_name(own->kind), own->name, other->name);
  if (own) return ok->graph_create(runner, profile, inflight, out_graph);
  /* The queue graph copies on the source device's copy queue: a CPU engine would write through a
   * Vulkan device address as if it were a host pointer. Host-memory devices stay among
   * themselves. */
  hcq_device_t *host = NULL, *gpu = NULL;
  for (size_t d = 0; d < runner->ndevices; d++) {
    if ((runner->devices[d]->caps & HCQ_CAP_HOST_MEMORY) && !host) host = runner->devices[d];
    if (!(runner->devices[d]->caps & HCQ_CAP_HOST_MEMORY) && !gpu) gpu = runner->devices[d];
  }
  if (host && gpu)
    return hcq_status_make(HCQ_INVALID_ARGUMENT,
                           "a graph cannot mix %s with %s: split the items by device kind (the "
                           "JIT does), or transfer eagerly",
                           host->name, gpu->name);
  return hcq__queue_graph_create(runner, profile, inflight, out_graph);
}

hcq_status_t hcq_graph_create(const hcq_exec_item_t *items, size_t nitems,
                              hcq_buffer_t *const *inputs, size_t ninputs,
                              const hcq_var_value_t *vals, size_t nvals,
                              const hcq_graph_options_t *options, hcq_graph_t **out_graph) {
  if (!out_graph)
    return hcq_status_make(HCQ_INVALID_ARGUMENT, "hcq_graph_create: out_graph is NULL");
  *out_graph = NULL;
  /* Under MPI every rank builds the same graph: the layer checks that they agree (docs/mpi.md). */
  const hcq__remote_hooks_t *remote = atomic_load(&hcq__remote);
  hcq_status_t st = remote ? remote->graph_check(items, nitems) : NULL;
  if (st) return st;
  hcq__runner_t runner;
  st = hcq__runner_init(&runner, items, nitems, inputs, ninputs, vals, nvals, "graph");
  if (st) {
    if (remote) remote->graph_built();
    return st;
  }
  bool profile = (options && options->profile) || hcq__options()->profile[0] || hcq__trace_on();
  st = create_runner_graph(&runner, profile, options ? options->inflight : 0, out_graph);
  if (remote) remote->graph_built();
  if (st)
    hcq__runner_deinit(&runner);
  else
    (*out_graph)->validated_replays = hcq__graph_validates_writes(*out_graph);
  return st;
}

/* Validation: a destroyed graph passed again is named instead of read. */
static hcq_status_t check_graph(const hcq_graph_t *g, const char *what) {
  if (!hcq__validating) return NULL;
  if (g->magic == HCQ__OBJ_LIVE) return NULL;
  return hcq_status_make(
      HCQ_FAILED_PRECONDITION, "%s: %s (HCQ_VALIDATE)", what,
      g->magic == HCQ__OBJ_DEAD ? "the graph was destroyed already" : "not a live hcq graph");
}

/* fence (may be NULL) is armed once the replay is submitted; room for it is made before, so a
 * replay that was queued never returns an error for it. */
static hcq_status_t graph_run(hcq_graph_t *g, hcq_buffer_t *const *inputs, size_t ninputs,
                              const hcq_var_value_t *vals, size_t nvals, bool wait,
                              uint64_t *out_elapsed_ns, bool prechecked, hcq_fence_t *fence,
                              const char *call) {
  if (!g) return hcq_status_make(HCQ_INVALID_ARGUMENT, "%s: graph is NULL", call);
  HCQ__TRY(check_graph(g, call));
  hcq_status_t st = hcq__runner_enter(&g->runner, call);
  if (st) return st;
  if ((st = prechecked ? hcq__runner_stage_prechecked(&g->runner, inputs, ninputs, vals, nvals)
                       : hcq__runner_stage(&g->runner, inputs, ninputs, vals, nvals)))
    goto leave;
  if (fence && (st = hcq__fence_reserve(fence, g->runner.ndevices))) goto leave;
  if ((st = g->validated_replays ? hcq__graph_run_validated(g, wait, out_elapsed_ns)
                                 : g->vt->run(g, wait, out_elapsed_ns)))
    goto leave;
  if (fence) hcq__fence_arm(fence, g->runner.devices, g->runner.ndevices);
  for (size_t d = 0; hcq__captures_elsewhere() && d < g->runner.ndevices; d++)
    hcq__capture_note_other_thread(g->runner.devices[d], "replay of %s", g->runner.label);
leave:
  hcq__runner_leave(&g->runner);
  return st ? hcq_status_annotate(st, "graph replay") : NULL;
}

hcq_status_t hcq_graph_run(hcq_graph_t *g, hcq_buffer_t *const *inputs, size_t ninputs,
                           const hcq_var_value_t *vals, size_t nvals, bool wait,
                           uint64_t *out_elapsed_ns) {
  return graph_run(g, inputs, ninputs, vals, nvals, wait, out_elapsed_ns, false, NULL,
                   "hcq_graph_run");
}

hcq_status_t hcq_graph_submit(hcq_graph_t *g, hcq_buffer_t *const *inputs, size_t ninputs,
                              const hcq_var_value_t *vals, size_t nvals, hcq_fence_t *fence) {
  return graph_run(g, inputs, ninputs, vals, nvals, false, NULL, false, fence, "hcq_graph_submit");
}

hcq_status_t hcq__graph_run_prechecked(hcq_graph_t *g, hcq_buffer_t *const *inputs, size_t ninputs,
                                       const hcq_var_value_t *vals, size_t nvals) {
  return graph_run(g, inputs, ninputs, vals, nvals, false, NULL, true, NULL, "hcq_graph_run");
}

hcq_status_t hcq_graph_destroy(hcq_graph_t *g) {
  if (!g) return NULL;
  hcq_status_t st = check_graph(g, "hcq_graph_destroy");
  if (st) return st;
  if ((st = hcq__runner_enter(&g->runner, "hcq_graph_destroy"))) return st;
  hcq__runner_t runner = g->runner;
  hcq_device_t *devs[HCQ__GRAPH_MAX_DEVICES];
  size_t ndevs =
      runner.ndevices < HCQ__GRAPH_MAX_DEVICES ? runner.ndevices : HCQ__GRAPH_MAX_DEVICES;
  memcpy(devs, runner.devices, ndevs * sizeof(*devs));
  st = g->vt->destroy(g);
  if (st) {
    /* A lost device never finishes the last replay: destroying still frees what can be freed. */
    bool lost = false;
    for (size_t i = 0; i < ndevs; i++) lost |= hcq__device_is_lost(devs[i]);
    if (!lost) {
      hcq__runner_leave(&g->runner);
      return st;
    }
    hcq_status_destroy(st);
    /* A device still waiting for the lost one's signals would wait for freed ones forever. */
    for (size_t i = 0; i < ndevs; i++) hcq__device_lose_if_orphaned(devs[i]);
    st = g->vt->destroy_anyway(g);
  }
  hcq__runner_deinit(&runner);
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

hcq_status_t hcq_graph_item_schedule(const hcq_graph_t *g, size_t i,
                                     hcq_graph_item_schedule_t *out) {
  if (!g || !out)
    return hcq_status_make(HCQ_INVALID_ARGUMENT,
                           "hcq_graph_item_schedule: graph or output is NULL");
  if (i >= g->runner.nitems)
    return hcq_status_make(HCQ_OUT_OF_RANGE, "item %zu: the graph has %zu items", i,
                           g->runner.nitems);
  if (!g->vt->item_schedule)
    return hcq_status_make(HCQ_FAILED_PRECONDITION, "a %s graph has no queue schedule",
                           g->vt->kind);
  return g->vt->item_schedule(g, i, out);
}

const hcq_queue_t *hcq_graph_queue(const hcq_graph_t *g, uint32_t queue) {
  return g && g->vt->queue ? g->vt->queue(g, queue) : NULL;
}

hcq_status_t hcq_graph_profile(hcq_graph_t *g, const hcq_profile_event_t **out) {
  if (!g || !out)
    return hcq_status_make(HCQ_INVALID_ARGUMENT, "hcq_graph_profile: graph or output is NULL");
  *out = NULL;
  hcq_status_t st = check_graph(g, "hcq_graph_profile");
  if (st) return st;
  if (!g->vt->profile)
    return hcq_status_make(HCQ_FAILED_PRECONDITION, "a %s graph keeps no profile", g->vt->kind);
  if ((st = hcq__runner_enter(&g->runner, "hcq_graph_profile"))) return st;
  st = g->vt->profile(g, out);
  hcq__runner_leave(&g->runner);
  return st;
}

void hcq_graph_stats(const hcq_graph_t *g, hcq_graph_stats_t *out) {
  if (!out) return;
  if (g)
    *out = g->stats;
  else
    memset(out, 0, sizeof(*out));
}

void *hcq__graph_alloc(size_t size, const hcq__graph_vtable_t *vt, const hcq__runner_t *runner) {
  hcq_graph_t *g = calloc(1, size);
  if (!g) return NULL;
  g->vt = vt;
  g->magic = HCQ__OBJ_LIVE;
  g->runner = *runner;
  return g;
}

const hcq__backend_t *hcq__graph_kind(hcq_device_kind_t kind) {
  const hcq__backend_t *b = hcq__backend(kind);
  return b && b->graph_create ? b : NULL;
}

uintptr_t hcq__graph_class(const hcq_device_t *dev) {
  const hcq__backend_t *b = hcq__backend(dev->kind);
  if (!b) return 0;
  /* Devices of one runner share graphs; the queue graph's host-memory devices (CPU) stay apart from
   * each of its GPU kinds (a CPU engine reads addresses as host pointers). */
  const hcq__backend_t *own = hcq__graph_kind(dev->kind);
  if (own) return own->graph_one_device ? (uintptr_t)dev : (uintptr_t)own;
  return dev->caps & HCQ_CAP_HOST_MEMORY ? 1 : (uintptr_t)b;
}

bool hcq__graph_holds_transfers(const hcq_device_t *dev) {
  const hcq__backend_t *own = hcq__graph_kind(dev->kind);
  return hcq__backend(dev->kind) && !(own && own->graph_kernels_only);
}
