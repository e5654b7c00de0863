#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/buffer.h"
#include "core/vec.h"
#include "graph/runner.h"
#include "graph/update_plan.h"

typedef struct plan_item {
  uint32_t nargs, nvals;
  uint32_t args_at, vals_at, dims_at; /* into the flat arrays; dims_at UINT32_MAX for transfers */
  uint32_t ops_at;                    /* into plan->ops: nvals values then 6 dims */
  uint64_t eval_gen;                  /* evaluated by the prepare of this generation */
  uint64_t mark_gen;                  /* put on the dirty list in this generation */
  bool updatable, stale;
} plan_item_t;

struct hcq__update_plan {
  plan_item_t *items;
  size_t nitems;
  uint32_t *arg_input; /* per argument */
  hcq_operand_t *ops;  /* retained symbols */
  size_t nops;
  uint64_t *args_held, *args_next;
  int32_t *vals_held, *vals_next;
  uint32_t *dims_held, *dims_next;
  uint64_t *inputs_held, *inputs_next;
  size_t ninputs;
  const hcq_expr_t **vars; /* retained */
  int64_t *values_held, *values_next;
  hcq_var_value_t *bind; /* scratch for evaluation */
  size_t nvars;
  uint32_t *by_input_at, *by_input; /* CSR: items per input */
  uint32_t *by_var_at, *by_var;     /* CSR: items per variable */
  HCQ__VEC(uint32_t) dirty, changed, stale;
  uint64_t gen;
  size_t nupdatable;
  bool all_stale; /* an abort could not remember its items: every updatable item is listed next */
};

static hcq_status_t oom(void) {
  return hcq_status_make(HCQ_OUT_OF_MEMORY, "out of memory planning graph updates");
}

static bool is_symbolic(hcq_operand_t op) { return op.sym && !hcq_expr_is_const(op.sym); }

static size_t var_index(const hcq__update_plan_t *p, const hcq_expr_t *v) {
  for (size_t i = 0; i < p->nvars; i++)
    if (p->vars[i] == v) return i;
  return SIZE_MAX;
}

/* Calls fn(p, var index, item) for each variable operand j uses (repeats allowed). */
static hcq_status_t for_item_vars(hcq__update_plan_t *p, uint32_t j,
                                  void (*fn)(hcq__update_plan_t *, size_t, uint32_t)) {
  const plan_item_t *it = &p->items[j];
  size_t nops = it->nvals + (it->dims_at != UINT32_MAX ? 6 : 0);
  for (size_t o = 0; o < nops; o++) {
    const hcq_operand_t *op = &p->ops[it->ops_at + o];
    if (!is_symbolic(*op)) continue;
    const hcq_expr_t *found[16];
    size_t n = hcq_expr_vars(op->sym, found, 16);
    if (n > 16)
      return hcq_status_make(HCQ_INVALID_ARGUMENT,
                             "item %" PRIu32 ": an operand uses more than 16 variables", j);
    for (size_t i = 0; i < n; i++) {
      size_t v = var_index(p, found[i]);
      if (v == SIZE_MAX)
        return hcq_status_make(HCQ_NOT_FOUND, "item %" PRIu32 ": variable %s has no value", j,
                               hcq_var_name(found[i]));
      fn(p, v, j);
    }
  }
  return NULL;
}

static void count_var(hcq__update_plan_t *p, size_t v, uint32_t j) {
  (void)j;
  p->by_var_at[v + 1]++;
}

static void place_var(hcq__update_plan_t *p, size_t v, uint32_t j) {
  /* by_var_at[v] is used as a cursor here, restored after. */
  uint32_t at = p->by_var_at[v]++;
  p->by_var[at] = j;
}

/* Evaluates item j's operands into the next arrays. */
static hcq_status_t evaluate(hcq__update_plan_t *p, uint32_t j, const uint64_t *inputs) {
  plan_item_t *it = &p->items[j];
  for (uint32_t a = 0; a < it->nargs; a++) {
    uint32_t k = p->arg_input[it->args_at + a];
    p->args_next[it->args_at + a] =
        k != HCQ__PLAN_NO_INPUT ? inputs[k] : p->args_held[it->args_at + a];
  }
  size_t nops = it->nvals + (it->dims_at != UINT32_MAX ? 6 : 0);
  for (size_t o = 0; o < nops; o++) {
    const hcq_operand_t *op = &p->ops[it->ops_at + o];
    int64_t v = op->value;
    if (op->sym) {
      hcq_status_t st = hcq_expr_eval(op->sym, p->bind, p->nvars, &v);
      if (st) return hcq_status_annotate(st, "item %" PRIu32, j);
    }
    bool is_val = o < it->nvals;
    int64_t lo = is_val ? INT32_MIN : 0, hi = is_val ? INT32_MAX : UINT32_MAX;
    if (v < lo || v > hi) {
      char text[96] = "", name[32];
      if (op->sym) hcq_expr_format(op->sym, text, sizeof(text));
      if (is_val)
        snprintf(name, sizeof(name), "value %zu", o);
      else
        snprintf(name, sizeof(name), "%s[%zu]", o - it->nvals < 3 ? "global" : "local",
                 (o - it->nvals) % 3);
      return hcq_status_make(HCQ_OUT_OF_RANGE,
                             "item %" PRIu32 ": %s %s = %" PRId64 " does not fit [%" PRId64
                             ", %" PRId64 "]",
                             j, name, text, v, lo, hi);
    }
    if (is_val)
      p->vals_next[it->vals_at + o] = (int32_t)v;
    else
      p->dims_next[it->dims_at + (o - it->nvals)] = (uint32_t)v;
  }
  it->eval_gen = p->gen;
  return NULL;
}

static bool differs(const hcq__update_plan_t *p, const plan_item_t *it) {
  if (memcmp(p->args_next + it->args_at, p->args_held + it->args_at, it->nargs * sizeof(uint64_t)))
    return true;
  if (memcmp(p->vals_next + it->vals_at, p->vals_held + it->vals_at, it->nvals * sizeof(int32_t)))
    return true;
  return it->dims_at != UINT32_MAX &&
         memcmp(p->dims_next + it->dims_at, p->dims_held + it->dims_at, 6 * sizeof(uint32_t));
}

static void hold(hcq__update_plan_t *p, const plan_item_t *it) {
  memcpy(p->args_held + it->args_at, p->args_next + it->args_at, it->nargs * sizeof(uint64_t));
  memcpy(p->vals_held + it->vals_at, p->vals_next + it->vals_at, it->nvals * sizeof(int32_t));
  if (it->dims_at != UINT32_MAX)
    memcpy(p->dims_held + it->dims_at, p->dims_next + it->dims_at, 6 * sizeof(uint32_t));
}

hcq_status_t hcq__update_plan_create(const hcq__plan_item_t *items, size_t nitems,
                                     const uint64_t *const *fixed_args, const uint64_t *inputs,
                                     size_t ninputs, const hcq_expr_t *const *vars,
                                     const int64_t *values, size_t nvars,
                                     hcq__update_plan_t **out) {
  *out = NULL;
  if (nitems >= UINT32_MAX / 8)
    return hcq_status_make(HCQ_INVALID_ARGUMENT, "%zu items are too many", nitems);
  hcq__update_plan_t *p = calloc(1, sizeof(*p));
  if (!p) return oom();
  size_t nargs = 0, nvals = 0, ndims = 0, nops = 0;
  for (size_t j = 0; j < nitems; j++) {
    nargs += items[j].nargs;
    nvals += items[j].nvals;
    ndims += items[j].global ? 6 : 0;
    nops += items[j].nvals + (items[j].global ? 6 : 0);
  }
  p->nitems = nitems;
  p->ninputs = ninputs;
  p->nvars = nvars;
  p->items = calloc(nitems + 1, sizeof(*p->items));
  p->arg_input = calloc(nargs + 1, sizeof(uint32_t));
  p->ops = calloc(nops + 1, sizeof(hcq_operand_t));
  p->args_held = calloc(nargs + 1, sizeof(uint64_t));
  p->args_next = calloc(nargs + 1, sizeof(uint64_t));
  p->vals_held = calloc(nvals + 1, sizeof(int32_t));
  p->vals_next = calloc(nvals + 1, sizeof(int32_t));
  p->dims_held = calloc(ndims + 1, sizeof(uint32_t));
  p->dims_next = calloc(ndims + 1, sizeof(uint32_t));
  p->inputs_held = calloc(ninputs + 1, sizeof(uint64_t));
  p->inputs_next = calloc(ninputs + 1, sizeof(uint64_t));
  p->vars = calloc(nvars + 1, sizeof(*p->vars));
  p->values_held = calloc(nvars + 1, sizeof(int64_t));
  p->values_next = calloc(nvars + 1, sizeof(int64_t));
  p->bind = calloc(nvars + 1, sizeof(hcq_var_value_t));
  p->by_input_at = calloc(ninputs + 2, sizeof(uint32_t));
  p->by_var_at = calloc(nvars + 2, sizeof(uint32_t));
  if (!p->items || !p->arg_input || !p->ops || !p->args_held || !p->args_next || !p->vals_held ||
      !p->vals_next || !p->dims_held || !p->dims_next || !p->inputs_held || !p->inputs_next ||
      !p->vars || !p->values_held || !p->values_next || !p->bind || !p->by_input_at ||
      !p->by_var_at) {
    hcq__update_plan_free(p);
    return oom();
  }
  for (size_t v = 0; v < nvars; v++) {
    p->vars[v] = hcq_expr_retain(vars[v]);
    p->values_held[v] = p->values_next[v] = values[v];
    p->bind[v] = (hcq_var_value_t){vars[v], values[v]};
  }
  if (ninputs) memcpy(p->inputs_held, inputs, ninputs * sizeof(uint64_t));
  uint32_t a_at = 0, v_at = 0, d_at = 0, o_at = 0;
  hcq_status_t st = NULL;
  for (uint32_t j = 0; j < nitems && !st; j++) {
    const hcq__plan_item_t *src = &items[j];
    plan_item_t *it = &p->items[j];
    *it = (plan_item_t){(uint32_t)src->nargs,
                        (uint32_t)src->nvals,
                        a_at,
                        v_at,
                        src->global ? d_at : UINT32_MAX,
                        o_at,
                        0,
                        0,
                        false,
                        false};
    for (size_t a = 0; a < src->nargs; a++) {
      uint32_t k = src->arg_input ? src->arg_input[a] : HCQ__PLAN_NO_INPUT;
      if (k != HCQ__PLAN_NO_INPUT && k >= ninputs) {
        st = hcq_status_make(HCQ_OUT_OF_RANGE,
                             "item %" PRIu32 ": argument %zu names input %" PRIu32 " of %zu", j, a,
                             k, ninputs);
        break;
      }
      p->arg_input[a_at + a] = k;
      p->args_held[a_at + a] = fixed_args && fixed_args[j] ? fixed_args[j][a] : 0;
      if (k != HCQ__PLAN_NO_INPUT) {
        it->updatable = true;
        p->by_input_at[k + 1]++;
      }
    }
    for (size_t i = 0; i < src->nvals; i++) p->ops[o_at + i] = src->vals[i];
    if (src->global)
      for (int i = 0; i < 3; i++)
        p->ops[o_at + src->nvals + i] = src->global[i],
                                   p->ops[o_at + src->nvals + 3 + i] = src->local[i];
    size_t n = src->nvals + (src->global ? 6 : 0);
    for (size_t i = 0; i < n; i++) {
      hcq_expr_retain(p->ops[o_at + i].sym);
      p->nops = o_at + i + 1;
      if (is_symbolic(p->ops[o_at + i])) it->updatable = true;
    }
    a_at += (uint32_t)src->nargs, v_at += (uint32_t)src->nvals, d_at += src->global ? 6 : 0,
        o_at += (uint32_t)n;
    if (!st) st = for_item_vars(p, j, count_var);
    p->nupdatable += it->updatable;
  }
  /* Per input and per variable, the items that use it (a variable used twice by one item lists
   * the item twice: harmless, the dirty mark keeps it once). */
  uint32_t *by_input_count = NULL;
  if (!st) {
    for (size_t k = 0; k < ninputs; k++) p->by_input_at[k + 1] += p->by_input_at[k];
    for (size_t v = 0; v < nvars; v++) p->by_var_at[v + 1] += p->by_var_at[v];
    p->by_input = calloc(p->by_input_at[ninputs] + 1, sizeof(uint32_t));
    p->by_var = calloc(p->by_var_at[nvars] + 1, sizeof(uint32_t));
    by_input_count = calloc(ninputs + 1, sizeof(uint32_t));
    if (!p->by_input || !p->by_var || !by_input_count) st = oom();
  }
  for (uint32_t j = 0; j < nitems && !st; j++) {
    const plan_item_t *it = &p->items[j];
    for (uint32_t a = 0; a < it->nargs; a++) {
      uint32_t k = p->arg_input[it->args_at + a];
      if (k != HCQ__PLAN_NO_INPUT) p->by_input[p->by_input_at[k] + by_input_count[k]++] = j;
    }
    st = for_item_vars(p, j, place_var);
  }
  free(by_input_count);
  if (!st) {
    /* place_var advanced each start to the next one's: shift back. */
    for (size_t v = nvars; v > 0; v--) p->by_var_at[v] = p->by_var_at[v - 1];
    p->by_var_at[0] = 0;
  }
  /* What the instantiated graph holds: every item evaluated with the build's inputs and values. */
  for (uint32_t j = 0; j < nitems && !st; j++) {
    if (!(st = evaluate(p, j, p->inputs_held))) hold(p, &p->items[j]);
  }
  if (st) {
    hcq__update_plan_free(p);
    return st;
  }
  *out = p;
  return NULL;
}

void hcq__update_plan_free(hcq__update_plan_t *p) {
  if (!p) return;
  for (size_t i = 0; i < p->nops; i++) hcq_expr_release(p->ops[i].sym);
  for (size_t v = 0; v < p->nvars && p->vars; v++) hcq_expr_release(p->vars[v]);
  free(p->items);
  free(p->arg_input);
  free(p->ops);
  free(p->args_held);
  free(p->args_next);
  free(p->vals_held);
  free(p->vals_next);
  free(p->dims_held);
  free(p->dims_next);
  free(p->inputs_held);
  free(p->inputs_next);
  free((void *)p->vars);
  free(p->values_held);
  free(p->values_next);
  free(p->bind);
  free(p->by_input_at);
  free(p->by_input);
  free(p->by_var_at);
  free(p->by_var);
  hcq__vec_free(&p->dirty);
  hcq__vec_free(&p->changed);
  hcq__vec_free(&p->stale);
  free(p);
}

static bool mark(hcq__update_plan_t *p, uint32_t j) {
  if (p->items[j].mark_gen == p->gen) return true;
  p->items[j].mark_gen = p->gen;
  return hcq__vec_push(&p->dirty, j);
}

static int cmp_u32(const void *a, const void *b) {
  uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
  return (x > y) - (x < y);
}

hcq_status_t hcq__update_plan_prepare(hcq__update_plan_t *p, const uint64_t *inputs,
                                      const int64_t *values, const uint32_t **out_items,
                                      size_t *out_count) {
  p->gen++;
  p->dirty.len = p->changed.len = 0;
  *out_items = NULL;
  *out_count = 0;
  bool ok = true;
  for (size_t k = 0; k < p->ninputs; k++) {
    p->inputs_next[k] = inputs[k];
    if (inputs[k] == p->inputs_held[k]) continue;
    for (uint32_t i = p->by_input_at[k]; i < p->by_input_at[k + 1]; i++)
      ok &= mark(p, p->by_input[i]);
  }
  for (size_t v = 0; v < p->nvars; v++) {
    p->values_next[v] = values[v];
    p->bind[v].value = values[v];
    if (values[v] == p->values_held[v]) continue;
    for (uint32_t i = p->by_var_at[v]; i < p->by_var_at[v + 1]; i++) ok &= mark(p, p->by_var[i]);
  }
  for (size_t i = 0; i < p->stale.len; i++) ok &= mark(p, p->stale.data[i]);
  for (uint32_t j = 0; p->all_stale && j < p->nitems; j++) {
    if (!p->items[j].updatable) continue;
    p->items[j].stale = true;
    ok &= mark(p, j);
  }
  if (!ok || !hcq__vec_reserve_for(&p->changed, p->dirty.len)) return oom();
  if (p->dirty.len > 1) qsort(p->dirty.data, p->dirty.len, sizeof(uint32_t), cmp_u32);
  for (size_t i = 0; i < p->dirty.len; i++) {
    uint32_t j = p->dirty.data[i];
    hcq_status_t st = evaluate(p, j, p->inputs_next);
    if (st) {
      p->changed.len = 0;
      return st;
    }
    if (p->items[j].stale || differs(p, &p->items[j])) p->changed.data[p->changed.len++] = j;
  }
  *out_items = p->changed.data;
  *out_count = p->changed.len;
  return NULL;
}

void hcq__update_plan_values(const hcq__update_plan_t *p, uint32_t item, hcq__plan_values_t *out) {
  const plan_item_t *it = &p->items[item];
  bool next = it->eval_gen == p->gen;
  out->args = (next ? p->args_next : p->args_held) + it->args_at;
  out->vals = (next ? p->vals_next : p->vals_held) + it->vals_at;
  if (it->dims_at == UINT32_MAX) {
    out->global = out->local = NULL;
  } else {
    out->global = (next ? p->dims_next : p->dims_held) + it->dims_at;
    out->local = out->global + 3;
  }
}

void hcq__update_plan_commit(hcq__update_plan_t *p) {
  for (size_t i = 0; i < p->changed.len; i++) {
    plan_item_t *it = &p->items[p->changed.data[i]];
    hold(p, it);
    it->stale = false;
  }
  p->stale.len = 0;
  p->all_stale = false;
  memcpy(p->inputs_held, p->inputs_next, p->ninputs * sizeof(uint64_t));
  memcpy(p->values_held, p->values_next, p->nvars * sizeof(int64_t));
  p->changed.len = 0;
}

void hcq__update_plan_abort(hcq__update_plan_t *p) {
  for (size_t i = 0; i < p->changed.len; i++) {
    uint32_t j = p->changed.data[i];
    if (p->items[j].stale) continue;
    p->items[j].stale = true;
    if (!hcq__vec_push(&p->stale, j)) p->all_stale = true;
  }
  p->changed.len = 0;
}

size_t hcq__update_plan_updatable_count(const hcq__update_plan_t *p) { return p->nupdatable; }

size_t hcq__update_plan_evaluated_count(const hcq__update_plan_t *p) { return p->dirty.len; }

/* ---- from a graph runner ---- */

hcq_status_t hcq__update_plan_for_runner(const hcq__runner_t *r, hcq__update_plan_t **out) {
  size_t nargs = 0;
  for (size_t j = 0; j < r->nitems; j++)
    nargs += r->items[j].kind == HCQ_ITEM_KERNEL ? r->items[j].kernel.nbufs : 2;
  hcq__plan_item_t *items = calloc(r->nitems, sizeof(*items));
  uint32_t *arg_input = malloc((nargs + 1) * sizeof(uint32_t));
  uint64_t *addrs = malloc((nargs + 1) * sizeof(uint64_t));
  const uint64_t **fixed = calloc(r->nitems, sizeof(*fixed));
  uint64_t *inputs = calloc(r->ninputs + 1, sizeof(uint64_t));
  hcq_status_t st = NULL;
  if (!items || !arg_input || !addrs || !fixed || !inputs)
    st = hcq_status_make(HCQ_OUT_OF_MEMORY, "out of memory planning the updates of %s", r->label);
  size_t at = 0;
  for (size_t j = 0; j < r->nitems && !st; j++) {
    const hcq_exec_item_t *it = &r->items[j];
    hcq__item_access_t acc;
    hcq__item_access(it, &acc);
    for (size_t i = 0; i < acc.n; i++) {
      arg_input[at + i] = HCQ__PLAN_NO_INPUT;
      addrs[at + i] = acc.bufs[i]->addr;
    }
    items[j].nargs = acc.n;
    items[j].arg_input = arg_input + at;
    fixed[j] = addrs + at;
    if (it->kind == HCQ_ITEM_KERNEL) {
      items[j].nvals = it->kernel.nvals;
      items[j].vals = it->kernel.vals;
      items[j].global = it->kernel.global;
      items[j].local = it->kernel.local;
    }
    at += acc.n;
  }
  if (!st) {
    /* Slots are in item order; each names (item, argument, input). */
    size_t first_arg = 0, item = 0;
    for (size_t s = 0; s < r->slots.len; s++) {
      const hcq__input_slot_t *slot = &r->slots.data[s];
      while (item < slot->item) first_arg += items[item++].nargs;
      arg_input[first_arg + slot->arg] = slot->input;
    }
    for (size_t k = 0; k < r->ninputs; k++) inputs[k] = r->build_inputs[k]->addr;
    st = hcq__update_plan_create(items, r->nitems, fixed, inputs, r->ninputs,
                                 (const hcq_expr_t *const *)r->vars.data, r->values, r->vars.len,
                                 out);
  }
  free(items);
  free(arg_input);
  free(addrs);
  free((void *)fixed);
  free(inputs);
  return st;
}
