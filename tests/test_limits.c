/* Device limits (hcq_device_limits, hcq/device.h): the CPU states its own limits and runs what they
 * allow; a portable device refuses what some backend would refuse, at hcq_launch, graph creation, a
 * replay's symbolic dims and buffer creation, with a message naming the limit, the value and the
 * portable maximum. */
#include <stdatomic.h>

#include "test_util.h"

TestSuite(limits, .timeout = 60);

static _Atomic uint64_t g_threads_run;

/* Counts the threads of its group, as a CPU kernel loops over them. */
static void count_threads(void *const *bufs, const int32_t *vals, const hcq_launch_t *l) {
  (void)bufs, (void)vals;
  atomic_fetch_add(&g_threads_run, (uint64_t)l->lsz[0] * l->lsz[1] * l->lsz[2]);
}

static hcq_device_t *open_portable(const char *name) {
  hcq_device_options_t o = {.portable = true};
  hcq_device_t *d = NULL;
  OK(hcq_device_open_ex(name, &o, &d));
  return d;
}

static hcq_launch_desc_t launch_of(hcq_program_t *p, uint32_t gx, uint32_t lx, uint32_t ly,
                                   uint32_t lz) {
  return (hcq_launch_desc_t){.program = p, .global = {gx, 1, 1}, .local = {lx, ly, lz}};
}

Test(limits, cpu_states_its_own_limits_and_runs_a_huge_group) {
  hcq_device_t *d = test_open("CPU:0");
  hcq_device_limits_t l;
  OK(hcq_device_limits(d, &l));
  cr_assert(!l.portable);
  cr_assert_eq(l.max_group_threads, UINT32_MAX,
               "a CPU kernel loops over its threads: no group limit");
  cr_assert_eq(l.max_work_items, UINT64_C(1) << 40);
  cr_assert_eq(l.max_kernel_buffers, HCQ_MAX_KERNEL_BUFS);
  cr_assert_eq(l.shared_memory, 0u, "CPU kernels have no shared memory");
  hcq_program_t *p = NULL;
  OK(hcq_program_create_fn(d, "count_threads", count_threads, &p));
  atomic_store(&g_threads_run, 0);
  hcq_launch_desc_t big = launch_of(p, 1, 1u << 20, 1, 1);
  OK(hcq_launch(&big));
  OK(hcq_device_synchronize(d));
  cr_assert_eq(atomic_load(&g_threads_run), UINT64_C(1) << 20);
  FAILS(hcq_device_limits(d, NULL), HCQ_INVALID_ARGUMENT, "hcq_device_limits: out is NULL");
  FAILS(hcq_device_limits(NULL, &l), HCQ_INVALID_ARGUMENT, "hcq_device_limits");
  hcq_program_release(p);
  test_close(d);
}

Test(limits, portable_set_is_the_documented_constants) {
  hcq_device_limits_t p;
  hcq_device_limits_portable(&p);
  cr_assert(p.portable);
  cr_assert_eq(p.max_group_threads, 1024u);
  cr_assert_eq(p.max_group_size[2], 64u);
  cr_assert_eq(p.max_grid[0], 65535u);
  cr_assert_eq(p.max_kernel_buffers, 30u);
  cr_assert_eq(p.max_buffer_size, UINT64_C(1) << 30);
  cr_assert_eq(p.view_offset_alignment, 16u);
  hcq_device_t *d = open_portable("CPU:1");
  hcq_device_limits_t l;
  OK(hcq_device_limits(d, &l));
  cr_assert(l.portable);
  cr_assert_eq(l.max_group_threads, 1024u);
  cr_assert_eq(l.max_grid[1], 65535u);
  cr_assert_eq(l.max_work_items, UINT64_C(1) << 40, "the CPU's own limit is the smaller one");
  cr_assert_eq(l.shared_memory, 0u, "portable mode gives the CPU no shared memory");
  test_close(d);
}

Test(limits, portable_launch_refuses_what_a_gpu_would) {
  hcq_device_t *d = open_portable("CPU:2");
  hcq_program_t *p = NULL;
  OK(hcq_program_create_fn(d, "count_threads", count_threads, &p));
  hcq_launch_desc_t l = launch_of(p, 1, 1u << 20, 1, 1);
  FAILS(hcq_launch(&l), HCQ_OUT_OF_RANGE,
        "launch of count_threads: local size 1048576x1x1 = 1048576 exceeds the portable limit of "
        "1024 threads per "
        "work-group (HCQ_PORTABLE)");
  l = launch_of(p, 1, 1, 1, 128);
  FAILS(hcq_launch(&l), HCQ_OUT_OF_RANGE, "local[2] 128 exceeds the portable limit of 64 threads",
        "(HCQ_PORTABLE)");
  l = launch_of(p, 70000, 1, 1, 1);
  FAILS(hcq_launch(&l), HCQ_OUT_OF_RANGE,
        "global[0] 70000 exceeds the portable limit of 65535 work-groups");
  /* At the limits it runs, every thread. */
  atomic_store(&g_threads_run, 0);
  l = launch_of(p, 65535, 1024, 1, 1);
  OK(hcq_launch(&l));
  l = launch_of(p, 1, 16, 1, 64);
  OK(hcq_launch(&l));
  OK(hcq_device_synchronize(d));
  cr_assert_eq(atomic_load(&g_threads_run), UINT64_C(65535) * 1024 + 16 * 64);
  /* 31 buffer arguments: Metal's table has room for 30 and the values. */
  hcq_buffer_t *b = test_buffer(d, 64), *bufs[31];
  for (int i = 0; i < 31; i++) bufs[i] = b;
  l = launch_of(p, 1, 1, 1, 1);
  l.bufs = bufs, l.nbufs = 31;
  FAILS(hcq_launch(&l), HCQ_OUT_OF_RANGE,
        "buffer argument count 31 exceeds the portable limit of 30 buffers per launch");
  l.nbufs = 30;
  OK(hcq_launch(&l));
  OK(hcq_device_synchronize(d));
  hcq_buffer_release(b);
  hcq_program_release(p);
  test_close(d);
}

Test(limits, portable_graph_items_and_symbolic_dims) {
  hcq_device_t *d = open_portable("CPU:3");
  hcq_program_t *p = NULL;
  OK(hcq_program_create_fn(d, "count_threads", count_threads, &p));
  hcq_exec_item_t it = {.kind = HCQ_ITEM_KERNEL};
  it.kernel = (hcq_kernel_item_t){.program = p,
                                  .global = {hcq_imm(1), hcq_imm(1), hcq_imm(1)},
                                  .local = {hcq_imm(2048), hcq_imm(1), hcq_imm(1)}};
  hcq_graph_t *g = NULL;
  FAILS(hcq_graph_create(&it, 1, NULL, 0, NULL, 0, NULL, &g), HCQ_OUT_OF_RANGE,
        "local size 2048x1x1 = 2048 exceeds the portable limit of 1024 threads per work-group "
        "(HCQ_PORTABLE)");
  cr_assert_null(g);
  /* A symbolic group size: fine when built, refused by the replay that makes it too big. */
  hcq_expr_t *n = NULL;
  OK(hcq_var_create("n", 1, 1 << 20, &n));
  it.kernel.local[0] = hcq_sym(n);
  hcq_var_value_t v = {n, 64};
  OK(hcq_graph_create(&it, 1, NULL, 0, &v, 1, NULL, &g));
  atomic_store(&g_threads_run, 0);
  OK(hcq_graph_run(g, NULL, 0, &v, 1, true, NULL));
  cr_assert_eq(atomic_load(&g_threads_run), 64u);
  v.value = 4096;
  FAILS(hcq_graph_run(g, NULL, 0, &v, 1, true, NULL), HCQ_OUT_OF_RANGE,
        "local size 4096x1x1 = 4096 exceeds the portable limit of 1024 threads per work-group");
  cr_assert_eq(atomic_load(&g_threads_run), 64u, "the refused replay ran nothing");
  OK(hcq_graph_destroy(g));
  hcq_expr_release(n);
  hcq_program_release(p);
  test_close(d);
}

Test(limits, portable_buffers_and_views) {
  hcq_device_t *d = open_portable("CPU:4");
  hcq_buffer_t *b = NULL;
  FAILS(hcq_buffer_create(d, (UINT64_C(1) << 30) + 1, &b), HCQ_OUT_OF_RANGE,
        "buffer on CPU:4: size 1073741825 exceeds the portable limit of 1073741824 bytes "
        "(HCQ_PORTABLE)");
  cr_assert_null(b);
  b = test_buffer(d, 256);
  hcq_buffer_t *v = NULL;
  FAILS(hcq_buffer_view_create(b, 4, 16, &v), HCQ_INVALID_ARGUMENT, "offset 4",
        "not a multiple of 16 bytes", "(HCQ_PORTABLE)");
  cr_assert_null(v);
  OK(hcq_buffer_view_create(b, 32, 16, &v));
  hcq_buffer_t *vv = NULL;
  FAILS(hcq_buffer_view_create(v, 8, 8, &vv), HCQ_INVALID_ARGUMENT, "offset 40", "(HCQ_PORTABLE)");
  hcq_buffer_release(v);
  hcq_buffer_release(b);
  test_close(d);
  /* Without portable mode a view may start anywhere. */
  d = test_open("CPU:5");
  b = test_buffer(d, 256);
  OK(hcq_buffer_view_create(b, 4, 16, &v));
  hcq_buffer_release(v);
  hcq_buffer_release(b);
  test_close(d);
}
