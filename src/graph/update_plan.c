#include <inttypes.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/buffer.h"
#include "core/status.h"
#include "graph/runner.h"
#include "graph/update_plan.h"
#include "graph/update_plan_testing.h"

typedef struct plan_item {
  uint32_t nargs, nvals;
  uint32_t args_at, vals_at, dims_at; /* into the flat arrays; dims_at UINT32_MAX for transfers */
  uint32_t ops_at;                    /* into plan->ops: nvals values then 6 dims */
  uint64_t eval_gen;                  /* evaluated by the prepare of this generation */
  uint64_t mark_gen;                  /* put on the dirty list in this generation */
  bool updatable, stale;
} plan_item_t;

/* The plan and every array it points to are one allocation (an arena laid out by lay_out), sized
 * before it is made: a replay allocates nothing, and one free releases it all. */
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
  /* Item lists, nitems each: an item is on each at most once (the dirty list by its mark_gen,
   * the changed list being part of it, the stale list by its stale flag). */
  uint32_t *dirty, *changed, *stale;
  size_t ndirty, nchanged, nstale;
  uint64_t gen;
  size_t nupdatable;
};

/* How many of each array element the plan holds. */
typedef struct plan_sizes {
  size_t nitems, nargs, nvals, ndims, nops, ninputs, nvars;
  size_t input_uses, var_uses; /* arguments naming an input; variables of operands (repeats) */
} plan_sizes_t;

static hcq_status_t oom(void) {
  return hcq_status_make(HCQ_OUT_OF_MEMORY, "out of memory planning graph updates");
}

static bool is_symbolic(hcq_operand_t op) { return op.sym && !hcq_expr_is_const(op.sym); }

static size_t var_index(const hcq_expr_t *const *vars, size_t nvars, const hcq_expr_t *v) {
  for (size_t i = 0; i < nvars; i++)
    if (vars[i] == v) return i;
  return SIZE_MAX;
}

/* The variables operand op of item j uses, as indexes into vars (repeats allowed): n of them. */
static hcq_status_t operand_vars(hcq_operand_t op, const hcq_expr_t *const *vars, size_t nvars,
                                 uint32_t j, size_t index[16], size_t *n) {
  *n = 0;
  if (!is_symbolic(op)) return NULL;
  const hcq_expr_t *found[16];
  size_t m = hcq_expr_vars(op.sym, found, 16);
  if (m > 16)
    return hcq_status_make(HCQ_INVALID_ARGUMENT,
                           "item %" PRIu32 ": an operand uses more than 16 variables", j);
  for (size_t i = 0; i < m; i++) {
    index[i] = var_index(vars, nvars, found[i]);
    if (index[i] == SIZE_MAX)
      return hcq_status_make(HCQ_NOT_FOUND, "item %" PRIu32 ": variable %s has no value", j,
                             hcq_var_name(found[i]));
  }
  *n = m;
  return NULL;
}

/* Operand o of a described item: its values, then global[0..2], then local[0..2]. */
static size_t source_nops(const hcq__plan_item_t *src) {
  return src->nvals + (src->global ? 6 : 0);
}

static hcq_operand_t source_operand(const hcq__plan_item_t *src, size_t o) {
  if (o < src->nvals) return src->vals[o];
  o -= src->nvals;
  return o < 3 ? src->global[o] : src->local[o - 3];
}

static uint32_t source_input(const hcq__plan_item_t *src, size_t a) {
  return src->arg_input ? src->arg_input[a] : HCQ__PLAN_NO_INPUT;
}

/* Counts what the plan of items holds (n's nitems, ninputs and nvars given), checking every input
 * index and variable they name, item by item. */
static hcq_status_t measure(const hcq__plan_item_t *items, const hcq_expr_t *const *vars,
                            plan_sizes_t *n) {
  for (uint32_t j = 0; j < n->nitems; j++) {
    const hcq__plan_item_t *src = &items[j];
    for (size_t a = 0; a < src->nargs; a++) {
      uint32_t k = source_input(src, a);
      if (k != HCQ__PLAN_NO_INPUT && k >= n->ninputs)
        return hcq_status_make(HCQ_OUT_OF_RANGE,
                               "item %" PRIu32 ": argument %zu names input %" PRIu32 " of %zu", j,
                               a, k, n->ninputs);
      n->input_uses += k != HCQ__PLAN_NO_INPUT;
    }
    for (size_t o = 0; o < source_nops(src); o++) {
      size_t index[16], m;
      HCQ__TRY(operand_vars(source_operand(src, o), vars, n->nvars, j, index, &m));
      n->var_uses += m;
    }
    n->nargs += src->nargs;
    n->nvals += src->nvals;
    n->ndims += src->global ? 6 : 0;
    n->nops += source_nops(src);
  }
  return NULL;
}

#define ARENA_ALIGN _Alignof(max_align_t)

/* count elements of size bytes at *used, aligned; NULL when only measuring (base NULL). */
static void *carve(char *base, size_t *used, size_t count, size_t size) {
  size_t at = (*used + ARENA_ALIGN - 1) / ARENA_ALIGN * ARENA_ALIGN;
  *used = at + count * size;
  return base ? base + at : NULL;
}

/* Points p's arrays into the arena at base, after the plan itself (base NULL: measures only).
 * Returns the arena's size in bytes. */
static size_t lay_out(hcq__update_plan_t *p, char *base, const plan_sizes_t *n) {
  size_t used = sizeof(*p);
#define CARVE(field, count) p->field = carve(base, &used, (count), sizeof(*p->field))
  CARVE(items, n->nitems);
  CARVE(arg_input, n->nargs);
  CARVE(ops, n->nops);
  CARVE(args_held, n->nargs);
  CARVE(args_next, n->nargs);
  CARVE(vals_held, n->nvals);
  CARVE(vals_next, n->nvals);
  CARVE(dims_held, n->ndims);
  CARVE(dims_next, n->ndims);
  CARVE(inputs_held, n->ninputs);
  CARVE(inputs_next, n->ninputs);
  CARVE(vars, n->nvars);
  CARVE(values_held, n->nvars);
  CARVE(values_next, n->nvars);
  CARVE(bind, n->nvars);
  CARVE(by_input_at, n->ninputs + 1);
  CARVE(by_input, n->input_uses);
  CARVE(by_var_at, n->nvars + 1);
  CARVE(by_var, n->var_uses);
  CARVE(dirty, n->nitems);
  CARVE(changed, n->nitems);
  CARVE(stale, n->nitems);
#undef CARVE
  /* Whole units, so that an empty array's pointer stays inside. */
  return carve(NULL, &used, 0, 0), used;
}

/* Copies (and retains) the variables and the values the graph was instantiated with. */
static void fill_vars(hcq__update_plan_t *p, const hcq_expr_t *const *vars, const int64_t *values,
                      const uint64_t *inputs) {
  for (size_t v = 0; v < p->nvars; v++) {
    p->vars[v] = hcq_expr_retain(vars[v]);
    p->values_held[v] = p->values_next[v] = values[v];
    p->bind[v] = (hcq_var_value_t){vars[v], values[v]};
  }
  if (p->ninputs) memcpy(p->inputs_held, inputs, p->ninputs * sizeof(uint64_t));
}

/* Copies the items (checked by measure) into the flat arrays, retaining their symbols. */
static void fill_items(hcq__update_plan_t *p, const hcq__plan_item_t *items,
                       const uint64_t *const *fixed_args) {
  uint32_t a_at = 0, v_at = 0, d_at = 0, o_at = 0;
  for (uint32_t j = 0; j < p->nitems; j++) {
    const hcq__plan_item_t *src = &items[j];
    uint32_t nops = (uint32_t)source_nops(src);
    plan_item_t *it = &p->items[j];
    *it = (plan_item_t){.nargs = (uint32_t)src->nargs,
                        .nvals = (uint32_t)src->nvals,
                        .args_at = a_at,
                        .vals_at = v_at,
                        .dims_at = src->global ? d_at : UINT32_MAX,
                        .ops_at = o_at};
    for (size_t a = 0; a < src->nargs; a++) {
      uint32_t k = source_input(src, a);
      p->arg_input[a_at + a] = k;
      p->args_held[a_at + a] = fixed_args && fixed_args[j] ? fixed_args[j][a] : 0;
      it->updatable |= k != HCQ__PLAN_NO_INPUT;
    }
    for (uint32_t o = 0; o < nops; o++) {
      hcq_operand_t *op = &p->ops[o_at + o];
      *op = source_operand(src, o);
      hcq_expr_retain(op->sym);
      it->updatable |= is_symbolic(*op);
    }
    a_at += it->nargs, v_at += it->nvals, d_at += src->global ? 6 : 0, o_at += nops;
    p->nupdatable += it->updatable;
  }
  p->nops = o_at;
}

/* Calls fn(p, var index, item) for each variable operand j uses (repeats allowed). */
static void for_item_vars(hcq__update_plan_t *p, uint32_t j,
                          void (*fn)(hcq__update_plan_t *, size_t, uint32_t)) {
  const plan_item_t *it = &p->items[j];
  size_t nops = it->nvals + (it->dims_at != UINT32_MAX ? 6 : 0);
  for (size_t o = 0; o < nops; o++) {
    size_t index[16], n;
    /* measure checked every operand: this cannot fail. */
    hcq_status_destroy(operand_vars(p->ops[it->ops_at + o], p->vars, p->nvars, j, index, &n));
    for (size_t i = 0; i < n; i++) fn(p, index[i], j);
  }
}

static void count_var(hcq__update_plan_t *p, size_t v, uint32_t j) {
  (void)j;
  p->by_var_at[v + 1]++;
}

static void place_var(hcq__update_plan_t *p, size_t v, uint32_t j) {
  /* by_var_at[v] is used as a cursor here, restored after. */
  p->by_var[p->by_var_at[v]++] = j;
}

/* at[0..n] from per-entry counts in at[1..n] to the starts of each entry's run. */
static void counts_to_starts(uint32_t *at, size_t n) {
  for (size_t i = 0; i < n; i++) at[i + 1] += at[i];
}

/* Placing advanced each start to the next one's: shift back. */
static void cursors_to_starts(uint32_t *at, size_t n) {
  for (size_t i = n; i > 0; i--) at[i] = at[i - 1];
  at[0] = 0;
}

/* Per input and per variable, the items that use it (a variable used twice by one item lists the
 * item twice: harmless, the dirty mark keeps it once). */
static void index_uses(hcq__update_plan_t *p) {
  for (uint32_t j = 0; j < p->nitems; j++) {
    const plan_item_t *it = &p->items[j];
    for (uint32_t a = 0; a < it->nargs; a++) {
      uint32_t k = p->arg_input[it->args_at + a];
      if (k != HCQ__PLAN_NO_INPUT) p->by_input_at[k + 1]++;
    }
    for_item_vars(p, j, count_var);
  }
  counts_to_starts(p->by_input_at, p->ninputs);
  counts_to_starts(p->by_var_at, p->nvars);
  for (uint32_t j = 0; j < p->nitems; j++) {
    const plan_item_t *it = &p->items[j];
    for (uint32_t a = 0; a < it->nargs; a++) {
      uint32_t k = p->arg_input[it->args_at + a];
      if (k != HCQ__PLAN_NO_INPUT) p->by_input[p->by_input_at[k]++] = j;
    }
    for_item_vars(p, j, place_var);
  }
  cursors_to_starts(p->by_input_at, p->ninputs);
  cursors_to_starts(p->by_var_at, p->nvars);
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
  plan_sizes_t n = {.nitems = nitems, .ninputs = ninputs, .nvars = nvars};
  HCQ__TRY(measure(items, vars, &n));
  hcq__update_plan_t shape;
  char *arena = calloc(1, lay_out(&shape, NULL, &n));
  if (!arena) return oom();
  hcq__update_plan_t *p = (hcq__update_plan_t *)arena;
  lay_out(p, arena, &n);
  p->nitems = nitems;
  p->ninputs = ninputs;
  p->nvars = nvars;
  fill_vars(p, vars, values, inputs);
  fill_items(p, items, fixed_args);
  index_uses(p);
  /* What the instantiated graph holds: every item evaluated with the build's inputs and values. */
  hcq_status_t st;
  for (uint32_t j = 0; j < nitems; j++) {
    if ((st = evaluate(p, j, p->inputs_held))) goto fail;
    hold(p, &p->items[j]);
  }
  *out = p;
  return NULL;
fail:
  hcq__update_plan_free(p);
  return st;
}

void hcq__update_plan_free(hcq__update_plan_t *p) {
  if (!p) return;
  for (size_t i = 0; i < p->nops; i++) hcq_expr_release(p->ops[i].sym);
  for (size_t v = 0; v < p->nvars; v++) hcq_expr_release(p->vars[v]);
  free(p); /* the arena */
}

static void mark(hcq__update_plan_t *p, uint32_t j) {
  if (p->items[j].mark_gen == p->gen) return;
  p->items[j].mark_gen = p->gen;
  p->dirty[p->ndirty++] = j;
}

static int cmp_u32(const void *a, const void *b) {
  uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
  return (x > y) - (x < y);
}

hcq_status_t hcq__update_plan_prepare(hcq__update_plan_t *p, const uint64_t *inputs,
                                      const int64_t *values, const uint32_t **out_items,
                                      size_t *out_count) {
  p->gen++;
  p->ndirty = p->nchanged = 0;
  *out_items = NULL;
  *out_count = 0;
  for (size_t k = 0; k < p->ninputs; k++) {
    p->inputs_next[k] = inputs[k];
    if (inputs[k] == p->inputs_held[k]) continue;
    for (uint32_t i = p->by_input_at[k]; i < p->by_input_at[k + 1]; i++) mark(p, p->by_input[i]);
  }
  for (size_t v = 0; v < p->nvars; v++) {
    p->values_next[v] = values[v];
    p->bind[v].value = values[v];
    if (values[v] == p->values_held[v]) continue;
    for (uint32_t i = p->by_var_at[v]; i < p->by_var_at[v + 1]; i++) mark(p, p->by_var[i]);
  }
  for (size_t i = 0; i < p->nstale; i++) mark(p, p->stale[i]);
  if (p->ndirty > 1) qsort(p->dirty, p->ndirty, sizeof(uint32_t), cmp_u32);
  for (size_t i = 0; i < p->ndirty; i++) {
    uint32_t j = p->dirty[i];
    hcq_status_t st = evaluate(p, j, p->inputs_next);
    if (st) {
      p->nchanged = 0;
      return st;
    }
    if (p->items[j].stale || differs(p, &p->items[j])) p->changed[p->nchanged++] = j;
  }
  *out_items = p->changed;
  *out_count = p->nchanged;
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
  for (size_t i = 0; i < p->nchanged; i++) {
    plan_item_t *it = &p->items[p->changed[i]];
    hold(p, it);
    it->stale = false;
  }
  p->nstale = 0;
  memcpy(p->inputs_held, p->inputs_next, p->ninputs * sizeof(uint64_t));
  memcpy(p->values_held, p->values_next, p->nvars * sizeof(int64_t));
  p->nchanged = 0;
}

void hcq__update_plan_abort(hcq__update_plan_t *p) {
  for (size_t i = 0; i < p->nchanged; i++) {
    uint32_t j = p->changed[i];
    if (p->items[j].stale) continue;
    p->items[j].stale = true;
    p->stale[p->nstale++] = j;
  }
  p->nchanged = 0;
}

size_t hcq__update_plan_updatable_count(const hcq__update_plan_t *p) { return p->nupdatable; }

size_t hcq__update_plan_evaluated_count(const hcq__update_plan_t *p) { return p->ndirty; }

/* ---- from a graph runner ---- */

/* The described items of r (arg_input all HCQ__PLAN_NO_INPUT, fixed[j] its addresses). */
static void describe_runner_items(const hcq__runner_t *r, hcq__plan_item_t *items,
                                  uint32_t *arg_input, uint64_t *addrs, const uint64_t **fixed) {
  size_t at = 0;
  for (size_t j = 0; j < r->nitems; j++) {
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
  /* Slots are in item order; each names (item, argument, input). */
  size_t first_arg = 0, item = 0;
  for (size_t s = 0; s < r->slots.len; s++) {
    const hcq__input_slot_t *slot = &r->slots.data[s];
    while (item < slot->item) first_arg += items[item++].nargs;
    arg_input[first_arg + slot->arg] = slot->input;
  }
}

hcq_status_t hcq__update_plan_for_runner(const hcq__runner_t *r, hcq__update_plan_t **out) {
  size_t nargs = 0;
  for (size_t j = 0; j < r->nitems; j++)
    nargs += r->items[j].kind == HCQ_ITEM_KERNEL ? r->items[j].kernel.nbufs : 2;
  hcq__plan_item_t *items = calloc(r->nitems, sizeof(*items));
  uint32_t *arg_input = malloc((nargs + 1) * sizeof(uint32_t));
  uint64_t *addrs = malloc((nargs + 1) * sizeof(uint64_t));
  const uint64_t **fixed = calloc(r->nitems, sizeof(*fixed));
  uint64_t *inputs = calloc(r->ninputs + 1, sizeof(uint64_t));
  hcq_status_t st;
  if (!items || !arg_input || !addrs || !fixed || !inputs) {
    st = hcq_status_make(HCQ_OUT_OF_MEMORY, "out of memory planning the updates of %s", r->label);
    goto done;
  }
  describe_runner_items(r, items, arg_input, addrs, fixed);
  for (size_t k = 0; k < r->ninputs; k++) inputs[k] = r->build_inputs[k]->addr;
  st =
      hcq__update_plan_create(items, r->nitems, fixed, inputs, r->ninputs,
                              (const hcq_expr_t *const *)r->vars.data, r->values, r->vars.len, out);
done:
  free(items);
  free(arg_input);
  free(addrs);
  free((void *)fixed);
  free(inputs);
  return st;
}
