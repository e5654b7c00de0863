/* Eager work ordered by the device timelines: launches, host copies through staging buffers,
 * device-to-device transfers with the cross-device waits. */
#include <stdlib.h>
#include <string.h>

#include "test_util.h"

TestSuite(eager, .timeout = 120);

Test(eager, one_kernel) {
  hcq_device_t *d = test_open("CPU:0");
  hcq_program_t *p = test_program(d, "add_scalar", test_kernels_source);
  hcq_buffer_t *a = test_buffer_iota(d, 1000, 2, 1), *out = test_buffer(d, 1000 * 4);
  hcq_buffer_t *bufs[] = {out, a};
  int32_t vals[] = {-5, 1000};
  hcq_launch_desc_t ld = {p, bufs, 2, vals, 2, {4, 1, 1}, {256, 1, 1}};
  OK(hcq_launch(&ld));
  int32_t got[1000];
  test_read(out, got, sizeof(got));
  for (int i = 0; i < 1000; i++) cr_assert_eq(got[i], i * 2 + 1 - 5);
  hcq_buffer_release(a);
  hcq_buffer_release(out);
  hcq_program_release(p);
  test_close(d);
}

/* x = x*3+1 then x = x*5+2, 100 times: any reordering changes the result. */
Test(eager, two_kernels_100_times_in_order) {
  hcq_device_t *d = test_open("CPU:0");
  hcq_program_t *p = test_program(d, "mul_add", test_kernels_source);
  enum { N = 512 };
  hcq_buffer_t *x = test_buffer_iota(d, N, 7, 3);
  int32_t v1[] = {3, 1, N}, v2[] = {5, 2, N};
  hcq_launch_desc_t l1 = {p, &x, 1, v1, 3, {2, 1, 1}, {256, 1, 1}};
  hcq_launch_desc_t l2 = {p, &x, 1, v2, 3, {N, 1, 1}, {1, 1, 1}};
  uint32_t model[N];
  for (int i = 0; i < N; i++) model[i] = (uint32_t)i * 7 + 3;
  for (int r = 0; r < 100; r++) {
    OK(hcq_launch(&l1));
    OK(hcq_launch(&l2));
    for (int i = 0; i < N; i++) model[i] = (model[i] * 3 + 1) * 5 + 2;
  }
  uint32_t got[N];
  test_read(x, got, sizeof(got));
  cr_assert_arr_eq(got, model, sizeof(got));
  hcq_buffer_release(x);
  hcq_program_release(p);
  test_close(d);
}

Test(eager, copy_in_and_out_at_offsets) {
  hcq_device_t *d = test_open("CPU:0");
  hcq_buffer_t *b = test_buffer(d, 100);
  uint8_t zeros[100] = {0}, got[100], src[30];
  test_read(b, got, 100);
  cr_assert_arr_eq(got, zeros, 100, "new buffers start as zeros");
  for (int i = 0; i < 30; i++) src[i] = (uint8_t)(i + 1);
  OK(hcq_buffer_copyin(b, 17, src, 30));
  OK(hcq_buffer_copyout(b, 0, got, 100));
  for (int i = 0; i < 100; i++) cr_assert_eq(got[i], i >= 17 && i < 47 ? i - 16 : 0);
  uint8_t part[10];
  OK(hcq_buffer_copyout(b, 20, part, 10));
  for (int i = 0; i < 10; i++) cr_assert_eq(part[i], 20 - 16 + i);
  hcq_buffer_release(b);
  test_close(d);
}

/* Staging chunks of 4 KiB: a 1 MiB + 3 bytes copy crosses hundreds of chunks both ways. */
Test(eager, long_copy_larger_than_a_staging_chunk) {
  setenv("HCQ_STAGING_CHUNK", "4096", 1);
  hcq_device_t *d = test_open("CPU:0");
  const size_t n = (1 << 20) + 3;
  uint8_t *src = malloc(n), *got = malloc(n);
  for (size_t i = 0; i < n; i++) src[i] = (uint8_t)(i * 131 + (i >> 12));
  hcq_buffer_t *b = test_buffer(d, n);
  OK(hcq_buffer_copyin(b, 0, src, n));
  memset(src + 5000, 0xab, 100); /* the host buffer may be reused once copyin returns */
  OK(hcq_buffer_copyout(b, 0, got, n));
  memset(src + 5000, 0, 100);
  for (size_t i = 5000; i < 5100; i++) src[i] = (uint8_t)(i * 131 + (i >> 12));
  cr_assert_arr_eq(got, src, n);
  free(src);
  free(got);
  hcq_buffer_release(b);
  test_close(d);
}

/* A kernel on CPU:0 writes, a transfer moves the result to CPU:1, a kernel there reads it: the
 * transfer waits for CPU:0's kernel and CPU:1's kernel waits for the transfer. */
Test(eager, transfer_between_devices_is_ordered) {
  hcq_device_t *d0 = test_open("CPU:0"), *d1 = test_open("CPU:1");
  hcq_program_t *f0 = test_program(d0, "mul_add", test_kernels_source);
  hcq_program_t *f1 = test_program(d1, "mul_add", test_kernels_source);
  enum { N = 1 << 16 };
  hcq_buffer_t *x0 = test_buffer_iota(d0, N, 1, 0), *x1 = test_buffer(d1, N * 4);
  int32_t v0[] = {3, 1, N}, v1[] = {2, 5, N};
  hcq_launch_desc_t l0 = {f0, &x0, 1, v0, 3, {N / 256, 1, 1}, {256, 1, 1}};
  hcq_launch_desc_t l1 = {f1, &x1, 1, v1, 3, {N / 256, 1, 1}, {256, 1, 1}};
  uint32_t *model = malloc(N * 4), *got = malloc(N * 4);
  for (int i = 0; i < N; i++) model[i] = (uint32_t)i;
  for (int r = 0; r < 10; r++) {
    OK(hcq_launch(&l0));
    OK(hcq_transfer(x1, x0, N * 4));
    OK(hcq_launch(&l1));
    OK(hcq_transfer(x0, x1, N * 4));
    for (int i = 0; i < N; i++) model[i] = (model[i] * 3 + 1) * 2 + 5;
  }
  test_read(x0, got, N * 4);
  cr_assert_arr_eq(got, model, N * 4);
  test_read(x1, got, N * 4);
  cr_assert_arr_eq(got, model, N * 4);
  free(model);
  free(got);
  hcq_buffer_release(x0);
  hcq_buffer_release(x1);
  hcq_program_release(f0);
  hcq_program_release(f1);
  test_close(d0);
  test_close(d1);
}

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
  for (int i = 0; i < 64; i++) cr_assert_eq(got[i], i == 21 ? 7 : (i >= 16 && i < 32) ? -1 : i, "word %d", i);
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
                        .kernel = {p, NULL, 0, NULL, 0, NULL, 0, {hcq_imm(2), hcq_imm(1), hcq_imm(1)},
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
