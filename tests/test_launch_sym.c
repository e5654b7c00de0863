/* Symbolic launches (hcq_launch_sym) and the variables of a capture: an eager symbolic launch
 * equals hcq_launch with the evaluated numbers and a host model; a capture of symbolic launches
 * replays with new values, each replay equal to plain eager launches with those values; a value for
 * a variable the capture never saw is reported (report line, warning, or an error when strict). */
#include "test_util.h"

TestSuite(launch_sym, .timeout = 120);

enum { N = 256, STEPS = 4, NMIN = 1, POSMIN = -100, POSMAX = 100 };

typedef struct fixture {
  hcq_device_t *dev;
  hcq_program_t *mul_add, *mix;
  hcq_buffer_t *x, *y;   /* written by symbolic launches and replays */
  hcq_buffer_t *xm, *ym; /* mirrors: the same work by plain hcq_launch (the ground truth) */
  uint32_t hx[N], hy[N]; /* host model of x and y */
  hcq_expr_t *n, *pos;
  hcq_expr_t *add_of[STEPS], *mixadd_of[STEPS]; /* pos + s, 2*pos - s */
  hcq_expr_t *groups64, *groups32;              /* (n+63)//64, (n+31)//32 */
} fixture_t;

static void fixture_open(fixture_t *f) {
  memset(f, 0, sizeof(*f));
  f->dev = test_open("CPU:0");
  f->mul_add = test_program(f->dev, "mul_add", test_kernels_source);
  f->mix = test_program(f->dev, "mix", test_kernels_source);
  f->x = test_buffer_iota(f->dev, N, 7, 1);
  f->xm = test_buffer_iota(f->dev, N, 7, 1);
  f->y = test_buffer_iota(f->dev, N, -3, 5);
  f->ym = test_buffer_iota(f->dev, N, -3, 5);
  for (uint32_t i = 0; i < N; i++) f->hx[i] = i * 7u + 1u, f->hy[i] = i * (uint32_t)-3 + 5u;
  OK(hcq_var_create("n", NMIN, N, &f->n));
  OK(hcq_var_create("pos", POSMIN, POSMAX, &f->pos));
  hcq_expr_t *two = hcq_expr_const(2), *pos2 = hcq_expr_binary(HCQ_EXPR_MUL, two, f->pos);
  for (int s = 0; s < STEPS; s++) {
    hcq_expr_t *c = hcq_expr_const(s);
    f->add_of[s] = hcq_expr_binary(HCQ_EXPR_ADD, f->pos, c);
    f->mixadd_of[s] = hcq_expr_binary(HCQ_EXPR_SUB, pos2, c);
    hcq_expr_release(c);
    cr_assert(f->add_of[s] && f->mixadd_of[s]);
  }
  hcq_expr_t *c63 = hcq_expr_const(63), *c64 = hcq_expr_const(64), *c31 = hcq_expr_const(31),
             *c32 = hcq_expr_const(32);
  hcq_expr_t *n63 = hcq_expr_binary(HCQ_EXPR_ADD, f->n, c63),
             *n31 = hcq_expr_binary(HCQ_EXPR_ADD, f->n, c31);
  f->groups64 = hcq_expr_binary(HCQ_EXPR_FLOORDIV, n63, c64);
  f->groups32 = hcq_expr_binary(HCQ_EXPR_FLOORDIV, n31, c32);
  cr_assert(f->groups64 && f->groups32);
  hcq_expr_release(two), hcq_expr_release(pos2), hcq_expr_release(c63), hcq_expr_release(c64);
  hcq_expr_release(c31), hcq_expr_release(c32), hcq_expr_release(n63), hcq_expr_release(n31);
}

static void fixture_close(fixture_t *f) {
  for (int s = 0; s < STEPS; s++) hcq_expr_release(f->add_of[s]), hcq_expr_release(f->mixadd_of[s]);
  hcq_expr_release(f->groups64), hcq_expr_release(f->groups32), hcq_expr_release(f->n),
      hcq_expr_release(f->pos);
  hcq_buffer_release(f->x), hcq_buffer_release(f->y), hcq_buffer_release(f->xm),
      hcq_buffer_release(f->ym);
  hcq_program_release(f->mul_add), hcq_program_release(f->mix);
  test_close(f->dev);
}

/* One step of work, STEPS times: x = x*3 + (pos+s); y = x*(s+1) + y + (2*pos - s); first n
 * elements. */
static hcq_status_t sym_step(fixture_t *f, const hcq_var_value_t *vals, size_t nvals) {
  static const uint32_t out0[1] = {0};
  for (int s = 0; s < STEPS; s++) {
    hcq_buffer_t *xb[1] = {f->x}, *mb[3] = {f->y, f->x, f->y};
    hcq_operand_t mav[3] = {hcq_imm(3), hcq_sym(f->add_of[s]), hcq_sym(f->n)};
    hcq_launch_sym_desc_t ma = {f->mul_add,
                                xb,
                                1,
                                mav,
                                3,
                                {hcq_sym(f->groups64), hcq_imm(1), hcq_imm(1)},
                                {hcq_imm(64), hcq_imm(1), hcq_imm(1)},
                                NULL,
                                0};
    hcq_status_t st = hcq_launch_sym(&ma, vals, nvals);
    if (st) return st;
    hcq_operand_t mxv[3] = {hcq_imm(s + 1), hcq_sym(f->mixadd_of[s]), hcq_sym(f->n)};
    hcq_launch_sym_desc_t mx = {f->mix,
                                mb,
                                3,
                                mxv,
                                3,
                                {hcq_sym(f->groups32), hcq_imm(1), hcq_imm(1)},
                                {hcq_imm(32), hcq_imm(1), hcq_imm(1)},
                                out0,
                                1};
    if ((st = hcq_launch_sym(&mx, vals, nvals))) return st;
  }
  return NULL;
}

/* The same step with numbers, by plain hcq_launch on the given buffers. */
static void plain_step(fixture_t *f, hcq_buffer_t *x, hcq_buffer_t *y, int32_t n, int32_t pos) {
  static const uint32_t out0[1] = {0};
  for (int s = 0; s < STEPS; s++) {
    hcq_buffer_t *xb[1] = {x}, *mb[3] = {y, x, y};
    int32_t mav[3] = {3, pos + s, n}, mxv[3] = {s + 1, 2 * pos - s, n};
    hcq_launch_desc_t ma = {f->mul_add, xb,   1, mav, 3, {(uint32_t)(n + 63) / 64, 1, 1},
                            {64, 1, 1}, NULL, 0};
    hcq_launch_desc_t mx = {f->mix,     mb,   3, mxv, 3, {(uint32_t)(n + 31) / 32, 1, 1},
                            {32, 1, 1}, out0, 1};
    OK(hcq_launch(&ma));
    OK(hcq_launch(&mx));
  }
}

static void model_step(fixture_t *f, int32_t n, int32_t pos) {
  for (int s = 0; s < STEPS; s++) {
    for (int32_t i = 0; i < n; i++) f->hx[i] = f->hx[i] * 3u + (uint32_t)(pos + s);
    for (int32_t i = 0; i < n; i++)
      f->hy[i] = f->hx[i] * (uint32_t)(s + 1) + f->hy[i] + (uint32_t)(2 * pos - s);
  }
}

/* The mirrors and the model take the step with (n, pos); then x, y equal their mirrors and the
 * model. */
static void expect_step(fixture_t *f, int32_t n, int32_t pos, const char *what) {
  plain_step(f, f->xm, f->ym, n, pos);
  model_step(f, n, pos);
  static uint32_t got[4][N];
  test_read(f->x, got[0], N * 4);
  test_read(f->xm, got[1], N * 4);
  test_read(f->y, got[2], N * 4);
  test_read(f->ym, got[3], N * 4);
  for (int i = 0; i < N; i++) {
    cr_assert_eq(got[0][i], got[1][i], "%s (n=%d, pos=%d): x[%d] is %u, eager gives %u", what, n,
                 pos, i, got[0][i], got[1][i]);
    cr_assert_eq(got[2][i], got[3][i], "%s (n=%d, pos=%d): y[%d] is %u, eager gives %u", what, n,
                 pos, i, got[2][i], got[3][i]);
    cr_assert_eq(got[0][i], f->hx[i], "%s (n=%d, pos=%d): x[%d] is %u, the model gives %u", what, n,
                 pos, i, got[0][i], f->hx[i]);
    cr_assert_eq(got[2][i], f->hy[i], "%s (n=%d, pos=%d): y[%d] is %u, the model gives %u", what, n,
                 pos, i, got[2][i], f->hy[i]);
  }
}

/* Warnings collected through hcq_jit_options_t.on_warning. */
typedef struct warnings {
  int count;
  char text[4096];
} warnings_t;

static void collect_warning(void *ctx, const char *message) {
  warnings_t *w = ctx;
  w->count++;
  size_t used = strlen(w->text);
  snprintf(w->text + used, sizeof(w->text) - used, "%s\n", message);
}

Test(launch_sym, eager_symbolic_launches_equal_plain_launches_and_the_model) {
  fixture_t f;
  fixture_open(&f);
  int32_t cases[][2] = {{200, -7}, {1, POSMAX}, {N, POSMIN}, {65, 0}};
  for (int c = 0; c < 4; c++) {
    hcq_var_value_t vals[] = {{f.pos, cases[c][1]}, {f.n, cases[c][0]}};
    OK(sym_step(&f, vals, 2));
    expect_step(&f, cases[c][0], cases[c][1], "eager symbolic step");
  }
  fixture_close(&f);
}

Test(launch_sym, capture_of_symbolic_launches_replays_with_new_values) {
  fixture_t f;
  fixture_open(&f);
  warnings_t warned = {0};
  hcq_capture_t *cap = NULL;
  OK(hcq_capture_begin(&cap));
  hcq_var_value_t at[] = {{f.n, 200}, {f.pos, 5}};
  OK(sym_step(&f, at, 2));
  cr_assert_eq(hcq_capture_item_count(cap), 2 * STEPS);
  /* No values: the capture keeps the ones the launches were bound to. */
  hcq_jit_options_t opts = {.on_warning = collect_warning, .warning_ctx = &warned};
  hcq_jit_t *jit = NULL;
  OK(hcq_capture_end(cap, NULL, 0, NULL, 0, &opts, &jit));
  expect_step(&f, 200, 5, "the capture run");
  const hcq_jit_report_t *rep = hcq_jit_report(jit);
  cr_assert_eq(rep->graphed_items, 2 * STEPS, "%s", rep->text);
  cr_assert_eq(rep->unused_vars, 0, "%s", rep->text);
  cr_assert_eq(warned.count, 0, "%s", warned.text);
  cr_assert_eq(hcq_jit_var_count(jit), 2);
  for (size_t i = 0; i < 2; i++)
    cr_assert_eq(hcq_jit_var_value(jit, i), hcq_jit_var(jit, i) == f.n ? 200 : 5);
  /* A launch with no outs counts every buffer as written, as hcq_launch does. */
  cr_assert_eq(hcq_jit_item(jit, 0)->kernel.nouts, 1);
  cr_assert_eq(hcq_jit_item(jit, 1)->kernel.nouts, 1);

  int32_t cases[][2] = {{37, 9}, {N, POSMIN}, {NMIN, POSMAX}, {64, 0}, {65, -1}};
  for (int c = 0; c < 5; c++) {
    hcq_var_value_t vals[] = {{f.n, cases[c][0]}, {f.pos, cases[c][1]}};
    OK(hcq_jit_run(jit, NULL, 0, vals, 2, c % 2 == 0, NULL));
    expect_step(&f, cases[c][0], cases[c][1], "replay");
  }
  /* Only pos: n keeps its last value (65). */
  hcq_var_value_t only_pos[] = {{f.pos, 77}};
  OK(hcq_jit_run(jit, NULL, 0, only_pos, 1, true, NULL));
  expect_step(&f, 65, 77, "replay with pos only");
  cr_assert_eq(warned.count, 0, "%s", warned.text);
  OK(hcq_jit_destroy(jit));
  fixture_close(&f);
}

/* The issue this API answers: plain launches record numbers, so a replay's value for a variable
 * changes nothing. That is reported, never silently accepted. */
Test(launch_sym, plain_launch_capture_reports_values_for_variables_it_never_saw) {
  fixture_t f;
  fixture_open(&f);
  warnings_t warned = {0};
  hcq_capture_t *cap = NULL;
  OK(hcq_capture_begin(&cap));
  plain_step(&f, f.x, f.y, 200, 5);
  hcq_var_value_t at[] = {{f.n, 200}, {f.pos, 5}};
  hcq_jit_options_t opts = {.on_warning = collect_warning, .warning_ctx = &warned};
  hcq_jit_t *jit = NULL;
  OK(hcq_capture_end(cap, NULL, 0, at, 2, &opts, &jit));
  expect_step(&f, 200, 5, "the capture run");
  const hcq_jit_report_t *rep = hcq_jit_report(jit);
  cr_assert_eq(rep->unused_vars, 2, "%s", rep->text);
  cr_assert_eq(warned.count, 2, "%s", warned.text);
  cr_assert(strstr(warned.text, "capture: variable n has a value but no captured item uses it"),
            "%s", warned.text);
  cr_assert(strstr(warned.text, "capture: variable pos has a value but no captured item uses it"),
            "%s", warned.text);
  cr_assert(strstr(warned.text, "hcq_launch_sym"), "the warning says what to do: %s", warned.text);
  cr_assert(strstr(rep->text, "variable n has a value but no captured item uses it"), "%s",
            rep->text);
  cr_assert_eq(hcq_jit_var_count(jit), 0);

  /* The replay runs the captured constants: the same work as the capture, whatever n says. n was
   * reported already: once per variable, not once per replay. */
  hcq_var_value_t again[] = {{f.n, 37}};
  OK(hcq_jit_run(jit, NULL, 0, again, 1, true, NULL));
  expect_step(&f, 200, 5, "replay of constants");
  cr_assert_eq(warned.count, 2, "%s", warned.text);

  hcq_expr_t *m = NULL;
  OK(hcq_var_create("m", 0, 10, &m));
  hcq_var_value_t with_m[] = {{m, 3}};
  OK(hcq_jit_run(jit, NULL, 0, with_m, 1, true, NULL));
  expect_step(&f, 200, 5, "replay of constants");
  cr_assert_eq(warned.count, 3, "%s", warned.text);
  cr_assert(strstr(warned.text, "jit replay: variable m has a value but no captured item uses it"),
            "%s", warned.text);
  rep = hcq_jit_report(jit);
  cr_assert_eq(rep->unused_vars, 3);
  cr_assert(strstr(rep->text, "jit replay: variable m"), "the report holds it too: %s", rep->text);
  OK(hcq_jit_destroy(jit));
  hcq_expr_release(m);
  fixture_close(&f);
}

/* Items given to hcq_jit_create carry their own symbols: extra values are ignored, as by graphs. */
Test(launch_sym, jit_create_ignores_values_for_variables_its_items_do_not_use) {
  fixture_t f;
  fixture_open(&f);
  warnings_t warned = {0};
  hcq_buffer_t *xb[1] = {f.x};
  static const uint32_t out0[1] = {0};
  hcq_operand_t v[3] = {hcq_imm(3), hcq_imm(1), hcq_sym(f.n)};
  hcq_exec_item_t items[2];
  for (int j = 0; j < 2; j++)
    items[j] = (hcq_exec_item_t){.kind = HCQ_ITEM_KERNEL,
                                 .kernel = {f.mul_add,
                                            xb,
                                            1,
                                            out0,
                                            1,
                                            v,
                                            3,
                                            {hcq_sym(f.groups64), hcq_imm(1), hcq_imm(1)},
                                            {hcq_imm(64), hcq_imm(1), hcq_imm(1)}}};
  hcq_var_value_t at[] = {{f.n, 10}, {f.pos, 3}};
  hcq_jit_options_t opts = {
      .on_warning = collect_warning, .warning_ctx = &warned, .strict_vars = true};
  hcq_jit_t *jit = NULL;
  OK(hcq_jit_create(items, 2, NULL, 0, at, 2, &opts, &jit));
  OK(hcq_jit_run(jit, NULL, 0, at, 2, true, NULL));
  cr_assert_eq(warned.count, 0, "%s", warned.text);
  cr_assert_eq(hcq_jit_report(jit)->unused_vars, 0);
  OK(hcq_jit_destroy(jit));
  fixture_close(&f);
}

Test(launch_sym, strict_vars_turns_the_report_into_an_error) {
  fixture_t f;
  fixture_open(&f);
  hcq_jit_options_t strict = {.strict_vars = true};
  hcq_capture_t *cap = NULL;
  OK(hcq_capture_begin(&cap));
  plain_step(&f, f.x, f.y, 200, 5);
  hcq_var_value_t at[] = {{f.n, 200}};
  hcq_jit_t *jit = NULL;
  FAILS(hcq_capture_end(cap, NULL, 0, at, 1, &strict, &jit), HCQ_INVALID_ARGUMENT,
        "capture: variable n", "no captured item uses it");
  cr_assert_null(jit);
  expect_step(&f, 200, 5, "the capture run");

  /* Symbolic capture, then a replay naming a variable it never saw: an error, and nothing runs. */
  OK(hcq_capture_begin(&cap));
  hcq_var_value_t vals[] = {{f.n, 100}, {f.pos, -3}};
  OK(sym_step(&f, vals, 2));
  OK(hcq_capture_end(cap, NULL, 0, NULL, 0, &strict, &jit));
  expect_step(&f, 100, -3, "the capture run");
  hcq_expr_t *m = NULL;
  OK(hcq_var_create("m", 0, 10, &m));
  hcq_var_value_t bad[] = {{f.n, 7}, {m, 3}};
  FAILS(hcq_jit_run(jit, NULL, 0, bad, 2, true, NULL), HCQ_INVALID_ARGUMENT,
        "jit replay: variable m", "hcq_launch_sym");
  OK(hcq_device_synchronize(f.dev));
  static uint32_t got[N], want[N];
  test_read(f.x, got, N * 4);
  test_read(f.xm, want, N * 4);
  cr_assert_arr_eq(got, want, N * 4, "a refused replay ran");
  /* n did not become 7: a replay without values uses the last good ones. */
  OK(hcq_jit_run(jit, NULL, 0, NULL, 0, true, NULL));
  expect_step(&f, 100, -3, "replay after a refused one");
  OK(hcq_jit_destroy(jit));
  hcq_expr_release(m);
  fixture_close(&f);
}

/* A replay gives every item one value per variable; a capture whose launches bound several values
 * to one variable did work no replay repeats, and the report says so. */
Test(launch_sym, several_values_of_one_variable_in_a_capture_are_reported) {
  fixture_t f;
  fixture_open(&f);
  warnings_t warned = {0};
  hcq_capture_t *cap = NULL;
  OK(hcq_capture_begin(&cap));
  for (int32_t p = 0; p < 3; p++) {
    hcq_var_value_t vals[] = {{f.n, 50}, {f.pos, p}};
    OK(sym_step(&f, vals, 2));
  }
  hcq_jit_options_t opts = {.on_warning = collect_warning, .warning_ctx = &warned};
  hcq_jit_t *jit = NULL;
  OK(hcq_capture_end(cap, NULL, 0, NULL, 0, &opts, &jit));
  /* The capture ran each step with its own pos. */
  for (int32_t p = 0; p < 2; p++) plain_step(&f, f.xm, f.ym, 50, p), model_step(&f, 50, p);
  expect_step(&f, 50, 2, "the capture run");
  cr_assert_eq(hcq_jit_item_count(jit), 3 * 2 * STEPS);
  cr_assert_eq(warned.count, 1, "%s", warned.text);
  cr_assert(
      strstr(warned.text, "variable pos was bound to several values during the capture (last 2)"),
      "%s", warned.text);
  cr_assert(strstr(hcq_jit_report(jit)->text, "variable pos was bound to several values"), "%s",
            hcq_jit_report(jit)->text);
  for (size_t i = 0; i < hcq_jit_var_count(jit); i++)
    cr_assert_eq(hcq_jit_var_value(jit, i), hcq_jit_var(jit, i) == f.n ? 50 : 2);
  OK(hcq_jit_destroy(jit));
  fixture_close(&f);
}

/* hcq_capture_end's vals name what they name; the bound values fill in the rest. */
Test(launch_sym, capture_end_values_take_precedence_over_bound_ones) {
  fixture_t f;
  fixture_open(&f);
  hcq_capture_t *cap = NULL;
  OK(hcq_capture_begin(&cap));
  hcq_var_value_t at[] = {{f.n, 120}, {f.pos, 4}};
  OK(sym_step(&f, at, 2));
  hcq_var_value_t given[] = {{f.pos, -8}};
  hcq_jit_t *jit = NULL;
  OK(hcq_capture_end(cap, NULL, 0, given, 1, NULL, &jit));
  /* after the capture: the mirrors' launches are not recorded */
  expect_step(&f, 120, 4, "the capture run");
  for (size_t i = 0; i < hcq_jit_var_count(jit); i++)
    cr_assert_eq(hcq_jit_var_value(jit, i), hcq_jit_var(jit, i) == f.n ? 120 : -8);
  /* A replay without values uses them: n = 120 (bound), pos = -8 (given). */
  OK(hcq_jit_run(jit, NULL, 0, NULL, 0, true, NULL));
  expect_step(&f, 120, -8, "replay with the capture's values");
  OK(hcq_jit_destroy(jit));
  fixture_close(&f);
}

Test(launch_sym, bad_launches_fail_and_record_nothing) {
  fixture_t f;
  fixture_open(&f);
  FAILS(hcq_launch_sym(NULL, NULL, 0), HCQ_INVALID_ARGUMENT, "descriptor or program is NULL");
  hcq_capture_t *cap = NULL;
  OK(hcq_capture_begin(&cap));
  hcq_var_value_t no_n[] = {{f.pos, 1}};
  FAILS(sym_step(&f, no_n, 1), HCQ_NOT_FOUND, "hcq_launch_sym of mul_add", "n");
  hcq_var_value_t too_big[] = {{f.n, N + 1}, {f.pos, 1}};
  FAILS(sym_step(&f, too_big, 2), HCQ_OUT_OF_RANGE, "hcq_launch_sym of mul_add", "n");
  /* An operand that evaluates outside its field: a negative grid. */
  hcq_expr_t *c100 = hcq_expr_const(100), *neg = hcq_expr_binary(HCQ_EXPR_SUB, f.n, c100);
  hcq_buffer_t *xb[1] = {f.x};
  hcq_operand_t v[3] = {hcq_imm(1), hcq_imm(0), hcq_sym(f.n)};
  hcq_launch_sym_desc_t d = {f.mul_add,
                             xb,
                             1,
                             v,
                             3,
                             {hcq_sym(neg), hcq_imm(1), hcq_imm(1)},
                             {hcq_imm(64), hcq_imm(1), hcq_imm(1)},
                             NULL,
                             0};
  hcq_var_value_t n50[] = {{f.n, 50}};
  FAILS(hcq_launch_sym(&d, n50, 1), HCQ_OUT_OF_RANGE, "global[0]", "n-100");
  uint32_t bad_out[1] = {3};
  d.global[0] = hcq_imm(1), d.outs = bad_out, d.nouts = 1;
  FAILS(hcq_launch_sym(&d, n50, 1), HCQ_OUT_OF_RANGE, "out 0");
  cr_assert_eq(hcq_capture_item_count(cap), 0);
  hcq_capture_abort(cap);
  OK(hcq_device_synchronize(f.dev));
  static uint32_t got[N], want[N];
  test_read(f.x, got, N * 4);
  test_read(f.xm, want, N * 4);
  cr_assert_arr_eq(got, want, N * 4, "a failed launch ran");
  hcq_expr_release(neg), hcq_expr_release(c100);
  fixture_close(&f);
}

/* Launch dims in captures: a constant 0 (eager or symbolic launch, or a jit item) is refused naming
 * the dim and records nothing; a symbolic dim that is 0 runs nothing, in the capture and in
 * replays. */
Test(launch_sym, zero_dims_in_captures) {
  hcq_device_t *d = test_open("CPU:0");
  hcq_program_t *p = test_program(d, "fill", test_kernels_source);
  hcq_buffer_t *out = test_buffer(d, N * 4);
  hcq_expr_t *k = NULL;
  OK(hcq_var_create("k", 0, N / 64, &k));
  hcq_capture_t *cap = NULL;
  OK(hcq_capture_begin(&cap));
  int32_t iv[2] = {9, N};
  hcq_launch_desc_t l = {.program = p,
                         .bufs = &out,
                         .nbufs = 1,
                         .vals = iv,
                         .nvals = 2,
                         .global = {4},
                         .local = {64, 1, 1}};
  FAILS(hcq_launch(&l), HCQ_INVALID_ARGUMENT, "launch of fill", "global[1] is 0");
  hcq_operand_t v[2] = {hcq_imm(9), hcq_imm(N)};
  hcq_launch_sym_desc_t sd = {p,
                              &out,
                              1,
                              v,
                              2,
                              {hcq_sym(k), hcq_imm(1), hcq_imm(1)},
                              {hcq_imm(64), hcq_imm(0), hcq_imm(1)},
                              NULL,
                              0};
  hcq_var_value_t k0 = {k, 0};
  FAILS(hcq_launch_sym(&sd, &k0, 1), HCQ_INVALID_ARGUMENT, "fill", "local[1] is 0");
  cr_assert_eq(hcq_capture_item_count(cap), 0);
  sd.local[1] = hcq_imm(1);
  OK(hcq_launch_sym(&sd, &k0, 1)); /* k = 0: nothing runs */
  cr_assert_eq(hcq_capture_item_count(cap), 1);
  hcq_jit_t *jit = NULL;
  OK(hcq_capture_end(cap, NULL, 0, NULL, 0, NULL, &jit));
  int32_t got[N];
  test_read(out, got, sizeof(got));
  for (int i = 0; i < N; i++)
    cr_assert_eq(got[i], 0, "k = 0 ran the kernel (out[%d] = %d)", i, got[i]);
  OK(hcq_jit_run(jit, NULL, 0, &k0, 1, true, NULL));
  test_read(out, got, sizeof(got));
  for (int i = 0; i < N; i++)
    cr_assert_eq(got[i], 0, "a k = 0 replay ran the kernel (out[%d] = %d)", i, got[i]);
  hcq_var_value_t k2 = {k, 2};
  OK(hcq_jit_run(jit, NULL, 0, &k2, 1, true, NULL));
  test_read(out, got, sizeof(got));
  for (int i = 0; i < N; i++)
    cr_assert_eq(got[i], i < 128 ? 9 : 0, "k = 2 replay: out[%d] = %d", i, got[i]);
  OK(hcq_jit_destroy(jit));
  hcq_exec_item_t it = {.kind = HCQ_ITEM_KERNEL,
                        .kernel = {.program = p,
                                   .bufs = &out,
                                   .nbufs = 1,
                                   .vals = v,
                                   .nvals = 2,
                                   .global = {hcq_imm(1), hcq_imm(1), hcq_imm(0)},
                                   .local = {hcq_imm(64), hcq_imm(1), hcq_imm(1)}}};
  FAILS(hcq_jit_create(&it, 1, NULL, 0, NULL, 0, NULL, &jit), HCQ_INVALID_ARGUMENT, "item 0 (fill)",
        "global[2] is 0");
  hcq_expr_release(k);
  hcq_buffer_release(out);
  hcq_program_release(p);
  test_close(d);
}
