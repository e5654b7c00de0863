#include <stdlib.h>
#include <string.h>

#include "core/expr.h"
#include "core/symset.h"
#include "test_util.h"

static hcq_expr_t *var(const char *name, int64_t lo, int64_t hi) {
  hcq_expr_t *v = NULL;
  OK(hcq_var_create(name, lo, hi, &v));
  return v;
}

static int64_t eval1(const char *text, const hcq_expr_t *v, int64_t value) {
  hcq_expr_t *e = NULL;
  const hcq_expr_t *vars[1] = {v};
  OK(hcq_expr_parse(text, vars, v ? 1 : 0, &e));
  hcq_var_value_t vals[1] = {{v, value}};
  int64_t out = 0;
  OK(hcq_expr_eval(e, vals, v ? 1 : 0, &out));
  hcq_expr_release(e);
  return out;
}

Test(symbolic, parse_and_eval) {
  hcq_expr_t *n = var("n", 1, 65536);
  cr_assert_eq(eval1("(n+255)//256", n, 4096), 16);
  cr_assert_eq(eval1("(n+255)//256", n, 4097), 17);
  cr_assert_eq(eval1("n*2-3", n, 10), 17);
  cr_assert_eq(eval1("n - 2 * 3", n, 10), 4);
  cr_assert_eq(eval1("n % 7 + min(n, 5) * max(2, 3, 4)", n, 10), 3 + 5 * 4);
  cr_assert_eq(eval1("-n + 1", n, 10), -9);
  cr_assert_eq(eval1("--n", n, 10), 10);
  cr_assert_eq(eval1("  ( ( n ) )  ", n, 42), 42);
  cr_assert_eq(eval1("12345678901234", NULL, 0), 12345678901234LL);
  hcq_expr_release(n);
}

Test(symbolic, floor_division_and_modulo) {
  hcq_expr_t *n = var("n", -100, 100);
  cr_assert_eq(eval1("n // 2", n, -7), -4);
  cr_assert_eq(eval1("n % 2", n, -7), 1);
  cr_assert_eq(eval1("n // -2", n, 7), -4);
  cr_assert_eq(eval1("n % -2", n, 7), -1);
  cr_assert_eq(eval1("n // 3", n, 9), 3);
  hcq_expr_release(n);
}

Test(symbolic, builders_fold_constants) {
  hcq_expr_t *a = hcq_expr_const(6), *b = hcq_expr_const(7);
  hcq_expr_t *m = hcq_expr_binary(HCQ_EXPR_MUL, a, b);
  cr_assert(hcq_expr_is_const(m));
  cr_assert_eq(hcq_expr_const_value(m), 42);
  hcq_expr_t *zero = hcq_expr_const(0);
  /* not folded: stays an error to report */
  hcq_expr_t *d = hcq_expr_binary(HCQ_EXPR_FLOORDIV, a, zero);
  cr_assert_not(hcq_expr_is_const(d));
  int64_t out;
  FAILS(hcq_expr_eval(d, NULL, 0, &out), HCQ_OUT_OF_RANGE, "division by zero", "6//0");
  hcq_expr_release(d);
  hcq_expr_release(zero);
  hcq_expr_release(m);
  hcq_expr_release(a);
  hcq_expr_release(b);
  cr_assert_null(hcq_expr_binary(HCQ_EXPR_ADD, NULL, NULL));
  cr_assert_null(hcq_expr_neg(NULL));
}

Test(symbolic, range_checks) {
  hcq_expr_t *n = var("n", 1, 10), *e = NULL;
  const hcq_expr_t *vars[] = {n};
  OK(hcq_expr_parse("n*2", vars, 1, &e));
  int64_t out;
  hcq_var_value_t hi = {n, 11}, lo = {n, 0}, ok = {n, 10};
  FAILS(hcq_expr_eval(e, &hi, 1, &out), HCQ_OUT_OF_RANGE, "variable n = 11", "[1, 10]");
  FAILS(hcq_expr_eval(e, &lo, 1, &out), HCQ_OUT_OF_RANGE, "variable n = 0");
  FAILS(hcq_expr_eval(e, NULL, 0, &out), HCQ_NOT_FOUND, "variable n has no value");
  OK(hcq_expr_eval(e, &ok, 1, &out));
  cr_assert_eq(out, 20);
  hcq_expr_release(e);
  hcq_expr_release(n);
}

Test(symbolic, arithmetic_errors) {
  hcq_expr_t *n = var("n", INT64_MIN, INT64_MAX);
  const hcq_expr_t *vars[] = {n};
  struct {
    const char *text;
    int64_t value;
    const char *frag;
  } cases[] = {
      {"10 // n", 0, "division by zero"},   {"10 % n", 0, "division by zero"},
      {"n * 4", INT64_MAX / 2, "overflow"}, {"n + 1", INT64_MAX, "overflow"},
      {"n - 1", INT64_MIN, "overflow"},     {"-n", INT64_MIN, "overflow"},
      {"n // -1", INT64_MIN, "overflow"},
  };
  for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
    hcq_expr_t *e = NULL;
    OK(hcq_expr_parse(cases[i].text, vars, 1, &e));
    hcq_var_value_t v = {n, cases[i].value};
    int64_t out;
    FAILS(hcq_expr_eval(e, &v, 1, &out), HCQ_OUT_OF_RANGE, cases[i].frag);
    hcq_expr_release(e);
  }
  hcq_expr_release(n);
}

Test(symbolic, parse_errors_name_the_column) {
  hcq_expr_t *n = var("n", 0, 10), *e = (hcq_expr_t *)1;
  const hcq_expr_t *vars[] = {n};
  FAILS(hcq_expr_parse("n+", vars, 1, &e), HCQ_INVALID_ARGUMENT, "\"n+\"", "column 3");
  cr_assert_null(e);
  FAILS(hcq_expr_parse("q*2", vars, 1, &e), HCQ_NOT_FOUND, "unknown variable \"q\"", "column 1");
  FAILS(hcq_expr_parse("(n", vars, 1, &e), HCQ_INVALID_ARGUMENT, "expected ')'");
  FAILS(hcq_expr_parse("n/2", vars, 1, &e), HCQ_INVALID_ARGUMENT, "'//'");
  FAILS(hcq_expr_parse("n 2", vars, 1, &e), HCQ_INVALID_ARGUMENT, "column 3");
  FAILS(hcq_expr_parse("min(n)", vars, 1, &e), HCQ_INVALID_ARGUMENT, "two arguments");
  FAILS(hcq_expr_parse("99999999999999999999", vars, 1, &e), HCQ_INVALID_ARGUMENT, "64 bits");
  FAILS(hcq_expr_parse("", vars, 1, &e), HCQ_INVALID_ARGUMENT, "column 1");
  FAILS(hcq_expr_parse("2n", vars, 1, &e), HCQ_INVALID_ARGUMENT, "after number");
  FAILS(hcq_expr_parse(NULL, vars, 1, &e), HCQ_INVALID_ARGUMENT, "NULL");
  char deep[1000];
  memset(deep, '(', 500);
  strcpy(deep + 500, "n");
  FAILS(hcq_expr_parse(deep, vars, 1, &e), HCQ_INVALID_ARGUMENT, "nested too deeply");
  memset(deep, '-', 600);
  strcpy(deep + 600, "n");
  FAILS(hcq_expr_parse(deep, vars, 1, &e), HCQ_INVALID_ARGUMENT, "nested too deeply");
  hcq_expr_release(n);
}

Test(symbolic, variable_creation_errors) {
  hcq_expr_t *v = NULL;
  FAILS(hcq_var_create("", 0, 1, &v), HCQ_INVALID_ARGUMENT, "not an identifier");
  FAILS(hcq_var_create("1x", 0, 1, &v), HCQ_INVALID_ARGUMENT, "not an identifier");
  FAILS(hcq_var_create("min", 0, 1, &v), HCQ_INVALID_ARGUMENT, "min/max");
  FAILS(hcq_var_create("n", 5, 1, &v), HCQ_INVALID_ARGUMENT, "min 5 is greater than max 1");
  FAILS(hcq_var_create(NULL, 0, 1, &v), HCQ_INVALID_ARGUMENT, "(null)");
  cr_assert_null(v);
  OK(hcq_var_create("n_2", -3, 3, &v));
  cr_assert_str_eq(hcq_var_name(v), "n_2");
  cr_assert_eq(hcq_var_min(v), -3);
  cr_assert_eq(hcq_var_max(v), 3);
  hcq_expr_release(v);
}

Test(symbolic, format_round_trips) {
  hcq_expr_t *n = var("n", -1000, 1000), *m = var("m", 1, 1000);
  const hcq_expr_t *vars[] = {n, m};
  const char *texts[] = {"(n+255)//256",      "n-(m-1)", "n*(m+2)", "-(n+m)",
                         "min(n,max(m,3))%7", "n-m-1",   "n//m//2", "n//(m//2+1)"};
  for (size_t i = 0; i < sizeof(texts) / sizeof(texts[0]); i++) {
    hcq_expr_t *a = NULL, *b = NULL;
    OK(hcq_expr_parse(texts[i], vars, 2, &a));
    char buf[256];
    hcq_expr_format(a, buf, sizeof(buf));
    OK(hcq_expr_parse(buf, vars, 2, &b));
    cr_assert(hcq_expr_equal(a, b), "%s formatted as %s parses differently", texts[i], buf);
    for (int64_t nv = -50; nv <= 50; nv += 7) {
      hcq_var_value_t vals[] = {{n, nv}, {m, 3}};
      int64_t x, y;
      OK(hcq_expr_eval(a, vals, 2, &x));
      OK(hcq_expr_eval(b, vals, 2, &y));
      cr_assert_eq(x, y);
    }
    hcq_expr_release(a);
    hcq_expr_release(b);
  }
  hcq_expr_release(n);
  hcq_expr_release(m);
}

Test(symbolic, vars_and_equality) {
  hcq_expr_t *n = var("n", 0, 9), *n2 = var("n", 0, 9), *a = NULL, *b = NULL, *c = NULL;
  const hcq_expr_t *v1[] = {n}, *v2[] = {n2};
  OK(hcq_expr_parse("n*2+n", v1, 1, &a));
  OK(hcq_expr_parse("n*2+n", v1, 1, &b));
  OK(hcq_expr_parse("n*2+n", v2, 1, &c));
  cr_assert(hcq_expr_equal(a, b));
  cr_assert_not(hcq_expr_equal(a, c), "variables are compared by identity");
  const hcq_expr_t *found[4];
  cr_assert_eq(hcq_expr_vars(a, found, 4), 1);
  cr_assert_eq(found[0], n);
  hcq_expr_release(a);
  hcq_expr_release(b);
  hcq_expr_release(c);
  hcq_expr_release(n);
  hcq_expr_release(n2);
}

/* Reference semantics in plain C for the fuzz below; false when the result is undefined. */
static bool ref_apply(hcq_expr_op_t op, int64_t a, int64_t b, int64_t *out) {
  switch (op) {
    case HCQ_EXPR_ADD: *out = a + b; return true;
    case HCQ_EXPR_SUB: *out = a - b; return true;
    case HCQ_EXPR_MUL: *out = a * b; return true;
    case HCQ_EXPR_FLOORDIV:
    case HCQ_EXPR_MOD: {
      if (b == 0) return false;
      int64_t q = a / b;
      if ((a % b != 0) && ((a < 0) != (b < 0))) q--;
      *out = op == HCQ_EXPR_FLOORDIV ? q : a - q * b;
      return true;
    }
    case HCQ_EXPR_MIN: *out = a < b ? a : b; return true;
    case HCQ_EXPR_MAX: *out = a > b ? a : b; return true;
    default: return false;
  }
}

Test(symbolic, compiled_symbols_match_plain_c_fuzz) {
  srand(1234);
  enum { N = 200 };
  hcq_expr_t *x = var("x", -1000, 1000), *y = var("y", 1, 50);
  hcq__symset_t set;
  hcq__symset_init(&set);
  hcq_expr_t *exprs[N];
  uint32_t idx[N];
  hcq_expr_op_t o1[N], o2[N], o3[N];
  int64_t k1[N], k2[N];
  const hcq_expr_op_t ops[] = {HCQ_EXPR_ADD, HCQ_EXPR_SUB, HCQ_EXPR_MUL, HCQ_EXPR_FLOORDIV,
                               HCQ_EXPR_MOD, HCQ_EXPR_MIN, HCQ_EXPR_MAX};
  for (int i = 0; i < N; i++) {
    /* ((x o1 k1) o2 y) o3 k2, where k2 may be 0 */
    o1[i] = ops[rand() % 7], o2[i] = ops[rand() % 7], o3[i] = ops[rand() % 5];
    k1[i] = rand() % 19 + 1, k2[i] = rand() % 23 - 11;
    hcq_expr_t *c1 = hcq_expr_const(k1[i]), *c2 = hcq_expr_const(k2[i]);
    hcq_expr_t *t1 = hcq_expr_binary(o1[i], x, c1);
    hcq_expr_t *t2 = hcq_expr_binary(o2[i], t1, y);
    exprs[i] = hcq_expr_binary(o3[i], t2, c2);
    hcq_expr_release(c1);
    hcq_expr_release(c2);
    hcq_expr_release(t1);
    hcq_expr_release(t2);
    OK(hcq__symset_add(&set, exprs[i], &idx[i]));
  }
  for (int round = 0; round < 100; round++) {
    int64_t xv = rand() % 2001 - 1000, yv = rand() % 50 + 1;
    hcq_var_value_t vals[] = {{y, yv}, {x, xv}};
    OK(hcq__symset_bind(&set, vals, 2));
    for (int i = 0; i < N; i++) {
      int64_t r1, r2, want = 0, got = 0, tree = 0;
      bool defined = ref_apply(o1[i], xv, k1[i], &r1) && ref_apply(o2[i], r1, yv, &r2) &&
                     ref_apply(o3[i], r2, k2[i], &want);
      hcq_status_t s1 = hcq__symset_eval(&set, idx[i], &got);
      hcq_status_t s2 = hcq_expr_eval(exprs[i], vals, 2, &tree);
      cr_assert_eq(s1 == NULL, defined, "expression %d with x=%ld y=%ld: defined=%d but status %s",
                   i, (long)xv, (long)yv, defined, hcq_status_message(s1));
      cr_assert_eq(s2 == NULL, defined);
      if (defined) {
        cr_assert_eq(got, want, "expression %d: compiled %ld, plain C %ld", i, (long)got,
                     (long)want);
        cr_assert_eq(tree, want);
      }
      hcq_status_destroy(s1);
      hcq_status_destroy(s2);
    }
  }
  for (int i = 0; i < N; i++) hcq_expr_release(exprs[i]);
  hcq__symset_deinit(&set);
  hcq_expr_release(x);
  hcq_expr_release(y);
}

Test(symbolic, symset_dedupes_equal_symbols) {
  hcq_expr_t *n = var("n", 0, 100), *a = NULL, *b = NULL;
  const hcq_expr_t *vars[] = {n};
  OK(hcq_expr_parse("n+1", vars, 1, &a));
  OK(hcq_expr_parse("n+1", vars, 1, &b));
  hcq__symset_t set;
  hcq__symset_init(&set);
  uint32_t i1, i2, i3;
  OK(hcq__symset_add(&set, a, &i1));
  OK(hcq__symset_add(&set, b, &i2));
  OK(hcq__symset_add(&set, n, &i3));
  cr_assert_eq(i1, i2);
  cr_assert_neq(i1, i3);
  cr_assert_eq(hcq__symset_count(&set), 2);
  hcq_var_value_t v = {n, 101};
  FAILS(hcq__symset_bind(&set, &v, 1), HCQ_OUT_OF_RANGE, "variable n = 101");
  hcq__symset_deinit(&set);
  hcq_expr_release(a);
  hcq_expr_release(b);
  hcq_expr_release(n);
}

/* hcq__expr_bounds (core/expr.h), against every value: random expressions over two small-ranged
 * variables evaluate, for every pair of values, inside the bounds given, and never fail where
 * bounds are given; bounds are exact on the leaves, and a divisor whose range holds 0 gives none.
 */
Test(symbolic, bounds_hold_for_every_value_in_the_ranges) {
  srand(99);
  hcq_expr_t *x = var("x", -20, 30), *y = var("y", -6, 9);
  const hcq_expr_op_t ops[] = {HCQ_EXPR_ADD, HCQ_EXPR_SUB, HCQ_EXPR_MUL, HCQ_EXPR_FLOORDIV,
                               HCQ_EXPR_MOD, HCQ_EXPR_MIN, HCQ_EXPR_MAX};
  int with_bounds = 0;
  for (int i = 0; i < 400; i++) {
    /* ((x o1 k1) o2 (y o3 k2)) o4 k3: constants of either sign, y's side may cross 0 */
    hcq_expr_t *c1 = hcq_expr_const(rand() % 15 - 7), *c2 = hcq_expr_const(rand() % 15 - 7),
               *c3 = hcq_expr_const(rand() % 9 + 1);
    hcq_expr_t *a = hcq_expr_binary(ops[rand() % 7], x, c1),
               *b = hcq_expr_binary(ops[rand() % 7], y, c2);
    hcq_expr_t *t = a && b ? hcq_expr_binary(ops[rand() % 7], a, b) : NULL;
    hcq_expr_t *e = t ? hcq_expr_binary(ops[rand() % 7], t, c3) : NULL;
    int64_t lo = 0, hi = 0;
    bool known = e && hcq__expr_bounds(e, &lo, &hi);
    with_bounds += known;
    for (int64_t xv = -20; known && xv <= 30; xv++)
      for (int64_t yv = -6; yv <= 9; yv++) {
        hcq_var_value_t vals[] = {{x, xv}, {y, yv}};
        int64_t v = 0;
        hcq_status_t st = hcq_expr_eval(e, vals, 2, &v);
        char text[256];
        hcq_expr_format(e, text, sizeof(text));
        cr_assert_null(st, "%s at x=%ld y=%ld: bounds given but it fails: %s", text, (long)xv,
                       (long)yv, hcq_status_message(st));
        cr_assert(v >= lo && v <= hi, "%s at x=%ld y=%ld is %ld, outside [%ld, %ld]", text,
                  (long)xv, (long)yv, (long)v, (long)lo, (long)hi);
      }
    hcq_expr_t *all[] = {c1, c2, c3, a, b, t, e};
    for (size_t k = 0; k < sizeof(all) / sizeof(all[0]); k++) hcq_expr_release(all[k]);
  }
  cr_assert_gt(with_bounds, 100, "only %d of 400 expressions got bounds", with_bounds);
  int64_t lo, hi;
  cr_assert(hcq__expr_bounds(x, &lo, &hi) && lo == -20 && hi == 30);
  hcq_expr_t *d = hcq_expr_binary(HCQ_EXPR_FLOORDIV, x, y),
             *m = hcq_expr_binary(HCQ_EXPR_MOD, x, y);
  cr_assert(!hcq__expr_bounds(d, &lo, &hi) && !hcq__expr_bounds(m, &lo, &hi), "y may be 0");
  hcq_expr_release(d);
  hcq_expr_release(m);
  hcq_expr_release(x);
  hcq_expr_release(y);
}
