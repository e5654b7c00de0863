/* Private view of symbolic expressions, shared by the evaluator, the parser and symbol sets. */
#ifndef HCQ_CORE_EXPR_H
#define HCQ_CORE_EXPR_H

#include <stdatomic.h>

#include "hcq/symbolic.h"

struct hcq_expr {
  atomic_uint refs;
  hcq_expr_op_t op;
  uint32_t height; /* 1 for leaves: bounds the evaluation stack */
  uint64_t hash;   /* structural, for deduplication */
  union {
    int64_t value; /* CONST */
    struct {
      int64_t min, max;
      char name[HCQ_VAR_NAME_MAX + 1];
    } var;
    struct {
      const hcq_expr_t *a, *b; /* NEG uses a only */
    } kids;
  } u;
};

typedef enum { HCQ__ARITH_OK, HCQ__ARITH_DIV_ZERO, HCQ__ARITH_OVERFLOW } hcq__arith_result_t;

/* Applies a unary or binary operator with floor division semantics and overflow checks. */
static inline hcq__arith_result_t hcq__arith(hcq_expr_op_t op, int64_t a, int64_t b, int64_t *out) {
  switch (op) {
    case HCQ_EXPR_NEG:
      if (a == INT64_MIN) return HCQ__ARITH_OVERFLOW;
      *out = -a;
      return HCQ__ARITH_OK;
    case HCQ_EXPR_ADD:
      return __builtin_add_overflow(a, b, out) ? HCQ__ARITH_OVERFLOW : HCQ__ARITH_OK;
    case HCQ_EXPR_SUB:
      return __builtin_sub_overflow(a, b, out) ? HCQ__ARITH_OVERFLOW : HCQ__ARITH_OK;
    case HCQ_EXPR_MUL:
      return __builtin_mul_overflow(a, b, out) ? HCQ__ARITH_OVERFLOW : HCQ__ARITH_OK;
    case HCQ_EXPR_FLOORDIV:
    case HCQ_EXPR_MOD: {
      if (b == 0) return HCQ__ARITH_DIV_ZERO;
      if (a == INT64_MIN && b == -1) {
        if (op == HCQ_EXPR_MOD) {
          *out = 0;
          return HCQ__ARITH_OK;
        }
        return HCQ__ARITH_OVERFLOW;
      }
      int64_t q = a / b, r = a % b;
      if (r != 0 && ((r < 0) != (b < 0))) {
        q -= 1;
        r += b;
      }
      *out = op == HCQ_EXPR_FLOORDIV ? q : r;
      return HCQ__ARITH_OK;
    }
    case HCQ_EXPR_MIN: *out = a < b ? a : b; return HCQ__ARITH_OK;
    case HCQ_EXPR_MAX: *out = a > b ? a : b; return HCQ__ARITH_OK;
    default: return HCQ__ARITH_OVERFLOW;
  }
}

/* Every value e can take while each variable stays in its [min, max] lies in [*lo, *hi]; false when
 * that is not known (e might divide by zero or overflow somewhere in the ranges). */
bool hcq__expr_bounds(const hcq_expr_t *e, int64_t *lo, int64_t *hi);

#endif
