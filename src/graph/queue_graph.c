/* The queue graph, the HCQ graph runner (docs/design.md, "The HCQ graph"): exec items scheduled
 * once onto one compute queue per device and a copy queue per transfer-source device, bound, and
 * replayed by patching symbols and ringing one doorbell per queue.
 *
 * Synchronisation. Every queue has a signal; item j signals j+1 on its queue's signal when someone
 * waits for it (transfers always do). Items wait for the items they depend on (buffer access by
 * base buffer, plus the previous item of their queue), dropping waits the queue already did and
 * waits on itself (queues run in order). Before touching a device's buffers, a queue must know that
 * device finished its work from before the replay: its compute queue waits for the device timeline
 * and the host kickoff, then sets the device signal to K (the replay number); any queue that has
 * not learned (directly or through queues it waited for) that a device is ready waits for that
 * device signal. Each compute queue ends by waiting for the copy queues that fed its device and
 * then signals the device timeline, so eager work after the replay is ordered after it. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>

#include "core/buffer.h"
#include "core/options.h"
#include "core/queue.h"
#include "core/remote.h"
#include "core/status.h"
#include "graph/graph_testing.h"
#include "graph/queue_graph_internal.h"

static hcq_status_t oom(void) {
  return hcq_status_make(HCQ_OUT_OF_MEMORY, "out of memory building a graph");
}

static inline hcq_operand_t addr_of(const hcq_signal_t *s) {
  return hcq_imm((int64_t)hcq_signal_address(s));
}

/* ---- variables ---- */

static hcq_status_t make_var(const char *fmt, unsigned index, int64_t max, hcq_expr_t **out) {
  char name[HCQ_VAR_NAME_MAX + 1];
  snprintf(name, sizeof(name), fmt, index);
  return hcq_var_create(name, 0, max, out);
}

static hcq_status_t make_vars(queue_graph_t *g) {
  hcq__runner_t *r = &g->base.runner;
  HCQ__TRY(make_var("graph_kickoff", 0, UINT32_MAX, &g->kickoff_var));
  for (size_t d = 0; d < g->ndev; d++) {
    HCQ__TRY(make_var("graph_timeline_value_%u", (unsigned)d, UINT32_MAX - 1, &g->timeline_val[d]));
    HCQ__TRY(make_var("graph_timeline_signal_%u", (unsigned)d, INT64_MAX, &g->timeline_addr[d]));
  }
  g->input_vars = calloc(r->ninputs + 1, sizeof(*g->input_vars));
  if (!g->input_vars) return oom();
  for (size_t k = 0; k < r->ninputs; k++)
    HCQ__TRY(make_var("graph_input_%u", (unsigned)k, INT64_MAX, &g->input_vars[k]));
  g->user_at = 1;
  g->timeline_at = g->user_at + r->vars.len;
  g->inputs_at = g->timeline_at + 2 * g->ndev;
  g->nvalues = g->inputs_at + r->ninputs;
  g->values = calloc(g->nvalues, sizeof(*g->values));
  if (!g->values) return oom();
  g->values[0].var = g->kickoff_var;
  for (size_t i = 0; i < r->vars.len; i++) g->values[g->user_at + i].var = r->vars.data[i];
  for (size_t d = 0; d < g->ndev; d++) {
    g->values[g->timeline_at + 2 * d].var = g->timeline_val[d];
    g->values[g->timeline_at + 2 * d + 1].var = g->timeline_addr[d];
  }
  for (size_t k = 0; k < r->ninputs; k++) g->values[g->inputs_at + k].var = g->input_vars[k];
  return NULL;
}

/* ---- queue building (docs/design.md, "The HCQ graph", build step 6) ---- */

static hcq_status_t get_queue(graph_inst_t *in, uint32_t q, hcq_queue_t **out) {
  if (!in->queues[q]) {
    hcq_status_t st = hcq_queue_create(q & 1 ? HCQ_QUEUE_COPY : HCQ_QUEUE_COMPUTE, &in->queues[q]);
    if (st) return st;
  }
  *out = in->queues[q];
  return NULL;
}

/* The operand of item j's argument i: its input variable if an input slot names that argument. */
static hcq_operand_t buffer_operand(const queue_graph_t *g, uint32_t j, uint32_t i,
                                    const hcq_buffer_t *b) {
  const hcq__runner_t *r = &g->base.runner;
  for (size_t s = 0; s < r->slots.len; s++)
    if (r->slots.data[s].item == j && r->slots.data[s].arg == i)
      return hcq_sym(g->input_vars[r->slots.data[s].input]);
  return hcq_imm((int64_t)b->addr);
}

static hcq_operand_t stamp_addr(const graph_inst_t *in, uint32_t dev, uint32_t stamp) {
  return hcq_imm((int64_t)(hcq_buffer_address(in->prof_stamps[dev]) +
                           (uint64_t)stamp * sizeof(hcq__signal_words_t)));
}

/* Kernel item j's arguments and launch on q. */
static hcq_status_t encode_kernel(queue_graph_t *g, graph_inst_t *in, uint32_t j, hcq_queue_t *q) {
  const hcq_kernel_item_t *k = &g->base.runner.items[j].kernel;
  const item_sched_t *s = &g->sched[j];
  uint32_t d = s->queue / 2;
  hcq_operand_t bufs[HCQ_MAX_KERNEL_BUFS];
  for (uint32_t i = 0; i < k->nbufs; i++) bufs[i] = buffer_operand(g, j, i, k->bufs[i]);
  HCQ__TRY(hcq_queue_kernargs(q, in->kernargs[d], s->kernargs_offset, bufs, k->nbufs, k->vals,
                              k->nvals));
  return hcq_queue_exec(
      q, k->program, hcq_imm((int64_t)(hcq_buffer_address(in->kernargs[d]) + s->kernargs_offset)),
      k->nbufs, k->global, k->local);
}

/* Transfer item j's copy on q. */
static hcq_status_t encode_transfer(queue_graph_t *g, uint32_t j, hcq_queue_t *q) {
  hcq__runner_t *r = &g->base.runner;
  const hcq_transfer_item_t *t = &r->items[j].transfer;
  uint32_t d = g->sched[j].queue / 2;
  /* A cross-rank transfer run by this rank's engine: its tag word also carries the graph id. */
  const hcq__remote_hooks_t *hooks = atomic_load(&hcq__remote);
  if (hooks && !hcq__device_is_remote(r->devices[d]) &&
      (hcq__device_is_remote(t->dst->dev) || hcq__device_is_remote(t->src->dev)))
    q->tag = hooks->graph_copy_tag(j);
  hcq_status_t st = hcq_queue_copy(q, buffer_operand(g, j, 0, t->dst),
                                   buffer_operand(g, j, 1, t->src), hcq_imm((int64_t)t->bytes));
  q->tag = j + 1;
  return st;
}

/* Item j's words on its queue q: its waits, timestamps, the work itself, its signal. */
static hcq_status_t encode_item_words(queue_graph_t *g, graph_inst_t *in, uint32_t j,
                                      hcq_queue_t *q) {
  const item_sched_t *s = &g->sched[j];
  uint32_t d = s->queue / 2;
  for (uint32_t i = 0; i < s->nready; i++)
    HCQ__TRY(hcq_queue_wait(q, addr_of(in->dev_sig[g->ready.data[s->ready_at + i]]),
                            hcq_sym(g->kickoff_var)));
  for (uint32_t i = 0; i < s->nwaits; i++) {
    const hcq_graph_wait_t *w = &g->waits.data[s->waits_at + i];
    HCQ__TRY(hcq_queue_wait(q, addr_of(in->queue_sig[w->queue]), hcq_imm(w->value)));
  }
  if (g->profile && s->start_stamp == 2 * j)
    HCQ__TRY(hcq_queue_timestamp(q, stamp_addr(in, d, s->start_stamp)));
  if (g->base.runner.items[j].kind == HCQ_ITEM_KERNEL)
    HCQ__TRY(encode_kernel(g, in, j, q));
  else
    HCQ__TRY(encode_transfer(g, j, q));
  if (g->profile) HCQ__TRY(hcq_queue_timestamp(q, stamp_addr(in, d, s->end_stamp)));
  if (s->signal_value)
    HCQ__TRY(hcq_queue_signal(q, addr_of(in->queue_sig[s->queue]), hcq_imm(s->signal_value)));
  return NULL;
}

static hcq_status_t encode_item(queue_graph_t *g, graph_inst_t *in, uint32_t j) {
  const item_sched_t *s = &g->sched[j];
  if (s->foreign) return NULL;
  hcq_queue_t *q = NULL;
  hcq_status_t st = get_queue(in, s->queue, &q);
  if (st) return hcq_status_annotate(st, "item %u", j);
  q->tag = j + 1; /* hang reports and fault messages name the item */
  st = encode_item_words(g, in, j, q);
  q->tag = 0;
  return st ? hcq_status_annotate(st, "item %u", j) : NULL;
}

/* Kernel arguments: one block per device, each item's block 16-byte aligned. Fills in each kernel
 * item's offset and each device's block size. */
static void layout_kernargs(queue_graph_t *g, uint64_t kernargs_size[HCQ__GRAPH_MAX_DEVICES]) {
  hcq__runner_t *r = &g->base.runner;
  for (uint32_t j = 0; j < r->nitems; j++) {
    const hcq_exec_item_t *it = &r->items[j];
    if (it->kind != HCQ_ITEM_KERNEL || g->sched[j].foreign) continue;
    uint32_t d = g->sched[j].queue / 2;
    g->sched[j].kernargs_offset = kernargs_size[d];
    kernargs_size[d] += hcq_kernargs_size(it->kernel.nbufs, it->kernel.nvals);
  }
}

/* The instance's memory and signals on device d; tag tells instances apart in their labels. */
static hcq_status_t create_device_objects(queue_graph_t *g, graph_inst_t *in, size_t d,
                                          uint64_t kernargs_size, const char *tag) {
  hcq__runner_t *r = &g->base.runner;
  hcq_device_t *dev = r->devices[d];
  char name[96];
  if (kernargs_size) {
    HCQ__TRY(hcq__buffer_create_host_visible(dev, kernargs_size, &in->kernargs[d]));
    snprintf(name, sizeof(name), "kernargs of %s%s", r->label, tag);
    hcq_buffer_set_label(in->kernargs[d], name);
    hcq__buffer_set_mem_class(in->kernargs[d], HCQ__MEMC_KERNARGS);
    hcq__obj_set_holder(&in->kernargs[d]->obj, &r->objs[d]); /* the graph's, not the user's */
  }
  if (g->profile) {
    HCQ__TRY(hcq__buffer_create_host_visible(dev, 2 * r->nitems * sizeof(hcq__signal_words_t),
                                             &in->prof_stamps[d]));
    snprintf(name, sizeof(name), "profile timestamps of %s%s", r->label, tag);
    hcq_buffer_set_label(in->prof_stamps[d], name);
    hcq__buffer_set_mem_class(in->prof_stamps[d], HCQ__MEMC_PROFILE);
    hcq__obj_set_holder(&in->prof_stamps[d]->obj, &r->objs[d]);
  }
  snprintf(name, sizeof(name), "graph device signal of %s%s", dev->name, tag);
  HCQ__TRY(hcq__signal_create_internal(dev, name, 0, &in->dev_sig[d]));
  snprintf(name, sizeof(name), "%s done on %s%s", r->label, dev->name, tag);
  HCQ__TRY(hcq__signal_create_internal(dev, name, 0, &in->done_sig[d]));
  for (int kind = 0; kind < 2; kind++) {
    if (kind == 1 && g->last_item[2 * d + 1] == NO_ITEM) continue;
    snprintf(name, sizeof(name), "graph %s queue signal of %s%s", kind ? "copy" : "compute",
             dev->name, tag);
    HCQ__TRY(hcq__signal_create_internal(dev, name, 0, &in->queue_sig[2 * d + kind]));
  }
  return NULL;
}

/* Prologue of every compute queue: barrier, previous work on the device, kickoff, device ready. */
static hcq_status_t encode_prologues(queue_graph_t *g, graph_inst_t *in) {
  for (uint32_t d = 0; d < g->ndev; d++) {
    hcq_queue_t *q = NULL;
    if (!g->active[d]) continue;
    HCQ__TRY(get_queue(in, 2 * d, &q));
    HCQ__TRY(hcq_queue_memory_barrier(q));
    HCQ__TRY(hcq_queue_wait(q, hcq_sym(g->timeline_addr[d]), hcq_sym(g->timeline_val[d])));
    HCQ__TRY(hcq_queue_wait(q, addr_of(in->kickoff), hcq_sym(g->kickoff_var)));
    HCQ__TRY(hcq_queue_signal(q, addr_of(in->dev_sig[d]), hcq_sym(g->kickoff_var)));
  }
  return NULL;
}

/* Epilogue of every compute queue: wait for the copy queues that fed the device, then signal its
 * timeline. */
static hcq_status_t encode_epilogues(queue_graph_t *g, graph_inst_t *in) {
  for (uint32_t d = 0; d < g->ndev; d++) {
    hcq_queue_t *q = in->queues[2 * d];
    if (!g->active[d]) continue;
    uint64_t sources = g->copied_into[d] | (UINT64_C(1) << d);
    for (uint32_t s = 0; s < g->ndev; s++) {
      uint32_t cq = 2 * s + 1;
      if (!(sources & (UINT64_C(1) << s)) || g->last_item[cq] == NO_ITEM) continue;
      HCQ__TRY(hcq_queue_wait(q, addr_of(in->queue_sig[cq]), hcq_imm(g->last_item[cq] + 1)));
    }
    hcq_expr_t *one = hcq_expr_const(1),
               *next = hcq_expr_binary(HCQ_EXPR_ADD, g->timeline_val[d], one);
    hcq_status_t st =
        next ? hcq_queue_signal(q, hcq_sym(g->timeline_addr[d]), hcq_sym(next)) : oom();
    hcq_expr_release(one);
    hcq_expr_release(next);
    if (st) return st;
    /* Last: once the host sees it, it may patch this instance's words for the next replay, the
     * timeline signal's value among them. */
    HCQ__TRY(hcq_queue_signal(q, addr_of(in->done_sig[d]), hcq_sym(g->kickoff_var)));
  }
  return NULL;
}

static hcq_status_t build_instance(queue_graph_t *g, graph_inst_t *in, unsigned index) {
  hcq__runner_t *r = &g->base.runner;
  uint64_t kernargs_size[HCQ__GRAPH_MAX_DEVICES] = {0};
  layout_kernargs(g, kernargs_size);
  char tag[24] = "";
  if (g->ninst > 1) snprintf(tag, sizeof(tag), " (instance %u)", index);
  for (size_t d = 0; d < g->ndev; d++)
    HCQ__TRY(create_device_objects(g, in, d, kernargs_size[d], tag));
  char kname[64];
  snprintf(kname, sizeof(kname), "graph kickoff%s", tag);
  HCQ__TRY(hcq__signal_create_internal(r->devices[0], kname, 0, &in->kickoff));

  HCQ__TRY(encode_prologues(g, in));
  for (uint32_t j = 0; j < r->nitems; j++) HCQ__TRY(encode_item(g, in, j));
  HCQ__TRY(encode_epilogues(g, in));
  for (uint32_t q = 0; q < 2 * g->ndev; q++) {
    if (!in->queues[q]) continue;
    char label[160];
    snprintf(label, sizeof(label), "%s %s queue of %s%s", r->label, q & 1 ? "copy" : "compute",
             r->devices[q / 2]->name, tag);
    in->queue_label[q] = strdup(label);
    in->queues[q]->label = in->queue_label[q];
    HCQ__TRY(hcq_queue_bind(in->queues[q], r->devices[q / 2]));
  }
  return NULL;
}

static hcq_status_t build_queues(queue_graph_t *g) {
  for (unsigned i = 0; i < g->ninst; i++) HCQ__TRY(build_instance(g, &g->inst[i], i));
  return NULL;
}

/* ---- profiling (docs/design.md, "The HCQ graph", "Profiling") ---- */

static hcq_status_t build_profile(queue_graph_t *g) {
  hcq__runner_t *r = &g->base.runner;
  size_t n = r->nitems;
  g->prof_entries = calloc(n, sizeof(*g->prof_entries));
  g->prof_names = calloc(n, 80);
  g->prof_deps = calloc(n, sizeof(*g->prof_deps));
  g->prof_ndeps = calloc(n, sizeof(*g->prof_ndeps));
  g->prof_timestamps = calloc(2 * n, sizeof(uint64_t));
  if (!g->prof_entries || !g->prof_names || !g->prof_deps || !g->prof_ndeps || !g->prof_timestamps)
    return oom();
  for (size_t j = 0; j < n; j++) {
    const hcq_exec_item_t *it = &r->items[j];
    const item_sched_t *s = &g->sched[j];
    char *name = g->prof_names + j * 80;
    if (it->kind == HCQ_ITEM_KERNEL)
      snprintf(name, 80, "%s", it->kernel.program->name);
    else
      snprintf(name, 80, "%s -> %s", it->transfer.src->dev->name, it->transfer.dst->dev->name);
    g->prof_entries[j] = (hcq_profile_entry_t){r->devices[s->queue / 2]->name, name, s->start_stamp,
                                               s->end_stamp, it->kind == HCQ_ITEM_TRANSFER};
    g->prof_deps[j] = g->deps.data + s->deps_at;
    g->prof_ndeps[j] = s->ndeps;
  }
  g->prof_event = (hcq_profile_event_t){
      g->prof_entries, n, g->prof_deps, g->prof_ndeps, g->prof_timestamps, 2 * n, 0};
  return NULL;
}

/* Hands the profiler, when it is on, where each item's timestamps land and when a replay ended on
 * each device: it reads every replay once the next one (or destroy, or a flush) has waited for it.
 */
static void trace_register(queue_graph_t *g) {
  if (!hcq__trace_on()) return;
  const hcq__runner_t *r = &g->base.runner;
  hcq__trace_graph_item_t *items = calloc(r->nitems * g->ninst, sizeof(*items));
  hcq__signal_words_t **done = calloc(g->ndev * g->ninst, sizeof(*done));
  for (unsigned k = 0; items && done && k < g->ninst; k++) {
    const graph_inst_t *in = &g->inst[k];
    for (size_t j = 0; j < r->nitems; j++) {
      const item_sched_t *s = &g->sched[j];
      const hcq__signal_words_t *stamps = in->prof_stamps[s->queue / 2]->mem.host;
      bool copy = r->items[j].kind == HCQ_ITEM_TRANSFER;
      items[k * r->nitems + j] =
          (hcq__trace_graph_item_t){g->prof_entries[j].name,
                                    r->devices[s->queue / 2],
                                    copy ? HCQ_QUEUE_COPY : HCQ_QUEUE_COMPUTE,
                                    copy ? r->items[j].transfer.bytes : 0,
                                    &stamps[s->start_stamp],
                                    &stamps[s->end_stamp],
                                    g->deps.data + s->deps_at,
                                    s->ndeps};
    }
    size_t n = 0;
    for (size_t d = 0; d < g->ndev; d++)
      if (g->active[d]) done[k * g->ndev + n++] = in->done_sig[d]->words;
  }
  /* Only the devices a replay signals here: the others' done signals never move. */
  hcq_device_t *devs[HCQ__GRAPH_MAX_DEVICES];
  size_t nactive = 0;
  for (size_t d = 0; d < g->ndev; d++)
    if (g->active[d]) devs[nactive++] = r->devices[d];
  for (unsigned k = 0; done && nactive < g->ndev && k < g->ninst; k++)
    memmove(done + k * nactive, done + k * g->ndev, nactive * sizeof(*done));
  if (items && done)
    g->trace = hcq__trace_graph_register(r->label, items, r->nitems, g->ninst, devs, done, nactive);
  free(items);
  free(done);
}

/* Every instance's last replay, oldest first (all have finished). */
static void trace_collect_all(queue_graph_t *g) {
  if (!g->trace) return;
  for (uint64_t done = 0;;) {
    unsigned pick = g->ninst;
    for (unsigned k = 0; k < g->ninst; k++)
      if (g->inst[k].kickoff_value > done &&
          (pick == g->ninst || g->inst[k].kickoff_value < g->inst[pick].kickoff_value))
        pick = k;
    if (pick == g->ninst) return;
    hcq__trace_graph_collect(g->trace, pick);
    done = g->inst[pick].kickoff_value;
  }
}

static void collect_timestamps(queue_graph_t *g) {
  const hcq__runner_t *r = &g->base.runner;
  memset(g->prof_timestamps, 0, 2 * r->nitems * sizeof(uint64_t));
  for (size_t j = 0; j < r->nitems; j++) {
    const item_sched_t *s = &g->sched[j];
    const hcq__signal_words_t *stamps = g->last_inst->prof_stamps[s->queue / 2]->mem.host;
    g->prof_timestamps[s->start_stamp] =
        atomic_load_explicit(&stamps[s->start_stamp].timestamp, memory_order_acquire);
    g->prof_timestamps[s->end_stamp] =
        atomic_load_explicit(&stamps[s->end_stamp].timestamp, memory_order_acquire);
  }
  g->prof_event.replay = g->kickoff_value;
}

/* ---- replay (docs/design.md, "The HCQ graph", "Replay") ---- */

/* What a timed-out wait tells the caller: a caller retrying on TIMEOUT must know whether the replay
 * it asked for is queued already (running it again would run it twice). */
typedef enum { WAIT_PREVIOUS, WAIT_BEFORE_SUBMIT, WAIT_THIS_REPLAY } wait_kind_t;

/* Waits until the instance's last replay finished on every device. */
static hcq_status_t wait_instance(queue_graph_t *g, graph_inst_t *in, wait_kind_t kind) {
  if (!in->kickoff_value) return NULL;
  hcq__runner_t *r = &g->base.runner;
  for (size_t d = 0; d < g->ndev; d++) {
    if (!g->active[d]) continue;
    hcq_status_t st = hcq__wait_signal(in->done_sig[d], in->kickoff_value, HCQ_TIMEOUT_DEFAULT,
                                       r->devices, g->ndev);
    if (!st) continue;
    if (kind == WAIT_THIS_REPLAY && hcq_status_code(st) == HCQ_DEVICE_LOST)
      return hcq_status_annotate(
          st,
          "this replay of %s was queued, but %s was lost before it finished: a lost device "
          "runs nothing more, so its work was dropped",
          r->label, r->devices[d]->name);
    if (kind == WAIT_THIS_REPLAY)
      return hcq_status_annotate(
          st,
          "this replay of %s was queued but did not finish on %s in time; it stays queued and "
          "runs when the device gets to it: do not run it again",
          r->label, r->devices[d]->name);
    return hcq_status_annotate(
        st, "waiting for the previous replay of %s on %s%s", r->label, r->devices[d]->name,
        kind == WAIT_BEFORE_SUBMIT ? " (this replay was NOT queued: running it again is safe)"
                                   : "");
  }
  return NULL;
}

static hcq_status_t wait_previous(queue_graph_t *g, wait_kind_t kind) {
  for (unsigned i = 0; i < g->ninst; i++) {
    hcq_status_t st = wait_instance(g, &g->inst[i], kind);
    if (st) return st;
  }
  return NULL;
}

/* "item 3 (kernel mix)" for a failing prepare of q, or "" */
static void failed_item(const queue_graph_t *g, const hcq_queue_t *q, char *out, size_t size) {
  out[0] = '\0';
  uint32_t j;
  if (!q->failed_patch || !hcq__tag_item(q->failed_patch->tag, &j) || j >= g->base.runner.nitems)
    return;
  const hcq_exec_item_t *it = &g->base.runner.items[j];
  if (it->kind == HCQ_ITEM_KERNEL)
    snprintf(out, size, "kernel %s", it->kernel.program->name);
  else
    snprintf(out, size, "transfer %s -> %s", it->transfer.src->label, it->transfer.dst->label);
}

/* The kickoff value is a 32-bit payload: restart it (and the signals compared with it) before it
 * overflows, once every instance's replay has finished. */
static hcq_status_t restart_kickoff(queue_graph_t *g) {
  hcq_status_t st = wait_previous(g, WAIT_BEFORE_SUBMIT);
  if (st) return st;
  for (unsigned i = 0; i < g->ninst; i++) {
    graph_inst_t *x = &g->inst[i];
    for (size_t d = 0; d < g->ndev; d++) hcq_signal_set(x->dev_sig[d], 0);
    for (size_t d = 0; d < g->ndev; d++) hcq_signal_set(x->done_sig[d], 0);
    hcq_signal_set(x->kickoff, 0);
    x->kickoff_value = 0;
  }
  g->kickoff_value = 0;
  return NULL;
}

/* Hands every queue of the instance over (the devices are locked, and room on every engine was
 * reserved, so nothing here can fail) and makes it the last replay. */
static inline void commit_replay(queue_graph_t *g, graph_inst_t *in, uint64_t kickoff) {
  hcq__runner_t *r = &g->base.runner;
  g->kickoff_value = kickoff;
  in->kickoff_value = kickoff;
  g->last_inst = in;
  g->next_inst = (g->next_inst + 1) % g->ninst;
  hcq_signal_set(in->kickoff, kickoff);
  for (size_t d = 0; d < g->ndev; d++) {
    hcq_device_t *dev = r->devices[d];
    if (!g->active[d]) continue;
    hcq_status_destroy(hcq__queue_commit_locked(in->queues[2 * d], dev));
    if (in->queues[2 * d + 1])
      hcq_status_destroy(hcq__queue_commit_locked(in->queues[2 * d + 1], dev));
    hcq__timeline_advance(dev);
  }
}

/* With the graph's devices locked: the devices' timelines into the values, then every queue
 * evaluated and room reserved on every engine before any is submitted: a replay runs whole or not
 * at all. */
static hcq_status_t prepare_replay_locked(queue_graph_t *g, graph_inst_t *in) {
  hcq__runner_t *r = &g->base.runner;
  for (size_t d = 0; d < g->ndev; d++) HCQ__TRY(hcq__device_prepare_submit(r->devices[d]));
  for (size_t d = 0; d < g->ndev; d++) {
    hcq_device_t *dev = r->devices[d];
    g->values[g->timeline_at + 2 * d].value = (int64_t)dev->timeline_value - 1;
    g->values[g->timeline_at + 2 * d + 1].value = (int64_t)hcq_signal_address(dev->timeline);
  }
  for (uint32_t q = 0; q < 2 * g->ndev; q++) {
    if (!in->queues[q]) continue;
    hcq_status_t st = hcq__queue_prepare(in->queues[q], g->values, g->nvalues);
    if (!st) continue;
    char what[160];
    failed_item(g, in->queues[q], what, sizeof(what));
    return *what ? hcq_status_annotate(st, "%s", what) : st;
  }
  for (uint32_t q = 0; q < 2 * g->ndev; q++)
    if (in->queues[q]) HCQ__TRY(hcq__queue_reserve_locked(in->queues[q], r->devices[q / 2]));
  return NULL;
}

static hcq_status_t queue_graph_run(hcq_graph_t *base, bool wait, uint64_t *out_elapsed_ns) {
  queue_graph_t *g = (queue_graph_t *)base;
  hcq__runner_t *r = &base->runner;
  uint64_t start = hcq__now_ns();
  /* The next instance in turn: the host waits only when its previous replay has not finished, so
   * up to ninst replays are in flight; the device timeline orders them one after another. */
  unsigned index = g->next_inst;
  graph_inst_t *in = &g->inst[index];
  hcq_status_t st = wait_instance(g, in, WAIT_BEFORE_SUBMIT);
  if (st) return st;
  if (g->trace) hcq__trace_graph_collect(g->trace, index);
  uint64_t submit_start = g->trace ? hcq__now_ns() : 0;

  if (g->kickoff_value >= HCQ_TIMELINE_WRAP && (st = restart_kickoff(g))) return st;
  uint64_t kickoff = g->kickoff_value + 1;
  for (uint32_t q = 0; q < 2 * g->ndev; q++)
    if (in->queue_sig[q]) hcq_signal_set(in->queue_sig[q], 0);

  g->values[0].value = (int64_t)kickoff;
  for (size_t i = 0; i < r->vars.len; i++) g->values[g->user_at + i].value = r->pending_values[i];
  for (size_t k = 0; k < r->ninputs; k++)
    g->values[g->inputs_at + k].value = (int64_t)r->pending_inputs[k]->addr;

  hcq__device_lock_many(r->devices, g->ndev);
  st = prepare_replay_locked(g, in);
  if (!st) commit_replay(g, in, kickoff);
  hcq__device_unlock_many(r->devices, g->ndev);
  if (st) return st;
  if (g->trace) {
    hcq__trace_graph_submitted(g->trace, index, kickoff, submit_start);
    /* The replay before this one is read while this one runs, not before its submit. */
    if (g->ninst > 1)
      hcq__trace_graph_collect_finished(g->trace, (index + g->ninst - 1) % g->ninst);
  }
  hcq__runner_commit(r);
  if (wait) {
    if ((st = wait_instance(g, in, WAIT_THIS_REPLAY))) return st;
    if (out_elapsed_ns) *out_elapsed_ns = hcq__now_ns() - start;
  }
  return NULL;
}

/* ---- the rest of the vtable ---- */

/* keep_signals: a device of the graph is lost and another may still be waiting on the graph's
 * signals (which live on one device but are read by the queues of all): they are kept, not freed.
 */
static void queue_graph_free_ex(queue_graph_t *g, bool keep_signals) {
  void (*release_signal)(hcq_signal_t *) =
      keep_signals ? hcq__signal_abandon : hcq__signal_free_internal;
  hcq__trace_graph_unregister(g->trace);
  for (unsigned i = 0; g->inst && i < g->ninst; i++) {
    graph_inst_t *in = &g->inst[i];
    for (size_t q = 0; q < 2 * HCQ__GRAPH_MAX_DEVICES; q++) {
      hcq_queue_destroy(in->queues[q]);
      release_signal(in->queue_sig[q]);
      free(in->queue_label[q]);
    }
    for (size_t d = 0; d < HCQ__GRAPH_MAX_DEVICES; d++) {
      release_signal(in->dev_sig[d]);
      release_signal(in->done_sig[d]);
      hcq_buffer_release(in->kernargs[d]);
      hcq_buffer_release(in->prof_stamps[d]);
    }
    release_signal(in->kickoff);
  }
  free(g->inst);
  for (size_t d = 0; d < HCQ__GRAPH_MAX_DEVICES; d++) {
    hcq_expr_release(g->timeline_val[d]);
    hcq_expr_release(g->timeline_addr[d]);
  }
  hcq_expr_release(g->kickoff_var);
  for (size_t k = 0; g->input_vars && k < g->base.runner.ninputs; k++)
    hcq_expr_release(g->input_vars[k]);
  free(g->input_vars);
  free(g->values);
  free(g->sched);
  hcq__vec_free(&g->waits);
  hcq__vec_free(&g->ready);
  hcq__vec_free(&g->deps);
  free(g->prof_entries);
  free(g->prof_names);
  free(g->prof_deps);
  free(g->prof_ndeps);
  free(g->prof_timestamps);
  hcq__graph_struct_free(&g->base);
}

static void queue_graph_free(queue_graph_t *g) { queue_graph_free_ex(g, false); }

static hcq_status_t queue_graph_destroy(hcq_graph_t *base) {
  queue_graph_t *g = (queue_graph_t *)base;
  hcq_status_t st = wait_previous(g, WAIT_PREVIOUS);
  if (st) return st;
  trace_collect_all(g);
  queue_graph_free(g);
  return NULL;
}

static hcq_status_t queue_graph_destroy_anyway(hcq_graph_t *base) {
  queue_graph_t *g = (queue_graph_t *)base;
  /* A device still at its queues may read this graph's signals, whichever device owns them; a lost
   * one too, until its engine has dropped its work (a CPU engine's completion counter then jumps to
   * what was submitted). Their memory is kept rather than freed under it. */
  bool busy = false;
  for (size_t d = 0; d < g->ndev; d++) {
    hcq_device_t *dev = base->runner.devices[d];
    for (int k = 0; k < 2; k++)
      busy |= dev->vt->completed(dev, (hcq_queue_kind_t)k) <
              dev->vt->submitted(dev, (hcq_queue_kind_t)k);
  }
  queue_graph_free_ex(g, busy);
  return NULL;
}

static hcq_status_t queue_graph_item_schedule(const hcq_graph_t *base, size_t i,
                                              hcq_graph_item_schedule_t *out) {
  const queue_graph_t *g = (const queue_graph_t *)base;
  const item_sched_t *s = &g->sched[i];
  *out = (hcq_graph_item_schedule_t){s->queue,
                                     g->waits.data + s->waits_at,
                                     s->nwaits,
                                     g->ready.data + s->ready_at,
                                     s->nready,
                                     s->signal_value,
                                     g->deps.data + s->deps_at,
                                     s->ndeps};
  return NULL;
}

/* The queue of the last replay's instance (the first instance before any replay). */
static const hcq_queue_t *queue_graph_queue(const hcq_graph_t *base, uint32_t q) {
  const queue_graph_t *g = (const queue_graph_t *)base;
  const graph_inst_t *in = g->last_inst ? g->last_inst : &g->inst[0];
  return q < 2 * g->ndev ? in->queues[q] : NULL;
}

static hcq_status_t queue_graph_profile(hcq_graph_t *base, const hcq_profile_event_t **out) {
  queue_graph_t *g = (queue_graph_t *)base;
  if (!g->profile)
    return hcq_status_make(HCQ_FAILED_PRECONDITION, "the graph was built without profiling");
  if (!g->kickoff_value)
    return hcq_status_make(HCQ_FAILED_PRECONDITION, "the graph has not run yet");
  hcq_status_t st = wait_previous(g, WAIT_PREVIOUS);
  if (st) return st;
  collect_timestamps(g);
  *out = &g->prof_event;
  return NULL;
}

static const hcq__graph_vtable_t queue_graph_vtable = {
    .kind = "hcq",
    .destroy = queue_graph_destroy,
    .destroy_anyway = queue_graph_destroy_anyway,
    .run = queue_graph_run,
    .item_schedule = queue_graph_item_schedule,
    .queue = queue_graph_queue,
    .profile = queue_graph_profile,
};

hcq_status_t hcq__queue_graph_create(hcq__runner_t *runner, bool profile, unsigned inflight,
                                     hcq_graph_t **out) {
  if (runner->ndevices > HCQ__GRAPH_MAX_DEVICES)
    return hcq_status_make(HCQ_INVALID_ARGUMENT,
                           "an HCQ graph spans at most %d devices; these items use %zu",
                           HCQ__GRAPH_MAX_DEVICES, runner->ndevices);
  queue_graph_t *g = hcq__graph_alloc(sizeof(*g), &queue_graph_vtable, runner);
  if (!g) return oom();
  g->ndev = runner->ndevices;
  g->profile = profile;
  g->ninst = inflight ? inflight : hcq__options()->graph_inflight;
  g->inst = calloc(g->ninst, sizeof(*g->inst));
  g->sched = calloc(runner->nitems, sizeof(*g->sched));
  hcq_status_t st;
  if (!g->sched || !g->inst) {
    st = oom();
    goto fail;
  }
  if ((st = hcq__queue_graph_schedule(g))) goto fail;
  if ((st = make_vars(g))) goto fail;
  if ((st = build_queues(g))) goto fail;
  if (profile) {
    if ((st = build_profile(g))) goto fail;
    trace_register(g);
  }
  *out = &g->base;
  return NULL;
fail:
  /* The runner stays with the caller, who releases it. */
  queue_graph_free(g);
  return st;
}

uint64_t hcq__graph_kickoff_value_for_tests(const hcq_graph_t *g) {
  return ((const queue_graph_t *)g)->kickoff_value;
}

void hcq__graph_pretend_replays_for_tests(hcq_graph_t *base, uint64_t replays) {
  queue_graph_t *g = (queue_graph_t *)base;
  g->kickoff_value = replays;
  for (unsigned i = 0; i < g->ninst; i++) {
    graph_inst_t *in = &g->inst[i];
    in->kickoff_value = replays;
    hcq_signal_set(in->kickoff, replays);
    for (size_t d = 0; d < g->ndev; d++) {
      hcq_signal_set(in->dev_sig[d], replays);
      hcq_signal_set(in->done_sig[d], replays);
    }
  }
}
