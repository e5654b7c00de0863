/* Kept bindings (hcq_jit_run in hcq/jit.h): a replay that passes NULL for an input keeps the buffer
 * it was last bound to (the captured one before the first replay), as a CUDA graph keeps its kernel
 * parameters. Checked with double buffering against eager launches of the same kernel. Also the
 * replay error's prefix said once. */
#include "test_util.h"

TestSuite(jit_keep, .timeout = 60);

enum { N = 64 };

/* out[i] = x[i] * 3 + vals[0] */
static void axpb(void *const *bufs, const int32_t *vals, const hcq_launch_t *l) {
  const int32_t *x = bufs[0];
  int32_t *out = bufs[1];
  for (uint32_t t = 0; t < l->lsz[0]; t++) {
    uint32_t i = l->gid[0] * l->lsz[0] + t;
    if (i < N) out[i] = x[i] * 3 + vals[0];
  }
}

static void launch(hcq_program_t *p, hcq_buffer_t *x, hcq_buffer_t *out, int32_t b) {
  hcq_buffer_t *bufs[] = {x, out};
  uint32_t outs[] = {1};
  hcq_launch_desc_t d = {p, bufs, 2, &b, 1, {N / 16, 1, 1}, {16, 1, 1}, outs, 1};
  OK(hcq_launch(&d));
}

static void fill(hcq_buffer_t *x, int32_t mul) {
  int32_t v[N];
  for (int i = 0; i < N; i++) v[i] = i * mul - 7;
  OK(hcq_buffer_copyin(x, 0, v, sizeof(v)));
}

/* out against an eager launch of the kernel on x into ref. */
static void expect_eager(hcq_program_t *p, hcq_buffer_t *x, hcq_buffer_t *out, hcq_buffer_t *ref,
                         const char *what) {
  launch(p, x, ref, 5);
  int32_t got[N], want[N];
  test_read(out, got, sizeof(got));
  test_read(ref, want, sizeof(want));
  cr_assert_arr_eq(got, want, sizeof(got), "%s", what);
}

Test(jit_keep, double_buffered_outputs_with_a_kept_input) {
  hcq_device_t *d = test_open("CPU:0");
  hcq_program_t *p = NULL;
  OK(hcq_program_create_fn(d, "axpb", axpb, &p));
  hcq_buffer_t *x = test_buffer(d, N * 4), *y = test_buffer(d, N * 4),
               *out[2] = {test_buffer(d, N * 4), test_buffer(d, N * 4)};
  hcq_buffer_t *ref = test_buffer(d, N * 4);
  fill(x, 2);
  hcq_capture_t *c = NULL;
  OK(hcq_capture_begin(&c));
  launch(p, x, out[0], 5);
  hcq_buffer_t *ins[] = {x, out[0]};
  hcq_jit_t *jit = NULL;
  OK(hcq_capture_end(c, ins, 2, NULL, 0, NULL, &jit));
  /* First replay: x kept from the capture, the output swapped. */
  for (int r = 0; r < 6; r++) {
    fill(x, r + 3); /* the kept input's contents change between replays; its binding does not */
    hcq_buffer_t *bind[] = {NULL, out[(r + 1) % 2]};
    OK(hcq_jit_run(jit, bind, 2, NULL, 0, true, NULL));
    char what[64];
    snprintf(what, sizeof(what), "replay %d into out[%d]", r, (r + 1) % 2);
    expect_eager(p, x, out[(r + 1) % 2], ref, what);
  }
  /* Bind the input to y once; NULL afterwards keeps y, not the captured x. */
  fill(y, -4);
  hcq_buffer_t *to_y[] = {y, out[0]};
  OK(hcq_jit_run(jit, to_y, 2, NULL, 0, true, NULL));
  expect_eager(p, y, out[0], ref, "bound to y");
  fill(y, 9);
  hcq_buffer_t *keep_y[] = {NULL, out[1]};
  OK(hcq_jit_submit(jit, keep_y, 2, NULL, 0, NULL));
  OK(hcq_device_synchronize(d));
  expect_eager(p, y, out[1], ref, "y kept by a submit");
  /* Every input NULL: both keep theirs (out[1]). */
  fill(y, 11);
  hcq_buffer_t *keep_all[] = {NULL, NULL};
  OK(hcq_jit_run(jit, keep_all, 2, NULL, 0, true, NULL));
  expect_eager(p, y, out[1], ref, "both kept");
  /* The jit holds what it keeps: y released by the caller still serves the next replay. */
  hcq_buffer_release(y);
  fill(x, 1);
  OK(hcq_jit_run(jit, keep_all, 2, NULL, 0, true, NULL));
  int32_t got[N];
  test_read(out[1], got, sizeof(got));
  cr_assert_eq(got[3], (3 * 11 - 7) * 3 + 5, "y kept alive (its contents from the last fill): %d",
               got[3]);
  /* A non-NULL input is still checked: the wrong size. */
  hcq_buffer_t *small = test_buffer(d, 16), *bad[] = {NULL, small};
  FAILS(hcq_jit_run(jit, bad, 2, NULL, 0, true, NULL), HCQ_INVALID_ARGUMENT, "jit replay: input 1");
  OK(hcq_jit_destroy(jit));
  hcq_buffer_release(small);
  hcq_buffer_release(x);
  hcq_buffer_release(out[0]);
  hcq_buffer_release(out[1]);
  hcq_buffer_release(ref);
  hcq_program_release(p);
  test_close(d);
}

Test(jit_keep, replay_error_says_replay_once) {
  hcq_device_t *d = test_open("CPU:0");
  hcq_program_t *p = NULL;
  OK(hcq_program_create_fn(d, "axpb", axpb, &p));
  hcq_buffer_t *x = test_buffer(d, N * 4), *out = test_buffer(d, N * 4);
  hcq_expr_t *n = NULL;
  OK(hcq_var_create("n", 0, 100, &n));
  hcq_capture_t *c = NULL;
  OK(hcq_capture_begin(&c));
  hcq_buffer_t *bufs[] = {x, out};
  hcq_operand_t v = hcq_sym(n);
  hcq_launch_sym_desc_t sd = {p,
                              bufs,
                              2,
                              &v,
                              1,
                              {hcq_imm(N / 16), hcq_imm(1), hcq_imm(1)},
                              {hcq_imm(16), hcq_imm(1), hcq_imm(1)},
                              NULL,
                              0};
  hcq_var_value_t at = {n, 5};
  OK(hcq_launch_sym(&sd, &at, 1));
  hcq_jit_t *jit = NULL;
  OK(hcq_capture_end(c, NULL, 0, &at, 1, NULL, &jit));
  hcq_var_value_t twice[] = {{n, 1}, {n, 2}};
  hcq_status_t st = hcq_jit_run(jit, NULL, 0, twice, 2, true, NULL);
  cr_assert_not_null(st);
  const char *msg = hcq_status_message(st);
  cr_assert(strstr(msg, "jit replay: variable n has two values (values 0 and 1)"), "%s", msg);
  cr_assert_null(strstr(msg, "replay: replay"), "%s", msg);
  hcq_status_destroy(st);
  OK(hcq_jit_destroy(jit));
  hcq_expr_release(n);
  hcq_buffer_release(x);
  hcq_buffer_release(out);
  hcq_program_release(p);
  test_close(d);
}
