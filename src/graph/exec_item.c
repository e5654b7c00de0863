/* One exec item (include/hcq/graph.h): the device it runs on and the buffers it touches, the checks
 * every item passes (at a graph's build, at a replay whose symbolic dims may have gone wrong,
 * before hcq_exec_item_run), owned copies of it, running it eagerly (hcq_exec_item_run, and
 * hcq_launch_sym on top of it), and HCQ_VALIDATE's replay of a graph as its items run one by one.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>

#include "core/buffer.h"
#include "core/capture.h"
#include "core/eager.h"
#include "core/expr.h"
#include "core/host_wait.h"
#include "core/limits.h"
#include "core/program.h"
#include "core/queue.h"
#include "core/remote.h"
#include "core/status.h"
#include "graph/graph_internal.h"
#include "hcq/jit.h"

static hcq_status_t oom(void) {
  return hcq_status_make(HCQ_OUT_OF_MEMORY, "out of memory building a graph");
}

hcq_device_t *hcq__item_device(const hcq_exec_item_t *it) {
  if (it->kind == HCQ_ITEM_KERNEL) return it->kernel.program->dev;
  hcq_device_t *dst = it->transfer.dst->dev, *src = it->transfer.src->dev;
  bool rdst = hcq__device_is_remote(dst), rsrc = hcq__device_is_remote(src);
  if (rdst != rsrc) {
    /* Between this rank and another (docs/mpi.md): on the local end's copy queue when its engine
     * sends and receives itself, else on the remote device's copy queue (the communication thread).
     */
    hcq_device_t *local = rdst ? src : dst;
    const hcq__remote_hooks_t *hooks = atomic_load_explicit(&hcq__remote, memory_order_acquire);
    if (hooks && hooks->engine_copies && (local->caps & HCQ__CAP_ENGINE_REMOTE_COPY)) return local;
    return rdst ? dst : src;
  }
  return src; /* a transfer runs on its source's copy queue */
}

bool hcq__item_is_foreign(const hcq_exec_item_t *it) {
  if (it->kind == HCQ_ITEM_KERNEL) return hcq__device_is_remote(it->kernel.program->dev);
  return hcq__device_is_remote(it->transfer.dst->dev) &&
         hcq__device_is_remote(it->transfer.src->dev);
}

void hcq__item_access(const hcq_exec_item_t *it, hcq__item_access_t *out) {
  if (it->kind == HCQ_ITEM_TRANSFER) {
    out->pair[0] = it->transfer.dst;
    out->pair[1] = it->transfer.src;
    out->bufs = out->pair;
    out->n = 2;
    out->writes[0] = true;
    out->writes[1] = false;
    return;
  }
  out->bufs = it->kernel.bufs;
  out->n = it->kernel.nbufs;
  /* The rule of hcq_kernel_item_t (graph.h): no outs array, every buffer is written; an empty one,
   * none. */
  bool all = it->kernel.outs == NULL;
  for (size_t i = 0; i < out->n; i++) out->writes[i] = all;
  for (size_t i = 0; !all && i < it->kernel.nouts; i++) out->writes[it->kernel.outs[i]] = true;
}

/* ---- checks ---- */

const hcq_var_value_t hcq__no_var_values[1];

/* Checks a constant operand's range, or evaluates a symbolic one with vals (NULL: constants only).
 * The operand is named "<what>[index]" or "<what> index" in messages, built only on failure. */
static hcq_status_t check_operand(hcq_operand_t op, int64_t lo, int64_t hi,
                                  const hcq_var_value_t *vals, size_t nvals, const char *who,
                                  const char *what, size_t index) {
  int64_t v = op.value;
  if (op.sym && !vals) return NULL;
  hcq_status_t st = op.sym ? hcq_expr_eval(op.sym, vals, nvals, &v) : NULL;
  if (!st && v >= lo && v <= hi) return NULL;
  char name[32];
  snprintf(name, sizeof(name), strcmp(what, "value") ? "%s[%zu]" : "%s %zu", what, index);
  if (st) return hcq_status_annotate(st, "%s: %s", who, name);
  char text[128] = "";
  if (op.sym) hcq_expr_format(op.sym, text, sizeof(text));
  return hcq_status_make(HCQ_OUT_OF_RANGE,
                         "%s: %s %s%s%" PRId64 " is outside [%" PRId64 ", %" PRId64 "]", who, name,
                         text, op.sym ? " = " : "", v, lo, hi);
}

bool hcq__kernel_dims_symbolic(const hcq_kernel_item_t *k) {
  for (int i = 0; i < 3; i++)
    if ((k->global[i].sym && !hcq_expr_is_const(k->global[i].sym)) ||
        (k->local[i].sym && !hcq_expr_is_const(k->local[i].sym)))
      return true;
  return false;
}

/* The largest values make the largest launch. */
bool hcq__kernel_dims_always_ok(const hcq_kernel_item_t *k) {
  uint64_t g[3], l[3];
  for (int i = 0; i < 3; i++) {
    int64_t glo = k->global[i].value, ghi = glo, llo = k->local[i].value, lhi = llo;
    if (k->global[i].sym && !hcq__expr_bounds(k->global[i].sym, &glo, &ghi)) return false;
    if (k->local[i].sym && !hcq__expr_bounds(k->local[i].sym, &llo, &lhi)) return false;
    if (glo < 0 || llo < 0) return false;
    g[i] = (uint64_t)ghi, l[i] = (uint64_t)lhi;
  }
  return hcq__dims_ok(k->program->dev, g, l);
}

/* *v = sym's value (sym NULL: *v stays); false when it does not evaluate. */
static bool eval_quietly(const hcq_expr_t *sym, const hcq_var_value_t *vals, size_t nvals,
                         int64_t *v) {
  if (!sym) return true;
  hcq_status_t st = hcq_expr_eval(sym, vals, nvals, v);
  bool ok = st == NULL;
  hcq_status_destroy(st);
  return ok;
}

bool hcq__kernel_dims_ok(const hcq_kernel_item_t *k, const hcq_var_value_t *vals, size_t nvals) {
  uint64_t g[3], l[3];
  for (int i = 0; i < 3; i++) {
    int64_t gv = k->global[i].value, lv = k->local[i].value;
    if (!eval_quietly(k->global[i].sym, vals, nvals, &gv) ||
        !eval_quietly(k->local[i].sym, vals, nvals, &lv) || gv < 0 || lv < 0)
      return false;
    g[i] = (uint64_t)gv, l[i] = (uint64_t)lv;
  }
  return hcq__dims_ok(k->program->dev, g, l);
}

/* The launch geometry with these values: fits 32 bits per dim and the device's work-item limit.
 * Operands are known to evaluate (checked before). */
static hcq_status_t check_kernel_dims(const hcq_kernel_item_t *k, const char *who,
                                      const hcq_var_value_t *vals, size_t nvals) {
  uint64_t g[3], l[3];
  for (int i = 0; i < 3; i++) {
    int64_t gv = k->global[i].value, lv = k->local[i].value;
    if (k->global[i].sym) hcq_status_destroy(hcq_expr_eval(k->global[i].sym, vals, nvals, &gv));
    if (k->local[i].sym) hcq_status_destroy(hcq_expr_eval(k->local[i].sym, vals, nvals, &lv));
    g[i] = (uint64_t)gv, l[i] = (uint64_t)lv;
  }
  return hcq__check_dims(k->program->dev, g, l, who);
}

hcq_status_t hcq__kernel_item_check(const hcq_kernel_item_t *k, const char *who,
                                    const hcq_var_value_t *vals, size_t nvals) {
  if (!k->program) return hcq_status_make(HCQ_INVALID_ARGUMENT, "%s: kernel has no program", who);
  const char *name = k->program->name;
  if (k->nbufs > HCQ_MAX_KERNEL_BUFS || k->nvals > HCQ_MAX_KERNEL_VALS)
    return hcq_status_make(HCQ_INVALID_ARGUMENT,
                           "%s (%s): %zu buffers and %zu values exceed the limits (%d, %d)", who,
                           name, k->nbufs, k->nvals, HCQ_MAX_KERNEL_BUFS, HCQ_MAX_KERNEL_VALS);
  if ((k->nbufs && !k->bufs) || (k->nouts && !k->outs) || (k->nvals && !k->vals))
    return hcq_status_make(HCQ_INVALID_ARGUMENT, "%s (%s): a buffer, out or value array is NULL",
                           who, name);
  hcq_status_t st = NULL;
  if (!hcq__program_args_ok(k->program, k->nbufs, k->nvals))
    return hcq__program_check_args(k->program, k->nbufs, k->nvals, who);
  if ((st = hcq__check_arg_limits(k->program->dev, k->nbufs, k->nvals, who))) return st;
  if (hcq__validating) {
    char what[96];
    snprintf(what, sizeof(what), "%s: program", who);
    if ((st = hcq__obj_check(&k->program->obj, HCQ__OBJ_PROGRAM, what))) return st;
  }
  for (size_t i = 0; i < k->nbufs; i++) {
    if (!k->bufs[i])
      return hcq_status_make(HCQ_INVALID_ARGUMENT, "%s (%s): buffer %zu is NULL", who, name, i);
    if (hcq__validating) {
      char what[96];
      snprintf(what, sizeof(what), "%s (%s): buffer %zu", who, name, i);
      if ((st = hcq__obj_check(&k->bufs[i]->obj, HCQ__OBJ_BUFFER, what))) return st;
    }
    if (k->bufs[i]->dev != k->program->dev)
      return hcq_status_make(
          HCQ_INVALID_ARGUMENT, "%s (%s): buffer %zu (%s) is on %s but the program runs on %s", who,
          name, i, k->bufs[i]->label, k->bufs[i]->dev->name, k->program->dev->name);
  }
  for (size_t i = 0; i < k->nouts; i++)
    if (k->outs[i] >= k->nbufs)
      return hcq_status_make(HCQ_OUT_OF_RANGE,
                             "%s (%s): out %zu names buffer %u but the kernel has %zu", who, name,
                             i, k->outs[i], k->nbufs);
  /* Only a symbolic dim may be 0 (an empty launch at a replay whose values make it so); a constant
   * 0 is a dim left out of an initializer and would silently run nothing. */
  for (int i = 0; i < 3; i++)
    for (int w = 0; w < 2; w++) {
      hcq_operand_t op = w ? k->local[i] : k->global[i];
      if (op.sym ? hcq_expr_is_const(op.sym) && hcq_expr_const_value(op.sym) == 0 : op.value == 0)
        return hcq__zero_dim_error(w ? "local" : "global", i, "%s (%s)", who, name);
    }
  for (size_t i = 0; i < k->nvals; i++)
    HCQ__TRY(check_operand(k->vals[i], INT32_MIN, INT32_MAX, vals, nvals, who, "value", i));
  for (size_t i = 0; i < 3; i++) {
    HCQ__TRY(check_operand(k->global[i], 0, UINT32_MAX, vals, nvals, who, "global", i));
    HCQ__TRY(check_operand(k->local[i], 0, UINT32_MAX, vals, nvals, who, "local", i));
  }
  if (vals || !hcq__kernel_dims_symbolic(k)) return check_kernel_dims(k, who, vals, nvals);
  return NULL;
}

hcq_status_t hcq__transfer_item_check(const hcq_transfer_item_t *t, const char *who) {
  if (!t->dst || !t->src)
    return hcq_status_make(HCQ_INVALID_ARGUMENT, "%s: transfer with a NULL buffer", who);
  if (hcq__validating) {
    char what[64];
    snprintf(what, sizeof(what), "%s: transfer destination", who);
    HCQ__TRY(hcq__obj_check(&t->dst->obj, HCQ__OBJ_BUFFER, what));
    snprintf(what, sizeof(what), "%s: transfer source", who);
    HCQ__TRY(hcq__obj_check(&t->src->obj, HCQ__OBJ_BUFFER, what));
  }
  if (t->bytes > t->dst->size || t->bytes > t->src->size)
    return hcq_status_make(HCQ_OUT_OF_RANGE,
                           "%s: transfer of %" PRIu64 " bytes from %s (%" PRIu64
                           " bytes) to %s (%" PRIu64 " bytes) is larger than a buffer",
                           who, t->bytes, t->src->label, t->src->size, t->dst->label, t->dst->size);
  if (!(t->src->dev->caps & HCQ_CAP_COPY_QUEUE))
    return hcq_status_make(HCQ_INVALID_ARGUMENT, "%s: %s has no copy queue for transfers", who,
                           t->src->dev->name);
  return hcq__transfer_overlap_check(t->dst, t->src, t->bytes, who);
}

/* ---- owned copies ---- */

hcq_status_t hcq__exec_item_copy(const hcq_exec_item_t *src, hcq_exec_item_t *dst) {
  *dst = *src;
  if (src->kind == HCQ_ITEM_TRANSFER) {
    hcq_buffer_retain(dst->transfer.dst);
    hcq_buffer_retain(dst->transfer.src);
    return NULL;
  }
  const hcq_kernel_item_t *k = &src->kernel;
  hcq_kernel_item_t *c = &dst->kernel;
  c->bufs = NULL, c->outs = NULL, c->vals = NULL;
  hcq_buffer_t **bufs = k->nbufs ? malloc(k->nbufs * sizeof(*bufs)) : NULL;
  /* An empty outs array ("writes nothing") stays an array: NULL would mean "writes everything". */
  uint32_t *outs = k->outs ? malloc((k->nouts ? k->nouts : 1) * sizeof(*outs)) : NULL;
  hcq_operand_t *vals = k->nvals ? malloc(k->nvals * sizeof(*vals)) : NULL;
  if ((k->nbufs && !bufs) || (k->outs && !outs) || (k->nvals && !vals)) {
    free(bufs), free(outs), free(vals);
    /* Leave nothing that hcq__exec_item_release would release: none of it was retained. */
    memset(c, 0, sizeof(*c));
    return oom();
  }
  for (size_t i = 0; i < k->nbufs; i++) bufs[i] = hcq_buffer_retain(k->bufs[i]);
  if (k->nouts) memcpy(outs, k->outs, k->nouts * sizeof(*outs));
  for (size_t i = 0; i < k->nvals; i++) {
    vals[i] = k->vals[i];
    hcq_expr_retain(vals[i].sym);
  }
  for (int i = 0; i < 3; i++) {
    hcq_expr_retain(c->global[i].sym);
    hcq_expr_retain(c->local[i].sym);
  }
  c->bufs = bufs, c->outs = outs, c->vals = vals;
  hcq_program_retain(c->program);
  return NULL;
}

void hcq__exec_item_release(hcq_exec_item_t *it) {
  if (it->kind == HCQ_ITEM_TRANSFER) {
    hcq_buffer_release(it->transfer.dst);
    hcq_buffer_release(it->transfer.src);
    return;
  }
  hcq_kernel_item_t *k = &it->kernel;
  for (size_t i = 0; i < k->nbufs; i++) hcq_buffer_release(k->bufs[i]);
  for (size_t i = 0; i < k->nvals; i++) hcq_expr_release(k->vals[i].sym);
  for (int i = 0; i < 3; i++) {
    hcq_expr_release(k->global[i].sym);
    hcq_expr_release(k->local[i].sym);
  }
  free((void *)k->bufs);
  free((void *)k->outs);
  free((void *)k->vals);
  hcq_program_release(k->program);
}

/* ---- running one item eagerly ---- */

static hcq_status_t exec_item_run(const hcq_exec_item_t *it, const hcq_var_value_t *vals,
                                  size_t nvals);

hcq_status_t hcq_exec_item_run(const hcq_exec_item_t *it, const hcq_var_value_t *vals,
                               size_t nvals) {
  /* A capture records the item with its symbols, not the launch it turns into. */
  const hcq__recorder_t *rec = hcq__recorder;
  hcq__recorder = NULL;
  hcq_status_t st = exec_item_run(it, vals, nvals);
  hcq__recorder = rec;
  if (st) return st;
  if (rec) rec->item(rec->ctx, it);
  return NULL;
}

static hcq_status_t exec_item_run(const hcq_exec_item_t *it, const hcq_var_value_t *vals,
                                  size_t nvals) {
  if (!it) return hcq_status_make(HCQ_INVALID_ARGUMENT, "hcq_exec_item_run: item is NULL");
  if (nvals && !vals)
    return hcq_status_make(HCQ_INVALID_ARGUMENT, "hcq_exec_item_run: %zu values but vals is NULL",
                           nvals);
  hcq_status_t vst = hcq__var_values_check(vals, nvals, "hcq_exec_item_run");
  if (vst) return vst;
  if (it->kind == HCQ_ITEM_TRANSFER) {
    hcq_status_t st = hcq__transfer_item_check(&it->transfer, "transfer");
    return st ? st : hcq_transfer(it->transfer.dst, it->transfer.src, it->transfer.bytes);
  }
  if (it->kind != HCQ_ITEM_KERNEL)
    return hcq_status_make(HCQ_INVALID_ARGUMENT, "item: unknown kind %d", (int)it->kind);
  /* Validation evaluates every operand; evaluate again into the launch (cheap, and keeps one path).
   */
  hcq_status_t st =
      hcq__kernel_item_check(&it->kernel, "kernel", nvals ? vals : hcq__no_var_values, nvals);
  if (st) return st;
  const hcq_kernel_item_t *k = &it->kernel;
  int32_t ivals[HCQ_MAX_KERNEL_VALS];
  hcq_launch_desc_t l = {k->program, k->bufs, k->nbufs, ivals,   k->nvals,
                         {0},        {0},     k->outs,  k->nouts};
  for (size_t i = 0; i < k->nvals; i++) {
    int64_t v = k->vals[i].value;
    if (k->vals[i].sym) hcq_status_destroy(hcq_expr_eval(k->vals[i].sym, vals, nvals, &v));
    ivals[i] = (int32_t)v;
  }
  for (int i = 0; i < 3; i++) {
    int64_t g = k->global[i].value, lo = k->local[i].value;
    if (k->global[i].sym) hcq_status_destroy(hcq_expr_eval(k->global[i].sym, vals, nvals, &g));
    if (k->local[i].sym) hcq_status_destroy(hcq_expr_eval(k->local[i].sym, vals, nvals, &lo));
    l.global[i] = (uint32_t)g;
    l.local[i] = (uint32_t)lo;
    /* Constants were refused above: a symbolic dim is 0 with these values, an empty launch (as at a
     * replay), which hcq_launch would refuse. */
    if (!g || !lo) return NULL;
  }
  return hcq_launch(&l);
}

/* Symbolic launches (include/hcq/jit.h): hcq_launch() with operands that may be expressions, run as
 * a kernel item, which evaluates the operands and which a capture records with its symbols. */
hcq_status_t hcq_launch_sym(const hcq_launch_sym_desc_t *d, const hcq_var_value_t *vals,
                            size_t nvals) {
  if (!d || !d->program)
    return hcq_status_make(HCQ_INVALID_ARGUMENT, "hcq_launch_sym: descriptor or program is NULL");
  if (d->nbufs > HCQ_MAX_KERNEL_BUFS)
    return hcq_status_make(HCQ_INVALID_ARGUMENT, "launch of %s: %zu buffers exceed the limit (%d)",
                           d->program->name, d->nbufs, HCQ_MAX_KERNEL_BUFS);
  /* The one rule (graph.h): no outs array, every buffer written (recorded as the full list, as
   * hcq_launch's are); an empty array, nothing. */
  uint32_t every[HCQ_MAX_KERNEL_BUFS];
  for (size_t i = 0; i < d->nbufs; i++) every[i] = (uint32_t)i;
  hcq_exec_item_t it = {.kind = HCQ_ITEM_KERNEL};
  hcq_kernel_item_t *k = &it.kernel;
  k->program = d->program;
  k->bufs = d->bufs;
  k->nbufs = d->nbufs;
  k->outs = d->outs ? d->outs : every;
  k->nouts = d->outs ? d->nouts : d->nbufs;
  k->vals = d->vals;
  k->nvals = d->nvals;
  for (int i = 0; i < 3; i++) {
    k->global[i] = d->global[i];
    k->local[i] = d->local[i];
  }
  hcq_status_t st = hcq_exec_item_run(&it, vals, nvals);
  if (st) return hcq_status_annotate(st, "hcq_launch_sym of %s", d->program->name);
  /* A capture starts its replays from the values the launches were given. */
  const hcq__recorder_t *rec = hcq__recorder;
  if (rec) rec->bind(rec->ctx, vals, nvals);
  return NULL;
}

/* ---- HCQ_VALIDATE=1 graph replays (include/hcq/graph.h, "Validation") ----
 *
 * A replay of a graph with a kernel
 * item whose outs leave some of its buffers undeclared runs item by item, eagerly, each kernel
 * checked by hcq_launch's write check (core/validate.c).
 *
 * Why not the graph itself: an undeclared write is a missing dependency, and what it breaks is the
 * graph's ordering, by chance (a race on the device). Comparing a graph replay's buffers after the
 * fact cannot tell which item wrote what; running the same items eagerly, in order, with the
 * replay's inputs and values, can, on every backend, every time. The replay's results are those of
 * the eager run (the ground truth), and the graph's own queues do not run. */

static const hcq_buffer_t *base_of(const hcq_buffer_t *b) { return b->base ? b->base : b; }

/* A kernel item that declares outs and takes a buffer outside their bases. */
static bool has_undeclared(const hcq_kernel_item_t *k) {
  if (!k->outs) return false;
  for (size_t i = 0; i < k->nbufs; i++) {
    bool declared = false;
    for (size_t o = 0; o < k->nouts && !declared; o++)
      declared = base_of(k->bufs[k->outs[o]]) == base_of(k->bufs[i]);
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
  for (size_t j = 0; j < r->nitems; j++) {
    size_t from = s;
    while (s < r->slots.len && r->slots.data[s].item == j) s++;
    hcq_exec_item_t it = hcq__runner_item_with_inputs(r, j, from, s, bufs);
    if ((st = hcq_exec_item_run(&it, vals, r->vars.len))) {
      st = hcq_status_annotate(st, "item %zu (%s; HCQ_VALIDATE runs the replay item by item)", j,
                               it.kind == HCQ_ITEM_KERNEL ? it.kernel.program->name : "transfer");
      break;
    }
  }
  hcq__recorder = rec;
  if (st) return st;
  hcq__runner_commit(r);
  if (!wait) return NULL;
  for (size_t d = 0; d < r->ndevices; d++) HCQ__TRY(hcq_device_synchronize(r->devices[d]));
  if (out_elapsed_ns) *out_elapsed_ns = hcq__now_ns() - start;
  return NULL;
}
