/* A symbol set: the distinct symbolic expressions of one queue (or graph), compiled for fast
 * repeated evaluation. Adding dedupes structurally equal expressions; binding variable values and
 * evaluating allocate nothing, so a submit can run them on its hot path. */
#ifndef HCQ_CORE_SYMSET_H
#define HCQ_CORE_SYMSET_H

#include <stdint.h>

#include "core/vec.h"
#include "hcq/symbolic.h"

typedef struct {
  int32_t op;   /* hcq_expr_op_t; CONST pushes imm, VAR pushes the bound value of var */
  uint32_t var; /* index into vars, for VAR */
  int64_t imm;
} hcq__sym_instr_t;

typedef struct hcq__symset {
  HCQ__VEC(const hcq_expr_t *) vars; /* distinct variables, retained */
  HCQ__VEC(const hcq_expr_t *) syms; /* distinct symbols, retained */
  HCQ__VEC(uint32_t) code_start; /* per symbol: first instruction; one extra entry ends the last */
  HCQ__VEC(hcq__sym_instr_t) code;
  uint32_t *index;  /* open-addressing table of symbol indices + 1, by structural hash */
  size_t index_cap; /* power of two */
  int64_t *values;  /* per variable, filled by bind */
  uint32_t *lookup; /* per variable, where it was found in the caller's array last time */
  int64_t *stack;   /* evaluation stack, as deep as the tallest symbol */
  size_t stack_cap, values_cap;
} hcq__symset_t;

void hcq__symset_init(hcq__symset_t *set);
void hcq__symset_deinit(hcq__symset_t *set);

/* Adds expr (retained) unless an equal one is there; *out_index is its symbol index. */
HCQ_MUST_USE hcq_status_t hcq__symset_add(hcq__symset_t *set, const hcq_expr_t *expr,
                                          uint32_t *out_index);

/* Undoing additions: a mark taken before adding, truncate drops what was added since (symbols and
 * the variables they brought). */
typedef struct {
  size_t syms, vars, code, code_start;
} hcq__symset_mark_t;
hcq__symset_mark_t hcq__symset_mark(const hcq__symset_t *set);
void hcq__symset_truncate(hcq__symset_t *set, hcq__symset_mark_t mark);

/* Binds the values of every variable of the set: missing values and values outside a variable's
 * range are errors naming the variable. Extra values for other variables are ignored. */
HCQ_MUST_USE hcq_status_t hcq__symset_bind(hcq__symset_t *set, const hcq_var_value_t *vals,
                                           size_t nvals);

/* Evaluates symbol i with the bound values. */
HCQ_MUST_USE hcq_status_t hcq__symset_eval(const hcq__symset_t *set, uint32_t i,
                                           int64_t *out_value);

static inline size_t hcq__symset_count(const hcq__symset_t *set) { return set->syms.len; }

#endif
