/* hcq benchmarks: prints a table of medians over repetitions. Nothing here asserts a time. */
#include <string.h>

#include "bench.h"

void bench_empty_kernel(void *const *bufs, const int32_t *vals, const hcq_launch_t *l) {
  (void)bufs, (void)vals, (void)l;
}

/* Host time of hcq_launch alone, the device draining in the background. */
static void bench_eager_launch(hcq_device_t *dev, hcq_program_t *prog, hcq_buffer_t *buf) {
  enum { N = 20000 };
  double host[REPS], per_item[REPS];
  hcq_launch_desc_t l = {prog, &buf, 1, NULL, 0, {1, 1, 1}, {1, 1, 1}};
  for (int r = 0; r < REPS; r++) {
    CHECK(hcq_device_synchronize(dev));
    double t0 = now_ns();
    for (int i = 0; i < N; i++) CHECK(hcq_launch(&l));
    double t1 = now_ns();
    CHECK(hcq_device_synchronize(dev));
    double t2 = now_ns();
    host[r] = (t1 - t0) / N;
    per_item[r] = (t2 - t0) / N;
  }
  row("eager launch: host time per hcq_launch", median(host, REPS), "ns");
  row("eager launch: per item, 20000 queued back to back + sync", median(per_item, REPS), "ns");
}

/* Two bound queues on different engines pass a signal back and forth M times. */
static void bench_signal_round_trip(hcq_device_t *dev) {
  enum { M = 5000 };
  hcq_signal_t *ping, *pong;
  CHECK(hcq_signal_create(dev, "ping", 0, &ping));
  CHECK(hcq_signal_create(dev, "pong", 0, &pong));
  hcq_expr_t *base;
  CHECK(hcq_var_create("base", 0, 1 << 30, &base));
  hcq_queue_t *a, *b;
  CHECK(hcq_queue_create(HCQ_QUEUE_COMPUTE, &a));
  CHECK(hcq_queue_create(HCQ_QUEUE_COPY, &b));
  hcq_operand_t pi = hcq_imm((int64_t)hcq_signal_address(ping)),
                po = hcq_imm((int64_t)hcq_signal_address(pong));
  for (int i = 1; i <= M; i++) {
    hcq_expr_t *c = hcq_expr_const(i), *v = hcq_expr_binary(HCQ_EXPR_ADD, base, c);
    CHECK(hcq_queue_wait(a, pi, hcq_sym(v)));
    CHECK(hcq_queue_signal(a, po, hcq_sym(v)));
    CHECK(hcq_queue_signal(b, pi, hcq_sym(v)));
    CHECK(hcq_queue_wait(b, po, hcq_sym(v)));
    hcq_expr_release(c);
    hcq_expr_release(v);
  }
  hcq_signal_t *b_done;
  CHECK(hcq_signal_create(dev, "b done", 0, &b_done));
  hcq_expr_t *m = hcq_expr_const(M), *last = hcq_expr_binary(HCQ_EXPR_ADD, base, m);
  CHECK(hcq_queue_signal(b, hcq_imm((int64_t)hcq_signal_address(b_done)), hcq_sym(last)));
  hcq_expr_release(m);
  hcq_expr_release(last);
  CHECK(hcq_queue_bind(a, dev));
  CHECK(hcq_queue_bind(b, dev));
  double rt[REPS];
  for (int r = 0; r < REPS; r++) {
    hcq_var_value_t vals[] = {{base, (int64_t)r * M}};
    double t0 = now_ns();
    CHECK(hcq_queue_submit(a, dev, vals, 1));
    CHECK(hcq_queue_submit(b, dev, vals, 1));
    CHECK(hcq_signal_wait(pong, (uint64_t)(r + 1) * M, HCQ_TIMEOUT_DEFAULT));
    rt[r] = (now_ns() - t0) / M;
    /* b's last wait may not have run yet when pong is set, and the next submit patches b's words
     * in place: b must be done first (hcq/queue.h). */
    CHECK(hcq_signal_wait(b_done, (uint64_t)(r + 1) * M, HCQ_TIMEOUT_DEFAULT));
  }
  row("signal round trip between two queues (two hand-offs)", median(rt, REPS), "ns");
  hcq_queue_destroy(a);
  hcq_queue_destroy(b);
  hcq_expr_release(base);
  hcq_signal_destroy(ping);
  hcq_signal_destroy(pong);
  hcq_signal_destroy(b_done);
}

/* One bound compute queue of N empty one-group execs: the engine's per-command cost. */
static void bench_bound_chain(hcq_device_t *dev, hcq_program_t *prog, hcq_buffer_t *buf) {
  enum { N = 100000 };
  hcq_buffer_t *args;
  CHECK(hcq_buffer_create(dev, 16, &args));
  hcq_operand_t bufs[] = {hcq_imm((int64_t)hcq_buffer_address(buf))};
  hcq_signal_t *done;
  CHECK(hcq_signal_create(dev, "done", 0, &done));
  hcq_queue_t *q;
  CHECK(hcq_queue_create(HCQ_QUEUE_COMPUTE, &q));
  CHECK(hcq_queue_kernargs(q, args, 0, bufs, 1, NULL, 0));
  hcq_operand_t one[3] = {hcq_imm(1), hcq_imm(1), hcq_imm(1)};
  for (int i = 0; i < N; i++)
    CHECK(hcq_queue_exec(q, prog, hcq_imm((int64_t)hcq_buffer_address(args)), 1, one, one));
  hcq_expr_t *r;
  CHECK(hcq_var_create("r", 0, 1000, &r));
  CHECK(hcq_queue_signal(q, hcq_imm((int64_t)hcq_signal_address(done)), hcq_sym(r)));
  CHECK(hcq_queue_bind(q, dev));
  double per[REPS];
  for (int i = 0; i < REPS; i++) {
    hcq_var_value_t v[] = {{r, i + 1}};
    double t0 = now_ns();
    CHECK(hcq_queue_submit(q, dev, v, 1));
    CHECK(hcq_signal_wait(done, (uint64_t)i + 1, HCQ_TIMEOUT_DEFAULT));
    per[i] = (now_ns() - t0) / N;
  }
  row("bound queue of 100000 empty execs: device time per exec", median(per, REPS), "ns");
  hcq_queue_destroy(q);
  hcq_expr_release(r);
  hcq_signal_destroy(done);
  hcq_buffer_release(args);
}

/* The floor: a plain C loop of indirect calls over the same kernel. */
static void bench_plain_loop(void) {
  enum { N = 1000000 };
  void (*volatile fn)(void *const *, const int32_t *, const hcq_launch_t *) = bench_empty_kernel;
  hcq_launch_t l = {{0, 0, 0}, {1, 1, 1}, {1, 1, 1}};
  void *bufs[1] = {NULL};
  double per[REPS];
  for (int r = 0; r < REPS; r++) {
    double t0 = now_ns();
    for (int i = 0; i < N; i++) fn(bufs, NULL, &l);
    per[r] = (now_ns() - t0) / N;
  }
  row("plain C loop of indirect calls (reference)", median(per, REPS), "ns");
}

int bench_rows_mode;

int main(int argc, char **argv) {
  bench_rows_mode = argc > 1 && !strcmp(argv[1], "--rows");
  /* Measure with spinning workers (1 ms before they sleep), so that a sample does not depend on
   * whether an engine happened to fall asleep; HCQ_SPIN_NS set by the caller wins. */
  setenv("HCQ_SPIN_NS", "1000000", 0);
  hcq_device_t *dev;
  CHECK(hcq_device_open("CPU:0", &dev));
  hcq_program_t *prog;
  CHECK(hcq_program_create_fn(dev, "empty", bench_empty_kernel, &prog));
  hcq_buffer_t *buf;
  CHECK(hcq_buffer_create(dev, 64, &buf));
  if (!bench_rows_mode) {
    printf(
        "hcq benchmarks on CPU:0 (%u threads per device, HCQ_SPIN_NS=%s), medians over "
        "repetitions\n\n",
        hcq_device_thread_count(dev), getenv("HCQ_SPIN_NS"));
    printf("| %-58s | %12s | %-5s |\n", "measure", "median", "unit");
    printf("|%s|%s|%s|\n", "------------------------------------------------------------",
           "--------------", "-------");
  }
  bench_plain_loop();
  bench_eager_launch(dev, prog, buf);
  bench_signal_round_trip(dev);
  bench_bound_chain(dev, prog, buf);
  bench_graph(dev, prog);
  hcq_buffer_release(buf);
  hcq_program_release(prog);
  CHECK(hcq_device_close(dev));
  return 0;
}
