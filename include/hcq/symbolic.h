/* hcq symbolic integers: variables and small expressions over them.
 *
 * Any numeric operand of a queue command, a kernel argument or a launch dimension may be symbolic.
 * A symbol is an immutable, reference-counted expression tree over 64-bit signed integers:
 * constants, variables (name, inclusive [min, max]) and the operators + - * // % min max, plus
 * unary minus. `//` and `%` follow floor semantics (like Python): -7 // 2 == -4, -7 % 2 == 1.
 *
 * Identity: a variable is its object. Two variables with the same name are different variables;
 * values are bound by pointer through hcq_var_value_t. Expressions built from the same variables
 * with the same structure are equal (a queue stores such symbols once).
 *
 * Ownership: every constructor returns a new reference (or NULL when memory or arguments fail);
 * operands are borrowed (the new node retains them). Constructors accept NULL operands and then
 * return NULL, so a chain of builders needs one check at the end. Release with hcq_expr_release().
 * Reference counting is atomic: expressions may be shared between threads.
 */
#ifndef HCQ_SYMBOLIC_H
#define HCQ_SYMBOLIC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "hcq/status.h"

#ifdef __cplusplus
extern "C" {
#endif
#pragma GCC visibility push(default) /* exported from libhcq.so (see hcq.h) */

// clang-format off
#define HCQ_EXPR_OPS(X) \
  X(CONST, "const")     \
  X(VAR, "var")         \
  X(NEG, "neg")         \
  X(ADD, "+")           \
  X(SUB, "-")           \
  X(MUL, "*")           \
  X(FLOORDIV, "//")     \
  X(MOD, "%")           \
  X(MIN, "min")         \
  X(MAX, "max")
// clang-format on

typedef enum hcq_expr_op {
#define HCQ__EXPR_ENUM(name, text) HCQ_EXPR_##name,
  HCQ_EXPR_OPS(HCQ__EXPR_ENUM)
#undef HCQ__EXPR_ENUM
      HCQ_EXPR_OP_COUNT
} hcq_expr_op_t;

typedef struct hcq_expr hcq_expr_t;

/* A value bound to a variable for one evaluation, submit or replay. The calls that take an array of
 * them (graph and jit create and run, hcq_exec_item_run, hcq_launch_sym, hcq_queue_submit,
 * hcq_capture_end) refuse one whose var is NULL or not a variable, and a variable given twice
 * (INVALID_ARGUMENT naming the value); a value for a variable the call does not use is ignored
 * (a jit made from a capture warns about it, see strict_vars in jit.h). */
typedef struct hcq_var_value {
  const hcq_expr_t *var;
  int64_t value;
} hcq_var_value_t;

/* Longest variable name accepted, in bytes. */
#define HCQ_VAR_NAME_MAX 63

/* Creates a variable. Fails (INVALID_ARGUMENT) on an empty name, a name that is not an identifier
 * ([A-Za-z_][A-Za-z0-9_]*, at most HCQ_VAR_NAME_MAX bytes, not "min"/"max") or min > max. */
HCQ_MUST_USE hcq_status_t hcq_var_create(const char *name, int64_t min, int64_t max,
                                         hcq_expr_t **out_var);

hcq_expr_t *hcq_expr_const(int64_t value);
/* Unary minus of a. */
hcq_expr_t *hcq_expr_neg(const hcq_expr_t *a);
/* A binary node (op one of ADD SUB MUL FLOORDIV MOD MIN MAX). Two constants fold into a constant
 * when the result is defined (no division by zero, no overflow). */
hcq_expr_t *hcq_expr_binary(hcq_expr_op_t op, const hcq_expr_t *a, const hcq_expr_t *b);

hcq_expr_t *hcq_expr_retain(const hcq_expr_t *e);
/* Drops one reference. An expression used after its last release is undefined behaviour, not
 * checked even with HCQ_VALIDATE=1. */
void hcq_expr_release(const hcq_expr_t *e);

hcq_expr_op_t hcq_expr_op(const hcq_expr_t *e);
bool hcq_expr_is_const(const hcq_expr_t *e);
/* The constant of a CONST node (0 for others). */
int64_t hcq_expr_const_value(const hcq_expr_t *e);
/* Variable properties; NULL / 0 for nodes that are not variables. */
const char *hcq_var_name(const hcq_expr_t *var);
int64_t hcq_var_min(const hcq_expr_t *var);
int64_t hcq_var_max(const hcq_expr_t *var);

/* Structural equality: same operators, constants and variable objects. */
bool hcq_expr_equal(const hcq_expr_t *a, const hcq_expr_t *b);

/* Stores up to cap distinct variables of e (in first-use order) into out_vars and returns how many
 * e has in all (which may exceed cap). References are borrowed. */
size_t hcq_expr_vars(const hcq_expr_t *e, const hcq_expr_t **out_vars, size_t cap);

/* Writes e as text that hcq_expr_parse() reads back ("(n+255)//256"); returns the length it needs,
 * like snprintf. */
size_t hcq_expr_format(const hcq_expr_t *e, char *buf, size_t size);

/* Parses text with the grammar
 *   expr := term (('+' | '-') term)*       term := unary (('*' | '//' | '%') unary)*
 *   unary := '-' unary | primary
 *   primary := INT | NAME | ('min'|'max') '(' expr (',' expr)+ ')' | '(' expr ')'
 * where NAME must be one of vars (by name). Errors (INVALID_ARGUMENT) quote the text and give the
 * 1-based column: `expression "n+": expected a number, variable or '(' at column 3`. Nesting deeper
 * than 128 levels is rejected, and so is a tree taller than 1000 levels: a chain of more than 1000
 * terms (n+n+..., n*n*..., min/max arguments) says how many terms it has. */
HCQ_MUST_USE hcq_status_t hcq_expr_parse(const char *text, const hcq_expr_t *const *vars,
                                         size_t nvars, hcq_expr_t **out_expr);

/* Evaluates e with the given values. Errors: a variable with no value (NOT_FOUND), a value outside
 * its variable's [min, max] (OUT_OF_RANGE), division or modulo by zero and 64-bit overflow
 * (OUT_OF_RANGE). Each message names the variable or the expression. */
HCQ_MUST_USE hcq_status_t hcq_expr_eval(const hcq_expr_t *e, const hcq_var_value_t *vals,
                                        size_t nvals, int64_t *out_value);

/* Checks one binding against its variable's range; the message names the variable. */
HCQ_MUST_USE hcq_status_t hcq_var_check(const hcq_expr_t *var, int64_t value);

#pragma GCC visibility pop
#ifdef __cplusplus
}
#endif
#endif
