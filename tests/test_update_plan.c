/* The update planner, without any device: which items a replay must re-set, checked against what
 * was changed by hand, and that its work follows what changed. */
#include "graph/update_plan_testing.h"
#include "test_util.h"

TestSuite(update_plan, .timeout = 60);

#define NI HCQ__PLAN_NO_INPUT

typedef struct fixture {
  hcq_expr_t *n, *k, *groups, *nm5;
  hcq_operand_t vals1[2], vals2[1], dims_const[3], dims_sym[3], dims_nm5[3];
  uint32_t in0[3], fixed3[3], in_t[2];
  uint64_t addrs[5][3];
  const uint64_t *fixed[5];
  hcq__plan_item_t items[5];
} fixture_t;

static hcq_expr_t *binop(hcq_expr_op_t op, const hcq_expr_t *a, int64_t b) {
  hcq_expr_t *c = hcq_expr_const(b), *e = hcq_expr_binary(op, a, c);
  hcq_expr_release(c);
  return e;
}

/* item 0: kernel whose argument 1 is input 0; item 1: value n; item 2: global (n+63)//64, value k;
 * item 3: transfer whose source is input 1; item 4: all constant. */
static void setup(fixture_t *f) {
  memset(f, 0, sizeof(*f));
  OK(hcq_var_create("n", 0, 100000, &f->n));
  OK(hcq_var_create("k", -100, 100, &f->k));
  hcq_expr_t *sum = binop(HCQ_EXPR_ADD, f->n, 63);
  f->groups = binop(HCQ_EXPR_FLOORDIV, sum, 64);
  hcq_expr_release(sum);
  f->nm5 = binop(HCQ_EXPR_SUB, f->n, 5);
  f->vals1[0] = hcq_imm(4);
  f->vals1[1] = hcq_sym(f->n);
  f->vals2[0] = hcq_sym(f->k);
  for (int i = 0; i < 3; i++) {
    f->dims_const[i] = hcq_imm(i ? 1 : 8);
    f->dims_sym[i] = i ? hcq_imm(1) : hcq_sym(f->groups);
    f->dims_nm5[i] = i ? hcq_imm(1) : hcq_sym(f->nm5);
    f->in0[i] = i == 1 ? 0 : NI;
    f->fixed3[i] = NI;
  }
  f->in_t[0] = NI;
  f->in_t[1] = 1;
  for (int j = 0; j < 5; j++) {
    for (int a = 0; a < 3; a++) f->addrs[j][a] = 0x1000u * (j + 1) + 0x10u * a;
    f->fixed[j] = f->addrs[j];
  }
  f->items[0] = (hcq__plan_item_t){3, f->in0, 0, NULL, f->dims_const, f->dims_const};
  f->items[1] = (hcq__plan_item_t){3, f->fixed3, 2, f->vals1, f->dims_const, f->dims_const};
  f->items[2] = (hcq__plan_item_t){3, f->fixed3, 1, f->vals2, f->dims_sym, f->dims_const};
  f->items[3] = (hcq__plan_item_t){2, f->in_t, 0, NULL, NULL, NULL};
  f->items[4] = (hcq__plan_item_t){3, f->fixed3, 0, NULL, f->dims_const, f->dims_const};
}

static void teardown(fixture_t *f) {
  hcq_expr_release(f->n);
  hcq_expr_release(f->k);
  hcq_expr_release(f->groups);
  hcq_expr_release(f->nm5);
}

static hcq__update_plan_t *make(fixture_t *f, const uint64_t inputs[2], int64_t n, int64_t k) {
  const hcq_expr_t *vars[2] = {f->n, f->k};
  int64_t values[2] = {n, k};
  hcq__update_plan_t *p = NULL;
  OK(hcq__update_plan_create(f->items, 5, f->fixed, inputs, 2, vars, values, 2, &p));
  return p;
}

/* Prepares and checks the listed items against want (ascending), then commits. */
static void expect(hcq__update_plan_t *p, const uint64_t inputs[2], int64_t n, int64_t k,
                   const uint32_t *want, size_t nwant, const char *what) {
  int64_t values[2] = {n, k};
  const uint32_t *got;
  size_t ngot;
  OK(hcq__update_plan_prepare(p, inputs, values, &got, &ngot));
  cr_assert_eq(ngot, nwant, "%s: %zu items listed, want %zu", what, ngot, nwant);
  for (size_t i = 0; i < nwant; i++)
    cr_assert_eq(got[i], want[i], "%s: item %zu is %u, want %u", what, i, got[i], want[i]);
  hcq__update_plan_commit(p);
}

Test(update_plan, lists_exactly_the_items_whose_operands_changed) {
  fixture_t f;
  setup(&f);
  uint64_t in[2] = {0xA000, 0xB000};
  hcq__update_plan_t *p = make(&f, in, 100, 3);
  cr_assert_eq(hcq__update_plan_updatable_count(p), 4u, "items 0-3 can change, item 4 cannot");
  expect(p, in, 100, 3, NULL, 0, "nothing changed since the build");
  cr_assert_eq(hcq__update_plan_evaluated_count(p), 0u, "nothing changed: nothing evaluated");

  uint64_t in2[2] = {0xA100, 0xB000};
  expect(p, in2, 100, 3, (uint32_t[]){0}, 1, "input 0 swapped");
  hcq__plan_values_t v;
  hcq__update_plan_values(p, 0, &v);
  cr_assert_eq(v.args[0], f.addrs[0][0]);
  cr_assert_eq(v.args[1], 0xA100u, "argument 1 takes the new input address");
  cr_assert_eq(v.args[2], f.addrs[0][2]);
  expect(p, in2, 100, 3, NULL, 0, "the same inputs again");

  expect(p, in2, 101, 3, (uint32_t[]){1}, 1, "n 100 -> 101: item 1's value; item 2's grid stays 2");
  cr_assert_eq(hcq__update_plan_evaluated_count(p), 2u, "items 1 and 2 use n: both evaluated");
  hcq__update_plan_values(p, 1, &v);
  cr_assert_eq(v.vals[0], 4);
  cr_assert_eq(v.vals[1], 101);

  expect(p, in2, 200, 3, (uint32_t[]){1, 2}, 2,
         "n 101 -> 200: item 1's value and item 2's grid (4)");
  hcq__update_plan_values(p, 2, &v);
  cr_assert_eq(v.global[0], 4u);
  cr_assert_eq(v.global[1], 1u);
  cr_assert_eq(v.local[0], 8u);
  cr_assert_eq(v.vals[0], 3);

  expect(p, in2, 200, -7, (uint32_t[]){2}, 1, "k: item 2's value");
  uint64_t in3[2] = {0xA000, 0xB100};
  expect(p, in3, 1, 5, (uint32_t[]){0, 1, 2, 3}, 4, "everything at once");
  hcq__update_plan_values(p, 3, &v);
  cr_assert_eq(v.args[0], f.addrs[3][0], "a transfer's fixed destination");
  cr_assert_eq(v.args[1], 0xB100u, "its source is input 1");
  cr_assert_null(v.global);
  expect(p, in3, 1, 5, NULL, 0, "and back to nothing");
  hcq__update_plan_free(p);
  teardown(&f);
}

Test(update_plan, an_abort_lists_the_same_items_again) {
  fixture_t f;
  setup(&f);
  uint64_t in[2] = {1, 2}, in2[2] = {1, 3};
  hcq__update_plan_t *p = make(&f, in, 10, 0);
  int64_t values[2] = {10, 0};
  const uint32_t *got;
  size_t n;
  OK(hcq__update_plan_prepare(p, in2, values, &got, &n));
  cr_assert_eq(n, 1u);
  cr_assert_eq(got[0], 3u);
  hcq__update_plan_abort(p);
  /* The graph may hold anything for item 3 now: listed again even with nothing new. */
  expect(p, in2, 10, 0, (uint32_t[]){3}, 1, "after an abort");
  expect(p, in2, 10, 0, NULL, 0, "after the commit");
  /* An abort with a value change: the value is listed again against the old baseline too. */
  values[0] = 11;
  OK(hcq__update_plan_prepare(p, in2, values, &got, &n));
  cr_assert_eq(n, 1u);
  hcq__update_plan_abort(p);
  expect(p, in2, 10, 0, (uint32_t[]){1}, 1, "back to the old value: item 1 is stale");
  hcq__update_plan_free(p);
  teardown(&f);
}

Test(update_plan, an_operand_outside_its_field_fails_and_changes_nothing) {
  fixture_t f;
  setup(&f);
  f.items[2].global = f.dims_nm5; /* global[0] = n - 5 */
  uint64_t in[2] = {1, 2};
  hcq__update_plan_t *p = make(&f, in, 10, 0);
  int64_t values[2] = {3, 0};
  const uint32_t *got;
  size_t n = 99;
  FAILS(hcq__update_plan_prepare(p, in, values, &got, &n), HCQ_OUT_OF_RANGE, "item 2", "global[0]",
        "-2");
  cr_assert_eq(n, 0u);
  expect(p, in, 10, 0, NULL, 0, "the failed values were never held");
  expect(p, in, 12, 0, (uint32_t[]){1, 2}, 2, "a valid change afterwards");
  hcq__update_plan_free(p);
  /* At build, the same failure names the item too. */
  const hcq_expr_t *vars[2] = {f.n, f.k};
  int64_t bad[2] = {0, 0};
  hcq__update_plan_t *q = NULL;
  FAILS(hcq__update_plan_create(f.items, 5, f.fixed, in, 2, vars, bad, 2, &q), HCQ_OUT_OF_RANGE,
        "item 2");
  cr_assert_null(q);
  teardown(&f);
}

Test(update_plan, work_follows_what_changed_not_the_graph_size) {
  enum { ITEMS = 2000 };
  static hcq__plan_item_t items[ITEMS];
  static uint32_t arg_input[ITEMS][1];
  static uint64_t addrs[ITEMS][1], inputs[ITEMS];
  static const uint64_t *fixed[ITEMS];
  for (int j = 0; j < ITEMS; j++) {
    arg_input[j][0] = (uint32_t)j;
    addrs[j][0] = 0;
    fixed[j] = addrs[j];
    inputs[j] = 0x10000u + (uint64_t)j * 64;
    items[j] = (hcq__plan_item_t){1, arg_input[j], 0, NULL, NULL, NULL};
  }
  hcq__update_plan_t *p = NULL;
  OK(hcq__update_plan_create(items, ITEMS, fixed, inputs, ITEMS, NULL, NULL, 0, &p));
  const uint32_t *got;
  size_t n;
  OK(hcq__update_plan_prepare(p, inputs, NULL, &got, &n));
  cr_assert_eq(n, 0u);
  cr_assert_eq(hcq__update_plan_evaluated_count(p), 0u);
  inputs[1234] += 4096;
  OK(hcq__update_plan_prepare(p, inputs, NULL, &got, &n));
  cr_assert_eq(n, 1u);
  cr_assert_eq(got[0], 1234u);
  cr_assert_eq(hcq__update_plan_evaluated_count(p), 1u,
               "one input changed: one item evaluated of %d", ITEMS);
  hcq__update_plan_commit(p);
  hcq__update_plan_free(p);
}
