#include "graph/runner.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>

#include "core/expr.h"

static hcq_status_t oom(void) { return hcq_status_make(HCQ_OUT_OF_MEMORY, "out of memory building a graph"); }

hcq_device_t *hcq__item_device(const hcq_exec_item_t *it) {
  if (it->kind == HCQ_ITEM_KERNEL) return it->kernel.program->dev;
  hcq_device_t *dst = it->transfer.dst->dev, *src = it->transfer.src->dev;
  bool rdst = hcq__device_is_remote(dst), rsrc = hcq__device_is_remote(src);
  if (rdst != rsrc) {
    /* Between this rank and another (docs/mpi.md): on the local end's copy queue when its engine
     * sends and receives itself, else on the remote device's copy queue (the communication thread). */
    hcq_device_t *local = rdst ? src : dst;
    const hcq__remote_hooks_t *hooks = atomic_load_explicit(&hcq__remote, memory_order_acquire);
    if (hooks && hooks->engine_copies && (local->caps & HCQ__CAP_ENGINE_REMOTE_COPY)) return local;
    return rdst ? dst : src;
  }
  return src; /* a transfer runs on its source's copy queue */
}

bool hcq__item_is_foreign(const hcq_exec_item_t *it) {
  if (it->kind == HCQ_ITEM_KERNEL) return hcq__device_is_remote(it->kernel.program->dev);
  return hcq__device_is_remote(it->transfer.dst->dev) && hcq__device_is_remote(it->transfer.src->dev);
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

uint32_t hcq__runner_device_index(const hcq__runner_t *r, const hcq_device_t *dev) {
  for (size_t i = 0; i < r->ndevices; i++)
    if (r->devices[i] == dev) return (uint32_t)i;
  return UINT32_MAX;
}

static hcq_status_t add_device(hcq__runner_t *r, hcq_device_t *dev) {
  if (hcq__runner_device_index(r, dev) != UINT32_MAX) return NULL;
  if (!hcq__vec_reserve((void **)&r->devices, &r->devices_cap, r->ndevices + 1, sizeof(*r->devices))) return oom();
  r->devices[r->ndevices++] = dev;
  return NULL;
}

static hcq_status_t add_vars(hcq__runner_t *r, const hcq_expr_t *e) {
  const hcq_expr_t *found[16];
  size_t n = hcq_expr_vars(e, found, 16);
  const hcq_expr_t **all = found;
  if (n > 16) {
    all = malloc(n * sizeof(*all));
    if (!all) return oom();
    hcq_expr_vars(e, all, n);
  }
  hcq_status_t st = NULL;
  for (size_t i = 0; i < n && !st; i++) {
    bool have = false;
    for (size_t k = 0; k < r->vars.len; k++) have |= r->vars.data[k] == all[i];
    if (!have) {
      if (hcq__vec_push(&r->vars, all[i]))
        hcq_expr_retain(all[i]);
      else
        st = oom();
    }
  }
  if (all != found) free((void *)all);
  return st;
}

/* Stands for "no values" where NULL would mean "do not evaluate". */
static const hcq_var_value_t k_no_values[1];

/* Checks a constant operand's range, or evaluates a symbolic one with vals (NULL: constants only).
 * The operand is named "<what>[index]" or "<what> index" in messages, built only on failure. */
static hcq_status_t check_operand(hcq_operand_t op, int64_t lo, int64_t hi, const hcq_var_value_t *vals, size_t nvals,
                                  const char *who, const char *what, size_t index) {
  int64_t v = op.value;
  if (op.sym && !vals) return NULL;
  hcq_status_t st = op.sym ? hcq_expr_eval(op.sym, vals, nvals, &v) : NULL;
  if (!st && v >= lo && v <= hi) return NULL;
  char name[32];
  snprintf(name, sizeof(name), strcmp(what, "value") ? "%s[%zu]" : "%s %zu", what, index);
  if (st) return hcq_status_annotate(st, "%s: %s", who, name);
  char text[128] = "";
  if (op.sym) hcq_expr_format(op.sym, text, sizeof(text));
  return hcq_status_make(HCQ_OUT_OF_RANGE, "%s: %s %s%s%" PRId64 " is outside [%" PRId64 ", %" PRId64 "]", who, name,
                         text, op.sym ? " = " : "", v, lo, hi);
}

static bool kernel_dims_symbolic(const hcq_kernel_item_t *k) {
  for (int i = 0; i < 3; i++)
    if ((k->global[i].sym && !hcq_expr_is_const(k->global[i].sym)) || (k->local[i].sym && !hcq_expr_is_const(k->local[i].sym)))
      return true;
  return false;
}

/* Every value the variables may take makes a valid launch: no dim can be negative, fail to evaluate,
 * exceed 32 bits or take the launch past the device's work-item limit (the largest values make the
 * largest launch). Such an item needs no check per replay. */
static bool kernel_dims_always_ok(const hcq_kernel_item_t *k) {
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

/* Quick form of the check below, with no message: every dim evaluates and the launch is valid. */
static bool kernel_dims_ok(const hcq_kernel_item_t *k, const hcq_var_value_t *vals, size_t nvals) {
  uint64_t g[3], l[3];
  for (int i = 0; i < 3; i++) {
    int64_t gv = k->global[i].value, lv = k->local[i].value;
    hcq_status_t st = k->global[i].sym ? hcq_expr_eval(k->global[i].sym, vals, nvals, &gv) : NULL;
    if (!st && k->local[i].sym) st = hcq_expr_eval(k->local[i].sym, vals, nvals, &lv);
    if (st || gv < 0 || lv < 0) {
      hcq_status_destroy(st);
      return false;
    }
    g[i] = (uint64_t)gv, l[i] = (uint64_t)lv;
  }
  return hcq__dims_ok(k->program->dev, g, l);
}

/* The launch geometry with these values: fits 32 bits per dim and the device's work-item limit.
 * Operands are known to evaluate (checked before). */
static hcq_status_t check_kernel_dims(const hcq_kernel_item_t *k, const char *who, const hcq_var_value_t *vals,
                                      size_t nvals) {
  uint64_t g[3], l[3];
  for (int i = 0; i < 3; i++) {
    int64_t gv = k->global[i].value, lv = k->local[i].value;
    if (k->global[i].sym) hcq_status_destroy(hcq_expr_eval(k->global[i].sym, vals, nvals, &gv));
    if (k->local[i].sym) hcq_status_destroy(hcq_expr_eval(k->local[i].sym, vals, nvals, &lv));
    g[i] = (uint64_t)gv, l[i] = (uint64_t)lv;
  }
  return hcq__check_dims(k->program->dev, g, l, who);
}

static hcq_status_t validate_kernel(const hcq_kernel_item_t *k, const char *who, const hcq_var_value_t *vals, size_t nvals) {
  if (!k->program) return hcq_status_make(HCQ_INVALID_ARGUMENT, "%s: kernel has no program", who);
  const char *name = k->program->name;
  if (k->nbufs > HCQ_MAX_KERNEL_BUFS || k->nvals > HCQ_MAX_KERNEL_VALS)
    return hcq_status_make(HCQ_INVALID_ARGUMENT, "%s (%s): %zu buffers and %zu values exceed the limits (%d, %d)",
                           who, name, k->nbufs, k->nvals, HCQ_MAX_KERNEL_BUFS, HCQ_MAX_KERNEL_VALS);
  if ((k->nbufs && !k->bufs) || (k->nouts && !k->outs) || (k->nvals && !k->vals))
    return hcq_status_make(HCQ_INVALID_ARGUMENT, "%s (%s): a buffer, out or value array is NULL", who, name);
  hcq_status_t st = NULL;
  if (!hcq__program_args_ok(k->program, k->nbufs, k->nvals)) return hcq__program_check_args(k->program, k->nbufs, k->nvals, who);
  if (hcq__validating) {
    char what[96];
    snprintf(what, sizeof(what), "%s: program", who);
    if ((st = hcq__obj_check(&k->program->obj, HCQ__OBJ_PROGRAM, what))) return st;
  }
  for (size_t i = 0; i < k->nbufs; i++) {
    if (!k->bufs[i]) return hcq_status_make(HCQ_INVALID_ARGUMENT, "%s (%s): buffer %zu is NULL", who, name, i);
    if (hcq__validating) {
      char what[96];
      snprintf(what, sizeof(what), "%s (%s): buffer %zu", who, name, i);
      if ((st = hcq__obj_check(&k->bufs[i]->obj, HCQ__OBJ_BUFFER, what))) return st;
    }
    if (k->bufs[i]->dev != k->program->dev)
      return hcq_status_make(HCQ_INVALID_ARGUMENT, "%s (%s): buffer %zu (%s) is on %s but the program runs on %s",
                             who, name, i, k->bufs[i]->label, k->bufs[i]->dev->name, k->program->dev->name);
  }
  for (size_t i = 0; i < k->nouts; i++)
    if (k->outs[i] >= k->nbufs)
      return hcq_status_make(HCQ_OUT_OF_RANGE, "%s (%s): out %zu names buffer %u but the kernel has %zu", who, name,
                             i, k->outs[i], k->nbufs);
  /* Only a symbolic dim may be 0 (an empty launch at a replay whose values make it so); a constant
   * 0 is a dim left out of an initializer and would silently run nothing. */
  for (int i = 0; i < 3; i++)
    for (int w = 0; w < 2; w++) {
      hcq_operand_t op = w ? k->local[i] : k->global[i];
      if (op.sym ? hcq_expr_is_const(op.sym) && hcq_expr_const_value(op.sym) == 0 : op.value == 0)
        return hcq__zero_dim_error(w ? "local" : "global", i, "%s (%s)", who, name);
    }
  for (size_t i = 0; i < k->nvals && !st; i++) st = check_operand(k->vals[i], INT32_MIN, INT32_MAX, vals, nvals, who, "value", i);
  for (size_t i = 0; i < 3 && !st; i++) {
    st = check_operand(k->global[i], 0, UINT32_MAX, vals, nvals, who, "global", i);
    if (!st) st = check_operand(k->local[i], 0, UINT32_MAX, vals, nvals, who, "local", i);
  }
  if (!st && (vals || !kernel_dims_symbolic(k))) st = check_kernel_dims(k, who, vals, nvals);
  return st;
}

static hcq_status_t validate_transfer(const hcq_transfer_item_t *t, const char *who) {
  if (!t->dst || !t->src) return hcq_status_make(HCQ_INVALID_ARGUMENT, "%s: transfer with a NULL buffer", who);
  if (hcq__validating) {
    char what[64];
    snprintf(what, sizeof(what), "%s: transfer destination", who);
    hcq_status_t st = hcq__obj_check(&t->dst->obj, HCQ__OBJ_BUFFER, what);
    snprintf(what, sizeof(what), "%s: transfer source", who);
    if (!st) st = hcq__obj_check(&t->src->obj, HCQ__OBJ_BUFFER, what);
    if (st) return st;
  }
  if (t->bytes > t->dst->size || t->bytes > t->src->size)
    return hcq_status_make(HCQ_OUT_OF_RANGE,
                           "%s: transfer of %" PRIu64 " bytes from %s (%" PRIu64 " bytes) to %s (%" PRIu64
                           " bytes) is larger than a buffer",
                           who, t->bytes, t->src->label, t->src->size, t->dst->label, t->dst->size);
  if (!(t->src->dev->caps & HCQ_CAP_COPY_QUEUE))
    return hcq_status_make(HCQ_INVALID_ARGUMENT, "%s: %s has no copy queue for transfers", who, t->src->dev->name);
  return hcq__transfer_overlap_check(t->dst, t->src, t->bytes, who);
}

/* Deep-copies one validated item, retaining its program and buffers. */
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

void hcq__runner_deinit(hcq__runner_t *r) {
  for (size_t j = 0; j < r->nitems; j++) hcq__exec_item_release(&r->items[j]);
  free(r->items);
  for (size_t i = 0; i < r->ninputs && r->inputs; i++) hcq_buffer_release(r->inputs[i]);
  free(r->inputs);
  free(r->pending_inputs);
  for (size_t i = 0; i < r->vars.len; i++) hcq_expr_release(r->vars.data[i]);
  hcq__vec_free(&r->vars);
  hcq__vec_free(&r->slots);
  free(r->values);
  free(r->pending_values);
  if (r->objs) {
    for (size_t i = 0; i < r->ndevices; i++) {
      if (!r->objs[i].next) continue; /* never added */
      hcq__obj_remove(&r->objs[i]);
      hcq__device_struct_release(r->devices[i]);
    }
  }
  free(r->objs);
  free(r->label);
  free(r->devices);
  for (size_t i = 0; i < r->ninputs && r->build_inputs; i++) hcq_buffer_release(r->build_inputs[i]);
  free(r->build_inputs);
  free(r->fixed);
  free(r->input_base);
  free(r->input_writer);
  hcq__vec_free(&r->symdim_items);
  free(r->eval_vals);
  memset(r, 0, sizeof(*r));
}

static int key_cmp(const void *a, const void *b) {
  uintptr_t x = ((const struct hcq__runner_key *)a)->base, y = ((const struct hcq__runner_key *)b)->base;
  return (x > y) - (x < y);
}

/* Fixed keys (bases of buffers in slots that are not inputs) and per-input bases, with a writer
 * of each where one exists. */
static hcq_status_t collect_aliasing(hcq__runner_t *r) {
  size_t nargs = 0;
  for (size_t j = 0; j < r->nitems; j++) {
    hcq__item_access_t acc;
    hcq__item_access(&r->items[j], &acc);
    nargs += acc.n;
  }
  r->fixed = calloc(nargs + 1, sizeof(*r->fixed));
  r->input_base = calloc(r->ninputs + 1, sizeof(*r->input_base));
  r->input_writer = calloc(r->ninputs + 1, sizeof(*r->input_writer));
  if (!r->fixed || !r->input_base || !r->input_writer) return oom();
  for (size_t k = 0; k < r->ninputs; k++) {
    r->input_base[k] = (uintptr_t)hcq_buffer_base(r->build_inputs[k]);
    r->input_writer[k] = UINT32_MAX;
  }
  for (uint32_t j = 0; j < r->nitems; j++) {
    hcq__item_access_t acc;
    hcq__item_access(&r->items[j], &acc);
    for (size_t i = 0; i < acc.n; i++) {
      size_t k = 0;
      while (k < r->ninputs && acc.bufs[i] != r->build_inputs[k]) k++;
      if (k < r->ninputs) {
        if (acc.writes[i] && r->input_writer[k] == UINT32_MAX) r->input_writer[k] = j;
        continue;
      }
      hcq_buffer_t *base = hcq_buffer_base(acc.bufs[i]);
      r->fixed[r->nfixed++] = (struct hcq__runner_key){(uintptr_t)base, base, acc.writes[i] ? j : UINT32_MAX};
    }
  }
  qsort(r->fixed, r->nfixed, sizeof(*r->fixed), key_cmp);
  size_t kept = 0;
  for (size_t i = 0; i < r->nfixed; i++) {
    if (kept && r->fixed[kept - 1].base == r->fixed[i].base) {
      if (r->fixed[kept - 1].writer == UINT32_MAX) r->fixed[kept - 1].writer = r->fixed[i].writer;
      continue;
    }
    r->fixed[kept++] = r->fixed[i];
  }
  r->nfixed = kept;
  return NULL;
}

static const struct hcq__runner_key *find_fixed(const hcq__runner_t *r, uintptr_t base) {
  size_t lo = 0, hi = r->nfixed;
  while (lo < hi) {
    size_t mid = (lo + hi) / 2;
    if (r->fixed[mid].base < base)
      lo = mid + 1;
    else
      hi = mid;
  }
  return lo < r->nfixed && r->fixed[lo].base == base ? &r->fixed[lo] : NULL;
}

/* A replacement input must not merge two buffers the build kept apart when either is written:
 * the dependencies between their items were never recorded. */
static hcq_status_t check_aliasing(const hcq__runner_t *r, size_t k) {
  const hcq_buffer_t *nb_buf = r->pending_inputs[k];
  uintptr_t nb = (uintptr_t)hcq_buffer_base(nb_buf), ob = r->input_base[k];
  if (nb == ob) return NULL;
  bool k_written = r->input_writer[k] != UINT32_MAX;
  const struct hcq__runner_key *f = find_fixed(r, nb);
  char n1[96], n2[96];
  if (f && (k_written || f->writer != UINT32_MAX))
    return hcq_status_make(HCQ_INVALID_ARGUMENT,
                           "input %zu: %s aliases %s, which the graph uses as a fixed buffer (%s by item %" PRIu32
                           "): dependencies were fixed at build; pass a buffer that does not overlap the graph's others",
                           k, hcq__buffer_name(nb_buf, n1), hcq__buffer_name(f->buf, n2),
                           k_written ? "the input is written" : "written", k_written ? r->input_writer[k] : f->writer);
  for (size_t j = 0; j < r->ninputs; j++) {
    if (j == k || r->input_base[j] == ob) continue;
    if ((uintptr_t)hcq_buffer_base(r->pending_inputs[j]) != nb) continue;
    if (!k_written && r->input_writer[j] == UINT32_MAX) continue;
    return hcq_status_make(HCQ_INVALID_ARGUMENT,
                           "input %zu: %s aliases input %zu (%s), and item %" PRIu32
                           " writes one of them: dependencies were fixed at build; pass buffers that do not overlap",
                           k, hcq__buffer_name(nb_buf, n1), j, hcq__buffer_name(r->pending_inputs[j], n2),
                           k_written ? r->input_writer[k] : r->input_writer[j]);
  }
  return NULL;
}

hcq_status_t hcq__runner_enter(hcq__runner_t *r, const char *what) {
  bool expected = false;
  if (!atomic_compare_exchange_strong_explicit(&r->busy, &expected, true, memory_order_acquire, memory_order_relaxed))
    return hcq_status_make(HCQ_FAILED_PRECONDITION,
                           "%s: %s is being used by another thread (one thread at a time per graph or jit)", what,
                           r->label ? r->label : "the graph");
  return NULL;
}

void hcq__runner_leave(hcq__runner_t *r) { atomic_store_explicit(&r->busy, false, memory_order_release); }

/* First pass: structure, devices, variables, input slots. Symbols are not evaluated yet (vals NULL). */
static hcq_status_t collect(hcq__runner_t *r, const hcq_exec_item_t *items, size_t nitems) {
  const hcq_var_value_t *vals = NULL;
  size_t nvals = 0;
  for (size_t j = 0; j < nitems; j++) {
    const hcq_exec_item_t *it = &items[j];
    hcq_status_t st;
    char who[32];
    snprintf(who, sizeof(who), "item %zu", j);
    if (it->kind == HCQ_ITEM_KERNEL)
      st = validate_kernel(&it->kernel, who, vals, nvals);
    else if (it->kind == HCQ_ITEM_TRANSFER)
      st = validate_transfer(&it->transfer, who);
    else
      st = hcq_status_make(HCQ_INVALID_ARGUMENT, "item %zu: unknown kind %d", j, (int)it->kind);
    if (st) return st;
    hcq__item_access_t acc;
    hcq__item_access(it, &acc);
    if ((st = add_device(r, hcq__item_device(it)))) return st;
    for (size_t i = 0; i < acc.n; i++)
      if ((st = add_device(r, acc.bufs[i]->dev))) return st;
    if (it->kind == HCQ_ITEM_KERNEL) {
      const hcq_kernel_item_t *k = &it->kernel;
      for (size_t i = 0; i < k->nvals && !st; i++)
        if (k->vals[i].sym) st = add_vars(r, k->vals[i].sym);
      for (int i = 0; i < 3 && !st; i++) {
        if (k->global[i].sym) st = add_vars(r, k->global[i].sym);
        if (!st && k->local[i].sym) st = add_vars(r, k->local[i].sym);
      }
      if (st) return st;
    }
    for (size_t i = 0; i < acc.n; i++)
      for (size_t k = 0; k < r->ninputs; k++)
        if (acc.bufs[i] == r->inputs[k]) {
          hcq__input_slot_t slot = {(uint32_t)j, (uint32_t)i, (uint32_t)k};
          if (!hcq__vec_push(&r->slots, slot)) return oom();
        }
  }
  return NULL;
}

hcq_status_t hcq__runner_init(hcq__runner_t *r, const hcq_exec_item_t *items, size_t nitems,
                              hcq_buffer_t *const *inputs, size_t ninputs, const hcq_var_value_t *vals, size_t nvals,
                              const char *kind) {
  memset(r, 0, sizeof(*r));
  if (!items || nitems == 0) return hcq_status_make(HCQ_INVALID_ARGUMENT, "a graph needs at least one item");
  if (nitems >= UINT32_MAX / 2) return hcq_status_make(HCQ_INVALID_ARGUMENT, "%zu items are too many", nitems);
  if (ninputs && !inputs) return hcq_status_make(HCQ_INVALID_ARGUMENT, "%zu inputs but the array is NULL", ninputs);
  if (nvals && !vals) return hcq_status_make(HCQ_INVALID_ARGUMENT, "%zu values but the array is NULL", nvals);
  hcq_status_t values_st = hcq__var_values_check(vals, nvals, kind);
  if (values_st) return values_st;
  for (size_t k = 0; k < ninputs; k++) {
    if (!inputs[k]) return hcq_status_make(HCQ_INVALID_ARGUMENT, "input %zu is NULL", k);
    if (hcq__validating) {
      char what[32];
      snprintf(what, sizeof(what), "input %zu", k);
      hcq_status_t vst = hcq__obj_check(&inputs[k]->obj, HCQ__OBJ_BUFFER, what);
      if (vst) return vst;
    }
    for (size_t i = 0; i < k; i++)
      if (inputs[i] == inputs[k])
        return hcq_status_make(HCQ_INVALID_ARGUMENT, "input %zu (%s) is listed twice", k, inputs[k]->label);
  }
  r->ninputs = ninputs;
  r->inputs = calloc(ninputs ? ninputs : 1, sizeof(*r->inputs));
  r->build_inputs = calloc(ninputs ? ninputs : 1, sizeof(*r->build_inputs));
  r->pending_inputs = calloc(ninputs ? ninputs : 1, sizeof(*r->pending_inputs));
  if (!r->inputs || !r->build_inputs || !r->pending_inputs) {
    hcq__runner_deinit(r);
    return oom();
  }
  for (size_t k = 0; k < ninputs; k++) {
    r->inputs[k] = hcq_buffer_retain(inputs[k]);
    r->build_inputs[k] = hcq_buffer_retain(inputs[k]);
  }

  hcq_status_t st = collect(r, items, nitems);
  if (!st) {
    r->values = calloc(r->vars.len + 1, sizeof(int64_t));
    r->pending_values = calloc(r->vars.len + 1, sizeof(int64_t));
    if (!r->values || !r->pending_values) st = oom();
  }
  for (size_t i = 0; i < r->vars.len && !st; i++) {
    const hcq_expr_t *var = r->vars.data[i];
    size_t k = 0;
    while (k < nvals && vals[k].var != var) k++;
    if (k == nvals)
      st = hcq_status_make(HCQ_NOT_FOUND, "variable %s has no initial value", hcq_var_name(var));
    else if (!(st = hcq_var_check(var, vals[k].value)))
      r->values[i] = vals[k].value;
  }
  /* Second pass: every symbolic operand evaluates into its field with the initial values. */
  for (size_t j = 0; j < nitems && !st; j++) {
    char who[96];
    snprintf(who, sizeof(who), "item %zu (%s)", j, items[j].kind == HCQ_ITEM_KERNEL ? items[j].kernel.program->name : "");
    if (items[j].kind == HCQ_ITEM_KERNEL) st = validate_kernel(&items[j].kernel, who, nvals ? vals : k_no_values, nvals);
  }
  if (!st) {
    r->items = calloc(nitems, sizeof(*r->items));
    if (!r->items) st = oom();
  }
  for (size_t j = 0; j < nitems && !st; j++) {
    st = hcq__exec_item_copy(&items[j], &r->items[j]);
    r->nitems = j + 1; /* a partly copied item is released safely: its arrays are NULL */
  }
  if (!st) st = collect_aliasing(r);
  for (uint32_t j = 0; j < r->nitems && !st; j++)
    if (r->items[j].kind == HCQ_ITEM_KERNEL && kernel_dims_symbolic(&r->items[j].kernel) &&
        !kernel_dims_always_ok(&r->items[j].kernel) && !hcq__vec_push(&r->symdim_items, j))
      st = oom();
  if (!st) {
    r->eval_vals = calloc(r->vars.len + 1, sizeof(*r->eval_vals));
    if (!r->eval_vals) st = oom();
    for (size_t i = 0; i < r->vars.len && !st; i++) r->eval_vals[i].var = r->vars.data[i];
  }
  for (size_t i = 0; i < r->ndevices && !st; i++) st = hcq__device_check(r->devices[i]);
  if (!st) {
    static atomic_ulong counter;
    char label[64];
    snprintf(label, sizeof(label), "%s#%lu (%zu items)", kind, atomic_fetch_add(&counter, 1) + 1, r->nitems);
    r->label = strdup(label);
    r->objs = calloc(r->ndevices, sizeof(*r->objs));
    if (!r->label || !r->objs) st = oom();
  }
  for (size_t i = 0; i < r->ndevices && !st; i++) hcq__obj_add(r->devices[i], &r->objs[i], HCQ__OBJ_GRAPH, r->label);
  if (st) hcq__runner_deinit(r);
  return st;
}

static hcq_status_t check_input_count(const hcq__runner_t *r, size_t ninputs) {
  if (ninputs == r->ninputs) return NULL;
  return hcq_status_make(HCQ_INVALID_ARGUMENT, "the graph has %zu inputs but the replay passed %zu", r->ninputs,
                         ninputs);
}

/* The replay's variable values over the current ones (others keep theirs); check: each within its
 * variable's range. */
static hcq_status_t stage_values(hcq__runner_t *r, const hcq_var_value_t *vals, size_t nvals, bool check) {
  memcpy(r->pending_values, r->values, r->vars.len * sizeof(int64_t));
  for (size_t i = 0; i < nvals; i++) {
    bool used = false;
    for (size_t v = 0; v < r->vars.len; v++) {
      if (r->vars.data[v] != vals[i].var) continue;
      hcq_status_t st = check ? hcq_var_check(vals[i].var, vals[i].value) : NULL;
      if (st) return st;
      r->pending_values[v] = vals[i].value;
      used = true;
    }
    /* Another variable object that goes by the name of one the items use: its value would be
     * dropped while the caller believes it was set (variables are matched by object, not name). */
    const char *name = check && !used ? hcq_var_name(vals[i].var) : NULL;
    for (size_t v = 0; name && v < r->vars.len; v++) {
      const char *mine = hcq_var_name(r->vars.data[v]);
      if (mine && !strcmp(mine, name))
        return hcq_status_make(HCQ_INVALID_ARGUMENT,
                               "replay: variable %s is not the one %s was built with but another of the same name "
                               "(variables are matched by object: pass the one the items use)",
                               name, r->label);
    }
  }
  return NULL;
}

hcq_status_t hcq__runner_stage(hcq__runner_t *r, hcq_buffer_t *const *inputs, size_t ninputs,
                               const hcq_var_value_t *vals, size_t nvals) {
  hcq_status_t cst = check_input_count(r, ninputs);
  if (cst) return cst;
  if ((ninputs && !inputs) || (nvals && !vals))
    return hcq_status_make(HCQ_INVALID_ARGUMENT, "replay: an input or value array is NULL");
  if ((cst = hcq__var_values_check(vals, nvals, "replay"))) return cst;
  for (size_t k = 0; k < ninputs; k++) {
    const hcq_buffer_t *want = r->inputs[k], *got = inputs[k];
    if (!got) return hcq_status_make(HCQ_INVALID_ARGUMENT, "input %zu is missing (NULL)", k);
    char n1[96], n2[96];
    if (got->size != want->size)
      return hcq_status_make(HCQ_INVALID_ARGUMENT, "input %zu: %s has %" PRIu64 " bytes but the graph's input %s has %" PRIu64,
                             k, hcq__buffer_name(got, n1), got->size, hcq__buffer_name(want, n2), want->size);
    if (got->dev != want->dev)
      return hcq_status_make(HCQ_INVALID_ARGUMENT, "input %zu: %s is on %s but the graph's input %s is on %s", k,
                             hcq__buffer_name(got, n1), got->dev->name, hcq__buffer_name(want, n2), want->dev->name);
    if (hcq__validating) {
      char what[32];
      snprintf(what, sizeof(what), "input %zu", k);
      hcq_status_t vst = hcq__obj_check(&got->obj, HCQ__OBJ_BUFFER, what);
      if (vst) return vst;
    }
    r->pending_inputs[k] = inputs[k];
  }
  for (size_t k = 0; k < ninputs; k++) {
    if (r->pending_inputs[k] == r->inputs[k] && r->pending_inputs[k] == r->build_inputs[k]) continue;
    hcq_status_t st = check_aliasing(r, k);
    if (st) return st;
  }
  for (size_t i = 0; i < r->ndevices; i++) {
    hcq_status_t st = hcq__device_check(r->devices[i]);
    if (st) return st;
  }
  if ((cst = stage_values(r, vals, nvals, true))) return cst;
  /* Symbolic launch sizes: each must still make a valid launch with these values. */
  if (r->symdim_items.len) {
    for (size_t i = 0; i < r->vars.len; i++) r->eval_vals[i].value = r->pending_values[i];
    for (size_t i = 0; i < r->symdim_items.len; i++) {
      uint32_t j = r->symdim_items.data[i];
      const hcq_kernel_item_t *k = &r->items[j].kernel;
      if (kernel_dims_ok(k, r->eval_vals, r->vars.len)) continue;
      /* Something is wrong: the full validation says what. */
      char who[96];
      snprintf(who, sizeof(who), "item %" PRIu32 " (%s)", j, k->program->name);
      hcq_status_t st = validate_kernel(k, who, r->eval_vals, r->vars.len);
      if (st) return st;
    }
  }
  return NULL;
}

hcq_status_t hcq__runner_stage_prechecked(hcq__runner_t *r, hcq_buffer_t *const *inputs, size_t ninputs,
                                          const hcq_var_value_t *vals, size_t nvals) {
  hcq_status_t st = check_input_count(r, ninputs);
  if (st) return st;
  memcpy(r->pending_inputs, inputs, ninputs * sizeof(*inputs));
  return stage_values(r, vals, nvals, false);
}

void hcq__runner_commit(hcq__runner_t *r) {
  for (size_t k = 0; k < r->ninputs; k++) {
    if (r->pending_inputs[k] == r->inputs[k]) continue;
    hcq_buffer_release(r->inputs[k]);
    r->inputs[k] = hcq_buffer_retain(r->pending_inputs[k]);
  }
  memcpy(r->values, r->pending_values, r->vars.len * sizeof(int64_t));
}

static hcq_status_t exec_item_run(const hcq_exec_item_t *it, const hcq_var_value_t *vals, size_t nvals);

hcq_status_t hcq_exec_item_run(const hcq_exec_item_t *it, const hcq_var_value_t *vals, size_t nvals) {
  /* A capture records the item with its symbols, not the launch it turns into. */
  const hcq__recorder_t *rec = hcq__recorder;
  hcq__recorder = NULL;
  hcq_status_t st = exec_item_run(it, vals, nvals);
  hcq__recorder = rec;
  if (!st && rec) rec->item(rec->ctx, it);
  return st;
}

static hcq_status_t exec_item_run(const hcq_exec_item_t *it, const hcq_var_value_t *vals, size_t nvals) {
  if (!it) return hcq_status_make(HCQ_INVALID_ARGUMENT, "hcq_exec_item_run: item is NULL");
  if (nvals && !vals) return hcq_status_make(HCQ_INVALID_ARGUMENT, "hcq_exec_item_run: %zu values but vals is NULL", nvals);
  hcq_status_t vst = hcq__var_values_check(vals, nvals, "hcq_exec_item_run");
  if (vst) return vst;
  if (it->kind == HCQ_ITEM_TRANSFER) {
    hcq_status_t st = validate_transfer(&it->transfer, "transfer");
    return st ? st : hcq_transfer(it->transfer.dst, it->transfer.src, it->transfer.bytes);
  }
  if (it->kind != HCQ_ITEM_KERNEL) return hcq_status_make(HCQ_INVALID_ARGUMENT, "item: unknown kind %d", (int)it->kind);
  /* Validation evaluates every operand; evaluate again into the launch (cheap, and keeps one path). */
  hcq_status_t st = validate_kernel(&it->kernel, "kernel", nvals ? vals : k_no_values, nvals);
  if (st) return st;
  const hcq_kernel_item_t *k = &it->kernel;
  int32_t ivals[HCQ_MAX_KERNEL_VALS];
  hcq_launch_desc_t l = {k->program, k->bufs, k->nbufs, ivals, k->nvals, {0}, {0}, k->outs, k->nouts};
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

hcq_exec_item_t hcq__runner_item_with_inputs(const hcq__runner_t *r, size_t j, size_t from, size_t to,
                                             hcq_buffer_t **bufs) {
  hcq_exec_item_t it = r->items[j];
  if (it.kind == HCQ_ITEM_KERNEL && from < to) {
    memcpy(bufs, it.kernel.bufs, it.kernel.nbufs * sizeof(*bufs));
    it.kernel.bufs = bufs;
  }
  for (size_t k = from; k < to; k++) {
    const hcq__input_slot_t *slot = &r->slots.data[k];
    hcq_buffer_t *b = r->pending_inputs[slot->input];
    if (it.kind == HCQ_ITEM_KERNEL)
      bufs[slot->arg] = b;
    else if (slot->arg == 0)
      it.transfer.dst = b;
    else
      it.transfer.src = b;
  }
  return it;
}
