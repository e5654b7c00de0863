/* Capture and batching: the capture run executes, replays match eager execution (the ground truth)
 * buffer by buffer, batches have the sizes of docs/design.md, "Capture and batching", leftovers run
 * eagerly with a reason, and a saved capture runs again through `hcq run`. */
#include <pthread.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include "world.h"

TestSuite(jit, .timeout = 240);

static hcq_operand_t I(int64_t v) { return hcq_imm(v); }
enum { N = 256 };

/* Runs the items under capture (they execute), mirrors that run eagerly, and returns the jit. */
static hcq_jit_t *capture(world_t *w, world_item_t *items, int n, const int *inputs, int ninputs,
                          const hcq_var_value_t *vals, size_t nvals,
                          const hcq_jit_options_t *opts) {
  hcq_capture_t *c = NULL;
  OK(hcq_capture_begin(&c));
  for (int j = 0; j < n; j++) OK(hcq_exec_item_run(&items[j].item, vals, nvals));
  cr_assert_eq(hcq_capture_item_count(c), (size_t)n);
  hcq_buffer_t *ins[WORLD_MAX_DEVS + 4];
  for (int k = 0; k < ninputs; k++) ins[k] = w->buf[inputs[k]];
  hcq_jit_t *jit = NULL;
  OK(hcq_capture_end(c, ins, (size_t)ninputs, vals, nvals, opts, &jit));
  world_run_eager(w, items, n, inputs, NULL, ninputs, vals, nvals);
  world_compare(w, "the capture run");
  return jit;
}

static void replay(world_t *w, hcq_jit_t *jit, world_item_t *items, int n, const int *inputs,
                   const int *swaps, int ninputs, const hcq_var_value_t *vals, size_t nvals,
                   bool wait, const char *what) {
  hcq_buffer_t *ins[WORLD_MAX_DEVS + 4];
  for (int k = 0; k < ninputs; k++) ins[k] = w->buf[swaps && swaps[k] >= 0 ? swaps[k] : inputs[k]];
  uint64_t ns = 0;
  OK(hcq_jit_run(jit, ins, (size_t)ninputs, vals, nvals, wait, wait ? &ns : NULL));
  world_run_eager(w, items, n, inputs, swaps, ninputs, vals, nvals);
  world_compare(w, what);
}

Test(jit, capture_replays_match_eager_for_mixed_work) {
  world_t w;
  world_open(&w, 2);
  int a = world_buffer(&w, 0, N, 1), b = world_buffer(&w, 0, N, 2), c = world_buffer(&w, 1, N, 3);
  int base = world_buffer(&w, 0, 2 * N, 4), v0 = world_view(&w, base, 0, N),
      v1 = world_view(&w, base, N, N);
  world_item_t items[8];
  world_mix(&w, &items[0], a, b, b, I(2), I(1), I(N), NULL);  /* write a */
  world_mix(&w, &items[1], a, a, b, I(3), I(2), I(N), NULL);  /* second write to a */
  world_mix(&w, &items[2], v0, a, b, I(1), I(0), I(N), NULL); /* read a, write a view */
  world_copy(&w, &items[3], c, v0, N * 4);                    /* copy after write, across devices */
  world_mix(&w, &items[4], c, c, c, I(5), I(1), I(N), NULL);  /* read after copy */
  world_copy(&w, &items[5], v1, c, N * 4);                    /* back into the other view */
  world_mix(&w, &items[6], b, v1, v0, I(1), I(1), I(N), NULL);
  world_mix(&w, &items[7], a, b, b, I(2), I(2), I(N), NULL); /* write after read */
  hcq_jit_t *jit = capture(&w, items, 8, NULL, 0, NULL, 0, NULL);
  const hcq_jit_report_t *rep = hcq_jit_report(jit);
  cr_assert_eq(rep->items, 8);
  cr_assert_eq(rep->batches, 1, "%s", rep->text);
  cr_assert_eq(rep->graphed_items, 8);
  for (int r = 0; r < 5; r++) replay(&w, jit, items, 8, NULL, NULL, 0, NULL, 0, r % 2, "replay");
  OK(hcq_jit_destroy(jit));
  world_close(&w);
}

Test(jit, symbolic_values_and_inputs_swapped) {
  world_t w;
  world_open(&w, 2);
  world_vars_t v;
  world_vars_open(&v);
  int x = world_buffer(&w, 0, N, 1), x2 = world_buffer(&w, 0, N, 2),
      acc = world_buffer(&w, 0, N, 3);
  int far = world_buffer(&w, 1, N, 4), far2 = world_buffer(&w, 1, N, 5);
  world_item_t items[4];
  world_mix(&w, &items[0], acc, x, acc, hcq_sym(v.k), I(1), hcq_sym(v.n), v.groups);
  world_copy(&w, &items[1], far, acc, N * 4);
  world_mix(&w, &items[2], far, far, far, I(3), hcq_sym(v.k), hcq_sym(v.n), v.groups);
  world_copy(&w, &items[3], x, far, N * 2);
  int inputs[] = {x, far};
  hcq_var_value_t init[] = {{v.n, 64}, {v.k, 2}};
  hcq_jit_t *jit = capture(&w, items, 4, inputs, 2, init, 2, NULL);
  cr_assert_eq(hcq_jit_var_count(jit), 2);
  int swaps[][2] = {{-1, -1}, {x2, -1}, {x2, far2}, {-1, far2}, {x, far}};
  int64_t ns[] = {1, 64, 33, 7, 64}, ks[] = {-9, 9, 0, 4, -1};
  for (int r = 0; r < 5; r++) {
    hcq_var_value_t vals[] = {{v.n, ns[r]}, {v.k, ks[r]}};
    replay(&w, jit, items, 4, inputs, swaps[r], 2, vals, 2, r % 2,
           "replay with new values and inputs");
  }
  /* Another variable called "k" is not the captured k: refused, naming it, not a silent no-op (the
   * old value stayed, with only a warning that no item uses it). */
  hcq_expr_t *other_k;
  OK(hcq_var_create("k", -9, 9, &other_k));
  hcq_var_value_t wrong[] = {{v.n, 64}, {other_k, 5}};
  hcq_buffer_t *now_inputs[] = {w.buf[x], w.buf[far]};
  FAILS(hcq_jit_run(jit, now_inputs, 2, wrong, 2, true, NULL), HCQ_INVALID_ARGUMENT,
        "variable k is not the one", "another of the same name");
  hcq_expr_release(other_k);
  OK(hcq_jit_destroy(jit));
  world_vars_close(&v);
  world_close(&w);
}

/* 200 items: batches of 32, then 64, then the rest (the next limit, 128, is not reached). */
Test(jit, long_capture_splits_into_doubling_batches) {
  world_t w;
  world_open(&w, 2);
  int a = world_buffer(&w, 0, N, 1), b = world_buffer(&w, 1, N, 2);
  world_item_t items[200];
  for (int j = 0; j < 200; j++) {
    if (j % 25 == 24)
      world_copy(&w, &items[j], j % 2 ? a : b, j % 2 ? b : a, N * 4);
    else
      world_mix(&w, &items[j], j % 2 ? b : a, j % 2 ? b : a, j % 2 ? b : a, I(j % 3 + 1), I(j),
                I(N), NULL);
  }
  hcq_jit_t *jit = capture(&w, items, 200, NULL, 0, NULL, 0, NULL);
  const hcq_jit_report_t *rep = hcq_jit_report(jit);
  cr_assert_eq(rep->batches, 3, "%s", rep->text);
  cr_assert_eq(rep->batch_sizes[0], 32);
  cr_assert_eq(rep->batch_sizes[1], 64);
  cr_assert_eq(rep->batch_sizes[2], 104);
  cr_assert_eq(rep->eager_items, 0);
  cr_assert(strstr(rep->text, "200 items: 200 graphed in 3 batches (32, 64, 104), 0 eager"), "%s",
            rep->text);
  for (int r = 0; r < 3; r++)
    replay(&w, jit, items, 200, NULL, NULL, 0, NULL, 0, r == 2, "replay of 3 batches");
  OK(hcq_jit_destroy(jit));
  world_close(&w);
}

Test(jit, first_batch_size_from_the_environment) {
  setenv("HCQ_JIT_BATCH_SIZE", "3", 1);
  world_t w;
  world_open(&w, 1);
  int a = world_buffer(&w, 0, N, 1);
  world_item_t items[30];
  for (int j = 0; j < 30; j++) world_mix(&w, &items[j], a, a, a, I(1), I(j), I(N), NULL);
  hcq_jit_t *jit = capture(&w, items, 30, NULL, 0, NULL, 0, NULL);
  const hcq_jit_report_t *rep = hcq_jit_report(jit);
  /* 3, 6, 12, then 9 left. */
  cr_assert_eq(rep->batches, 4, "%s", rep->text);
  size_t want[] = {3, 6, 12, 9};
  for (int i = 0; i < 4; i++) cr_assert_eq(rep->batch_sizes[i], want[i]);
  replay(&w, jit, items, 30, NULL, NULL, 0, NULL, 0, true, "replay");
  OK(hcq_jit_destroy(jit));
  world_close(&w);
}

Test(jit, single_items_are_not_graphed) {
  world_t w;
  world_open(&w, 1);
  int a = world_buffer(&w, 0, N, 1);
  world_item_t items[1];
  world_mix(&w, &items[0], a, a, a, I(3), I(1), I(N), NULL);
  hcq_jit_t *jit = capture(&w, items, 1, NULL, 0, NULL, 0, NULL);
  const hcq_jit_report_t *rep = hcq_jit_report(jit);
  cr_assert_eq(rep->batches, 0);
  cr_assert_eq(rep->eager_items, 1);
  cr_assert(
      strstr(rep->text, "item 0 (mix on CPU:0) runs eagerly: a batch of one item is not graphed"),
      "%s", rep->text);
  for (int r = 0; r < 3; r++)
    replay(&w, jit, items, 1, NULL, NULL, 0, NULL, 0, r == 2, "eager replay");
  OK(hcq_jit_destroy(jit));
  world_close(&w);
}

/* A batch over 65 devices cannot become an HCQ graph (it tracks 64): it runs eagerly, and says so.
 */
Test(jit, a_batch_whose_graph_cannot_be_built_runs_eagerly) {
  setenv("HCQ_CPU_THREADS", "1", 1);
  enum { D = 65 };
  hcq_device_t *devs[D];
  hcq_program_t *progs[D];
  hcq_buffer_t *bufs[D];
  world_item_t items[D];
  for (int d = 0; d < D; d++) {
    char name[16];
    snprintf(name, sizeof(name), "CPU:%d", d);
    devs[d] = test_open(name);
    progs[d] = test_program(devs[d], "mul_add", test_kernels_source);
    bufs[d] = test_buffer_iota(devs[d], 16, 1, d);
    memset(&items[d], 0, sizeof(items[d]));
    items[d].bufs[0] = bufs[d];
    items[d].vals[0] = I(3), items[d].vals[1] = I(1), items[d].vals[2] = I(16);
    hcq_kernel_item_t k = {
        progs[d],           items[d].bufs,      1, items[d].outs, 1, items[d].vals, 3,
        {I(1), I(1), I(1)}, {I(16), I(1), I(1)}};
    items[d].item.kind = HCQ_ITEM_KERNEL;
    items[d].item.kernel = k;
  }
  hcq_exec_item_t its[D];
  for (int d = 0; d < D; d++) its[d] = items[d].item;
  hcq_jit_options_t opts = {.first_batch_size = 100};
  hcq_jit_t *jit = NULL;
  OK(hcq_jit_create(its, D, NULL, 0, NULL, 0, &opts, &jit));
  const hcq_jit_report_t *rep = hcq_jit_report(jit);
  cr_assert_eq(rep->batches, 0);
  cr_assert_eq(rep->eager_items, D);
  cr_assert(strstr(rep->text, "items 0-64 run eagerly: building their graph failed"), "%s",
            rep->text);
  cr_assert(strstr(rep->text, "at most 64 devices"), "%s", rep->text);
  for (int r = 0; r < 2; r++) OK(hcq_jit_run(jit, NULL, 0, NULL, 0, true, NULL));
  for (int d = 0; d < D; d++) {
    uint32_t got[16];
    test_read(bufs[d], got, sizeof(got));
    for (uint32_t i = 0; i < 16; i++) cr_assert_eq(got[i], ((i + (uint32_t)d) * 3 + 1) * 3 + 1);
  }
  OK(hcq_jit_destroy(jit));
  for (int d = 0; d < D; d++) {
    hcq_buffer_release(bufs[d]);
    hcq_program_release(progs[d]);
    test_close(devs[d]);
  }
}

/* hcq_launch and hcq_transfer are recorded too (constant operands); host copies run once and are
 * counted, not recorded. */
Test(jit, eager_api_calls_are_recorded_and_host_copies_reported) {
  hcq_device_t *d0 = test_open("CPU:0"), *d1 = test_open("CPU:1");
  hcq_program_t *p = test_program(d0, "mul_add", test_kernels_source);
  hcq_buffer_t *x = test_buffer_iota(d0, 64, 1, 0), *y = test_buffer(d1, 256);
  hcq_capture_t *c = NULL;
  OK(hcq_capture_begin(&c));
  hcq_capture_t *again = NULL;
  FAILS(hcq_capture_begin(&again), HCQ_FAILED_PRECONDITION, "already capturing");
  uint32_t outs[] = {0};
  int32_t v[] = {2, 1, 64};
  hcq_launch_desc_t l = {p, &x, 1, v, 3, {1, 1, 1}, {64, 1, 1}, outs, 1};
  OK(hcq_launch(&l));
  OK(hcq_transfer(y, x, 256));
  int32_t seven = 7;
  OK(hcq_buffer_copyin(x, 0, &seven, 4)); /* not recorded */
  OK(hcq_launch(&l));
  cr_assert_eq(hcq_capture_item_count(c), 3);
  hcq_jit_t *jit = NULL;
  OK(hcq_capture_end(c, NULL, 0, NULL, 0, NULL, &jit));
  const hcq_jit_report_t *rep = hcq_jit_report(jit);
  cr_assert_eq(rep->host_copies, 1);
  cr_assert(
      strstr(
          rep->text,
          "1 host copy ran once during the capture and was not recorded (first: copyin of 4 bytes"),
      "%s", rep->text);
  cr_assert_eq(rep->batches, 1);
  /* Model: x after capture is ((7)*2+1 at word 0...), then each replay: x=x*2+1; y=x; x=x*2+1. */
  uint32_t model[64], got[64];
  for (uint32_t i = 0; i < 64; i++) model[i] = i * 2 + 1;
  model[0] = 7;
  for (int i = 0; i < 64; i++) model[i] = model[i] * 2 + 1;
  for (int r = 0; r < 3; r++) {
    OK(hcq_jit_run(jit, NULL, 0, NULL, 0, r == 2, NULL));
    for (int i = 0; i < 64; i++) model[i] = (model[i] * 2 + 1) * 2 + 1;
  }
  test_read(x, got, sizeof(got));
  cr_assert_arr_eq(got, model, sizeof(got));
  uint32_t ymodel[64];
  for (int i = 0; i < 64; i++) ymodel[i] = (model[i] - 1) / 2;
  test_read(y, got, sizeof(got));
  cr_assert_arr_eq(got, ymodel, sizeof(got));
  OK(hcq_jit_destroy(jit));
  hcq_buffer_release(x);
  hcq_buffer_release(y);
  hcq_program_release(p);
  test_close(d0);
  test_close(d1);
}

Test(jit, capture_and_replay_errors) {
  world_t w;
  world_open(&w, 1);
  world_vars_t v;
  world_vars_open(&v);
  int x = world_buffer(&w, 0, N, 1), small = world_buffer(&w, 0, N / 2, 2),
      acc = world_buffer(&w, 0, N, 3);
  hcq_capture_t *c = NULL;
  hcq_jit_t *jit = NULL;
  OK(hcq_capture_begin(&c));
  FAILS(hcq_capture_end(c, NULL, 0, NULL, 0, NULL, &jit), HCQ_FAILED_PRECONDITION,
        "recorded no launches");
  OK(hcq_capture_begin(&c)); /* the failed end released the capture and stopped recording */
  hcq_capture_abort(c);
  hcq_capture_abort(NULL);
  world_item_t items[2];
  world_mix(&w, &items[0], acc, x, acc, hcq_sym(v.k), I(1), hcq_sym(v.n), v.groups);
  world_mix(&w, &items[1], acc, acc, x, I(2), I(3), I(N), NULL);
  int inputs[] = {x};
  hcq_var_value_t init[] = {{v.n, 10}, {v.k, 1}};
  jit = capture(&w, items, 2, inputs, 1, init, 2, NULL);
  hcq_buffer_t *wrong[] = {w.buf[small]};
  FAILS(hcq_jit_run(jit, wrong, 1, NULL, 0, true, NULL), HCQ_INVALID_ARGUMENT, "jit replay",
        "input 0", "512 bytes");
  hcq_var_value_t bad[] = {{v.k, 10}};
  FAILS(hcq_jit_run(jit, NULL, 0, bad, 1, true, NULL), HCQ_INVALID_ARGUMENT,
        "1 inputs but the replay passed 0");
  hcq_buffer_t *ok[] = {w.buf[x]};
  FAILS(hcq_jit_run(jit, ok, 1, bad, 1, true, NULL), HCQ_OUT_OF_RANGE, "variable k = 10");
  FAILS(hcq_jit_run(NULL, ok, 1, NULL, 0, true, NULL), HCQ_INVALID_ARGUMENT, "jit is NULL");
  world_compare(&w, "after failed replays nothing ran");
  replay(&w, jit, items, 2, inputs, NULL, 1, init, 2, true, "a good replay");
  /* Function-pointer programs cannot be saved. */
  OK(hcq_jit_destroy(jit));
  OK(hcq_jit_destroy(NULL));
  world_vars_close(&v);
  world_close(&w);
}

static void empty_fn(void *const *b, const int32_t *v, const hcq_launch_t *l) {
  (void)b, (void)v, (void)l;
}

Test(jit, saving_function_pointer_programs_is_refused) {
  hcq_device_t *d = test_open("CPU:0");
  hcq_program_t *p = NULL;
  OK(hcq_program_create_fn(d, "empty_fn", empty_fn, &p));
  hcq_buffer_t *x = test_buffer(d, 64);
  hcq_exec_item_t it = {
      .kind = HCQ_ITEM_KERNEL,
      .kernel = {p, &x, 1, NULL, 0, NULL, 0, {I(1), I(1), I(1)}, {I(1), I(1), I(1)}}};
  hcq_jit_t *jit = NULL;
  OK(hcq_jit_create(&it, 1, NULL, 0, NULL, 0, NULL, &jit));
  const char *base = getenv("HCQ_TEST_TMP");
  char path[512];
  snprintf(path, sizeof(path), "%s/fnptr.json", base && *base ? base : "/tmp");
  FAILS(hcq_jit_save(jit, path), HCQ_UNIMPLEMENTED, "empty_fn", "function pointer");
  OK(hcq_jit_destroy(jit));
  hcq_buffer_release(x);
  hcq_program_release(p);
  test_close(d);
}

/* Runs the hcq command; returns its exit status. */
static int run_cli(const char *const *args) {
  const char *cli = getenv("HCQ_CLI");
  if (!cli || !*cli) cr_skip_test("HCQ_CLI is not set (CTest sets it to the hcq binary)");
  pid_t pid = fork();
  if (pid == 0) {
    char *argv[16];
    int n = 0;
    argv[n++] = (char *)cli;
    for (const char *const *a = args; *a && n < 15; a++) argv[n++] = (char *)*a;
    argv[n] = NULL;
    freopen("/dev/null", "w", stdout);
    execv(cli, argv);
    _exit(127);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

/* Save -> `hcq run --check` and `hcq run --out`: the saved file replays the capture from the state
 * at save time; one more eager step on the mirror must equal what the tool wrote. */
Test(jit, save_and_run_again_with_the_hcq_command) {
  world_t w;
  world_open(&w, 2);
  world_vars_t v;
  world_vars_open(&v);
  int x = world_buffer(&w, 0, N, 1), acc = world_buffer(&w, 0, N, 2),
      far = world_buffer(&w, 1, 2 * N, 3);
  int farv = world_view(&w, far, N, N);
  hcq_buffer_set_label(w.buf[x], "x");
  hcq_buffer_set_label(w.buf[acc], "acc");
  world_item_t items[4];
  world_mix(&w, &items[0], acc, x, acc, hcq_sym(v.k), I(1), hcq_sym(v.n), v.groups);
  world_copy(&w, &items[1], farv, acc, N * 4);
  world_mix(&w, &items[2], farv, farv, farv, I(3), hcq_sym(v.k), hcq_sym(v.n), v.groups);
  world_copy(&w, &items[3], x, farv, N * 4);
  int inputs[] = {x};
  hcq_var_value_t init[] = {{v.n, 40}, {v.k, 3}};
  hcq_jit_t *jit = capture(&w, items, 4, inputs, 1, init, 2, NULL);
  hcq_var_value_t later[] = {{v.n, 64}, {v.k, -2}};
  replay(&w, jit, items, 4, inputs, NULL, 1, later, 2, true, "replay before saving");

  const char *base = getenv("HCQ_TEST_TMP");
  char dir[512], path[600], out[600];
  snprintf(dir, sizeof(dir), "%s/save-XXXXXX", base && *base ? base : "/tmp");
  mkdir(base && *base ? base : "/tmp", 0755);
  cr_assert_not_null(mkdtemp(dir));
  snprintf(path, sizeof(path), "%s/captured.json", dir);
  snprintf(out, sizeof(out), "%s/out", dir);
  OK(hcq_jit_save(jit, path));

  const char *check[] = {"run", path, "--check", NULL};
  cr_assert_eq(run_cli(check), 0, "hcq run --check on the saved file failed");
  const char *graph_run[] = {"run", path, "--out", out, NULL};
  cr_assert_eq(run_cli(graph_run), 0, "hcq run --out on the saved file failed");

  /* The tool ran one more replay with the last values from the saved state. */
  world_run_eager(&w, items, 4, inputs, NULL, 1, later, 2);
  const char *names[] = {"x", "acc"};
  int idx[] = {x, acc};
  for (int i = 0; i < 2; i++) {
    char file[700];
    snprintf(file, sizeof(file), "%s/%s.bin", out, names[i]);
    FILE *f = fopen(file, "rb");
    cr_assert_not_null(f, "%s was not written", file);
    uint8_t got[N * 4], want[N * 4];
    cr_assert_eq(fread(got, 1, sizeof(got), f), sizeof(got));
    fclose(f);
    OK(hcq_buffer_copyout(w.mirror[idx[i]], 0, want, sizeof(want)));
    cr_assert_arr_eq(got, want, sizeof(got), "buffer %s after the saved replay differs from eager",
                     names[i]);
  }
  OK(hcq_jit_destroy(jit));
  world_vars_close(&v);
  world_close(&w);
}

/* Two captures sharing buffers over four devices, replayed alternately with eager transfers queued
 * before and after each replay: the device timelines order all of it. */
Test(jit, two_captures_sharing_buffers_with_eager_work_around_them) {
  world_t w;
  world_open(&w, 4);
  int buf[4], tmp[4];
  for (int d = 0; d < 4; d++) {
    buf[d] = world_buffer(&w, d, N, 10 + d);
    tmp[d] = world_buffer(&w, d, N, 20 + d);
  }
  world_item_t first[8], second[4], before[4], after[4];
  for (int d = 0; d < 4; d++) {
    world_mix(&w, &first[2 * d], tmp[d], buf[d], tmp[d], I(d + 2), I(d), I(N), NULL);
    world_copy(&w, &first[2 * d + 1], buf[(d + 1) % 4], tmp[d], N * 4);
    world_mix(&w, &second[d], buf[d], buf[d], tmp[d], I(3), I(1), I(N), NULL);
    world_copy(&w, &before[d], tmp[(d + 2) % 4], buf[d], N * 4);
    world_copy(&w, &after[d], buf[(d + 3) % 4], tmp[d], N * 2);
  }
  hcq_jit_t *j1 = capture(&w, first, 8, NULL, 0, NULL, 0, NULL),
            *j2 = capture(&w, second, 4, NULL, 0, NULL, 0, NULL);
  for (int r = 0; r < 4; r++) {
    for (int d = 0; d < 4; d++) OK(hcq_exec_item_run(&before[d].item, NULL, 0));
    world_run_eager(&w, before, 4, NULL, NULL, 0, NULL, 0);
    OK(hcq_jit_run(j1, NULL, 0, NULL, 0, false, NULL));
    OK(hcq_jit_run(j2, NULL, 0, NULL, 0, false, NULL));
    world_run_eager(&w, first, 8, NULL, NULL, 0, NULL, 0);
    world_run_eager(&w, second, 4, NULL, NULL, 0, NULL, 0);
    for (int d = 0; d < 4; d++) OK(hcq_exec_item_run(&after[d].item, NULL, 0));
    world_run_eager(&w, after, 4, NULL, NULL, 0, NULL, 0);
    world_compare(&w, "eager, two replays, eager");
  }
  OK(hcq_jit_destroy(j1));
  OK(hcq_jit_destroy(j2));
  world_close(&w);
}

/* Counts the warnings about unused inputs. */
static void count_warning(void *ctx, const char *message) {
  if (strstr(message, "is used by no captured item")) ++*(size_t *)ctx;
}

Test(jit, randomized_capture_fuzz, .timeout = 300) {
  uint32_t seed = 777;
  world_vars_t v;
  world_vars_open(&v);
  for (int round = 0; round < 16; round++) {
    world_t w;
    world_random_t rw;
    world_random(&w, &seed, &v, &rw);
    hcq_var_value_t init[] = {{v.n, 64}, {v.k, 1}};
    /* Random inputs need not be used by a random item list: that is a warning here. */
    size_t warnings = 0;
    hcq_jit_options_t opts = {.first_batch_size = 1 + world_rand(&seed) % 8,
                              .allow_unused_inputs = true,
                              .on_warning = count_warning,
                              .warning_ctx = &warnings};
    hcq_jit_t *jit = capture(&w, rw.items, rw.nitems, rw.inputs, rw.ninputs, init, 2, &opts);
    size_t unused = 0;
    for (int k = 0; k < rw.ninputs; k++) {
      bool used = false;
      for (int j = 0; j < rw.nitems && !used; j++) {
        const hcq_exec_item_t *it = &rw.items[j].item;
        if (it->kind == HCQ_ITEM_TRANSFER)
          used = it->transfer.dst == w.buf[rw.inputs[k]] || it->transfer.src == w.buf[rw.inputs[k]];
        for (size_t i = 0; it->kind == HCQ_ITEM_KERNEL && i < it->kernel.nbufs; i++)
          used |= it->kernel.bufs[i] == w.buf[rw.inputs[k]];
      }
      unused += !used;
    }
    cr_assert_eq(hcq_jit_report(jit)->unused_inputs, unused, "%s", hcq_jit_report(jit)->text);
    cr_assert_eq(warnings, unused ? 1 : 0, "one warning for the unused inputs: %s",
                 hcq_jit_report(jit)->text);
    for (int r = 0; r < 5; r++) {
      int swaps[WORLD_MAX_DEVS];
      hcq_var_value_t vals[2];
      world_random_replay(&rw, &seed, &v, swaps, vals);
      char what[96];
      snprintf(what, sizeof(what), "capture fuzz round %d (%d items) replay %d", round, rw.nitems,
               r);
      replay(&w, jit, rw.items, rw.nitems, rw.inputs, swaps, rw.ninputs, vals, 2, seed % 2, what);
    }
    OK(hcq_jit_destroy(jit));
    world_close(&w);
  }
  world_vars_close(&v);
}

/* ---- captures that record less than the code did ---- */

typedef struct warnings {
  int n;
  char text[8][512];
} warnings_t;

static void keep_warning(void *ctx, const char *message) {
  warnings_t *w = ctx;
  if (w->n < 8) snprintf(w->text[w->n], sizeof(w->text[0]), "%s", message);
  w->n++;
}

/* An input no captured item holds would make replays swap nothing: an error naming it, or a
 * warning when the options allow it. A view of the input is not the input. */
Test(jit, capture_input_that_no_item_uses_is_an_error_or_a_warning) {
  hcq_device_t *d = test_open("CPU:0");
  hcq_program_t *p = test_program(d, "mul_add", test_kernels_source);
  hcq_buffer_t *x = test_buffer_iota(d, 64, 1, 0), *y = test_buffer_iota(d, 64, 1, 0), *view = NULL;
  OK(hcq_buffer_view_create(y, 0, 128, &view));
  hcq_buffer_set_label(x, "x");
  hcq_buffer_set_label(y, "y");
  int32_t v[] = {2, 1, 32};
  hcq_launch_desc_t lx = {p, &x, 1, v, 3, {1, 1, 1}, {64, 1, 1}, NULL, 0};
  hcq_launch_desc_t lv = {p, &view, 1, v, 3, {1, 1, 1}, {64, 1, 1}, NULL, 0};
  hcq_buffer_t *inputs[] = {x, y};
  for (int allow = 0; allow < 2; allow++) {
    hcq_capture_t *c = NULL;
    OK(hcq_capture_begin(&c));
    OK(hcq_launch(&lx));
    OK(hcq_launch(&lv));
    warnings_t w = {0};
    hcq_jit_options_t opts = {
        .allow_unused_inputs = allow, .on_warning = keep_warning, .warning_ctx = &w};
    hcq_jit_t *jit = NULL;
    if (!allow) {
      FAILS(hcq_capture_end(c, inputs, 2, NULL, 0, &opts, &jit), HCQ_INVALID_ARGUMENT,
            "input 1 (buffer \"y\")", "used by no captured item", "allow_unused_inputs");
      cr_assert_null(jit);
      continue;
    }
    OK(hcq_capture_end(c, inputs, 2, NULL, 0, &opts, &jit));
    cr_assert_eq(w.n, 1, "one warning");
    cr_assert(strstr(w.text[0], "input 1 (buffer \"y\") is used by no captured item"), "%s",
              w.text[0]);
    const hcq_jit_report_t *rep = hcq_jit_report(jit);
    cr_assert_eq(rep->unused_inputs, 1);
    cr_assert(strstr(rep->text, "input 1 (buffer \"y\")"), "%s", rep->text);
    OK(hcq_jit_run(jit, inputs, 2, NULL, 0, true, NULL));
    OK(hcq_jit_destroy(jit));
  }
  /* Inputs the items hold are fine: no warning. */
  hcq_capture_t *c = NULL;
  OK(hcq_capture_begin(&c));
  OK(hcq_launch(&lx));
  OK(hcq_launch(&lv));
  warnings_t w = {0};
  hcq_jit_options_t opts = {.on_warning = keep_warning, .warning_ctx = &w};
  hcq_buffer_t *held[] = {x, view};
  hcq_jit_t *jit = NULL;
  OK(hcq_capture_end(c, held, 2, NULL, 0, &opts, &jit));
  cr_assert_eq(w.n, 0, "%s", w.text[0]);
  OK(hcq_jit_destroy(jit));
  hcq_buffer_release(view);
  hcq_buffer_release(x);
  hcq_buffer_release(y);
  hcq_program_release(p);
  test_close(d);
}

/* Host copies inside a capture are a warning on the warning channel (once per capture, naming the
 * first copy), not only a line of the report. */
Test(jit, capture_host_copies_are_a_warning) {
  hcq_device_t *d = test_open("CPU:0");
  hcq_program_t *p = test_program(d, "mul_add", test_kernels_source);
  hcq_buffer_t *x = test_buffer_iota(d, 64, 1, 0);
  hcq_buffer_set_label(x, "weights");
  int32_t v[] = {2, 1, 64}, host[64];
  hcq_launch_desc_t l = {p, &x, 1, v, 3, {1, 1, 1}, {64, 1, 1}, NULL, 0};
  hcq_capture_t *c = NULL;
  OK(hcq_capture_begin(&c));
  OK(hcq_launch(&l));
  OK(hcq_buffer_copyout(x, 0, host, 16));
  OK(hcq_buffer_copyin(x, 0, host, 8));
  OK(hcq_launch(&l));
  warnings_t w = {0};
  hcq_jit_options_t opts = {.on_warning = keep_warning, .warning_ctx = &w};
  hcq_jit_t *jit = NULL;
  OK(hcq_capture_end(c, NULL, 0, NULL, 0, &opts, &jit));
  cr_assert_eq(w.n, 1, "one warning for the capture's host copies");
  cr_assert(
      strstr(
          w.text[0],
          "2 host copies ran once during the capture and were not recorded (first: copyout of 16 "
          "bytes from weights, after item 1)"),
      "%s", w.text[0]);
  cr_assert_eq(hcq_jit_report(jit)->host_copies, 2);
  cr_assert(strstr(hcq_jit_report(jit)->text, w.text[0]), "the warning is a report line too");
  OK(hcq_jit_destroy(jit));
  hcq_buffer_release(x);
  hcq_program_release(p);
  test_close(d);
}

typedef struct other_thread {
  hcq_program_t *p;
  hcq_buffer_t *on_captured, *elsewhere;
  hcq_graph_t *graph;
} other_thread_t;

static void *other_thread_work(void *arg) {
  other_thread_t *o = arg;
  int32_t v[] = {3, 0, 64};
  hcq_launch_desc_t l0 = {o->p, &o->on_captured, 1, v, 3, {1, 1, 1}, {64, 1, 1}, NULL, 0};
  OK(hcq_launch(&l0));
  OK(hcq_graph_run(o->graph, NULL, 0, NULL, 0, true, NULL));
  OK(hcq_buffer_copyin(o->elsewhere, 0, v, sizeof(v))); /* on a device the capture does not use */
  return NULL;
}

/* Work another thread does, while a capture is open, on a device the captured items use is not in
 * the capture: its end warns, per device, with the count and the first operation. */
Test(jit, capture_warns_about_other_threads_work_on_its_devices) {
  hcq_device_t *d = test_open("CPU:0"), *d1 = test_open("CPU:1");
  hcq_program_t *p = test_program(d, "mul_add", test_kernels_source);
  hcq_buffer_t *x = test_buffer_iota(d, 64, 1, 0), *z = test_buffer_iota(d, 64, 1, 0),
               *far = test_buffer(d1, 256);
  int32_t v[] = {2, 1, 64};
  hcq_launch_desc_t l = {p, &x, 1, v, 3, {1, 1, 1}, {64, 1, 1}, NULL, 0};
  hcq_operand_t ov[] = {hcq_imm(1), hcq_imm(1), hcq_imm(64)};
  hcq_exec_item_t gi[2] = {
      {.kind = HCQ_ITEM_KERNEL,
       .kernel = {p, &z, 1, NULL, 0, ov, 3, {I(1), I(1), I(1)}, {I(64), I(1), I(1)}}},
      {.kind = HCQ_ITEM_KERNEL,
       .kernel = {p, &z, 1, NULL, 0, ov, 3, {I(1), I(1), I(1)}, {I(64), I(1), I(1)}}}};
  hcq_graph_t *g = NULL;
  OK(hcq_graph_create(gi, 2, NULL, 0, NULL, 0, NULL, &g));
  hcq_capture_t *c = NULL;
  OK(hcq_capture_begin(&c));
  OK(hcq_launch(&l));
  other_thread_t o = {p, z, far, g};
  pthread_t t;
  cr_assert_eq(pthread_create(&t, NULL, other_thread_work, &o), 0);
  pthread_join(t, NULL);
  OK(hcq_launch(&l));
  warnings_t w = {0};
  hcq_jit_options_t opts = {.on_warning = keep_warning, .warning_ctx = &w};
  hcq_jit_t *jit = NULL;
  OK(hcq_capture_end(c, NULL, 0, NULL, 0, &opts, &jit));
  cr_assert_eq(w.n, 1, "one warning, for CPU:0 only: %s", w.text[0]);
  cr_assert(strstr(w.text[0], "other threads did 2 operations on CPU:0"), "%s", w.text[0]);
  cr_assert(strstr(w.text[0], "(first: launch of mul_add)"), "%s", w.text[0]);
  cr_assert_eq(hcq_jit_report(jit)->other_thread_work, 2);
  OK(hcq_jit_destroy(jit));
  /* Once the capture ended, other threads' work is nobody's business. */
  hcq_capture_t *c2 = NULL;
  OK(hcq_capture_begin(&c2));
  hcq_capture_abort(c2);
  cr_assert_eq(pthread_create(&t, NULL, other_thread_work, &o), 0);
  pthread_join(t, NULL);
  OK(hcq_graph_destroy(g));
  hcq_buffer_release(x);
  hcq_buffer_release(z);
  hcq_buffer_release(far);
  hcq_program_release(p);
  test_close(d);
  test_close(d1);
}

/* The one outs rule through a capture: hcq_launch and hcq_launch_sym with an empty outs array are
 * recorded as writing nothing, and without one as writing every buffer. */
Test(jit, capture_keeps_an_empty_outs_array) {
  hcq_device_t *d = test_open("CPU:0");
  hcq_program_t *p = test_program(d, "add_scalar", test_kernels_source);
  hcq_buffer_t *x = test_buffer_iota(d, 64, 1, 0), *y = test_buffer(d, 256);
  hcq_buffer_t *bufs[] = {y, x};
  static const uint32_t none[1];
  int32_t v[] = {1, 0};
  hcq_operand_t sv[] = {hcq_imm(1), hcq_imm(0)};
  hcq_launch_desc_t quiet = {p, bufs, 2, v, 2, {1, 1, 1}, {64, 1, 1}, none, 0};
  hcq_launch_desc_t all = {p, bufs, 2, v, 2, {1, 1, 1}, {64, 1, 1}, NULL, 0};
  hcq_launch_sym_desc_t quiet_sym = {p,    bufs, 2, sv, 2, {I(1), I(1), I(1)}, {I(64), I(1), I(1)},
                                     none, 0};
  hcq_capture_t *c = NULL;
  OK(hcq_capture_begin(&c));
  OK(hcq_launch(&quiet));
  OK(hcq_launch(&all));
  OK(hcq_launch_sym(&quiet_sym, NULL, 0));
  hcq_jit_t *jit = NULL;
  OK(hcq_capture_end(c, NULL, 0, NULL, 0, NULL, &jit));
  for (size_t i = 0; i < 3; i += 2) {
    cr_assert_not_null(hcq_jit_item(jit, i)->kernel.outs, "item %zu writes nothing: an outs array",
                       i);
    cr_assert_eq(hcq_jit_item(jit, i)->kernel.nouts, 0, "item %zu", i);
  }
  cr_assert_eq(hcq_jit_item(jit, 1)->kernel.nouts, 2, "no outs array: every buffer, listed");
  OK(hcq_jit_destroy(jit));
  hcq_buffer_release(x);
  hcq_buffer_release(y);
  hcq_program_release(p);
  test_close(d);
}
