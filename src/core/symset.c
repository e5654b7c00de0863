#include "core/symset.h"

#include <string.h>

#include "core/expr.h"

void hcq__symset_init(hcq__symset_t *set) { memset(set, 0, sizeof(*set)); }

void hcq__symset_deinit(hcq__symset_t *set) {
  for (size_t i = 0; i < set->vars.len; i++) hcq_expr_release(set->vars.data[i]);
  for (size_t i = 0; i < set->syms.len; i++) hcq_expr_release(set->syms.data[i]);
  hcq__vec_free(&set->vars);
  hcq__vec_free(&set->syms);
  hcq__vec_free(&set->code_start);
  hcq__vec_free(&set->code);
  free(set->index);
  free(set->values);
  free(set->lookup);
  free(set->stack);
  memset(set, 0, sizeof(*set));
}

static hcq_status_t oom(void) {
  return hcq_status_make(HCQ_OUT_OF_MEMORY, "out of memory compiling symbols");
}

static bool var_index(hcq__symset_t *set, const hcq_expr_t *var, uint32_t *out) {
  for (size_t i = 0; i < set->vars.len; i++)
    if (set->vars.data[i] == var) {
      *out = (uint32_t)i;
      return true;
    }
  if (set->vars.len == set->values_cap) {
    size_t n = set->values_cap ? set->values_cap * 2 : 8;
    int64_t *v = realloc(set->values, n * sizeof(*v));
    if (!v) return false;
    set->values = v;
    uint32_t *l = realloc(set->lookup, n * sizeof(*l));
    if (!l) return false;
    set->lookup = l;
    set->values_cap = n;
  }
  if (!hcq__vec_push(&set->vars, var)) return false;
  hcq_expr_retain(var);
  set->lookup[set->vars.len - 1] = 0;
  *out = (uint32_t)(set->vars.len - 1);
  return true;
}

static bool emit(hcq__symset_t *set, const hcq_expr_t *e) {
  hcq__sym_instr_t ins = {(int32_t)e->op, 0, 0};
  switch (e->op) {
    case HCQ_EXPR_CONST: ins.imm = e->u.value; break;
    case HCQ_EXPR_VAR:
      if (!var_index(set, e, &ins.var)) return false;
      break;
    case HCQ_EXPR_NEG:
      if (!emit(set, e->u.kids.a)) return false;
      break;
    default:
      if (!emit(set, e->u.kids.a) || !emit(set, e->u.kids.b)) return false;
      break;
  }
  return hcq__vec_push(&set->code, ins);
}

static bool index_grow(hcq__symset_t *set) {
  size_t cap = set->index_cap ? set->index_cap * 2 : 64;
  uint32_t *t = calloc(cap, sizeof(*t));
  if (!t) return false;
  for (size_t i = 0; i < set->syms.len; i++) {
    size_t h = (size_t)set->syms.data[i]->hash & (cap - 1);
    while (t[h]) h = (h + 1) & (cap - 1);
    t[h] = (uint32_t)i + 1;
  }
  free(set->index);
  set->index = t;
  set->index_cap = cap;
  return true;
}

hcq_status_t hcq__symset_add(hcq__symset_t *set, const hcq_expr_t *expr, uint32_t *out_index) {
  if (!expr) return hcq_status_make(HCQ_INVALID_ARGUMENT, "symbolic operand is NULL");
  if ((set->syms.len + 1) * 2 > set->index_cap && !index_grow(set)) return oom();
  size_t h = (size_t)expr->hash & (set->index_cap - 1);
  while (set->index[h]) {
    uint32_t i = set->index[h] - 1;
    if (hcq_expr_equal(set->syms.data[i], expr)) {
      *out_index = i;
      return NULL;
    }
    h = (h + 1) & (set->index_cap - 1);
  }
  size_t code_mark = set->code.len, vars_mark = set->vars.len;
  if (set->code_start.len == 0 && !hcq__vec_push(&set->code_start, 0u)) return oom();
  if (!emit(set, expr) || !hcq__vec_reserve_for(&set->syms, set->syms.len + 1) ||
      !hcq__vec_push(&set->code_start, (uint32_t)set->code.len)) {
    set->code.len = code_mark;
    while (set->vars.len > vars_mark) hcq_expr_release(set->vars.data[--set->vars.len]);
    return oom();
  }
  if (expr->height > set->stack_cap) {
    int64_t *s = realloc(set->stack, expr->height * sizeof(*s));
    if (!s) {
      set->code.len = code_mark;
      set->code_start.len--;
      while (set->vars.len > vars_mark) hcq_expr_release(set->vars.data[--set->vars.len]);
      return oom();
    }
    set->stack = s;
    set->stack_cap = expr->height;
  }
  set->syms.data[set->syms.len++] = hcq_expr_retain(expr);
  set->index[h] = (uint32_t)set->syms.len;
  *out_index = (uint32_t)set->syms.len - 1;
  return NULL;
}

hcq__symset_mark_t hcq__symset_mark(const hcq__symset_t *set) {
  hcq__symset_mark_t m = {set->syms.len, set->vars.len, set->code.len, set->code_start.len};
  return m;
}

void hcq__symset_truncate(hcq__symset_t *set, hcq__symset_mark_t m) {
  if (set->syms.len <= m.syms && set->vars.len <= m.vars) return;
  while (set->syms.len > m.syms) hcq_expr_release(set->syms.data[--set->syms.len]);
  while (set->vars.len > m.vars) hcq_expr_release(set->vars.data[--set->vars.len]);
  set->code.len = m.code;
  set->code_start.len = m.code_start;
  /* Rebuild the index without the dropped symbols (same capacity: it held more before). */
  if (set->index) {
    memset(set->index, 0, set->index_cap * sizeof(*set->index));
    for (size_t i = 0; i < set->syms.len; i++) {
      size_t h = (size_t)set->syms.data[i]->hash & (set->index_cap - 1);
      while (set->index[h]) h = (h + 1) & (set->index_cap - 1);
      set->index[h] = (uint32_t)i + 1;
    }
  }
}

hcq_status_t hcq__symset_bind(hcq__symset_t *set, const hcq_var_value_t *vals, size_t nvals) {
  for (size_t i = 0; i < set->vars.len; i++) {
    const hcq_expr_t *var = set->vars.data[i];
    uint32_t at = set->lookup[i];
    if (at >= nvals || vals[at].var != var) {
      at = UINT32_MAX;
      for (size_t k = 0; k < nvals; k++)
        if (vals[k].var == var) {
          at = (uint32_t)k;
          break;
        }
      if (at == UINT32_MAX)
        return hcq_status_make(HCQ_NOT_FOUND, "variable %s has no value", var->u.var.name);
      set->lookup[i] = at;
    }
    int64_t v = vals[at].value;
    if (v < var->u.var.min || v > var->u.var.max) return hcq_var_check(var, v);
    set->values[i] = v;
  }
  return NULL;
}

hcq_status_t hcq__symset_eval(const hcq__symset_t *set, uint32_t i, int64_t *out_value) {
  const hcq__sym_instr_t *ins = set->code.data + set->code_start.data[i];
  const hcq__sym_instr_t *end = set->code.data + set->code_start.data[i + 1];
  int64_t *sp = set->stack;
  for (; ins < end; ins++) {
    switch (ins->op) {
      case HCQ_EXPR_CONST: *sp++ = ins->imm; break;
      case HCQ_EXPR_VAR: *sp++ = set->values[ins->var]; break;
      case HCQ_EXPR_NEG:
        if (hcq__arith(HCQ_EXPR_NEG, sp[-1], 0, &sp[-1]) != HCQ__ARITH_OK) goto fail;
        break;
      default:
        if (hcq__arith((hcq_expr_op_t)ins->op, sp[-2], sp[-1], &sp[-2]) != HCQ__ARITH_OK) goto fail;
        sp--;
        break;
    }
  }
  *out_value = sp[-1];
  return NULL;
fail:;
  /* Re-evaluate through the tree walker for a message that names the failing sub-expression. */
  hcq_var_value_t bound[64];
  size_t n = set->vars.len < 64 ? set->vars.len : 64;
  for (size_t k = 0; k < n; k++) bound[k] = (hcq_var_value_t){set->vars.data[k], set->values[k]};
  int64_t ignored;
  hcq_status_t s = hcq_expr_eval(set->syms.data[i], bound, n, &ignored);
  return s ? s : hcq_status_make(HCQ_OUT_OF_RANGE, "arithmetic error evaluating a symbol");
}
