/* The Metal graph (docs/design.md, "The Metal graph"; tinygrad's MetalGraph): kernel items encoded
 * once into an indirect command buffer, one concurrent-dispatch command per item followed by a
 * barrier, its buffers bound at their indices and its values read from one shared int buffer bound
 * after them.
 *
 * A replay encodes one command buffer on the device's engine, in order with its eager work: a
 * compute encoder that declares every buffer resident (useResources:count:usage:), a dummy dispatch
 * per pipeline where the GPU family needs it (below), executeCommandsInBuffer:withRange:, labelled
 * "batched N". With wait it reports the command buffer's GPU start-to-end time.
 *
 * Beyond tinygrad's MetalGraph: the graph keeps its encoded state in instances (HCQ_GRAPH_INFLIGHT
 * or the inflight option, default 2), each an ICB with its own value buffer and its own update plan
 * (update_plan.h). A replay takes the next instance, waits only if that instance's last replay has
 * not finished, and re-sets only the commands whose buffers or dims differ from what that ICB holds
 * (values are memory writes, no ICB call). So an unchanged replay makes no ICB call, and a replay
 * does not wait for the one before it. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "core/buffer.h"
#include "core/host_wait.h"
#include "core/options.h"
#include "core/signal.h"
#include "core/status.h"
#include "graph/graph_internal.h"
#include "graph/update_plan.h"
#include "metal/metal_internal.h"

#define MAX_INSTANCES 8

typedef struct mtl_held_cmd {
  uint64_t *args; /* nbufs addresses the command binds */
  uint32_t global[3], local[3];
  bool empty; /* reset (no dispatch): a dim is 0 */
} mtl_held_cmd_t;

typedef struct mtl_inst {
  struct mtl_graph *g;
  hcq_id icb, vals_buf;
  int32_t *vals;
  hcq__update_plan_t *plan;
  mtl_held_cmd_t *held;
  uint64_t *held_args;
  hcq_id *resources;
  size_t nresources;
  bool resources_stale;
  _Atomic bool busy;
  bool failed;
  uint64_t elapsed_ns;
} mtl_inst_t;

typedef struct mtl_graph {
  struct hcq_graph base;
  hcq_device_t *dev;
  const hcq__mtl_api_t *api;
  size_t n;
  uint32_t *vals_at; /* per item: first int of its values in an instance's value buffer */
  size_t nvals_total;
  hcq_id *pipelines; /* distinct, for the dummy dispatches */
  size_t npipelines;
  bool needs_fix;
  mtl_inst_t inst[MAX_INSTANCES];
  unsigned ninst, next_inst;
  uint64_t *input_addrs;
  char label[32];
  hcq_id label_str; /* label as an NSString, made once: replays only set it */
} mtl_graph_t;

#define MSG(ret, ...) HCQ__MSG(g->api, ret, ##__VA_ARGS__)
#define SEL(name) g->api->sel.name

static hcq_status_t oom(void) {
  return hcq_status_make(HCQ_OUT_OF_MEMORY, "out of memory building a Metal graph");
}

static const hcq__mtl_kernel_t *kernel_of(const mtl_graph_t *g, size_t j) {
  return g->base.runner.items[j].kernel.program->impl.object;
}

/* Encodes command j of in from v where it differs from what in holds (all when full); returns the
 * number of ICB calls made. */
static uint64_t encode_command(mtl_graph_t *g, mtl_inst_t *in, uint32_t j,
                               const hcq__plan_values_t *v, bool full) {
  const hcq_kernel_item_t *k = &g->base.runner.items[j].kernel;
  mtl_held_cmd_t *h = &in->held[j];
  uint64_t calls = 0;
  memcpy(in->vals + g->vals_at[j], v->vals, 4 * k->nvals); /* values are memory: no ICB call */
  bool empty = false;
  for (int i = 0; i < 3; i++) empty |= v->global[i] == 0 || v->local[i] == 0;
  hcq_id cmd = MSG(hcq_id, hcq_NSUInteger)(in->icb, SEL(indirectComputeCommandAtIndex), j);
  if (empty) {
    if (!h->empty || full) MSG(void)(cmd, SEL(reset)), calls++;
    h->empty = true;
    return calls;
  }
  bool all = full || h->empty; /* a reset command has lost its state */
  if (all) {
    MSG(void, hcq_id)(cmd, SEL(setComputePipelineState), kernel_of(g, j)->pipeline), calls++;
    MSG(void, hcq_id, hcq_NSUInteger, hcq_NSUInteger)
    (cmd, SEL(setKernelBuffer), in->vals_buf, (hcq_NSUInteger)g->vals_at[j] * 4, k->nbufs), calls++;
  }
  for (size_t i = 0; i < k->nbufs; i++) {
    if (!all && h->args[i] == v->args[i]) continue;
    uint64_t off = 0;
    hcq_id buf = hcq__mtl_buffer_at(g->dev, v->args[i], &off);
    MSG(void, hcq_id, hcq_NSUInteger, hcq_NSUInteger)
    (cmd, SEL(setKernelBuffer), buf, (hcq_NSUInteger)off, i), calls++;
    h->args[i] = v->args[i];
    in->resources_stale = true;
  }
  if (all || memcmp(h->global, v->global, sizeof(h->global)) ||
      memcmp(h->local, v->local, sizeof(h->local))) {
    hcq_MTLSize grid = {v->global[0], v->global[1], v->global[2]},
                group = {v->local[0], v->local[1], v->local[2]};
    MSG(void, hcq_MTLSize, hcq_MTLSize)
    (cmd, SEL(concurrentDispatchThreadgroups), grid, group), calls++;
    memcpy(h->global, v->global, sizeof(h->global));
    memcpy(h->local, v->local, sizeof(h->local));
  }
  if (all) MSG(void)(cmd, SEL(setBarrier)), calls++;
  h->empty = false;
  return calls;
}

/* Every buffer the instance's commands bind, once, plus its value buffer. */
static hcq_status_t collect_resources(mtl_graph_t *g, mtl_inst_t *in) {
  size_t n = 0;
  for (size_t j = 0; j < g->n; j++) {
    const hcq_kernel_item_t *k = &g->base.runner.items[j].kernel;
    for (size_t i = 0; i < k->nbufs; i++) {
      uint64_t off;
      hcq_id buf = hcq__mtl_buffer_at(g->dev, in->held[j].args[i], &off);
      bool dup = false;
      for (size_t r = 0; r < n && !dup; r++) dup = in->resources[r] == buf;
      if (buf && !dup) in->resources[n++] = buf;
    }
  }
  in->resources[n++] = in->vals_buf;
  in->nresources = n;
  in->resources_stale = false;
  return NULL;
}

static hcq_status_t build_instance(mtl_graph_t *g, mtl_inst_t *in) {
  hcq__runner_t *r = &g->base.runner;
  in->g = g;
  hcq_status_t st = hcq__update_plan_for_runner(r, &in->plan);
  if (st) return st;
  size_t nargs = 0;
  for (size_t j = 0; j < g->n; j++) nargs += r->items[j].kernel.nbufs;
  in->held = calloc(g->n, sizeof(*in->held));
  in->held_args = calloc(nargs + 1, sizeof(uint64_t));
  in->resources = calloc(nargs + 1, sizeof(hcq_id));
  if (!in->held || !in->held_args || !in->resources) return oom();
  for (size_t j = 0, at = 0; j < g->n; at += r->items[j].kernel.nbufs, j++)
    in->held[j].args = in->held_args + at;
  hcq_id device = hcq__mtl_device(g->dev);
  size_t vbytes = g->nvals_total * 4 < 64 ? 64 : g->nvals_total * 4;
  in->vals_buf = MSG(hcq_id, hcq_NSUInteger, hcq_NSUInteger)(
      device, SEL(newBufferWithLength), vbytes, HCQ_MTL_RESOURCE_STORAGE_SHARED);
  in->vals = in->vals_buf ? MSG(void *)(in->vals_buf, SEL(contents)) : NULL;
  if (!in->vals)
    return hcq_status_make(HCQ_OUT_OF_MEMORY, "%s: no memory for a Metal graph's value buffer",
                           g->dev->name);
  hcq_id desc = MSG(hcq_id)(g->api->MTLIndirectCommandBufferDescriptor, SEL(new_));
  MSG(void, hcq_NSUInteger)(desc, SEL(setCommandTypes), HCQ_MTL_INDIRECT_CONCURRENT_DISPATCH);
  MSG(void, signed char)(desc, SEL(setInheritBuffers), 0);
  MSG(void, signed char)(desc, SEL(setInheritPipelineState), 0);
  MSG(void, hcq_NSUInteger)(desc, SEL(setMaxKernelBufferBindCount), HCQ_MTL_MAX_BUFFER_BINDS);
  in->icb = MSG(hcq_id, hcq_id, hcq_NSUInteger, hcq_NSUInteger)(
      device, SEL(newIndirectCommandBuffer), desc, g->n, 0);
  MSG(void)(desc, SEL(release));
  if (!in->icb)
    return hcq_status_make(HCQ_UNAVAILABLE,
                           "%s: newIndirectCommandBufferWithDescriptor failed (%zu commands)",
                           g->dev->name, g->n);
  for (uint32_t j = 0; j < g->n; j++) {
    hcq__plan_values_t v;
    hcq__update_plan_values(in->plan, j, &v);
    encode_command(g, in, j, &v, true);
  }
  return collect_resources(g, in);
}

/* Every in-flight instance's ICB, whether the GPU needs the pipelines dispatched before an ICB, and
 * the label as an NSString; inside an autorelease pool. */
static hcq_status_t build_instances(mtl_graph_t *g) {
  for (unsigned k = 0; k < g->ninst; k++) HCQ__TRY(build_instance(g, &g->inst[k]));
  /* Apple's M1 and M2 GPUs (the ICB classes before AGXG15X) run an ICB's commands without the
   * pipelines' state unless each pipeline was dispatched once in the encoder: tinygrad's MetalGraph
   * dispatches every pipeline with an empty grid before the ICB there. */
  g->needs_fix = strcmp(g->api->object_getClassName(g->inst[0].icb),
                        "AGXG15XFamilyIndirectCommandBuffer") != 0;
  g->label_str = MSG(hcq_id)(hcq__mtl_string(g->api, g->label), SEL(retain));
  return NULL;
}

static hcq_status_t build(mtl_graph_t *g, unsigned inflight) {
  hcq__runner_t *r = &g->base.runner;
  for (size_t j = 0; j < r->nitems; j++) {
    const hcq_exec_item_t *it = &r->items[j];
    if (it->kind != HCQ_ITEM_KERNEL)
      return hcq_status_make(
          HCQ_INVALID_ARGUMENT,
          "item %zu: a Metal graph holds kernel items only, and this is a transfer "
          "(run it eagerly; the JIT does)",
          j);
    if (it->kernel.nbufs + 1 > HCQ_MTL_MAX_BUFFER_BINDS)
      return hcq_status_make(HCQ_INVALID_ARGUMENT,
                             "item %zu (%s): %zu buffers; a Metal graph's commands bind at most %d "
                             "(and the values after them)",
                             j, it->kernel.program->name, it->kernel.nbufs,
                             HCQ_MTL_MAX_BUFFER_BINDS - 1);
  }
  g->n = r->nitems;
  g->vals_at = calloc(g->n + 1, sizeof(uint32_t));
  g->pipelines = calloc(g->n + 1, sizeof(hcq_id));
  g->input_addrs = calloc(r->ninputs + 1, sizeof(uint64_t));
  if (!g->vals_at || !g->pipelines || !g->input_addrs) return oom();
  for (size_t j = 0; j < g->n; j++) {
    g->vals_at[j] = (uint32_t)g->nvals_total;
    g->nvals_total += r->items[j].kernel.nvals;
    hcq_id ps = kernel_of(g, j)->pipeline;
    bool dup = false;
    for (size_t p = 0; p < g->npipelines && !dup; p++) dup = g->pipelines[p] == ps;
    if (!dup) g->pipelines[g->npipelines++] = ps;
  }
  if (!inflight) inflight = hcq__options()->graph_inflight;
  g->ninst = inflight < 1 ? 1 : inflight > MAX_INSTANCES ? MAX_INSTANCES : inflight;
  snprintf(g->label, sizeof(g->label), "batched %zu", g->n);
  void *pool = g->api->objc_autoreleasePoolPush();
  hcq_status_t st = build_instances(g);
  g->api->objc_autoreleasePoolPop(pool);
  if (st) return st;
  g->base.stats.updatable_nodes = hcq__update_plan_updatable_count(g->inst[0].plan);
  return NULL;
}

/* ---- replay (on the device's engine) ---- */

static hcq_id encode_replay(void *ctx, hcq_device_t *dev, hcq_id queue, char *err,
                            size_t err_size) {
  mtl_inst_t *in = ctx;
  mtl_graph_t *g = in->g;
  (void)dev;
  hcq_id cb = MSG(hcq_id)(queue, SEL(commandBuffer));
  hcq_id enc = cb ? MSG(hcq_id)(cb, SEL(computeCommandEncoder)) : NULL;
  if (!enc) {
    snprintf(err, err_size, "no command buffer or compute encoder for %s", g->base.runner.label);
    return NULL;
  }
  MSG(void, const hcq_id *, hcq_NSUInteger, hcq_NSUInteger)
  (enc, SEL(useResources), in->resources, in->nresources, HCQ_MTL_RESOURCE_USAGE_READ_WRITE);
  if (g->needs_fix) {
    hcq_MTLSize none = {0, 0, 0};
    for (size_t p = 0; p < g->npipelines; p++) {
      MSG(void, hcq_id)(enc, SEL(setComputePipelineState), g->pipelines[p]);
      MSG(void, hcq_MTLSize, hcq_MTLSize)(enc, SEL(dispatchThreadgroups), none, none);
    }
  }
  hcq_NSRange range = {0, g->n};
  MSG(void, hcq_id, hcq_NSRange)(enc, SEL(executeCommandsInBuffer), in->icb, range);
  MSG(void)(enc, SEL(endEncoding));
  MSG(void, hcq_id)(cb, SEL(setLabel), g->label_str);
  return cb;
}

static void replay_done(void *ctx, hcq_id cb, bool failed) {
  mtl_inst_t *in = ctx;
  mtl_graph_t *g = in->g;
  in->failed = failed;
  if (cb && !failed) {
    double t0 = MSG(double)(cb, SEL(GPUStartTime)), t1 = MSG(double)(cb, SEL(GPUEndTime));
    in->elapsed_ns = t1 > t0 ? (uint64_t)((t1 - t0) * 1e9) : 0;
  }
  atomic_store_explicit(&in->busy, false, memory_order_release);
}

static hcq_status_t wait_instance(mtl_graph_t *g, mtl_inst_t *in) {
  uint64_t deadline = hcq__deadline_after_ms(HCQ_TIMEOUT_DEFAULT);
  for (unsigned i = 0; atomic_load_explicit(&in->busy, memory_order_acquire); i++) {
    hcq_status_t st = hcq__device_check(g->dev);
    if (st) return st;
    if (deadline && hcq__now_ns() >= deadline) {
      st = hcq_status_make(HCQ_TIMEOUT, "timed out after %" PRId64 " ms waiting for a replay of %s",
                           hcq__options()->wait_timeout_ms, g->base.runner.label);
      return hcq__device_annotate_report(st, &g->dev, 1);
    }
    if (i < 200) {
      hcq__spin_step(i);
    } else {
      struct timespec ts = {0, 50000};
      nanosleep(&ts, NULL);
    }
  }
  return NULL;
}

static hcq_status_t metal_graph_run(hcq_graph_t *base, bool wait, uint64_t *out_elapsed_ns) {
  mtl_graph_t *g = (mtl_graph_t *)base;
  hcq__runner_t *r = &base->runner;
  mtl_inst_t *in = &g->inst[g->next_inst];
  hcq_status_t st = wait_instance(g, in);
  if (st) return st;
  for (size_t k = 0; k < r->ninputs; k++) g->input_addrs[k] = r->pending_inputs[k]->addr;
  const uint32_t *changed;
  size_t nchanged;
  if ((st = hcq__update_plan_prepare(in->plan, g->input_addrs, r->pending_values, &changed,
                                     &nchanged)))
    return st;
  uint64_t calls = 0;
  void *pool = g->api->objc_autoreleasePoolPush();
  for (size_t i = 0; i < nchanged; i++) {
    hcq__plan_values_t v;
    hcq__update_plan_values(in->plan, changed[i], &v);
    calls += encode_command(g, in, changed[i], &v, false);
  }
  g->api->objc_autoreleasePoolPop(pool);
  hcq__update_plan_commit(in->plan);
  if (in->resources_stale) collect_resources(g, in);
  g->base.stats.last_replay_updates = calls;
  g->base.stats.total_updates += calls;

  hcq_device_t *dev = g->dev;
  pthread_mutex_lock(&dev->lock);
  st = hcq__device_prepare_submit(dev);
  if (!st) {
    uint32_t words[HCQ__LEN_SIGNAL] = {HCQ__HDR(SIGNAL)};
    hcq__wr64(words + HCQ__SIGNAL_ADDR, dev->timeline->mem.addr);
    words[HCQ__SIGNAL_VALUE] = (uint32_t)dev->timeline_value;
    hcq__mtl_job_t job = {encode_replay, replay_done, in};
    atomic_store_explicit(&in->busy, true, memory_order_relaxed);
    st = hcq__mtl_submit_job(dev, &job, words, HCQ__LEN_SIGNAL);
    if (st)
      atomic_store(&in->busy, false);
    else
      hcq__timeline_advance(dev);
  }
  pthread_mutex_unlock(&dev->lock);
  if (st) return st;
  g->next_inst = (g->next_inst + 1) % g->ninst;
  g->base.stats.replays++;
  hcq__runner_commit(r);
  if (wait) {
    if ((st = wait_instance(g, in)) && hcq_status_code(st) == HCQ_DEVICE_LOST)
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
    if (in->failed) return hcq__device_check(dev);
    if (out_elapsed_ns) *out_elapsed_ns = in->elapsed_ns;
  }
  return NULL;
}

/* ---- the rest of the vtable ---- */

static void free_graph(mtl_graph_t *g) {
  for (unsigned k = 0; k < MAX_INSTANCES; k++) {
    mtl_inst_t *in = &g->inst[k];
    if (in->icb) MSG(void)(in->icb, SEL(release));
    if (in->vals_buf) MSG(void)(in->vals_buf, SEL(release));
    hcq__update_plan_free(in->plan);
    free(in->held);
    free(in->held_args);
    free(in->resources);
  }
  if (g->label_str) MSG(void)(g->label_str, SEL(release));
  free(g->vals_at);
  free(g->pipelines);
  free(g->input_addrs);
  hcq__graph_struct_free(&g->base);
}

static hcq_status_t metal_graph_destroy(hcq_graph_t *base) {
  mtl_graph_t *g = (mtl_graph_t *)base;
  for (unsigned k = 0; k < g->ninst; k++) {
    hcq_status_t st = wait_instance(g, &g->inst[k]);
    if (st) return st;
  }
  free_graph(g);
  return NULL;
}

static hcq_status_t metal_graph_destroy_anyway(hcq_graph_t *base) {
  mtl_graph_t *g = (mtl_graph_t *)base;
  bool busy = false;
  for (unsigned k = 0; k < g->ninst; k++) busy |= atomic_load(&g->inst[k].busy);
  if (busy) { /* the engine may still encode from it: keep it (a lost device drops the job soon) */
    hcq__keep(g);
    return NULL;
  }
  free_graph(g);
  return NULL;
}

static const hcq__graph_vtable_t metal_graph_vtable = {
    .kind = "metal",
    .destroy = metal_graph_destroy,
    .destroy_anyway = metal_graph_destroy_anyway,
    .run = metal_graph_run,
};

hcq_status_t hcq__mtl_graph_create(hcq__runner_t *runner, bool profile, unsigned inflight,
                                   hcq_graph_t **out) {
  (void)profile; /* no per-item profile (hcq_graph_profile says so); replays with wait are timed by
                    the GPU */
  if (runner->ndevices != 1)
    return hcq_status_make(HCQ_INVALID_ARGUMENT,
                           "a Metal graph runs on one device; these items use %zu",
                           runner->ndevices);
  const hcq__mtl_api_t *api = hcq__mtl_api(NULL);
  mtl_graph_t *g = hcq__graph_alloc(sizeof(*g), &metal_graph_vtable, runner);
  if (!g) return oom();
  g->dev = runner->devices[0];
  g->api = api;
  hcq_status_t st = build(g, inflight);
  if (st) {
    free_graph(g); /* the runner stays with the caller, who releases it */
    return st;
  }
  *out = &g->base;
  return NULL;
}
