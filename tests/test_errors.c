/* Every error path of the public API: a status with a code and a message naming what is wrong, no
 * crash, and a device that still works afterwards. */
#include <stdlib.h>
#include <string.h>

#include "test_util.h"

TestSuite(errors, .timeout = 60);

/* After failures the device must still run work correctly. */
static void assert_device_works(hcq_device_t *d) {
  hcq_program_t *p = test_program(d, "add_scalar", test_kernels_source);
  hcq_buffer_t *a = test_buffer_iota(d, 64, 1, 0), *o = test_buffer(d, 256);
  hcq_buffer_t *bufs[] = {o, a};
  int32_t v[] = {10, 64};
  hcq_launch_desc_t l = {p, bufs, 2, v, 2, {1, 1, 1}, {64, 1, 1}};
  OK(hcq_launch(&l));
  int32_t got[64];
  test_read(o, got, sizeof(got));
  for (int i = 0; i < 64; i++) cr_assert_eq(got[i], i + 10);
  hcq_buffer_release(a);
  hcq_buffer_release(o);
  hcq_program_release(p);
}

Test(errors, device_open) {
  hcq_device_t *d = (hcq_device_t *)1;
  FAILS(hcq_device_open("GPU:0", &d), HCQ_NOT_FOUND, "unknown device \"GPU:0\"");
  cr_assert_null(d);
  FAILS(hcq_device_open("CPU:x", &d), HCQ_NOT_FOUND, "\"CPU:x\"", "index");
  FAILS(hcq_device_open("CPU:-1", &d), HCQ_NOT_FOUND, "\"CPU:-1\"");
  FAILS(hcq_device_open("CPU:", &d), HCQ_NOT_FOUND, "\"CPU:\"");
  FAILS(hcq_device_open("CPU:99999", &d), HCQ_NOT_FOUND, "\"CPU:99999\"");
  FAILS(hcq_device_open("", &d), HCQ_NOT_FOUND, "unknown device");
  FAILS(hcq_device_open(NULL, &d), HCQ_INVALID_ARGUMENT, "NULL");
  FAILS(hcq_device_open("CPU:0", NULL), HCQ_INVALID_ARGUMENT, "out_device");
  FAILS(hcq_device_open("METAL:0", &d), HCQ_UNAVAILABLE, "METAL:0", "Metal.framework not found",
        "macOS");
  hcq_status_t st = hcq_device_open("CUDA:0", &d);
  cr_assert_not_null(st, "CUDA cannot open here");
  cr_assert(strstr(hcq_status_message(st), "CUDA:0"), "%s", hcq_status_message(st));
  hcq_status_destroy(st);
  hcq_device_options_t opts = {.timeline_start = UINT64_C(1) << 40};
  FAILS(hcq_device_open_ex("CPU:0", &opts, &d), HCQ_OUT_OF_RANGE, "timeline_start");
  OK(hcq_device_close(NULL));
  FAILS(hcq_device_synchronize(NULL), HCQ_INVALID_ARGUMENT, "NULL");
}

Test(errors, close_with_live_objects_fails_and_keeps_the_device) {
  hcq_device_t *d = test_open("CPU:0");
  hcq_buffer_t *b = test_buffer(d, 16);
  hcq_signal_t *s = NULL;
  OK(hcq_signal_create(d, "x", 0, &s));
  hcq_buffer_set_label(b, "weights");
  FAILS(hcq_device_close(d), HCQ_FAILED_PRECONDITION, "cannot close CPU:0", "2 objects",
        "buffer \"weights\"", "signal \"x\"");
  assert_device_works(d);
  hcq_buffer_release(b);
  hcq_signal_destroy(s);
  test_close(d);
}

/* A queue waiting on a signal that is never set: closing reports a timeout instead of hanging, and
 * succeeds once the signal arrives. */
Test(errors, close_with_pending_work_is_an_error_not_a_hang) {
  setenv("HCQ_WAIT_TIMEOUT_MS", "100", 1);
  hcq_device_t *d = test_open("CPU:0"), *other = test_open("CPU:1");
  hcq_signal_t *gate = NULL;
  OK(hcq_signal_create(other, "gate", 0, &gate));
  hcq_queue_t *q = NULL;
  q = test_gate_queue(d, HCQ_QUEUE_COMPUTE, gate, 1);
  FAILS(hcq_device_close(d), HCQ_TIMEOUT, "cannot close CPU:0", "compute queue still has work");
  hcq_signal_set(gate, 1);
  test_close(d);
  hcq_queue_destroy(q);
  hcq_signal_destroy(gate);
  test_close(other);
}

Test(errors, synchronize_times_out_naming_the_timeline) {
  setenv("HCQ_WAIT_TIMEOUT_MS", "100", 1);
  hcq_device_t *d = test_open("CPU:0"), *other = test_open("CPU:1");
  hcq_signal_t *gate = NULL;
  OK(hcq_signal_create(other, "gate", 0, &gate));
  /* A raw queue blocks the compute engine; the eager launch queued behind it cannot finish. */
  hcq_queue_t *q = NULL;
  q = test_gate_queue(d, HCQ_QUEUE_COMPUTE, gate, 1);
  hcq_program_t *p = test_program(d, "fill", test_kernels_source);
  hcq_buffer_t *b = test_buffer(d, 64);
  int32_t v[] = {1, 16};
  hcq_launch_desc_t l = {p, &b, 1, v, 2, {1, 1, 1}, {16, 1, 1}};
  OK(hcq_launch(&l));
  FAILS(hcq_device_synchronize(d), HCQ_TIMEOUT, "\"CPU:0 timeline\"", "seen: 0");
  int32_t got;
  FAILS(hcq_buffer_copyout(b, 0, &got, 4), HCQ_TIMEOUT, "copyout from", "CPU:0 timeline");
  hcq_signal_set(gate, 1);
  OK(hcq_device_synchronize(d));
  assert_device_works(d);
  hcq_buffer_release(b);
  hcq_program_release(p);
  hcq_queue_destroy(q);
  hcq_signal_destroy(gate);
  test_close(d);
  test_close(other);
}

Test(errors, buffers) {
  hcq_device_t *d = test_open("CPU:0");
  hcq_buffer_t *b = NULL, *v = (hcq_buffer_t *)1;
  FAILS(hcq_buffer_create(d, 0, &b), HCQ_INVALID_ARGUMENT, "CPU:0", "greater than 0");
  FAILS(hcq_buffer_create(NULL, 4, &b), HCQ_INVALID_ARGUMENT, "device is NULL");
  FAILS(hcq_buffer_create(d, 4, NULL), HCQ_INVALID_ARGUMENT, "out_buffer");
  FAILS(hcq_buffer_create(d, UINT64_C(1) << 62, &b), HCQ_OUT_OF_MEMORY, "CPU:0");
  b = test_buffer(d, 100);
  hcq_buffer_set_label(b, "weights");
  cr_assert_str_eq(hcq_buffer_label(b), "weights");
  FAILS(hcq_buffer_view_create(b, 90, 20, &v), HCQ_OUT_OF_RANGE, "[90, 110)", "weights");
  cr_assert_null(v);
  FAILS(hcq_buffer_view_create(b, 0, 0, &v), HCQ_OUT_OF_RANGE, "weights");
  /* A range whose end passes 2^64 is reported with the numbers given, not a wrapped end. */
  FAILS(hcq_buffer_view_create(b, UINT64_MAX, 2, &v), HCQ_OUT_OF_RANGE, "weights",
        "offset 18446744073709551615 of 2 bytes");
  FAILS(hcq_buffer_view_create(b, 50, UINT64_MAX - 10, &v), HCQ_OUT_OF_RANGE,
        "offset 50 of 18446744073709551605 bytes");
  FAILS(hcq_buffer_view_create(NULL, 0, 1, &v), HCQ_INVALID_ARGUMENT, "NULL");
  char host[200];
  FAILS(hcq_buffer_copyin(b, 50, host, 51), HCQ_OUT_OF_RANGE, "copyin", "weights", "offset 50");
  FAILS(hcq_buffer_copyout(b, 101, host, 0), HCQ_OUT_OF_RANGE, "copyout", "weights");
  FAILS(hcq_buffer_copyin(b, 0, NULL, 4), HCQ_INVALID_ARGUMENT, "host pointer is NULL");
  FAILS(hcq_buffer_copyout(NULL, 0, host, 4), HCQ_INVALID_ARGUMENT, "buffer is NULL");
  OK(hcq_buffer_copyin(b, 100, host, 0));
  hcq_buffer_t *small = test_buffer(d, 10);
  FAILS(hcq_transfer(small, b, 20), HCQ_OUT_OF_RANGE, "weights", "larger than a buffer");
  FAILS(hcq_transfer(NULL, b, 1), HCQ_INVALID_ARGUMENT, "NULL");
  hcq_buffer_release(small);
  hcq_buffer_release(b);
  hcq_buffer_release(NULL);
  /* A buffer with its default label is named by it alone ("buffer#7"), never "buffer buffer#7";
   * one the user labelled is "buffer \"x\"". */
  hcq_program_t *p = test_program(d, "fill", test_kernels_source);
  hcq_buffer_t *in = test_buffer(d, 64), *other = test_buffer(d, 32), *named = test_buffer(d, 32);
  hcq_buffer_set_label(named, "x");
  int32_t vals[2] = {1, 16};
  hcq_exec_item_t it = {.kind = HCQ_ITEM_KERNEL};
  hcq_operand_t ops[2] = {hcq_imm(vals[0]), hcq_imm(vals[1])};
  it.kernel = (hcq_kernel_item_t){p,
                                  &in,
                                  1,
                                  NULL,
                                  0,
                                  ops,
                                  2,
                                  {hcq_imm(1), hcq_imm(1), hcq_imm(1)},
                                  {hcq_imm(16), hcq_imm(1), hcq_imm(1)}};
  hcq_jit_t *jit;
  OK(hcq_jit_create(&it, 1, &in, 1, NULL, 0, NULL, &jit));
  char msg[512];
  hcq_status_t st = hcq_jit_run(jit, &other, 1, NULL, 0, true, NULL);
  cr_assert(st);
  snprintf(msg, sizeof(msg), "%s", hcq_status_message(st));
  hcq_status_destroy(st);
  cr_assert(strstr(msg, "input 0: buffer#") && !strstr(msg, "buffer buffer#"), "%s", msg);
  FAILS(hcq_jit_run(jit, &named, 1, NULL, 0, true, NULL), HCQ_INVALID_ARGUMENT,
        "input 0: buffer \"x\" has 32 bytes");
  OK(hcq_jit_destroy(jit));
  hcq_buffer_release(in), hcq_buffer_release(other), hcq_buffer_release(named);
  hcq_program_release(p);
  assert_device_works(d);
  test_close(d);
}

Test(errors, programs_and_launches) {
  hcq_device_t *d = test_open("CPU:0"), *d1 = test_open("CPU:1");
  hcq_program_t *p = NULL;
  FAILS(hcq_program_create(NULL, "x", "", &p), HCQ_INVALID_ARGUMENT, "device is NULL");
  FAILS(hcq_program_create(d, "", "", &p), HCQ_INVALID_ARGUMENT, "name is empty");
  FAILS(hcq_program_create(d, NULL, "", &p), HCQ_INVALID_ARGUMENT, "name is empty");
  FAILS(hcq_program_create(d, "x", NULL, &p), HCQ_INVALID_ARGUMENT, "program x on CPU:0",
        "source is NULL");
  char longname[200];
  memset(longname, 'k', sizeof(longname) - 1);
  longname[sizeof(longname) - 1] = '\0';
  FAILS(hcq_program_create(d, longname, "", &p), HCQ_INVALID_ARGUMENT, "longer than");
  FAILS(hcq_program_create_fn(d, "f", NULL, &p), HCQ_INVALID_ARGUMENT, "function is NULL");
  FAILS(hcq_program_create(d, "x", "", NULL), HCQ_INVALID_ARGUMENT, "out_program");

  p = test_program(d, "add_scalar", test_kernels_source);
  hcq_buffer_t *a = test_buffer(d, 64), *far = test_buffer(d1, 64);
  FAILS(hcq_launch(NULL), HCQ_INVALID_ARGUMENT, "NULL");
  hcq_launch_desc_t l = {NULL, NULL, 0, NULL, 0, {1, 1, 1}, {1, 1, 1}};
  FAILS(hcq_launch(&l), HCQ_INVALID_ARGUMENT, "program is NULL");
  l.program = p;
  l.nbufs = 2;
  FAILS(hcq_launch(&l), HCQ_INVALID_ARGUMENT, "add_scalar", "array is NULL");
  hcq_buffer_t *bufs[] = {a, far};
  l.bufs = bufs;
  FAILS(hcq_launch(&l), HCQ_INVALID_ARGUMENT, "buffer 1", "CPU:1", "runs on CPU:0");
  hcq_buffer_t *nulls[] = {a, NULL};
  l.bufs = nulls;
  FAILS(hcq_launch(&l), HCQ_INVALID_ARGUMENT, "buffer 1 is NULL");
  l.nbufs = HCQ_MAX_KERNEL_BUFS + 1;
  FAILS(hcq_launch(&l), HCQ_INVALID_ARGUMENT, "exceed the limits");
  hcq_buffer_release(a);
  hcq_buffer_release(far);
  hcq_program_release(p);
  hcq_program_release(NULL);
  assert_device_works(d);
  test_close(d1);
  test_close(d);
}

Test(errors, queue_recording) {
  hcq_device_t *d = test_open("CPU:0"), *d1 = test_open("CPU:1");
  hcq_queue_t *q = NULL, *cq = NULL;
  FAILS(hcq_queue_create((hcq_queue_kind_t)7, &q), HCQ_INVALID_ARGUMENT, "unknown queue kind 7");
  FAILS(hcq_queue_create(HCQ_QUEUE_COPY, NULL), HCQ_INVALID_ARGUMENT, "out_queue");
  OK(hcq_queue_create(HCQ_QUEUE_COPY, &q));
  OK(hcq_queue_create(HCQ_QUEUE_COMPUTE, &cq));
  FAILS(hcq_queue_memory_barrier(q), HCQ_INVALID_ARGUMENT, "only compute queues");
  FAILS(hcq_queue_copy(cq, hcq_imm(0), hcq_imm(0), hcq_imm(0)), HCQ_INVALID_ARGUMENT,
        "only copy queues");
  hcq_program_t *p = test_program(d, "fill", test_kernels_source),
                *p1 = test_program(d1, "fill", test_kernels_source);
  hcq_operand_t g[3] = {hcq_imm(1), hcq_imm(1), hcq_imm(1)},
                l[3] = {hcq_imm(1), hcq_imm(1), hcq_imm(1)};
  FAILS(hcq_queue_exec(q, p, hcq_imm(0), 0, g, l), HCQ_INVALID_ARGUMENT, "only compute queues");
  FAILS(hcq_queue_exec(cq, NULL, hcq_imm(0), 0, g, l), HCQ_INVALID_ARGUMENT,
        "program or dims are NULL");
  FAILS(hcq_queue_exec(cq, p, hcq_imm(0), HCQ_MAX_KERNEL_BUFS + 1, g, l), HCQ_INVALID_ARGUMENT,
        "exec of fill");
  hcq_operand_t bad[3] = {hcq_imm(-1), hcq_imm(1), hcq_imm(1)};
  FAILS(hcq_queue_exec(cq, p, hcq_imm(0), 0, bad, l), HCQ_OUT_OF_RANGE, "global[0] -1");
  hcq_operand_t zero[3] = {hcq_imm(1), hcq_imm(0), hcq_imm(1)};
  FAILS(hcq_queue_exec(cq, p, hcq_imm(0), 0, g, zero), HCQ_INVALID_ARGUMENT,
        "exec of fill: local[1] is 0");
  hcq_program_t *declared = test_program(d, "fill", test_kernels_source);
  OK(hcq_program_declare_args(declared, 1, 2));
  FAILS(hcq_queue_exec(cq, declared, hcq_imm(0), 2, g, l), HCQ_INVALID_ARGUMENT,
        "exec of fill: the kernel takes 1 buffer, the exec passes 2");
  hcq_program_release(declared);
  FAILS(hcq_queue_wait(q, hcq_imm(-5), hcq_imm(0)), HCQ_OUT_OF_RANGE, "wait: signal address -5");
  FAILS(hcq_queue_signal(q, hcq_imm(64), hcq_imm(INT64_C(1) << 33)), HCQ_OUT_OF_RANGE,
        "signal: value 8589934592", "unsigned 32-bit");
  FAILS(hcq_queue_copy(q, hcq_imm(0), hcq_imm(0), hcq_imm(-1)), HCQ_OUT_OF_RANGE, "copy: size -1");
  FAILS(hcq_queue_wait(NULL, hcq_imm(0), hcq_imm(0)), HCQ_INVALID_ARGUMENT, "queue is NULL");
  cr_assert_eq(hcq_queue_size(q), 0, "failed commands leave no words");
  cr_assert_eq(hcq_queue_size(cq), 0);

  OK(hcq_queue_exec(cq, p, hcq_imm(0), 0, g, l));
  FAILS(hcq_queue_exec(cq, p1, hcq_imm(0), 0, g, l), HCQ_INVALID_ARGUMENT, "fill is on CPU:1",
        "already uses CPU:0");
  FAILS(hcq_queue_submit(cq, d1, NULL, 0), HCQ_INVALID_ARGUMENT,
        "uses programs or memory of CPU:0, not CPU:1");
  FAILS(hcq_queue_bind(cq, d1), HCQ_INVALID_ARGUMENT, "CPU:0, not CPU:1");
  FAILS(hcq_queue_bind(q, d), HCQ_FAILED_PRECONDITION, "queue is empty");
  FAILS(hcq_queue_bind(NULL, d), HCQ_INVALID_ARGUMENT, "NULL");
  FAILS(hcq_queue_submit(NULL, d, NULL, 0), HCQ_INVALID_ARGUMENT, "NULL");
  FAILS(hcq_queue_submit(q, d, NULL, 3), HCQ_INVALID_ARGUMENT, "3 values but vals is NULL");

  hcq_buffer_t *args = test_buffer(d, 32);
  hcq_operand_t three[3] = {hcq_imm(1), hcq_imm(2), hcq_imm(3)};
  FAILS(hcq_queue_kernargs(cq, args, 0, three, 3, three, 3), HCQ_OUT_OF_RANGE, "36 bytes",
        "do not fit");
  FAILS(hcq_queue_kernargs(cq, args, 8, three, 1, NULL, 0), HCQ_OUT_OF_RANGE, "16-byte aligned");
  FAILS(hcq_queue_kernargs(cq, args, 0, NULL, 1, NULL, 0), HCQ_INVALID_ARGUMENT, "array is NULL");
  FAILS(hcq_queue_kernargs(cq, NULL, 0, NULL, 0, NULL, 0), HCQ_INVALID_ARGUMENT, "memory is NULL");
  hcq_operand_t wide[1] = {hcq_imm(INT64_C(1) << 31)};
  FAILS(hcq_queue_kernargs(cq, args, 0, three, 1, wide, 1), HCQ_OUT_OF_RANGE, "value 0",
        "signed 32-bit");
  hcq_buffer_t *args1 = test_buffer(d1, 32);
  FAILS(hcq_queue_kernargs(cq, args1, 0, three, 1, NULL, 0), HCQ_INVALID_ARGUMENT, "on CPU:1");
  cr_assert_eq(hcq_queue_patch_count(cq), 0);
  hcq_buffer_release(args1);
  hcq_buffer_release(args);
  hcq_queue_destroy(q);
  hcq_queue_destroy(cq);
  hcq_queue_destroy(NULL);
  hcq_program_release(p);
  hcq_program_release(p1);
  assert_device_works(d);
  test_close(d1);
  test_close(d);
}

Test(errors, signals) {
  hcq_device_t *d = test_open("CPU:0");
  hcq_signal_t *s = NULL;
  FAILS(hcq_signal_create(NULL, "x", 0, &s), HCQ_INVALID_ARGUMENT, "device is NULL");
  FAILS(hcq_signal_create(d, "x", 0, NULL), HCQ_INVALID_ARGUMENT, "out_signal");
  FAILS(hcq_signal_wait(NULL, 1, 0), HCQ_INVALID_ARGUMENT, "signal is NULL");
  cr_assert_eq(hcq_signal_value(NULL), 0);
  hcq_signal_set(NULL, 3);
  hcq_signal_destroy(NULL);
  test_close(d);
}

Test(errors, expressions) {
  int64_t out;
  FAILS(hcq_expr_eval(NULL, NULL, 0, &out), HCQ_INVALID_ARGUMENT, "NULL");
  hcq_expr_t *c = hcq_expr_const(1);
  FAILS(hcq_expr_eval(c, NULL, 2, &out), HCQ_INVALID_ARGUMENT, "vals is NULL");
  FAILS(hcq_expr_parse("1", NULL, 2, NULL), HCQ_INVALID_ARGUMENT, "out_expr");
  FAILS(hcq_var_create("n", 0, 1, NULL), HCQ_INVALID_ARGUMENT, "out_var");
  FAILS(hcq_var_check(c, 0), HCQ_INVALID_ARGUMENT, "non-variable");
  hcq_expr_release(c);
}

/* A rank-qualified name (docs/mpi.md) without the MPI layer running: a clear NOT_FOUND, no device.
 */
Test(errors, rank_qualified_device_without_mpi) {
  hcq_device_t *d = (hcq_device_t *)1;
  hcq_status_t st = hcq_device_open("1/CPU:0", &d);
  cr_assert_not_null(st);
  cr_assert_eq(hcq_status_code(st), HCQ_NOT_FOUND);
  cr_assert(
      strstr(hcq_status_message(st), "1/CPU:0") && strstr(hcq_status_message(st), "MPI layer"),
      "%s", hcq_status_message(st));
  cr_assert_null(d);
  hcq_status_destroy(st);
}
