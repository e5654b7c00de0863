/* Fences (hcq/fence.h) on CPU devices: what a fence covers, timeline wraps, lost and closed
 * devices, JIT replays, and misuse. The same fences on every backend: tests/test_conformance.c. */
#include <pthread.h>

#include "core/device.h"
#include "core/signal.h"
#include "test_util.h"

TestSuite(fence, .timeout = 60);

enum { N = 256 };

static hcq_fence_t *new_fence(void) {
  hcq_fence_t *f = NULL;
  OK(hcq_fence_create(&f));
  return f;
}

static void launch_fill(hcq_program_t *fill, hcq_buffer_t *out, int32_t value) {
  int32_t vals[] = {value, N};
  hcq_launch_desc_t l = {fill, &out, 1, vals, 2, {N / 64, 1, 1}, {64, 1, 1}};
  OK(hcq_launch(&l));
}

static bool reached(const hcq_fence_t *f) {
  bool done = false;
  OK(hcq_fence_poll(f, &done));
  return done;
}

Test(fence, a_fence_never_armed_is_reached) {
  hcq_fence_t *f = new_fence();
  cr_assert_eq(hcq_fence_device_count(f), 0);
  cr_assert(reached(f));
  OK(hcq_fence_wait(f, 0));
  hcq_fence_destroy(f);
  hcq_fence_destroy(NULL);
}

Test(fence, misuse_is_named) {
  hcq_fence_t *f = new_fence();
  bool done = true;
  FAILS(hcq_fence_create(NULL), HCQ_INVALID_ARGUMENT, "out_fence");
  FAILS(hcq_fence_wait(NULL, 0), HCQ_INVALID_ARGUMENT, "hcq_fence_wait", "fence is NULL");
  FAILS(hcq_fence_poll(NULL, &done), HCQ_INVALID_ARGUMENT, "hcq_fence_poll", "fence is NULL");
  cr_assert(!done);
  FAILS(hcq_fence_poll(f, NULL), HCQ_INVALID_ARGUMENT, "out_done");
  FAILS(hcq_fence_record(NULL, NULL, 0), HCQ_INVALID_ARGUMENT, "fence is NULL");
  FAILS(hcq_fence_record(f, NULL, 1), HCQ_INVALID_ARGUMENT, "devices is NULL");
  hcq_device_t *nodev = NULL;
  FAILS(hcq_fence_record(f, &nodev, 1), HCQ_INVALID_ARGUMENT, "device is NULL", "devices[0]");
  FAILS(hcq_graph_submit(NULL, NULL, 0, NULL, 0, f), HCQ_INVALID_ARGUMENT, "hcq_graph_submit",
        "graph is NULL");
  FAILS(hcq_jit_submit(NULL, NULL, 0, NULL, 0, f), HCQ_INVALID_ARGUMENT, "hcq_jit_submit",
        "jit is NULL");
  hcq_fence_destroy(f);
}

/* Eager work on two devices; the fence covers both, and a timeout names the one not done. */
Test(fence, recorded_over_two_devices_waits_for_both) {
  hcq_device_t *d[2] = {test_open("CPU:0"), test_open("CPU:1")};
  hcq_program_t *fill0 = test_program(d[0], "fill", test_kernels_source);
  hcq_program_t *fill1 = test_program(d[1], "fill", test_kernels_source);
  hcq_buffer_t *a = test_buffer(d[0], N * 4), *b = test_buffer(d[1], N * 4);
  hcq_signal_t *gate = NULL;
  OK(hcq_signal_create(d[1], "gate", 0, &gate));
  hcq_queue_t *held = test_gate_queue(d[1], HCQ_QUEUE_COMPUTE, gate, 1);
  launch_fill(fill0, a, 1);
  launch_fill(fill1, b, 2);
  hcq_fence_t *f = new_fence();
  OK(hcq_fence_record(f, d, 2));
  cr_assert_eq(hcq_fence_device_count(f), 2);
  OK(hcq_device_synchronize(d[0]));
  cr_assert(!reached(f), "CPU:1 is held");
  FAILS(hcq_fence_wait(f, 30), HCQ_TIMEOUT, "fence on CPU:1", "timed out");
  hcq_signal_set(gate, 1);
  OK(hcq_fence_wait(f, HCQ_TIMEOUT_DEFAULT));
  cr_assert(reached(f));
  int32_t got[N];
  test_read(b, got, sizeof(got));
  cr_assert_eq(got[N - 1], 2);
  /* Work submitted after the fence was armed does not hold it back. */
  hcq_signal_set(gate, 0);
  hcq_queue_destroy(held);
  held = test_gate_queue(d[1], HCQ_QUEUE_COMPUTE, gate, 3);
  launch_fill(fill1, b, 3);
  cr_assert(reached(f));
  OK(hcq_fence_wait(f, 0));
  hcq_signal_set(gate, 3);
  OK(hcq_device_synchronize(d[1]));
  hcq_queue_destroy(held);
  hcq_signal_destroy(gate);
  hcq_fence_destroy(f);
  hcq_buffer_release(a);
  hcq_buffer_release(b);
  hcq_program_release(fill0);
  hcq_program_release(fill1);
  test_close(d[0]);
  test_close(d[1]);
}

/* Makes the device look as though 2^31 pieces of work had run since its last wrap, so the next
 * submission wraps again (two wraps: the signal a fence kept is then the live one, restarted). */
static void pretend_a_full_timeline(hcq_device_t *d) {
  OK(hcq_device_synchronize(d));
  pthread_mutex_lock(&d->lock);
  hcq__signal_words_set(d->timeline->words, HCQ_TIMELINE_WRAP);
  d->timeline_value = HCQ_TIMELINE_WRAP + 1;
  pthread_mutex_unlock(&d->lock);
}

Test(fence, fences_armed_before_timeline_wraps_are_reached) {
  hcq_device_options_t o = {.timeline_start = HCQ_TIMELINE_WRAP - 3};
  hcq_device_t *d = NULL;
  OK(hcq_device_open_ex("CPU:0", &o, &d));
  hcq_program_t *fill = test_program(d, "fill", test_kernels_source);
  hcq_buffer_t *x = test_buffer(d, N * 4);
  launch_fill(fill, x, 1);
  hcq_fence_t *f = new_fence();
  OK(hcq_fence_record(f, &d, 1));
  hcq_signal_t *first = NULL, *now = NULL;
  uint64_t next = 0;
  hcq_device_timeline(d, &first, NULL);
  for (int i = 0; i < 6; i++) launch_fill(fill, x, i);
  OK(hcq_device_synchronize(d));
  hcq_device_timeline(d, &now, &next);
  cr_assert_neq(now, first, "the timeline wrapped");
  cr_assert_lt(next, 100);
  cr_assert(reached(f), "armed before one wrap");
  OK(hcq_fence_wait(f, 0));

  /* Armed at a high value, then two wraps: the signal the fence kept is the live one again,
   * restarted near 0, so only the epoch tells that the fence was passed. */
  pretend_a_full_timeline(d);
  OK(hcq_fence_record(f, &d, 1));
  launch_fill(fill, x, 2); /* the first wrap: the kept signal becomes the shadow */
  OK(hcq_device_synchronize(d));
  pretend_a_full_timeline(d);
  launch_fill(fill, x, 3); /* the second: it is live again, restarted */
  OK(hcq_device_synchronize(d));
  hcq_device_timeline(d, &now, &next);
  cr_assert_lt(next, 100);
  cr_assert(reached(f), "armed before two wraps");
  OK(hcq_fence_wait(f, 0));
  hcq_fence_destroy(f);
  hcq_buffer_release(x);
  hcq_program_release(fill);
  test_close(d);
}

Test(fence, a_lost_device_ends_the_wait_and_says_its_work_was_dropped) {
  hcq_device_t *d = test_open("CPU:0");
  hcq_program_t *fill = test_program(d, "fill", test_kernels_source);
  hcq_buffer_t *x = test_buffer(d, N * 4);
  hcq_signal_t *gate = NULL;
  OK(hcq_signal_create(d, "gate", 0, &gate));
  hcq_fence_t *before = new_fence(), *after = new_fence();
  launch_fill(fill, x, 1);
  OK(hcq_fence_record(before, &d, 1));
  OK(hcq_fence_wait(before, HCQ_TIMEOUT_DEFAULT));
  hcq_queue_t *held = test_gate_queue(d, HCQ_QUEUE_COMPUTE, gate, 1);
  launch_fill(fill, x, 2);
  OK(hcq_fence_record(after, &d, 1));
  OK(hcq_device_declare_lost(d, "pulled out for the test"));
  FAILS(hcq_fence_wait(after, HCQ_TIMEOUT_DEFAULT), HCQ_DEVICE_LOST, "CPU:0",
        "pulled out for the test");
  bool done = true;
  FAILS(hcq_fence_poll(after, &done), HCQ_DEVICE_LOST, "its work was dropped");
  cr_assert(!done);
  cr_assert(reached(before), "work finished before the loss stays reached");
  hcq_queue_destroy(held);
  hcq_signal_destroy(gate);
  hcq_fence_destroy(before);
  hcq_fence_destroy(after);
  hcq_buffer_release(x);
  hcq_program_release(fill);
  hcq_status_destroy(hcq_device_close(d));
}

Test(fence, a_closed_device_is_named) {
  hcq_device_t *d = test_open("CPU:0");
  hcq_fence_t *f = new_fence();
  OK(hcq_fence_record(f, &d, 1));
  OK(hcq_device_close(d));
  FAILS(hcq_fence_wait(f, 0), HCQ_FAILED_PRECONDITION, "CPU:0 was closed");
  bool done = true;
  FAILS(hcq_fence_poll(f, &done), HCQ_FAILED_PRECONDITION, "CPU:0 was closed");
  FAILS(hcq_fence_record(f, &d, 1), HCQ_FAILED_PRECONDITION, "CPU:0 was closed");
  hcq_fence_destroy(f);
}

/* A captured step replayed with hcq_jit_submit: each replay's fence, its output read in place
 * while the next replay is already queued (behind a gate), as hcq generate streams tokens. */
Test(fence, jit_replays_each_have_their_fence) {
  hcq_device_t *d = test_open("CPU:0");
  hcq_program_t *fill = test_program(d, "fill", test_kernels_source);
  hcq_buffer_t *ring = test_buffer(d, 4 * N * 4); /* four slots of N */
  hcq_buffer_t *slot[4];
  for (int i = 0; i < 4; i++)
    OK(hcq_buffer_view_create(ring, (uint64_t)i * N * 4, N * 4, &slot[i]));
  const int32_t *host = NULL;
  OK(hcq_buffer_map(ring, (void **)&host));
  hcq_expr_t *step = NULL;
  OK(hcq_var_create("step", 0, 100, &step));
  /* fill(slot; step, N), captured on slot 0, which each replay replaces with its own slot. */
  hcq_operand_t vals[] = {hcq_sym(step), hcq_imm(N)};
  hcq_launch_sym_desc_t l = {.program = fill,
                             .bufs = &slot[0],
                             .nbufs = 1,
                             .vals = vals,
                             .nvals = 2,
                             .global = {hcq_imm(N / 64), hcq_imm(1), hcq_imm(1)},
                             .local = {hcq_imm(64), hcq_imm(1), hcq_imm(1)}};
  hcq_capture_t *cap = NULL;
  hcq_jit_t *jit = NULL;
  hcq_var_value_t v0 = {step, 0};
  OK(hcq_capture_begin(&cap));
  OK(hcq_launch_sym(&l, &v0, 1));
  OK(hcq_launch_sym(&l, &v0, 1));
  OK(hcq_capture_end(cap, &slot[0], 1, &v0, 1, NULL, &jit));
  hcq_fence_t *f[3] = {new_fence(), new_fence(), new_fence()};
  hcq_signal_t *gate = NULL;
  OK(hcq_signal_create(d, "gate", 0, &gate));
  /* replay 0 into slot 0; the gate; replays 1 and 2 into slots 1 and 2 */
  hcq_var_value_t v1 = {step, 11}, v2 = {step, 22}, v3 = {step, 33};
  OK(hcq_jit_submit(jit, &slot[0], 1, &v1, 1, f[0]));
  hcq_queue_t *held = test_gate_queue(d, HCQ_QUEUE_COMPUTE, gate, 1);
  OK(hcq_jit_submit(jit, &slot[1], 1, &v2, 1, f[1]));
  OK(hcq_jit_submit(jit, &slot[2], 1, &v3, 1, f[2]));
  OK(hcq_fence_wait(f[0], HCQ_TIMEOUT_DEFAULT));
  for (int i = 0; i < N; i++) cr_assert_eq(host[i], 11, "slot 0 element %d", i);
  cr_assert(!reached(f[1]) && !reached(f[2]));
  for (int i = 0; i < N; i++) cr_assert_eq(host[N + i], 0, "slot 1 not written yet");
  hcq_signal_set(gate, 1);
  OK(hcq_fence_wait(f[1], HCQ_TIMEOUT_DEFAULT));
  for (int i = 0; i < N; i++) cr_assert_eq(host[N + i], 22, "slot 1 element %d", i);
  OK(hcq_fence_wait(f[2], HCQ_TIMEOUT_DEFAULT));
  for (int i = 0; i < N; i++) cr_assert_eq(host[2 * N + i], 33, "slot 2 element %d", i);
  /* A replay refused before it is queued leaves the fence as it was. */
  FAILS(hcq_jit_submit(jit, NULL, 0, &v1, 1, f[0]), HCQ_INVALID_ARGUMENT, "input");
  cr_assert_eq(hcq_fence_device_count(f[0]), 1);
  OK(hcq_jit_destroy(jit));
  hcq_queue_destroy(held);
  hcq_signal_destroy(gate);
  for (int i = 0; i < 3; i++) hcq_fence_destroy(f[i]);
  for (int i = 0; i < 4; i++) hcq_buffer_release(slot[i]);
  hcq_expr_release(step);
  hcq_buffer_release(ring);
  hcq_program_release(fill);
  test_close(d);
}
