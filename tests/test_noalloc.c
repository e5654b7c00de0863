/* Submitting a queue (and an eager launch, once warm) allocates nothing: proved with a counting
 * allocator that replaces malloc and friends in this test executable. */
#include <stdatomic.h>

#include "test_util.h"

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define REPLACES_MALLOC 0
#else
#define REPLACES_MALLOC 1
#endif

static atomic_long g_allocs;
static atomic_int g_counting;

#if REPLACES_MALLOC
extern void *__libc_malloc(size_t);
extern void *__libc_calloc(size_t, size_t);
extern void *__libc_realloc(void *, size_t);
extern void *__libc_memalign(size_t, size_t);
extern void __libc_free(void *);

static inline void count(void) {
  if (atomic_load_explicit(&g_counting, memory_order_relaxed)) atomic_fetch_add(&g_allocs, 1);
}
void *malloc(size_t n) {
  count();
  return __libc_malloc(n);
}
void *calloc(size_t a, size_t b) {
  count();
  return __libc_calloc(a, b);
}
void *realloc(void *p, size_t n) {
  count();
  return __libc_realloc(p, n);
}
void *aligned_alloc(size_t align, size_t n) {
  count();
  return __libc_memalign(align, n);
}
int posix_memalign(void **out, size_t align, size_t n) {
  count();
  *out = __libc_memalign(align, n);
  return *out ? 0 : 12;
}
void free(void *p) { __libc_free(p); }
#endif

static void start_counting(void) {
  if (!REPLACES_MALLOC)
    cr_skip_test("the sanitizers replace malloc themselves; this test runs in the plain build");
  atomic_store(&g_allocs, 0);
  atomic_store(&g_counting, 1);
}

static long stop_counting(void) {
  atomic_store(&g_counting, 0);
  return atomic_load(&g_allocs);
}

/* OK while counting: a failure stops counting before its message is made. */
#define COUNTED_OK(call)                                                       \
  do {                                                                         \
    hcq_status_t counted_st_ = (call);                                         \
    if (counted_st_) {                                                         \
      stop_counting();                                                         \
      cr_assert_fail("%s failed: %s", #call, hcq_status_message(counted_st_)); \
    }                                                                          \
  } while (0)

TestSuite(noalloc, .timeout = 60);

Test(noalloc, queue_submit_allocates_nothing) {
  hcq_device_t *d = test_open("CPU:0");
  hcq_program_t *p = test_program(d, "add_scalar", test_kernels_source);
  hcq_buffer_t *a = test_buffer_iota(d, 1024, 1, 0), *o = test_buffer(d, 4096),
               *args = test_buffer(d, 64);
  hcq_expr_t *n = NULL, *k = NULL, *r = NULL, *g = NULL;
  OK(hcq_var_create("n", 1, 1024, &n));
  OK(hcq_var_create("k", -100, 100, &k));
  OK(hcq_var_create("r", 0, 1 << 20, &r));
  const hcq_expr_t *vars[] = {n};
  OK(hcq_expr_parse("(n+63)//64", vars, 1, &g));
  hcq_signal_t *done = NULL;
  OK(hcq_signal_create(d, "done", 0, &done));
  hcq_queue_t *bound = NULL, *loose = NULL;
  for (int which = 0; which < 2; which++) {
    hcq_queue_t *q = NULL;
    OK(hcq_queue_create(HCQ_QUEUE_COMPUTE, &q));
    hcq_operand_t bufs[] = {hcq_imm((int64_t)hcq_buffer_address(o)),
                            hcq_imm((int64_t)hcq_buffer_address(a))};
    hcq_operand_t vals[] = {hcq_sym(k), hcq_sym(n)};
    OK(hcq_queue_kernargs(q, args, 0, bufs, 2, vals, 2));
    hcq_operand_t gl[3] = {hcq_sym(g), hcq_imm(1), hcq_imm(1)},
                  lo[3] = {hcq_imm(64), hcq_imm(1), hcq_imm(1)};
    OK(hcq_queue_exec(q, p, hcq_imm((int64_t)hcq_buffer_address(args)), 2, gl, lo));
    OK(hcq_queue_signal(q, hcq_imm((int64_t)hcq_signal_address(done)), hcq_sym(r)));
    if (which == 0) {
      OK(hcq_queue_bind(q, d));
      bound = q;
    } else {
      loose = q;
    }
  }
  int64_t round = 0;
  for (int which = 0; which < 2; which++) {
    hcq_queue_t *q = which ? loose : bound;
    for (int warm = 0; warm < 2; warm++) {
      hcq_var_value_t v[] = {{n, 5}, {k, 1}, {r, ++round}};
      OK(hcq_queue_submit(q, d, v, 3));
      OK(hcq_signal_wait(done, (uint64_t)round, 5000));
    }
    start_counting();
    for (int i = 0; i < 500; i++) {
      hcq_var_value_t v[] = {{n, 1 + i % 1024}, {k, i % 50}, {r, ++round}};
      COUNTED_OK(hcq_queue_submit(q, d, v, 3));
      COUNTED_OK(hcq_signal_wait(done, (uint64_t)round, 5000));
    }
    long allocs = stop_counting();
    cr_assert_eq(allocs, 0, "%s queue: %ld allocations in 500 submits", which ? "unbound" : "bound",
                 allocs);
  }
  hcq_queue_destroy(bound);
  hcq_queue_destroy(loose);
  hcq_signal_destroy(done);
  hcq_expr_release(g);
  hcq_expr_release(n);
  hcq_expr_release(k);
  hcq_expr_release(r);
  hcq_buffer_release(a);
  hcq_buffer_release(o);
  hcq_buffer_release(args);
  hcq_program_release(p);
  test_close(d);
}

Test(noalloc, warm_eager_launches_allocate_nothing) {
  hcq_device_t *d = test_open("CPU:0");
  hcq_program_t *p = test_program(d, "mul_add", test_kernels_source);
  hcq_buffer_t *x = test_buffer_iota(d, 256, 1, 0);
  int32_t v[] = {3, 1, 256};
  hcq_launch_desc_t l = {p, &x, 1, v, 3, {4, 1, 1}, {64, 1, 1}};
  for (int i = 0; i < 10; i++) OK(hcq_launch(&l));
  OK(hcq_device_synchronize(d));
  start_counting();
  for (int i = 0; i < 2000; i++) COUNTED_OK(hcq_launch(&l));
  COUNTED_OK(hcq_device_synchronize(d));
  long allocs = stop_counting();
  cr_assert_eq(allocs, 0, "%ld allocations in 2000 eager launches", allocs);
  hcq_buffer_release(x);
  hcq_program_release(p);
  test_close(d);
}

/* A replay (symbols, inputs swapped, two devices with copies) allocates nothing. */
Test(noalloc, graph_replay_allocates_nothing) {
  hcq_device_t *d0 = test_open("CPU:0"), *d1 = test_open("CPU:1");
  hcq_program_t *p = test_program(d0, "add_scalar", test_kernels_source);
  hcq_buffer_t *a = test_buffer_iota(d0, 1024, 1, 0), *a2 = test_buffer_iota(d0, 1024, 2, 0);
  hcq_buffer_t *o = test_buffer(d0, 4096), *far = test_buffer(d1, 4096);
  hcq_expr_t *n = NULL, *k = NULL, *g = NULL;
  OK(hcq_var_create("n", 1, 1024, &n));
  OK(hcq_var_create("k", -100, 100, &k));
  const hcq_expr_t *vars[] = {n};
  OK(hcq_expr_parse("(n+63)//64", vars, 1, &g));
  hcq_buffer_t *bufs[] = {o, a};
  hcq_operand_t vals[] = {hcq_sym(k), hcq_sym(n)};
  hcq_exec_item_t items[2] = {
      {.kind = HCQ_ITEM_KERNEL,
       .kernel = {p,
                  bufs,
                  2,
                  (uint32_t[]){0},
                  1,
                  vals,
                  2,
                  {hcq_sym(g), hcq_imm(1), hcq_imm(1)},
                  {hcq_imm(64), hcq_imm(1), hcq_imm(1)}}},
      {.kind = HCQ_ITEM_TRANSFER, .transfer = {far, o, 4096}},
  };
  hcq_var_value_t init[] = {{n, 5}, {k, 1}};
  hcq_graph_t *graph = NULL;
  OK(hcq_graph_create(items, 2, &a, 1, init, 2, NULL, &graph));
  for (int i = 0; i < 3; i++) OK(hcq_graph_run(graph, &a, 1, init, 2, true, NULL));
  start_counting();
  for (int i = 0; i < 500; i++) {
    hcq_var_value_t v[] = {{n, 1 + i % 1024}, {k, i % 50}};
    COUNTED_OK(hcq_graph_run(graph, i % 2 ? &a : &a2, 1, v, 2, i % 3 == 0, NULL));
  }
  long allocs = stop_counting();
  cr_assert_eq(allocs, 0, "%ld allocations in 500 replays", allocs);
  OK(hcq_graph_destroy(graph));
  hcq_expr_release(n);
  hcq_expr_release(k);
  hcq_expr_release(g);
  hcq_buffer_release(a);
  hcq_buffer_release(a2);
  hcq_buffer_release(o);
  hcq_buffer_release(far);
  hcq_program_release(p);
  test_close(d0);
  test_close(d1);
}

Test(noalloc, the_counter_sees_allocations) {
  start_counting();
  void *volatile p = malloc(32);
  free(p);
  cr_assert_eq(stop_counting(), 1, "the replacement malloc is not in use");
}
