/* Eager work ordered by the device timelines: launches, host copies through staging buffers,
 * device-to-device transfers with the cross-device waits. */
#include <stdlib.h>
#include <string.h>

#include "test_util.h"

TestSuite(eager, .timeout = 120);

/* One kernel, kernels in order, copies at offsets and across staging chunks, and ordered transfers
 * between two devices are conformance scenarios (test_conformance.c), run on CPU devices there. */

/* Data passed around a ring of four devices, a kernel on each hop. */
Test(eager, transfers_around_four_devices) {
  enum { N = 4096, D = 4 };
  hcq_device_t *devs[D];
  hcq_program_t *progs[D];
  hcq_buffer_t *bufs[D];
  char name[16];
  for (int i = 0; i < D; i++) {
    snprintf(name, sizeof(name), "CPU:%d", i);
    devs[i] = test_open(name);
    progs[i] = test_program(devs[i], "mul_add", test_kernels_source);
    bufs[i] = test_buffer(devs[i], N * 4);
  }
  uint32_t model[N], got[N];
  for (int i = 0; i < N; i++) model[i] = (uint32_t)i;
  OK(hcq_buffer_copyin(bufs[0], 0, model, sizeof(model)));
  for (int hop = 0; hop < 12; hop++) {
    int at = hop % D, next = (hop + 1) % D;
    int32_t v[] = {at + 2, hop, N};
    hcq_launch_desc_t l = {progs[at], &bufs[at], 1, v, 3, {N / 64, 1, 1}, {64, 1, 1}};
    OK(hcq_launch(&l));
    OK(hcq_transfer(bufs[next], bufs[at], N * 4));
    for (int i = 0; i < N; i++) model[i] = model[i] * (uint32_t)(at + 2) + (uint32_t)hop;
  }
  test_read(bufs[0], got, sizeof(got));
  cr_assert_arr_eq(got, model, sizeof(got));
  for (int i = 0; i < D; i++) {
    hcq_buffer_release(bufs[i]);
    hcq_program_release(progs[i]);
    test_close(devs[i]);
  }
}

Test(eager, transfer_on_one_device_and_partial_sizes) {
  hcq_device_t *d = test_open("CPU:0");
  hcq_buffer_t *a = test_buffer_iota(d, 100, 1, 0), *b = test_buffer(d, 400);
  OK(hcq_transfer(b, a, 40));
  int32_t got[100];
  test_read(b, got, sizeof(got));
  for (int i = 0; i < 100; i++) cr_assert_eq(got[i], i < 10 ? i : 0);
  OK(hcq_transfer(b, a, 0));
  hcq_buffer_release(a);
  hcq_buffer_release(b);
  test_close(d);
}

Test(eager, views_alias_their_base) {
  hcq_device_t *d = test_open("CPU:0");
  hcq_program_t *p = test_program(d, "fill", test_kernels_source);
  hcq_buffer_t *base = test_buffer_iota(d, 64, 1, 0), *view = NULL, *view2 = NULL;
  OK(hcq_buffer_view_create(base, 64, 64, &view));
  OK(hcq_buffer_view_create(view, 16, 16, &view2));
  cr_assert_eq(hcq_buffer_base(view2), base);
  cr_assert_eq(hcq_buffer_offset(view2), 80);
  cr_assert_eq(hcq_buffer_address(view2), hcq_buffer_address(base) + 80);
  cr_assert_eq(hcq_buffer_size(view2), 16);
  int32_t v[] = {-1, 16};
  hcq_launch_desc_t l = {p, &view, 1, v, 2, {1, 1, 1}, {16, 1, 1}};
  OK(hcq_launch(&l));
  int32_t seven = 7;
  OK(hcq_buffer_copyin(view2, 4, &seven, 4));
  int32_t got[64];
  test_read(base, got, sizeof(got));
  for (int i = 0; i < 64; i++)
    cr_assert_eq(got[i], i == 21 ? 7 : (i >= 16 && i < 32) ? -1 : i, "word %d", i);
  /* The base outlives the caller's reference while a view holds it. */
  hcq_buffer_release(base);
  int32_t w;
  OK(hcq_buffer_copyout(view, 0, &w, 4));
  cr_assert_eq(w, -1);
  hcq_buffer_release(view2);
  hcq_buffer_release(view);
  hcq_program_release(p);
  test_close(d);
}

/* Releasing a buffer and a program while launches that use them are queued: memory is freed only
 * after the device timeline passes them (ASan would flag a use after free). */
Test(eager, release_with_work_pending_is_deferred) {
  hcq_device_t *d = test_open("CPU:0");
  hcq_program_t *p = test_program(d, "mul_add", test_kernels_source);
  hcq_buffer_t *x = test_buffer_iota(d, 1 << 16, 1, 0), *keep = test_buffer(d, 4);
  int32_t v[] = {3, 1, 1 << 16};
  hcq_launch_desc_t l = {p, &x, 1, v, 3, {256, 1, 1}, {256, 1, 1}};
  for (int i = 0; i < 50; i++) OK(hcq_launch(&l));
  hcq_buffer_release(x);
  hcq_program_release(p);
  OK(hcq_device_synchronize(d));
  hcq_buffer_release(keep);
  test_close(d);
}

Test(eager, many_small_launches_wrap_the_kernel_argument_ring) {
  setenv("HCQ_KERNARGS_RING", "65536", 1);
  hcq_device_t *d = test_open("CPU:0");
  hcq_program_t *p = test_program(d, "mul_add", test_kernels_source);
  hcq_buffer_t *x = test_buffer_iota(d, 16, 1, 0);
  uint32_t model[16];
  for (int i = 0; i < 16; i++) model[i] = (uint32_t)i;
  for (int i = 0; i < 20000; i++) { /* 32 bytes each: the 64 KiB ring wraps about ten times */
    int32_t v[] = {i % 3 + 1, i, 16};
    hcq_launch_desc_t l = {p, &x, 1, v, 3, {1, 1, 1}, {16, 1, 1}};
    OK(hcq_launch(&l));
    for (int k = 0; k < 16; k++) model[k] = model[k] * (uint32_t)(i % 3 + 1) + (uint32_t)i;
  }
  uint32_t got[16];
  test_read(x, got, sizeof(got));
  cr_assert_arr_eq(got, model, sizeof(got));
  hcq_buffer_release(x);
  hcq_program_release(p);
  test_close(d);
}

static int g_calls;
static void count_calls(void *const *bufs, const int32_t *vals, const hcq_launch_t *l) {
  (void)bufs, (void)vals, (void)l;
  __atomic_fetch_add(&g_calls, 1, __ATOMIC_RELAXED);
}

/* A kernel without buffers or values still gets an argument block (found by an example author:
 * a zero-byte allocation used to underflow the ring's segment arithmetic). */
Test(eager, kernels_without_arguments) {
  setenv("HCQ_KERNARGS_RING", "65536", 1);
  hcq_device_t *d = test_open("CPU:0");
  hcq_program_t *p = NULL;
  OK(hcq_program_create_fn(d, "count_calls", count_calls, &p));
  hcq_launch_desc_t l = {p, NULL, 0, NULL, 0, {1, 1, 1}, {1, 1, 1}};
  for (int i = 0; i < 10000; i++) OK(hcq_launch(&l)); /* 16 bytes each: the ring wraps */
  OK(hcq_device_synchronize(d));
  cr_assert_eq(__atomic_load_n(&g_calls, __ATOMIC_RELAXED), 10000);
  hcq_exec_item_t it = {.kind = HCQ_ITEM_KERNEL,
                        .kernel = {p,
                                   NULL,
                                   0,
                                   NULL,
                                   0,
                                   NULL,
                                   0,
                                   {hcq_imm(2), hcq_imm(1), hcq_imm(1)},
                                   {hcq_imm(1), hcq_imm(1), hcq_imm(1)}}};
  hcq_exec_item_t items[2] = {it, it};
  hcq_graph_t *g = NULL;
  OK(hcq_graph_create(items, 2, NULL, 0, NULL, 0, NULL, &g));
  OK(hcq_graph_run(g, NULL, 0, NULL, 0, true, NULL));
  cr_assert_eq(__atomic_load_n(&g_calls, __ATOMIC_RELAXED), 10004);
  OK(hcq_graph_destroy(g));
  hcq_program_release(p);
  test_close(d);
}
