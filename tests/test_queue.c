/* Queues with symbolic patch points, submitted to CPU devices. Every test submits at least twice
 * with different variable values. */
#include <stdlib.h>
#include <string.h>

#include "core/command.h"
#include "core/queue.h"
#include "test_util.h"

static hcq_device_t *dev, *dev1;
static void setup(void) {
  dev = test_open("CPU:0");
  dev1 = test_open("CPU:1");
}
static void teardown(void) {
  test_close(dev1);
  test_close(dev);
}

TestSuite(queue, .init = setup, .fini = teardown, .timeout = 120);

static hcq_expr_t *var(const char *name, int64_t lo, int64_t hi) {
  hcq_expr_t *v = NULL;
  OK(hcq_var_create(name, lo, hi, &v));
  return v;
}

static hcq_expr_t *parse(const char *text, const hcq_expr_t *const *vars, size_t n) {
  hcq_expr_t *e = NULL;
  OK(hcq_expr_parse(text, vars, n, &e));
  return e;
}

static hcq_signal_t *signal_on(hcq_device_t *d, const char *name) {
  hcq_signal_t *s = NULL;
  OK(hcq_signal_create(d, name, 0, &s));
  return s;
}

static hcq_operand_t addr_of(hcq_signal_t *s) { return hcq_imm((int64_t)hcq_signal_address(s)); }

Test(queue, symbolic_signal_value_resubmitted) {
  for (int kind = 0; kind < 2; kind++) {
    hcq_expr_t *v = var("v", 0, 1000);
    hcq_signal_t *s = signal_on(dev, "out");
    hcq_queue_t *q = NULL;
    OK(hcq_queue_create(kind ? HCQ_QUEUE_COPY : HCQ_QUEUE_COMPUTE, &q));
    OK(hcq_queue_signal(q, addr_of(s), hcq_sym(v)));
    cr_assert_eq(hcq_queue_patch_count(q), 1);
    int64_t values[] = {5, 9, 9, 1000, 3};
    for (size_t i = 0; i < sizeof(values) / sizeof(values[0]); i++) {
      hcq_var_value_t vals[] = {{v, values[i]}};
      OK(hcq_queue_submit(q, dev, vals, 1));
      if (i + 1 < sizeof(values) / sizeof(values[0]) && values[i] < 1000)
        OK(hcq_signal_wait(s, (uint64_t)values[i], 5000));
    }
    OK(hcq_device_synchronize(dev));
    /* In-order queue: after the last submit has run, the value is the last one written. */
    uint64_t deadline_spins = 0;
    while (hcq_signal_value(s) != 3 && deadline_spins++ < 100000000) {}
    cr_assert_eq(hcq_signal_value(s), 3);
    hcq_queue_destroy(q);
    hcq_signal_destroy(s);
    hcq_expr_release(v);
  }
}

Test(queue, wait_and_signal_chain_orders_work) {
  hcq_expr_t *k = var("k", 0, 1 << 20);
  hcq_expr_t *k1 = parse("k+1", (const hcq_expr_t *const[]){k}, 1);
  hcq_signal_t *go = signal_on(dev, "go"), *done = signal_on(dev, "done");
  hcq_queue_t *q = NULL;
  OK(hcq_queue_create(HCQ_QUEUE_COMPUTE, &q));
  OK(hcq_queue_wait(q, addr_of(go), hcq_sym(k)));
  OK(hcq_queue_signal(q, addr_of(done), hcq_sym(k1)));
  cr_assert_eq(hcq_queue_symbol_count(q), 2);
  for (int64_t round = 1; round <= 20; round++) {
    hcq_var_value_t vals[] = {{k, round}};
    OK(hcq_queue_submit(q, dev, vals, 1));
    /* Nothing may pass the wait before go reaches round. */
    cr_assert_lt(hcq_signal_value(done), (uint64_t)round + 1);
    hcq_signal_set(go, (uint64_t)round);
    OK(hcq_signal_wait(done, (uint64_t)round + 1, 5000));
  }
  hcq_queue_destroy(q);
  hcq_signal_destroy(go);
  hcq_signal_destroy(done);
  hcq_expr_release(k1);
  hcq_expr_release(k);
}

/* One compute queue: add_scalar(out, a; k, n) over (n+63)//64 groups of 64, then signal(done, r).
 * Resubmitted with random n and k and compared against a plain C model of the buffers. */
Test(queue, symbolic_kernel_args_and_dims_fuzz) {
  enum { N = 4096 };
  hcq_program_t *prog = test_program(dev, "add_scalar", test_kernels_source);
  hcq_buffer_t *a = test_buffer_iota(dev, N, 3, -7), *out = test_buffer(dev, N * 4),
               *args = test_buffer(dev, 64);
  hcq_expr_t *n = var("n", 1, N), *k = var("k", INT32_MIN, INT32_MAX), *r = var("r", 0, 1 << 30);
  const hcq_expr_t *vars[] = {n, k, r};
  hcq_expr_t *groups = parse("(n+63)//64", vars, 3);
  hcq_signal_t *done = signal_on(dev, "done");

  hcq_queue_t *q = NULL;
  OK(hcq_queue_create(HCQ_QUEUE_COMPUTE, &q));
  hcq_operand_t bufs[] = {hcq_imm((int64_t)hcq_buffer_address(out)),
                          hcq_imm((int64_t)hcq_buffer_address(a))};
  hcq_operand_t vals[] = {hcq_sym(k), hcq_sym(n)};
  OK(hcq_queue_kernargs(q, args, 0, bufs, 2, vals, 2));
  hcq_operand_t global[3] = {hcq_sym(groups), hcq_imm(1), hcq_imm(1)},
                local[3] = {hcq_imm(64), hcq_imm(1), hcq_imm(1)};
  OK(hcq_queue_exec(q, prog, hcq_imm((int64_t)hcq_buffer_address(args)), 2, global, local));
  OK(hcq_queue_signal(q, addr_of(done), hcq_sym(r)));

  int32_t *model = calloc(N, 4), *got = malloc(N * 4);
  srand(77);
  for (int round = 1; round <= 60; round++) {
    int64_t nv = round == 1 ? 1 : round == 2 ? N : rand() % N + 1;
    int64_t kv = round == 3   ? INT32_MIN
                 : round == 4 ? INT32_MAX
                              : (int64_t)(rand() % 2000001) - 1000000;
    hcq_var_value_t vv[] = {{r, round}, {k, kv}, {n, nv}};
    OK(hcq_queue_submit(q, dev, vv, 3));
    OK(hcq_signal_wait(done, (uint64_t)round, 5000));
    for (int64_t i = 0; i < nv; i++) model[i] = (int32_t)((uint32_t)(i * 3 - 7) + (uint32_t)kv);
    test_read(out, got, N * 4);
    for (int i = 0; i < N; i++)
      if (got[i] != model[i])
        cr_log_error("round %d: word %d is %d, want %d", round, i, got[i], model[i]);
    cr_assert_arr_eq(got, model, N * 4,
                     "round %d (n=%ld k=%ld): output differs from the C reference", round, (long)nv,
                     (long)kv);
  }
  free(model);
  free(got);
  hcq_queue_destroy(q);
  hcq_signal_destroy(done);
  hcq_expr_release(groups);
  hcq_expr_release(n);
  hcq_expr_release(k);
  hcq_expr_release(r);
  hcq_buffer_release(a);
  hcq_buffer_release(out);
  hcq_buffer_release(args);
  hcq_program_release(prog);
}

Test(queue, copy_with_symbolic_addresses_and_size) {
  enum { N = 1024, NBUF = 4 };
  hcq_buffer_t *bufs[NBUF];
  for (int i = 0; i < NBUF; i++) bufs[i] = test_buffer_iota(dev, N, 1, i * 100000);
  hcq_expr_t *dst = var("dst", 0, INT64_MAX), *src = var("src", 0, INT64_MAX),
             *sz = var("sz", 0, N * 4);
  hcq_signal_t *done = signal_on(dev, "copied");
  hcq_queue_t *q = NULL;
  OK(hcq_queue_create(HCQ_QUEUE_COPY, &q));
  OK(hcq_queue_copy(q, hcq_sym(dst), hcq_sym(src), hcq_sym(sz)));
  hcq_expr_t *r = var("r", 0, 1000);
  OK(hcq_queue_signal(q, addr_of(done), hcq_sym(r)));
  int32_t model[NBUF][N], got[N];
  for (int i = 0; i < NBUF; i++)
    for (int j = 0; j < N; j++) model[i][j] = j + i * 100000;
  srand(5);
  for (int round = 1; round <= 40; round++) {
    int d = rand() % NBUF, s = (d + 1 + rand() % (NBUF - 1)) % NBUF;
    int64_t bytes = (rand() % N) * 4;
    hcq_var_value_t vals[] = {{dst, (int64_t)hcq_buffer_address(bufs[d])},
                              {src, (int64_t)hcq_buffer_address(bufs[s])},
                              {sz, bytes},
                              {r, round}};
    OK(hcq_queue_submit(q, dev, vals, 4));
    OK(hcq_signal_wait(done, (uint64_t)round, 5000));
    memcpy(model[d], model[s], (size_t)bytes);
  }
  for (int i = 0; i < NBUF; i++) {
    test_read(bufs[i], got, sizeof(got));
    cr_assert_arr_eq(got, model[i], sizeof(got), "buffer %d", i);
    hcq_buffer_release(bufs[i]);
  }
  hcq_queue_destroy(q);
  hcq_signal_destroy(done);
  hcq_expr_release(dst);
  hcq_expr_release(src);
  hcq_expr_release(sz);
  hcq_expr_release(r);
}

/* White box: a bound queue's words live in device memory; a submit rewrites a patch point only when
 * its symbol's value changed. A word we scribble over survives a submit with unchanged values. */
Test(queue, bind_patches_only_changed_words) {
  hcq_expr_t *a = var("a", 0, 1000), *b = var("b", 0, 1000);
  hcq_signal_t *s1 = signal_on(dev, "s1"), *s2 = signal_on(dev, "s2");
  hcq_queue_t *q = NULL;
  OK(hcq_queue_create(HCQ_QUEUE_COMPUTE, &q));
  OK(hcq_queue_signal(q, addr_of(s1), hcq_sym(a)));
  OK(hcq_queue_signal(q, addr_of(s2), hcq_sym(b)));
  OK(hcq_queue_bind(q, dev));
  FAILS(hcq_queue_memory_barrier(q), HCQ_FAILED_PRECONDITION, "bound to CPU:0");
  FAILS(hcq_queue_bind(q, dev), HCQ_FAILED_PRECONDITION, "already bound");
  uint32_t *words = q->bound.host;
  const size_t a_word = HCQ__SIGNAL_VALUE, b_word = HCQ__LEN_SIGNAL + HCQ__SIGNAL_VALUE;

  hcq_var_value_t v1[] = {{a, 1}, {b, 2}};
  OK(hcq_queue_submit(q, dev, v1, 2));
  OK(hcq_signal_wait(s2, 2, 5000));
  cr_assert_eq(words[a_word], 1);
  cr_assert_eq(words[b_word], 2);
  cr_assert_eq(hcq_queue_word(q, b_word), 2);

  /* Scribble on a's word, then submit with a unchanged and b changed. */
  words[a_word] = 7;
  hcq_var_value_t v2[] = {{a, 1}, {b, 3}};
  OK(hcq_queue_submit(q, dev, v2, 2));
  OK(hcq_signal_wait(s2, 3, 5000));
  cr_assert_eq(words[a_word], 7, "an unchanged symbol's word was rewritten");
  cr_assert_eq(words[b_word], 3);
  cr_assert_eq(hcq_signal_value(s1), 7, "the bound words ran as they are in device memory");

  hcq_var_value_t v3[] = {{a, 4}, {b, 5}};
  OK(hcq_queue_submit(q, dev, v3, 2));
  OK(hcq_signal_wait(s2, 5, 5000));
  cr_assert_eq(words[a_word], 4);
  cr_assert_eq(hcq_signal_value(s1), 4);

  FAILS(hcq_queue_submit(q, dev1, v3, 2), HCQ_INVALID_ARGUMENT, "bound to CPU:0, not CPU:1");
  hcq_queue_destroy(q);
  hcq_signal_destroy(s1);
  hcq_signal_destroy(s2);
  hcq_expr_release(a);
  hcq_expr_release(b);
}

Test(queue, bound_queue_reruns_kernel_many_times) {
  hcq_program_t *prog = test_program(dev, "mul_add", test_kernels_source);
  hcq_buffer_t *x = test_buffer_iota(dev, 256, 1, 0), *args = test_buffer(dev, 64);
  hcq_expr_t *m = var("m", 0, 100), *r = var("r", 0, 1000);
  hcq_signal_t *done = signal_on(dev, "done");
  hcq_queue_t *q = NULL;
  OK(hcq_queue_create(HCQ_QUEUE_COMPUTE, &q));
  hcq_operand_t bufs[] = {hcq_imm((int64_t)hcq_buffer_address(x))};
  hcq_operand_t vals[] = {hcq_sym(m), hcq_imm(1), hcq_imm(256)};
  OK(hcq_queue_kernargs(q, args, 0, bufs, 1, vals, 3));
  hcq_operand_t g[3] = {hcq_imm(4), hcq_imm(1), hcq_imm(1)},
                l[3] = {hcq_imm(64), hcq_imm(1), hcq_imm(1)};
  OK(hcq_queue_exec(q, prog, hcq_imm((int64_t)hcq_buffer_address(args)), 1, g, l));
  OK(hcq_queue_signal(q, addr_of(done), hcq_sym(r)));
  OK(hcq_queue_bind(q, dev));
  uint32_t model[256];
  for (int i = 0; i < 256; i++) model[i] = (uint32_t)i;
  for (int round = 1; round <= 50; round++) {
    int64_t mv = round % 3 + 1;
    hcq_var_value_t vv[] = {{m, mv}, {r, round}};
    OK(hcq_queue_submit(q, dev, vv, 2));
    OK(hcq_signal_wait(done, (uint64_t)round, 5000));
    for (int i = 0; i < 256; i++) model[i] = model[i] * (uint32_t)mv + 1;
  }
  uint32_t got[256];
  test_read(x, got, sizeof(got));
  cr_assert_arr_eq(got, model, sizeof(got));
  hcq_queue_destroy(q);
  hcq_signal_destroy(done);
  hcq_expr_release(m);
  hcq_expr_release(r);
  hcq_buffer_release(x);
  hcq_buffer_release(args);
  hcq_program_release(prog);
}

/* A queue on CPU:1 waits for a signal of CPU:0; nothing runs before CPU:0's queue sets it. */
Test(queue, wait_on_another_devices_signal) {
  hcq_program_t *fill = test_program(dev1, "fill", test_kernels_source);
  hcq_buffer_t *out = test_buffer(dev1, 64 * 4), *args = test_buffer(dev1, 64);
  hcq_signal_t *gate = signal_on(dev, "gate on CPU:0"), *done = signal_on(dev1, "done on CPU:1");
  hcq_expr_t *v = var("v", 0, 1 << 20);
  hcq_queue_t *waiter = NULL, *setter = NULL;
  OK(hcq_queue_create(HCQ_QUEUE_COMPUTE, &waiter));
  OK(hcq_queue_create(HCQ_QUEUE_COPY, &setter));
  hcq_operand_t bufs[] = {hcq_imm((int64_t)hcq_buffer_address(out))},
                vals[] = {hcq_sym(v), hcq_imm(64)};
  OK(hcq_queue_kernargs(waiter, args, 0, bufs, 1, vals, 2));
  hcq_operand_t g[3] = {hcq_imm(1), hcq_imm(1), hcq_imm(1)},
                l[3] = {hcq_imm(64), hcq_imm(1), hcq_imm(1)};
  OK(hcq_queue_wait(waiter, addr_of(gate), hcq_sym(v)));
  OK(hcq_queue_exec(waiter, fill, hcq_imm((int64_t)hcq_buffer_address(args)), 1, g, l));
  OK(hcq_queue_signal(waiter, addr_of(done), hcq_sym(v)));
  OK(hcq_queue_signal(setter, addr_of(gate), hcq_sym(v)));
  for (int64_t round = 1; round <= 5; round++) {
    hcq_var_value_t vv[] = {{v, round * 11}};
    OK(hcq_queue_submit(waiter, dev1, vv, 1));
    usleep(2000);
    cr_assert_lt(hcq_signal_value(done), (uint64_t)round * 11, "CPU:1 ran before CPU:0 signalled");
    OK(hcq_queue_submit(setter, dev, vv, 1));
    OK(hcq_signal_wait(done, (uint64_t)round * 11, 5000));
    int32_t got[64];
    test_read(out, got, sizeof(got));
    for (int i = 0; i < 64; i++) cr_assert_eq(got[i], round * 11);
  }
  hcq_queue_destroy(waiter);
  hcq_queue_destroy(setter);
  hcq_signal_destroy(gate);
  hcq_signal_destroy(done);
  hcq_expr_release(v);
  hcq_buffer_release(out);
  hcq_buffer_release(args);
  hcq_program_release(fill);
}

/* The compute queue writes with a kernel, issues a memory barrier and signals; the copy queue waits
 * for that signal and copies what the kernel wrote. */
Test(queue, memory_barrier_before_copy) {
  enum { N = 4096 };
  hcq_program_t *fill = test_program(dev, "fill", test_kernels_source);
  hcq_buffer_t *src = test_buffer(dev, N * 4), *dst = test_buffer(dev, N * 4),
               *args = test_buffer(dev, 64);
  hcq_signal_t *written = signal_on(dev, "written"), *copied = signal_on(dev, "copied");
  hcq_expr_t *r = var("r", 0, 1000);
  hcq_queue_t *cq = NULL, *xq = NULL;
  OK(hcq_queue_create(HCQ_QUEUE_COMPUTE, &cq));
  OK(hcq_queue_create(HCQ_QUEUE_COPY, &xq));
  hcq_operand_t bufs[] = {hcq_imm((int64_t)hcq_buffer_address(src))},
                vals[] = {hcq_sym(r), hcq_imm(N)};
  OK(hcq_queue_kernargs(cq, args, 0, bufs, 1, vals, 2));
  hcq_operand_t g[3] = {hcq_imm(N / 256), hcq_imm(1), hcq_imm(1)},
                l[3] = {hcq_imm(256), hcq_imm(1), hcq_imm(1)};
  OK(hcq_queue_exec(cq, fill, hcq_imm((int64_t)hcq_buffer_address(args)), 1, g, l));
  OK(hcq_queue_memory_barrier(cq));
  OK(hcq_queue_signal(cq, addr_of(written), hcq_sym(r)));
  OK(hcq_queue_wait(xq, addr_of(written), hcq_sym(r)));
  OK(hcq_queue_copy(xq, hcq_imm((int64_t)hcq_buffer_address(dst)),
                    hcq_imm((int64_t)hcq_buffer_address(src)), hcq_imm(N * 4)));
  OK(hcq_queue_signal(xq, addr_of(copied), hcq_sym(r)));
  for (int64_t round = 1; round <= 10; round++) {
    hcq_var_value_t vv[] = {{r, round}};
    OK(hcq_queue_submit(xq, dev, vv, 1)); /* the copy is queued first and must wait */
    OK(hcq_queue_submit(cq, dev, vv, 1));
    OK(hcq_signal_wait(copied, (uint64_t)round, 5000));
    int32_t *got = malloc(N * 4);
    test_read(dst, got, N * 4);
    for (int i = 0; i < N; i++) cr_assert_eq(got[i], round, "round %ld word %d", (long)round, i);
    free(got);
  }
  hcq_queue_destroy(cq);
  hcq_queue_destroy(xq);
  hcq_signal_destroy(written);
  hcq_signal_destroy(copied);
  hcq_expr_release(r);
  hcq_buffer_release(src);
  hcq_buffer_release(dst);
  hcq_buffer_release(args);
  hcq_program_release(fill);
}

Test(queue, timestamps_move_forward) {
  hcq_signal_t *t1 = signal_on(dev, "t1"), *t2 = signal_on(dev, "t2"),
               *done = signal_on(dev, "done");
  hcq_expr_t *r = var("r", 0, 100);
  hcq_queue_t *q = NULL;
  OK(hcq_queue_create(HCQ_QUEUE_COMPUTE, &q));
  OK(hcq_queue_timestamp(q, addr_of(t1)));
  OK(hcq_queue_timestamp(q, addr_of(t2)));
  OK(hcq_queue_signal(q, addr_of(done), hcq_sym(r)));
  uint64_t last = 0;
  for (int64_t round = 1; round <= 3; round++) {
    hcq_var_value_t vv[] = {{r, round}};
    OK(hcq_queue_submit(q, dev, vv, 1));
    OK(hcq_signal_wait(done, (uint64_t)round, 5000));
    uint64_t a = hcq_signal_timestamp(t1), b = hcq_signal_timestamp(t2);
    cr_assert_gt(a, last);
    cr_assert_geq(b, a);
    last = b;
  }
  hcq_queue_destroy(q);
  hcq_signal_destroy(t1);
  hcq_signal_destroy(t2);
  hcq_signal_destroy(done);
  hcq_expr_release(r);
}

Test(queue, submit_is_all_or_nothing) {
  hcq_expr_t *a = var("a", 0, 10), *big = var("big", 0, INT64_MAX);
  hcq_signal_t *s = signal_on(dev, "s");
  hcq_queue_t *q = NULL;
  OK(hcq_queue_create(HCQ_QUEUE_COMPUTE, &q));
  OK(hcq_queue_signal(q, addr_of(s), hcq_sym(a)));
  OK(hcq_queue_signal(q, addr_of(s), hcq_sym(big))); /* 32-bit value field */
  hcq_var_value_t ok[] = {{a, 1}, {big, 2}};
  OK(hcq_queue_submit(q, dev, ok, 2));
  OK(hcq_signal_wait(s, 2, 5000));
  hcq_var_value_t too_big[] = {{a, 3}, {big, INT64_C(1) << 40}};
  FAILS(hcq_queue_submit(q, dev, too_big, 2), HCQ_OUT_OF_RANGE, "big", "does not fit");
  cr_assert_eq(hcq_queue_word(q, HCQ__SIGNAL_VALUE), 1, "a failed submit patched a word");
  hcq_var_value_t out_of_range[] = {{a, 11}, {big, 4}};
  FAILS(hcq_queue_submit(q, dev, out_of_range, 2), HCQ_OUT_OF_RANGE, "variable a = 11");
  FAILS(hcq_queue_submit(q, dev, ok, 1), HCQ_NOT_FOUND, "variable big has no value");
  hcq_var_value_t again[] = {{a, 5}, {big, 6}};
  OK(hcq_queue_submit(q, dev, again, 2));
  OK(hcq_signal_wait(s, 6, 5000));
  hcq_queue_destroy(q);
  hcq_signal_destroy(s);
  hcq_expr_release(a);
  hcq_expr_release(big);
}
