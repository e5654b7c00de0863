/* The CUDA graph (docs/design.md, "The CUDA graph"): one kernel node per kernel item, one memcpy
 * node per transfer, edges from buffer access (deps.c), instantiated once. A replay asks the update
 * planner which nodes' parameters differ from what the instantiated graph holds (input buffers,
 * variables, symbolic dims), sets only those (cuGraphExecKernelNodeSetParams /
 * cuGraphExecMemcpyNodeSetParams; a launch whose dims become empty disables its node), and launches
 * the graph on the first device's compute stream behind every device's earlier eager work; each
 * device's timeline is signalled after it. The driver copies node parameters when they are set and
 * orders launches of one graph, so a replay never waits for the previous one on the host. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "core/buffer.h"
#include "core/host_wait.h"
#include "core/options.h"
#include "core/status.h"
#include "cuda/cuda_device.h"
#include "cuda/cuda_internal.h"
#include "graph/graph_internal.h"
#include "graph/update_plan.h"

_Static_assert(HCQ__GRAPH_MAX_DEVICES <= HCQ__CUDA_GRAPH_MAX_DEVICES,
               "a graph's devices fit one CUDA graph launch");

typedef struct cuda_node {
  hcq_CUgraphNode node;
  bool is_copy, empty, enabled;
  hcq_device_t *dev;
  /* kernel */
  hcq_CUDA_KERNEL_NODE_PARAMS kp;
  void *extra[5];
  size_t arg_size;
  uint8_t args[HCQ_MAX_KERNEL_BUFS * 8 + HCQ_MAX_KERNEL_VALS * 4];
  /* transfer */
  hcq_CUDA_MEMCPY3D cp;
} cuda_node_t;

typedef struct cuda_graph {
  struct hcq_graph base;
  cuda_node_t *nodes;
  hcq_CUgraph graph;
  hcq_CUgraphExec exec;
  hcq_CUevent start, end;
  bool launched;
  hcq__update_plan_t *plan;
  uint64_t *input_addrs;
} cuda_graph_t;

static hcq_status_t oom(void) {
  return hcq_status_make(HCQ_OUT_OF_MEMORY, "out of memory building a CUDA graph");
}

static const hcq__cuda_api_t *api_of(const cuda_graph_t *g) {
  return hcq__cuda_device_api(g->base.runner.devices[0]);
}
static hcq_device_t *dev0(const cuda_graph_t *g) { return g->base.runner.devices[0]; }

/* Writes the planner's view of a kernel item into its node's parameters; false when a dim is 0. */
static bool kernel_params(cuda_node_t *n, const hcq__plan_values_t *v, size_t nbufs, size_t nvals) {
  for (size_t i = 0; i < nbufs; i++) memcpy(n->args + 8 * i, &v->args[i], 8);
  if (nvals) memcpy(n->args + 8 * nbufs, v->vals, 4 * nvals);
  bool empty = false;
  for (int i = 0; i < 3; i++) empty |= v->global[i] == 0 || v->local[i] == 0;
  /* A node must have a valid launch: an empty one keeps 1x1x1 and is disabled instead. */
  n->kp.gridDimX = empty ? 1 : v->global[0];
  n->kp.gridDimY = empty ? 1 : v->global[1];
  n->kp.gridDimZ = empty ? 1 : v->global[2];
  n->kp.blockDimX = empty ? 1 : v->local[0];
  n->kp.blockDimY = empty ? 1 : v->local[1];
  n->kp.blockDimZ = empty ? 1 : v->local[2];
  return !empty;
}

static void copy_params(cuda_node_t *n, const hcq__plan_values_t *v) {
  n->cp.dstDevice = v->args[0];
  n->cp.srcDevice = v->args[1];
}

/* ---- build ---- */

static hcq_status_t build_plan(cuda_graph_t *g) {
  g->input_addrs = calloc(g->base.runner.ninputs + 1, sizeof(uint64_t));
  if (!g->input_addrs) return oom();
  return hcq__update_plan_for_runner(&g->base.runner, &g->plan);
}

static hcq_status_t add_node(cuda_graph_t *g, uint32_t j, const hcq_CUgraphNode *deps,
                             size_t ndeps) {
  hcq__runner_t *r = &g->base.runner;
  const hcq_exec_item_t *it = &r->items[j];
  cuda_node_t *n = &g->nodes[j];
  const hcq__cuda_api_t *api = api_of(g);
  hcq__plan_values_t v;
  hcq__update_plan_values(g->plan, j, &v);
  hcq_CUresult rc;
  n->dev = hcq__item_device(it);
  if (it->kind == HCQ_ITEM_KERNEL) {
    const hcq_kernel_item_t *k = &it->kernel;
    const hcq__cuda_kernel_t *ck = k->program->impl.object;
    if (!ck || k->nbufs != ck->nptrs || k->nvals != ck->nvals)
      return hcq_status_make(HCQ_INVALID_ARGUMENT,
                             "item %" PRIu32
                             " (%s): the kernel takes %u buffers and %u values, the "
                             "item passes %zu and %zu",
                             j, k->program->name, ck ? ck->nptrs : 0, ck ? ck->nvals : 0, k->nbufs,
                             k->nvals);
    n->kp.func = ck->fn;
    n->arg_size = ck->param_bytes;
    n->extra[0] = HCQ_CU_LAUNCH_PARAM_BUFFER_POINTER;
    n->extra[1] = n->args;
    n->extra[2] = HCQ_CU_LAUNCH_PARAM_BUFFER_SIZE;
    n->extra[3] = &n->arg_size;
    n->extra[4] = HCQ_CU_LAUNCH_PARAM_END;
    n->kp.extra = n->arg_size ? n->extra : NULL;
    n->enabled = kernel_params(n, &v, k->nbufs, k->nvals);
    rc = api->cuGraphAddKernelNode(&n->node, g->graph, deps, ndeps, &n->kp);
    if (rc)
      return hcq__cuda_fail(n->dev, rc, "item %" PRIu32 " (%s): cuGraphAddKernelNode", j,
                            k->program->name);
    return NULL;
  }
  n->is_copy = true;
  n->enabled = true;
  if (it->transfer.bytes == 0) {
    n->empty = true;
    rc = api->cuGraphAddEmptyNode(&n->node, g->graph, deps, ndeps);
    return rc ? hcq__cuda_fail(n->dev, rc, "item %" PRIu32 ": cuGraphAddEmptyNode", j) : NULL;
  }
  n->cp.srcMemoryType = HCQ_CU_MEMORYTYPE_UNIFIED;
  n->cp.dstMemoryType = HCQ_CU_MEMORYTYPE_UNIFIED;
  n->cp.WidthInBytes = (size_t)it->transfer.bytes;
  n->cp.Height = 1;
  n->cp.Depth = 1;
  copy_params(n, &v);
  rc = api->cuGraphAddMemcpyNode(&n->node, g->graph, deps, ndeps, &n->cp,
                                 hcq__cuda_device_context(n->dev));
  if (rc)
    return hcq__cuda_fail(n->dev, rc, "item %" PRIu32 " (%s -> %s): cuGraphAddMemcpyNode", j,
                          it->transfer.src->label, it->transfer.dst->label);
  return NULL;
}

/* The graph's nodes in item order, with the edges deps.c finds. */
static hcq_status_t add_nodes(cuda_graph_t *g, hcq_CUgraphNode *deps) {
  hcq__runner_t *r = &g->base.runner;
  hcq__deps_t tracker;
  hcq__deps_init(&tracker);
  hcq__u32_vec_t rdeps = {0};
  uintptr_t keys[HCQ_MAX_KERNEL_BUFS];
  hcq_status_t st = NULL;
  for (uint32_t j = 0; j < r->nitems; j++) {
    hcq__item_access_t acc;
    hcq__item_access(&r->items[j], &acc);
    for (size_t i = 0; i < acc.n; i++) keys[i] = (uintptr_t)hcq_buffer_base(acc.bufs[i]);
    if ((st = hcq__deps_access(&tracker, keys, acc.writes, acc.n, j, &rdeps))) break;
    for (size_t i = 0; i < rdeps.len; i++) deps[i] = g->nodes[rdeps.data[i]].node;
    if ((st = add_node(g, j, deps, rdeps.len))) break;
  }
  hcq__vec_free(&rdeps);
  hcq__deps_deinit(&tracker);
  return st;
}

/* Instantiates the graph, disables the nodes of empty launches and makes the timing events. */
static hcq_status_t instantiate(cuda_graph_t *g) {
  hcq__runner_t *r = &g->base.runner;
  const hcq__cuda_api_t *api = api_of(g);
  hcq_CUresult rc;
  if ((rc = api->cuGraphInstantiateWithFlags(&g->exec, g->graph, 0)))
    return hcq__cuda_fail(dev0(g), rc, "cuGraphInstantiate of %s", r->label);
  for (uint32_t j = 0; j < r->nitems; j++) {
    if (g->nodes[j].enabled) continue;
    if ((rc = api->cuGraphNodeSetEnabled(g->exec, g->nodes[j].node, 0)))
      return hcq__cuda_fail(dev0(g), rc, "item %" PRIu32 ": disabling an empty launch", j);
  }
  if ((rc = api->cuEventCreate(&g->start, HCQ_CU_EVENT_DEFAULT)))
    return hcq__cuda_fail(dev0(g), rc, "cuEventCreate");
  if ((rc = api->cuEventCreate(&g->end, HCQ_CU_EVENT_DEFAULT)))
    return hcq__cuda_fail(dev0(g), rc, "cuEventCreate");
  return NULL;
}

/* The graph, its nodes and its executable form, with the first device's context current. */
static hcq_status_t build_graph(cuda_graph_t *g, hcq_CUgraphNode *deps) {
  hcq_CUresult rc = api_of(g)->cuGraphCreate(&g->graph, 0);
  if (rc) return hcq__cuda_fail(dev0(g), rc, "cuGraphCreate");
  HCQ__TRY(add_nodes(g, deps));
  return instantiate(g);
}

static hcq_status_t build(cuda_graph_t *g) {
  hcq__runner_t *r = &g->base.runner;
  HCQ__TRY(build_plan(g));
  hcq_status_t st;
  g->nodes = calloc(r->nitems, sizeof(*g->nodes));
  hcq_CUgraphNode *deps = malloc((r->nitems + 1) * sizeof(*deps));
  if (!g->nodes || !deps) {
    st = oom();
    goto out;
  }
  if ((st = hcq__cuda_push(dev0(g)))) goto out;
  st = build_graph(g, deps);
  hcq__cuda_pop(dev0(g));
  if (!st) g->base.stats.updatable_nodes = hcq__update_plan_updatable_count(g->plan);
out:
  free(deps);
  return st;
}

/* ---- replay ---- */

/* Applies the parameters the planner lists; counts each driver call. */
static hcq_status_t apply_updates(cuda_graph_t *g, const uint32_t *changed, size_t nchanged,
                                  uint64_t *out_calls) {
  const hcq__cuda_api_t *api = api_of(g);
  hcq__runner_t *r = &g->base.runner;
  uint64_t calls = 0;
  hcq_status_t st = NULL;
  for (size_t i = 0; i < nchanged; i++) {
    uint32_t j = changed[i];
    cuda_node_t *n = &g->nodes[j];
    hcq__plan_values_t v;
    hcq__update_plan_values(g->plan, j, &v);
    hcq_CUresult rc = 0;
    const char *what = "";
    if (n->empty) continue;
    if (n->is_copy) {
      copy_params(n, &v);
      what = "cuGraphExecMemcpyNodeSetParams";
      rc = api->cuGraphExecMemcpyNodeSetParams(g->exec, n->node, &n->cp,
                                               hcq__cuda_device_context(n->dev));
      calls++;
    } else {
      const hcq_kernel_item_t *k = &r->items[j].kernel;
      bool enabled = kernel_params(n, &v, k->nbufs, k->nvals);
      if (enabled) {
        what = "cuGraphExecKernelNodeSetParams";
        rc = api->cuGraphExecKernelNodeSetParams(g->exec, n->node, &n->kp);
        calls++;
      }
      if (!rc && enabled != n->enabled) {
        what = "cuGraphNodeSetEnabled";
        rc = api->cuGraphNodeSetEnabled(g->exec, n->node, enabled);
        calls++;
        if (!rc) n->enabled = enabled;
      }
    }
    if (rc) {
      st = hcq__cuda_fail(dev0(g), rc, "item %" PRIu32 ": %s", j, what);
      break;
    }
  }
  *out_calls = calls;
  return st;
}

/* Waits (polling, within the wait timeout) until the last launch's end event completed. */
static hcq_status_t wait_end(cuda_graph_t *g) {
  if (!g->launched) return NULL;
  hcq__runner_t *r = &g->base.runner;
  const hcq__cuda_api_t *api = api_of(g);
  uint64_t deadline = hcq__deadline_after_ms(HCQ_TIMEOUT_DEFAULT), nap = 2000;
  for (unsigned spin = 0;; spin++) {
    hcq_status_t st = hcq__cuda_push(dev0(g));
    if (st) return st;
    hcq_CUresult rc = api->cuEventQuery(g->end);
    hcq__cuda_pop(dev0(g));
    if (rc == 0) return NULL;
    if (rc != HCQ_CUDA_ERROR_NOT_READY)
      return hcq__cuda_fail(dev0(g), rc, "waiting for %s", r->label);
    for (size_t d = 0; d < r->ndevices; d++)
      if ((st = hcq__device_check(r->devices[d]))) return st;
    if (hcq__now_ns() >= deadline) {
      st = hcq_status_make(HCQ_TIMEOUT,
                           "timed out after %" PRId64 " ms waiting for the last replay of %s",
                           hcq__options()->wait_timeout_ms, r->label);
      return hcq__device_annotate_report(st, r->devices, r->ndevices);
    }
    if (spin < 64) {
      hcq__spin_step(spin);
      continue;
    }
    struct timespec ts = {0, (long)nap};
    nanosleep(&ts, NULL);
    if (nap < 1000000) nap *= 2;
  }
}

/* Launches the graph behind every device's earlier work and advances their timelines; the caller
 * holds the devices' locks. */
static hcq_status_t launch_locked(cuda_graph_t *g, bool wait) {
  hcq__runner_t *r = &g->base.runner;
  for (size_t d = 0; d < r->ndevices; d++) HCQ__TRY(hcq__device_prepare_submit(r->devices[d]));
  HCQ__TRY(
      hcq__cuda_graph_launch(r->devices, r->ndevices, g->exec, wait ? g->start : NULL, g->end));
  for (size_t d = 0; d < r->ndevices; d++) hcq__timeline_advance(r->devices[d]);
  return NULL;
}

static hcq_status_t cuda_graph_run(hcq_graph_t *base, bool wait, uint64_t *out_elapsed_ns) {
  cuda_graph_t *g = (cuda_graph_t *)base;
  hcq__runner_t *r = &base->runner;
  for (size_t k = 0; k < r->ninputs; k++) g->input_addrs[k] = r->pending_inputs[k]->addr;
  const uint32_t *changed;
  size_t nchanged;
  hcq_status_t st =
      hcq__update_plan_prepare(g->plan, g->input_addrs, r->pending_values, &changed, &nchanged);
  if (st) return st;
  uint64_t calls = 0;
  if (nchanged && !(st = hcq__cuda_push(dev0(g)))) {
    st = apply_updates(g, changed, nchanged, &calls);
    hcq__cuda_pop(dev0(g));
  }
  g->base.stats.last_replay_updates = calls;
  g->base.stats.total_updates += calls;
  if (st) {
    hcq__update_plan_abort(g->plan);
    return st;
  }
  hcq__update_plan_commit(g->plan);

  hcq__device_lock_many(r->devices, r->ndevices);
  st = launch_locked(g, wait);
  hcq__device_unlock_many(r->devices, r->ndevices);
  if (st) return st;
  g->launched = true;
  g->base.stats.replays++;
  hcq__runner_commit(r);
  if (wait) {
    /* A caller retrying on TIMEOUT must not launch it a second time. */
    if ((st = wait_end(g)) && hcq_status_code(st) == HCQ_DEVICE_LOST)
      return hcq_status_annotate(
          st,
          "this replay of %s was queued, but the device was lost before it finished: its work "
          "was dropped",
          r->label);
    if (st)
      return hcq_status_annotate(
          st,
          "this replay of %s was queued but did not finish in time; it stays queued and "
          "runs when the device gets to it: do not run it again",
          r->label);
    float ms = 0;
    const hcq__cuda_api_t *api = api_of(g);
    if (!(st = hcq__cuda_push(dev0(g)))) {
      hcq_CUresult rc = api->cuEventElapsedTime(&ms, g->start, g->end);
      hcq__cuda_pop(dev0(g));
      if (rc) st = hcq__cuda_fail(dev0(g), rc, "cuEventElapsedTime");
    }
    if (!st && out_elapsed_ns) *out_elapsed_ns = (uint64_t)((double)ms * 1e6);
  }
  return st;
}

/* ---- the rest of the vtable ---- */

static void free_graph(cuda_graph_t *g) {
  hcq_device_t *d0 = g->base.runner.ndevices ? dev0(g) : NULL;
  if (d0 && (g->exec || g->graph || g->start || g->end)) {
    const hcq__cuda_api_t *api = api_of(g);
    hcq_status_t st = hcq__cuda_push(d0);
    if (!st) {
      /* An executable graph still running is freed by the driver once it finishes. */
      if (g->exec) api->cuGraphExecDestroy(g->exec);
      if (g->graph) api->cuGraphDestroy(g->graph);
      if (g->start) api->cuEventDestroy(g->start);
      if (g->end) api->cuEventDestroy(g->end);
      hcq__cuda_pop(d0);
    }
    hcq_status_destroy(st);
  }
  hcq__update_plan_free(g->plan);
  free(g->nodes);
  free(g->input_addrs);
  hcq__graph_struct_free(&g->base);
}

static hcq_status_t cuda_graph_destroy(hcq_graph_t *base) {
  cuda_graph_t *g = (cuda_graph_t *)base;
  hcq_status_t st = wait_end(g);
  if (st) return st;
  free_graph(g);
  return NULL;
}

static hcq_status_t cuda_graph_destroy_anyway(hcq_graph_t *base) {
  free_graph((cuda_graph_t *)base);
  return NULL;
}

static const hcq__graph_vtable_t cuda_graph_vtable = {
    .kind = "cuda",
    .destroy = cuda_graph_destroy,
    .destroy_anyway = cuda_graph_destroy_anyway,
    .run = cuda_graph_run,
};

hcq_status_t hcq__cuda_graph_create(hcq__runner_t *runner, bool profile, unsigned inflight,
                                    hcq_graph_t **out) {
  (void)inflight;
  (void)profile; /* no per-item profile (hcq_graph_profile says so); replays with wait are timed
                    with CUDA events */
  if (runner->ndevices > HCQ__GRAPH_MAX_DEVICES)
    return hcq_status_make(HCQ_INVALID_ARGUMENT,
                           "a CUDA graph spans at most %d devices; these items use %zu",
                           HCQ__GRAPH_MAX_DEVICES, runner->ndevices);
  cuda_graph_t *g = hcq__graph_alloc(sizeof(*g), &cuda_graph_vtable, runner);
  if (!g) return oom();
  hcq_status_t st = build(g);
  if (st) {
    /* The runner stays with the caller, who releases it. */
    free_graph(g);
    return st;
  }
  *out = &g->base;
  return NULL;
}
