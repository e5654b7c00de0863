/* The CUDA device and the CUDA graph, against hand-computed results and eager execution.
 *
 * Needs a CUDA driver and NVRTC: every test skips, saying why, when either is missing. CTest runs
 * this suite twice: against the real driver (the `cuda` test: skipped on machines without a GPU,
 * run by tools/gpu-check.sh on one) and against tests/fake_cuda (`cuda_fake`, two stand-in GPUs),
 * which checks hcq's side of every driver call on any machine. */
#include <dlfcn.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <time.h>

#include "test_util.h"

TestSuite(cuda, .timeout = 120);

static const char k_source[] =
    "extern \"C\" __global__ void axpb(unsigned *y, const unsigned *x, const unsigned *w, int n, "
    "int a, int b) {\n"
    "  long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;\n"
    "  if (i < n) y[i] = x[i] * (unsigned)a + w[i] + (unsigned)b;\n"
    "}\n"
    "extern \"C\" __global__ void add_const(unsigned *y, const unsigned *x, int n, int k) {\n"
    "  long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;\n"
    "  if (i < n) y[i] = x[i] + (unsigned)k;\n"
    "}\n"
    "extern \"C\" __global__ void hcq_fake_fault(unsigned *y) {\n"
    "  *(volatile unsigned *)(unsigned long long)y[0] = 1u; /* y[0] is 0: a write to address 0 */\n"
    "}\n";

/* The CPU twin of add_const, for mixed captures. */
static const char k_cpu_add_const[] =
    "void add_const(void *const *bufs, const int32_t *vals, const hcq_launch_t *l) {\n"
    "  uint32_t *y = bufs[0]; const uint32_t *x = bufs[1];\n"
    "  for (uint32_t t = 0; t < l->lsz[0]; t++) { uint64_t i = (uint64_t)l->gid[0] * l->lsz[0] + "
    "t;\n"
    "    if (i < (uint64_t)vals[0]) y[i] = x[i] + (uint32_t)vals[1]; }\n"
    "}\n";

/* Opens CUDA:index or skips the test saying why it cannot run here. */
static hcq_device_t *open_or_skip(int index) {
  char name[16];
  snprintf(name, sizeof(name), "CUDA:%d", index);
  hcq_device_t *d = NULL;
  hcq_status_t st = hcq_device_open(name, &d);
  if (st) {
    char why[600];
    snprintf(why, sizeof(why), "%s: %s", name, hcq_status_message(st));
    hcq_status_destroy(st);
    cr_skip_test("no CUDA here (%s)", why);
  }
  return d;
}

static hcq_program_t *program_or_skip(hcq_device_t *d, const char *entry) {
  hcq_program_t *p = NULL;
  hcq_status_t st = hcq_program_create(d, entry, k_source, &p);
  if (st && hcq_status_code(st) == HCQ_UNAVAILABLE) {
    char why[600];
    snprintf(why, sizeof(why), "%s", hcq_status_message(st));
    hcq_status_destroy(st);
    cr_skip_test("cannot compile CUDA C here (%s)", why);
  }
  OK(st);
  return p;
}

static void fill(uint32_t *v, size_t n, uint32_t seed) {
  for (size_t i = 0; i < n; i++) v[i] = (uint32_t)(i * 2654435761u) ^ seed;
}

/* The stand-in driver's call counters, or false on a real driver. */
typedef void (*counts_fn)(uint64_t *, uint64_t *, uint64_t *, uint64_t *, uint64_t *);
static bool fake_counts(uint64_t out[5]) {
  const char *lib = getenv("HCQ_CUDA_LIBRARY");
  if (!lib || !strstr(lib, "fake")) return false;
  void *h = dlopen(lib, RTLD_NOW | RTLD_NOLOAD);
  counts_fn fn = h ? (counts_fn)(uintptr_t)dlsym(h, "hcq_fake_cuda_counts") : NULL;
  if (fn) fn(&out[0], &out[1], &out[2], &out[3], &out[4]);
  if (h) dlclose(h);
  return fn != NULL;
}

enum { N = 4096 };

Test(cuda, eager_launch_and_host_copies_compute_the_hand_computed_result) {
  hcq_device_t *d = open_or_skip(0);
  hcq_program_t *p = program_or_skip(d, "axpb");
  cr_assert(hcq_device_caps(d) & HCQ_CAP_COMPILE_CUDA);
  static uint32_t x[N], w[N], y[N];
  fill(x, N, 1);
  fill(w, N, 2);
  hcq_buffer_t *bx = test_buffer(d, sizeof(x)), *bw = test_buffer(d, sizeof(w)),
               *by = test_buffer(d, sizeof(y));
  uint32_t zero[N];
  test_read(by, zero, sizeof(zero));
  for (int i = 0; i < N; i++) cr_assert_eq(zero[i], 0u, "new device memory is zeroed (word %d)", i);
  OK(hcq_buffer_copyin(bx, 0, x, sizeof(x)));
  OK(hcq_buffer_copyin(bw, 0, w, sizeof(w)));
  for (int rep = 0; rep < 3; rep++) {
    int32_t vals[3] = {N - 5, 3 + rep, -7};
    hcq_buffer_t *bufs[3] = {by, bx, bw};
    hcq_launch_desc_t l = {p, bufs, 3, vals, 3, {N / 128, 1, 1}, {128, 1, 1}};
    OK(hcq_launch(&l));
    test_read(by, y, sizeof(y));
    for (int i = 0; i < N; i++) {
      uint32_t want = i < N - 5 ? x[i] * (uint32_t)(3 + rep) + w[i] - 7u : (rep ? y[i] : 0u);
      cr_assert_eq(y[i], want, "launch %d, y[%d]", rep, i);
    }
  }
  /* Many launches back to back, then one synchronize: each adds 1 (the stream orders them). */
  hcq_program_t *add = program_or_skip(d, "add_const");
  for (int rep = 0; rep < 200; rep++) {
    int32_t vals[2] = {N, 1};
    hcq_buffer_t *bufs[2] = {by, by};
    hcq_launch_desc_t l = {add, bufs, 2, vals, 2, {N / 256, 1, 1}, {256, 1, 1}};
    OK(hcq_launch(&l));
  }
  OK(hcq_device_synchronize(d));
  uint32_t z[N];
  test_read(by, z, sizeof(z));
  for (int i = 0; i < N; i++) cr_assert_eq(z[i], y[i] + 200u, "z[%d]", i);
  hcq_buffer_release(bx);
  hcq_buffer_release(bw);
  hcq_buffer_release(by);
  hcq_program_release(p);
  hcq_program_release(add);
  test_close(d);
}

/* The driver's own numbers (cuMemGetInfo), not hcq's counters: a buffer's memory leaves the
 * available bytes while it lives and comes back once released. */
Test(cuda, device_memory_comes_from_the_driver_and_follows_a_buffer) {
  hcq_device_t *d = open_or_skip(0);
  const uint64_t size = UINT64_C(64) << 20;
  hcq_device_memory_t before, during, after;
  OK(hcq_device_memory(d, &before));
  cr_assert_gt(before.total, 0);
  cr_assert_leq(before.available, before.total);
  cr_assert_str_eq(before.source, "cuMemGetInfo");
  hcq_buffer_t *b = test_buffer(d, size);
  OK(hcq_device_memory(d, &during));
  cr_assert_eq(during.total, before.total);
  cr_assert_leq(during.available + size, before.available,
                "a %" PRIu64 " byte buffer: available %" PRIu64 " before, %" PRIu64
                " while it lives",
                size, before.available, during.available);
  hcq_buffer_release(b);
  OK(hcq_device_synchronize(d));
  OK(hcq_device_memory(d, &after));
  cr_assert_geq(after.available, during.available + size,
                "available %" PRIu64 " with the buffer, %" PRIu64 " after its release",
                during.available, after.available);
  cr_assert_leq(after.available, after.total);
  FAILS(hcq_device_memory(NULL, &after), HCQ_INVALID_ARGUMENT, "hcq_device_memory");
  FAILS(hcq_device_memory(d, NULL), HCQ_INVALID_ARGUMENT, "hcq_device_memory");
  test_close(d);
}

Test(cuda, copies_views_and_cpu_cuda_transfers_keep_order) {
  hcq_device_t *d = open_or_skip(0), *cpu = test_open("CPU:0");
  hcq_program_t *add = program_or_skip(d, "add_const");
  hcq_program_t *cadd = test_program(cpu, "add_const", k_cpu_add_const);
  static uint32_t host[N], out[N];
  fill(host, N, 9);
  hcq_buffer_t *c0 = test_buffer(cpu, sizeof(host)), *c1 = test_buffer(cpu, sizeof(host));
  hcq_buffer_t *g0 = test_buffer(d, sizeof(host)), *g1 = test_buffer(d, 2 * sizeof(host)),
               *gv = NULL;
  OK(hcq_buffer_view_create(g1, sizeof(host), sizeof(host), &gv));
  OK(hcq_buffer_copyin(c0, 0, host, sizeof(host)));
  for (int rep = 0; rep < 5; rep++) {
    /* CPU +1, to the GPU, GPU +10 into a view of another buffer, device to device back, GPU +100,
     * back to the CPU, CPU +1000: every step reads what the one before wrote. */
    int32_t v1[2] = {N, 1}, v2[2] = {N, 10}, v3[2] = {N, 100}, v4[2] = {N, 1000};
    hcq_buffer_t *b1[2] = {c0, c0}, *b2[2] = {gv, g0}, *b3[2] = {g0, g0}, *b4[2] = {c1, c1};
    hcq_launch_desc_t l1 = {cadd, b1, 2, v1, 2, {N / 64, 1, 1}, {64, 1, 1}};
    hcq_launch_desc_t l2 = {add, b2, 2, v2, 2, {N / 64, 1, 1}, {64, 1, 1}};
    hcq_launch_desc_t l3 = {add, b3, 2, v3, 2, {N / 64, 1, 1}, {64, 1, 1}};
    hcq_launch_desc_t l4 = {cadd, b4, 2, v4, 2, {N / 64, 1, 1}, {64, 1, 1}};
    OK(hcq_launch(&l1));
    OK(hcq_transfer(g0, c0, sizeof(host)));
    OK(hcq_launch(&l2));
    OK(hcq_transfer(g0, gv, sizeof(host)));
    OK(hcq_launch(&l3));
    OK(hcq_transfer(c1, g0, sizeof(host)));
    OK(hcq_launch(&l4));
    OK(hcq_transfer(c0, c1, sizeof(host)));
  }
  test_read(c0, out, sizeof(out));
  for (int i = 0; i < N; i++) cr_assert_eq(out[i], host[i] + 5u * 1111u, "out[%d]", i);
  hcq_buffer_release(gv);
  hcq_buffer_release(g0);
  hcq_buffer_release(g1);
  hcq_buffer_release(c0);
  hcq_buffer_release(c1);
  hcq_program_release(add);
  hcq_program_release(cadd);
  test_close(d);
  test_close(cpu);
}

Test(cuda, peer_copies_between_two_gpus) {
  hcq_device_t *d0 = open_or_skip(0);
  hcq_device_t *d1 = NULL;
  hcq_status_t st = hcq_device_open("CUDA:1", &d1);
  if (st) {
    hcq_status_destroy(st);
    test_close(d0);
    cr_skip_test("one GPU only: the two-GPU case needs CUDA:1");
  }
  hcq_program_t *a0 = program_or_skip(d0, "add_const"), *a1 = program_or_skip(d1, "add_const");
  static uint32_t host[N], out[N];
  fill(host, N, 5);
  hcq_buffer_t *b0 = test_buffer(d0, sizeof(host)), *b1 = test_buffer(d1, sizeof(host));
  OK(hcq_buffer_copyin(b0, 0, host, sizeof(host)));
  for (int rep = 0; rep < 4; rep++) {
    int32_t v[2] = {N, 3};
    hcq_buffer_t *x0[2] = {b0, b0}, *x1[2] = {b1, b1};
    hcq_launch_desc_t l0 = {a0, x0, 2, v, 2, {N / 128, 1, 1}, {128, 1, 1}};
    hcq_launch_desc_t l1 = {a1, x1, 2, v, 2, {N / 128, 1, 1}, {128, 1, 1}};
    OK(hcq_launch(&l0));
    OK(hcq_transfer(b1, b0, sizeof(host)));
    OK(hcq_launch(&l1));
    OK(hcq_transfer(b0, b1, sizeof(host)));
  }
  test_read(b0, out, sizeof(out));
  for (int i = 0; i < N; i++) cr_assert_eq(out[i], host[i] + 24u, "out[%d]", i);
  hcq_buffer_release(b0);
  hcq_buffer_release(b1);
  hcq_program_release(a0);
  hcq_program_release(a1);
  test_close(d1);
  test_close(d0);
}

/* A graph of four kernels: item 0 reads the input, item 1 has a symbolic value, item 2 symbolic
 * launch dims, item 3 is fixed; plus a transfer into a view. */
typedef struct scene {
  hcq_device_t *d;
  hcq_program_t *axpb, *add;
  hcq_buffer_t *x, *x2, *w, *t1, *t2, *t3, *out, *view;
  hcq_expr_t *n, *groups;
  hcq_buffer_t *bufs[4][3];
  uint32_t outs[1];
  hcq_operand_t vals[4][3];
  hcq_exec_item_t items[5];
} scene_t;

static void scene_open(scene_t *s) {
  memset(s, 0, sizeof(*s));
  s->d = open_or_skip(0);
  s->axpb = program_or_skip(s->d, "axpb");
  s->add = program_or_skip(s->d, "add_const");
  static uint32_t a[N], b[N], c[N];
  fill(a, N, 11);
  fill(b, N, 12);
  fill(c, N, 13);
  s->x = test_buffer(s->d, sizeof(a));
  s->x2 = test_buffer(s->d, sizeof(a));
  s->w = test_buffer(s->d, sizeof(a));
  s->t1 = test_buffer(s->d, sizeof(a));
  s->t2 = test_buffer(s->d, sizeof(a));
  s->t3 = test_buffer(s->d, sizeof(a));
  s->out = test_buffer(s->d, 2 * sizeof(a));
  OK(hcq_buffer_view_create(s->out, sizeof(a), sizeof(a), &s->view));
  OK(hcq_buffer_copyin(s->x, 0, a, sizeof(a)));
  OK(hcq_buffer_copyin(s->x2, 0, b, sizeof(b)));
  OK(hcq_buffer_copyin(s->w, 0, c, sizeof(c)));
  OK(hcq_var_create("n", 0, N, &s->n));
  hcq_expr_t *c63 = hcq_expr_const(63), *c64 = hcq_expr_const(64);
  hcq_expr_t *sum = hcq_expr_binary(HCQ_EXPR_ADD, s->n, c63);
  s->groups = hcq_expr_binary(HCQ_EXPR_FLOORDIV, sum, c64);
  hcq_expr_release(c63);
  hcq_expr_release(c64);
  hcq_expr_release(sum);
  s->outs[0] = 0;
  hcq_buffer_t *b0[3] = {s->t1, s->x, s->w}, *b1[2] = {s->t2, s->t1}, *b2[2] = {s->t3, s->t2},
               *b3[3] = {s->out, s->t3, s->t1};
  memcpy(s->bufs[0], b0, sizeof(b0));
  memcpy(s->bufs[1], b1, sizeof(b1));
  memcpy(s->bufs[2], b2, sizeof(b2));
  memcpy(s->bufs[3], b3, sizeof(b3));
  hcq_operand_t v0[3] = {hcq_imm(N), hcq_imm(3), hcq_imm(1)}, v1[2] = {hcq_imm(N), hcq_sym(s->n)},
                v2[2] = {hcq_sym(s->n), hcq_imm(7)}, v3[3] = {hcq_imm(N), hcq_imm(2), hcq_imm(0)};
  memcpy(s->vals[0], v0, sizeof(v0));
  memcpy(s->vals[1], v1, sizeof(v1));
  memcpy(s->vals[2], v2, sizeof(v2));
  memcpy(s->vals[3], v3, sizeof(v3));
  hcq_program_t *progs[4] = {s->axpb, s->add, s->add, s->axpb};
  size_t nb[4] = {3, 2, 2, 3};
  for (int j = 0; j < 4; j++) {
    hcq_kernel_item_t k = {progs[j],   s->bufs[j],         nb[j], s->outs, 1,
                           s->vals[j], nb[j] == 3 ? 3 : 2, {{0}}, {{0}}};
    for (int i = 0; i < 3; i++)
      k.global[i] = hcq_imm(i ? 1 : N / 64), k.local[i] = hcq_imm(i ? 1 : 64);
    if (j == 2) k.global[0] = hcq_sym(s->groups);
    s->items[j] = (hcq_exec_item_t){.kind = HCQ_ITEM_KERNEL, .kernel = k};
  }
  s->items[4] =
      (hcq_exec_item_t){.kind = HCQ_ITEM_TRANSFER, .transfer = {s->view, s->t2, sizeof(a)}};
}

static void scene_close(scene_t *s) {
  hcq_buffer_t *all[] = {s->x, s->x2, s->w, s->t1, s->t2, s->t3, s->view, s->out};
  for (size_t i = 0; i < sizeof(all) / sizeof(all[0]); i++) hcq_buffer_release(all[i]);
  hcq_expr_release(s->n);
  hcq_expr_release(s->groups);
  hcq_program_release(s->axpb);
  hcq_program_release(s->add);
  test_close(s->d);
}

/* The scene's outputs after the items ran eagerly with this input and n (the ground truth). */
static void eager_result(scene_t *s, hcq_buffer_t *input, int64_t n, uint32_t *out, uint32_t *t3) {
  hcq_var_value_t vv = {s->n, n};
  for (int j = 0; j < 5; j++) {
    hcq_exec_item_t it = s->items[j];
    hcq_buffer_t *bufs[3];
    if (j == 0) {
      memcpy(bufs, s->bufs[0], sizeof(bufs));
      bufs[1] = input;
      it.kernel.bufs = bufs;
    }
    OK(hcq_exec_item_run(&it, &vv, 1));
  }
  test_read(s->out, out, 2 * N * sizeof(uint32_t));
  test_read(s->t3, t3, N * sizeof(uint32_t));
}

Test(cuda, graph_replays_equal_eager_with_input_swaps_variables_and_symbolic_dims) {
  scene_t s;
  scene_open(&s);
  hcq_var_value_t vv = {s.n, N};
  hcq_graph_t *g = NULL;
  hcq_buffer_t *in[1] = {s.x};
  OK(hcq_graph_create(s.items, 5, in, 1, &vv, 1, NULL, &g));
  cr_assert_str_eq(hcq_graph_kind(g), "cuda");
  static uint32_t want_out[2 * N], want_t3[N], got_out[2 * N], got_t3[N];
  struct {
    hcq_buffer_t *input;
    int64_t n;
  } runs[] = {{s.x, N}, {s.x2, N}, {s.x2, 100}, {s.x, 0}, {s.x, 65}, {s.x2, N}};
  for (size_t r = 0; r < sizeof(runs) / sizeof(runs[0]); r++) {
    /* Same starting contents for both: zero the intermediates. */
    static const uint32_t zeros[2 * N];
    hcq_buffer_t *clear[] = {s.t1, s.t2, s.t3, s.out};
    for (int i = 0; i < 4; i++)
      OK(hcq_buffer_copyin(clear[i], 0, zeros, i == 3 ? sizeof(zeros) : sizeof(zeros) / 2));
    eager_result(&s, runs[r].input, runs[r].n, want_out, want_t3);
    for (int i = 0; i < 4; i++)
      OK(hcq_buffer_copyin(clear[i], 0, zeros, i == 3 ? sizeof(zeros) : sizeof(zeros) / 2));
    hcq_var_value_t rv = {s.n, runs[r].n};
    uint64_t ns = 0;
    OK(hcq_graph_run(g, &runs[r].input, 1, &rv, 1, r % 2 == 0, r % 2 == 0 ? &ns : NULL));
    test_read(s.out, got_out, sizeof(got_out));
    test_read(s.t3, got_t3, sizeof(got_t3));
    cr_assert_arr_eq(got_out, want_out, sizeof(got_out), "run %zu: out differs from eager", r);
    cr_assert_arr_eq(got_t3, want_t3, sizeof(got_t3), "run %zu: t3 differs from eager", r);
    if (r % 2 == 0) cr_assert_gt(ns, 0u, "run %zu: a waited replay is timed (CUDA events)", r);
  }
  hcq_graph_stats_t stats;
  hcq_graph_stats(g, &stats);
  cr_assert_eq(stats.replays, 6u);
  cr_assert_eq(stats.updatable_nodes, 3u, "item 0 (input), 1 (value n) and 2 (n, dims) can change");
  OK(hcq_graph_destroy(g));
  scene_close(&s);
}

Test(cuda, a_replay_sets_params_only_for_nodes_that_changed) {
  scene_t s;
  scene_open(&s);
  hcq_var_value_t vv = {s.n, N};
  hcq_graph_t *g = NULL;
  hcq_buffer_t *in[1] = {s.x};
  OK(hcq_graph_create(s.items, 5, in, 1, &vv, 1, NULL, &g));
  struct {
    hcq_buffer_t *input;
    int64_t n;
    uint64_t updates; /* nodes that changed, counted by hand */
    const char *why;
  } runs[] = {
      {s.x, N, 0, "nothing changed since the build"},
      {s.x, N, 0, "nothing changed again"},
      {s.x2, N, 1, "the input of item 0"},
      {s.x2, N, 0, "nothing"},
      {s.x2, N - 1, 2, "n: item 1's value and item 2's value (its dims stay 64)"},
      {s.x2, 64, 2, "n: item 1's value, item 2's value and dims (one set each)"},
      {s.x, 64, 1, "the input only"},
      {s.x, 0, 2,
       "n = 0: item 1's value; item 2 is disabled (an empty launch), its params are left as they "
       "were"},
      {s.x, 0, 0, "nothing"},
      {s.x, 10, 3, "item 1's value, item 2's params and enabled again"},
  };
  uint64_t before[5] = {0}, after[5] = {0};
  bool fake = fake_counts(before);
  for (size_t r = 0; r < sizeof(runs) / sizeof(runs[0]); r++) {
    if (fake) fake_counts(before);
    hcq_var_value_t rv = {s.n, runs[r].n};
    OK(hcq_graph_run(g, &runs[r].input, 1, &rv, 1, true, NULL));
    hcq_graph_stats_t st;
    hcq_graph_stats(g, &st);
    cr_assert_eq(st.last_replay_updates, runs[r].updates,
                 "run %zu (%s): %llu driver parameter calls", r, runs[r].why,
                 (unsigned long long)st.last_replay_updates);
    if (fake) {
      fake_counts(after);
      uint64_t driver = (after[0] - before[0]) + (after[1] - before[1]) + (after[2] - before[2]);
      cr_assert_eq(driver, st.last_replay_updates, "run %zu: the driver saw %llu calls", r,
                   (unsigned long long)driver);
      cr_assert_eq(after[3] - before[3], 1u, "run %zu: one cuGraphLaunch per replay", r);
    }
  }
  OK(hcq_graph_destroy(g));
  scene_close(&s);
}

Test(cuda, jit_batches_close_where_the_device_kind_changes_and_mixed_captures_replay) {
  hcq_device_t *d = open_or_skip(0), *cpu = test_open("CPU:0");
  hcq_program_t *g_add = program_or_skip(d, "add_const");
  hcq_program_t *c_add = test_program(cpu, "add_const", k_cpu_add_const);
  static uint32_t host[N], out[N];
  fill(host, N, 21);
  hcq_buffer_t *cin = test_buffer(cpu, sizeof(host)), *cin2 = test_buffer(cpu, sizeof(host));
  hcq_buffer_t *ca = test_buffer(cpu, sizeof(host)), *cb = test_buffer(cpu, sizeof(host));
  hcq_buffer_t *ga = test_buffer(d, sizeof(host)), *gb = test_buffer(d, sizeof(host));
  OK(hcq_buffer_copyin(cin, 0, host, sizeof(host)));
  for (int i = 0; i < N; i++) host[i] += 7;
  OK(hcq_buffer_copyin(cin2, 0, host, sizeof(host)));
  int32_t v1[2] = {N, 1}, v10[2] = {N, 10};
  hcq_buffer_t *p0[2] = {ca, cin}, *p1[2] = {ca, ca}, *p2[2] = {ga, ga}, *p3[2] = {gb, ga},
               *p4[2] = {gb, gb}, *p5[2] = {cb, cb}, *p6[2] = {cb, cb};
  hcq_capture_t *c = NULL;
  OK(hcq_capture_begin(&c));
  hcq_launch_desc_t l;
  l = (hcq_launch_desc_t){c_add, p0, 2, v1, 2, {N / 64, 1, 1}, {64, 1, 1}};
  OK(hcq_launch(&l));
  l.bufs = p1;
  OK(hcq_launch(&l));
  OK(hcq_transfer(ga, ca, sizeof(host)));
  l = (hcq_launch_desc_t){g_add, p2, 2, v10, 2, {N / 64, 1, 1}, {64, 1, 1}};
  OK(hcq_launch(&l));
  l.bufs = p3;
  OK(hcq_launch(&l));
  l.bufs = p4;
  OK(hcq_launch(&l));
  OK(hcq_transfer(cb, gb, sizeof(host)));
  l = (hcq_launch_desc_t){c_add, p5, 2, v1, 2, {N / 64, 1, 1}, {64, 1, 1}};
  OK(hcq_launch(&l));
  l.bufs = p6;
  OK(hcq_launch(&l));
  hcq_jit_t *jit = NULL;
  OK(hcq_capture_end(c, &cin, 1, NULL, 0, NULL, &jit));
  test_read(cb, out, sizeof(out));
  for (int i = 0; i < N; i++)
    cr_assert_eq(out[i], host[i] - 7u + 2u + 30u + 2u, "capture run, out[%d]", i);
  const hcq_jit_report_t *rep = hcq_jit_report(jit);
  cr_assert_eq(rep->batches, 3u, "%s", rep->text);
  cr_assert_eq(rep->eager_items, 2u, "the two CPU<->CUDA transfers run eagerly: %s", rep->text);
  cr_assert_str_eq(hcq_graph_kind(hcq_jit_graph(jit, 0)), "hcq");
  cr_assert_str_eq(hcq_graph_kind(hcq_jit_graph(jit, 1)), "cuda");
  cr_assert_str_eq(hcq_graph_kind(hcq_jit_graph(jit, 2)), "hcq");
  for (int rep_i = 0; rep_i < 4; rep_i++) {
    hcq_buffer_t *input = rep_i % 2 ? cin2 : cin;
    OK(hcq_jit_run(jit, &input, 1, NULL, 0, rep_i == 3, NULL));
    test_read(cb, out, sizeof(out));
    for (int i = 0; i < N; i++)
      cr_assert_eq(out[i], host[i] - (rep_i % 2 ? 0u : 7u) + 34u, "replay %d, out[%d]", rep_i, i);
  }
  OK(hcq_jit_destroy(jit));
  hcq_buffer_t *all[] = {cin, cin2, ca, cb, ga, gb};
  for (size_t i = 0; i < 6; i++) hcq_buffer_release(all[i]);
  hcq_program_release(g_add);
  hcq_program_release(c_add);
  test_close(d);
  test_close(cpu);
}

Test(cuda, a_wait_that_never_completes_times_out_with_a_hang_report) {
  hcq_device_t *d = open_or_skip(0);
  hcq_signal_t *gate = NULL, *done = NULL;
  OK(hcq_signal_create(d, "gate", 0, &gate));
  OK(hcq_signal_create(d, "done", 0, &done));
  hcq_queue_t *q = NULL;
  OK(hcq_queue_create(HCQ_QUEUE_COMPUTE, &q));
  OK(hcq_queue_wait(q, hcq_imm((int64_t)hcq_signal_address(gate)), hcq_imm(1)));
  OK(hcq_queue_signal(q, hcq_imm((int64_t)hcq_signal_address(done)), hcq_imm(5)));
  OK(hcq_queue_submit(q, d, NULL, 0));
  hcq_status_t st = hcq_signal_wait(done, 5, 300);
  FAILS(st, HCQ_TIMEOUT, "\"done\"", "hang report", "CUDA:0", "compute queue",
        "wait \"gate\" >= 1");
  hcq_signal_set(gate, 1);
  OK(hcq_signal_wait(done, 5, 20000));
  hcq_queue_destroy(q);
  hcq_signal_destroy(gate);
  hcq_signal_destroy(done);
  test_close(d);
}

Test(cuda, a_faulting_kernel_loses_the_device_at_once_not_at_the_timeout) {
  hcq_device_t *d = open_or_skip(0);
  hcq_program_t *p = program_or_skip(d, "hcq_fake_fault");
  hcq_buffer_t *b = test_buffer(d, 64);
  hcq_launch_desc_t l = {p, &b, 1, NULL, 0, {1, 1, 1}, {1, 1, 1}};
  struct timespec t0, t1;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  /* The fault may surface in the launch's own later driver calls, or in the wait after it. */
  hcq_status_t st = test_launch_and_wait(&l, d);
  clock_gettime(CLOCK_MONOTONIC, &t1);
  double s = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) / 1e9;
  FAILS(st, HCQ_DEVICE_LOST, "CUDA:0", "illegal");
  cr_assert_lt(s, 10.0, "the fault surfaced after %.1f s (the wait timeout is 30 s)", s);
  hcq_buffer_release(b);
  hcq_program_release(p);
  OK(hcq_device_close(d));
}

Test(cuda, a_launch_past_the_gpu_limits_fails_cleanly_and_the_device_keeps_working) {
  hcq_device_t *d = open_or_skip(0);
  hcq_program_t *p = program_or_skip(d, "add_const");
  hcq_buffer_t *b = test_buffer(d, 4 * N);
  int32_t v[2] = {N, 1};
  hcq_buffer_t *bufs[2] = {b, b};
  hcq_launch_desc_t l = {p, bufs, 2, v, 2, {1, 1, 1}, {4096, 1, 1}};
  FAILS(hcq_launch(&l), HCQ_OUT_OF_RANGE, "add_const", "CUDA:0", "limit");
  hcq_launch_desc_t wrong = {p, bufs, 1, v, 2, {1, 1, 1}, {64, 1, 1}};
  FAILS(hcq_launch(&wrong), HCQ_INVALID_ARGUMENT, "takes 2 buffers");
  l.local[0] = 256;
  l.global[0] = N / 256;
  OK(hcq_launch(&l));
  uint32_t out[N];
  test_read(b, out, sizeof(out));
  for (int i = 0; i < N; i++) cr_assert_eq(out[i], 1u);
  hcq_buffer_release(b);
  hcq_program_release(p);
  test_close(d);
}

/* A CUDA graph replay whose own wait (wait=true) times out says it was queued, so a caller retrying
 * on TIMEOUT does not launch it twice; it then runs exactly once. */
Test(cuda, a_timed_out_graph_replay_says_it_was_queued) {
  setenv("HCQ_WAIT_TIMEOUT_MS", "500", 1);
  hcq_device_t *d = open_or_skip(0);
  hcq_program_t *add = program_or_skip(d, "add_const");
  hcq_buffer_t *y = test_buffer(d, N * 4);
  uint32_t zero[N] = {0};
  OK(hcq_buffer_copyin(y, 0, zero, sizeof(zero)));
  OK(hcq_device_synchronize(d));
  hcq_signal_t *gate = NULL;
  OK(hcq_signal_create(d, "gate", 0, &gate));
  hcq_queue_t *q = NULL;
  OK(hcq_queue_create(HCQ_QUEUE_COMPUTE, &q));
  OK(hcq_queue_wait(q, hcq_imm((int64_t)hcq_signal_address(gate)), hcq_imm(1)));
  hcq_buffer_t *bufs[2] = {y, y};
  hcq_operand_t vals[2] = {hcq_imm(N), hcq_imm(1)};
  hcq_exec_item_t it = {.kind = HCQ_ITEM_KERNEL,
                        .kernel = {add,
                                   bufs,
                                   2,
                                   (uint32_t[]){0},
                                   1,
                                   vals,
                                   2,
                                   {hcq_imm(N / 256), hcq_imm(1), hcq_imm(1)},
                                   {hcq_imm(256), hcq_imm(1), hcq_imm(1)}}};
  hcq_graph_t *g = NULL;
  OK(hcq_graph_create(&it, 1, NULL, 0, NULL, 0, NULL, &g));
  cr_assert_str_eq(hcq_graph_kind(g), "cuda");
  OK(hcq_queue_submit(q, d, NULL, 0));
  FAILS(hcq_graph_run(g, NULL, 0, NULL, 0, true, NULL), HCQ_TIMEOUT, "this replay of graph#",
        "was queued", "do not run it again");
  hcq_signal_set(gate, 1);
  OK(hcq_device_synchronize(d));
  uint32_t got[N];
  test_read(y, got, sizeof(got));
  for (int i = 0; i < N; i++) cr_assert_eq(got[i], 1u, "y[%d]: the replay ran %u times", i, got[i]);
  OK(hcq_graph_destroy(g));
  hcq_queue_destroy(q);
  hcq_signal_destroy(gate);
  hcq_buffer_release(y);
  hcq_program_release(add);
  test_close(d);
}

/* The kernel's parameters come from its PTX: a launch, an item or a capture with fewer (or more)
 * values or buffers than the .entry takes is refused naming the kernel and both counts, before the
 * kernel could read past its argument block; a declaration must agree with the PTX. */
Test(cuda, launches_are_checked_against_the_ptx_parameter_list) {
  hcq_device_t *d = open_or_skip(0);
  hcq_program_t *p = program_or_skip(d, "add_const");
  size_t nb = 0, nv = 0;
  cr_assert(hcq_program_args(p, &nb, &nv), "the PTX tells the parameters");
  cr_assert(nb == 2 && nv == 2, "add_const takes 2 pointers and 2 ints, not %zu and %zu", nb, nv);
  hcq_buffer_t *b = test_buffer(d, 4 * 64);
  hcq_buffer_t *bufs[2] = {b, b};
  int32_t v[2] = {64, 1};
  hcq_launch_desc_t l = {p, bufs, 2, v, 1, {1, 1, 1}, {64, 1, 1}};
  FAILS(hcq_launch(&l), HCQ_INVALID_ARGUMENT, "launch of add_const", "takes 2 buffers and 2 values",
        "parameter list", "2 buffers and 1 value are passed");
  hcq_operand_t ov[1] = {hcq_imm(64)};
  hcq_exec_item_t it = {.kind = HCQ_ITEM_KERNEL,
                        .kernel = {.program = p,
                                   .bufs = bufs,
                                   .nbufs = 2,
                                   .vals = ov,
                                   .nvals = 1,
                                   .global = {hcq_imm(1), hcq_imm(1), hcq_imm(1)},
                                   .local = {hcq_imm(64), hcq_imm(1), hcq_imm(1)}}};
  hcq_graph_t *g = NULL;
  FAILS(hcq_graph_create(&it, 1, NULL, 0, NULL, 0, NULL, &g), HCQ_INVALID_ARGUMENT, "item 0",
        "add_const", "takes 2 buffers and 2 values");
  cr_assert_null(g);
  FAILS(hcq_exec_item_run(&it, NULL, 0), HCQ_INVALID_ARGUMENT, "add_const", "1 value are passed");
  FAILS(hcq_program_declare_args(p, 2, 1), HCQ_INVALID_ARGUMENT, "add_const",
        "parameter list takes 2 and 2");
  OK(hcq_program_declare_args(p, 2, 2));
  l.nvals = 2;
  OK(hcq_launch(&l));
  uint32_t out[64];
  test_read(b, out, sizeof(out));
  for (int i = 0; i < 64; i++) cr_assert_eq(out[i], 1u);
  hcq_buffer_release(b);
  hcq_program_release(p);
  test_close(d);
}

Test(cuda, an_entry_with_cpp_linkage_is_named_and_the_fix_is_said) {
  hcq_device_t *d = open_or_skip(0);
  hcq_program_t *ok = program_or_skip(d, "add_const"); /* skips where NVRTC is missing */
  hcq_program_release(ok);
  static const char cpp[] =
      "__global__ void scale_cpp(unsigned *y, int n) { if ((int)threadIdx.x < n) y[threadIdx.x] *= "
      "2u; }\n";
  hcq_program_t *p = NULL;
  FAILS(hcq_program_create(d, "scale_cpp", cpp, &p), HCQ_COMPILE_ERROR, "scale_cpp",
        "_Z9scale_cppPji", "declare it extern \"C\"");
  cr_assert_null(p);
  test_close(d);
}

/* Runs fn(arg) on a thread and waits up to ms for it to return: false when it is still inside
 * (the caller then unblocks it and fails the test, rather than hanging until the suite's timeout).
 */
typedef struct bounded_call {
  void (*fn)(void *);
  void *arg;
  pthread_t thread;
  atomic_bool done;
} bounded_call_t;

static void *bounded_main(void *p) {
  bounded_call_t *c = p;
  c->fn(c->arg);
  atomic_store(&c->done, true);
  return NULL;
}

static bool returns_within(bounded_call_t *c, int ms) {
  atomic_store(&c->done, false);
  cr_assert_eq(pthread_create(&c->thread, NULL, bounded_main, c), 0);
  for (int i = 0; i < ms && !atomic_load(&c->done); i++) {
    struct timespec ts = {0, 1000000};
    nanosleep(&ts, NULL);
  }
  return atomic_load(&c->done);
}

typedef struct cpu_gpu_copies {
  hcq_buffer_t *cpu_dst, *gpu_src, *gpu_dst, *cpu_src;
  hcq_status_t st;
} cpu_gpu_copies_t;

static void do_cpu_gpu_copies(void *p) {
  cpu_gpu_copies_t *c = p;
  c->st = hcq_transfer(c->cpu_dst, c->gpu_src, 4 * N);
  if (!c->st) c->st = hcq_transfer(c->gpu_dst, c->cpu_src, 4 * N);
}

/* With the stand-in's synchronous pageable copies (the real driver's behaviour for ordinary host
 * memory), a transfer between a CPU device and a GPU whose copy stream waits on the host must still
 * return at once: the host is the one that will open the gate. */
Test(cuda, cpu_gpu_transfers_return_while_the_copy_stream_waits_on_the_host) {
  setenv("HCQ_FAKE_CUDA_SYNC_PAGEABLE", "1", 1);
  /* Two CPU devices: a transfer from a CPU device first waits on the host for that device's earlier
   * work, which for CPU:0 would include the first transfer (behind the gate). */
  hcq_device_t *d = open_or_skip(0), *cpu = test_open("CPU:0"), *cpu1 = test_open("CPU:1");
  static uint32_t a[N], b[N], got[N];
  fill(a, N, 31);
  fill(b, N, 32);
  cpu_gpu_copies_t c = {test_buffer(cpu, 4 * N), test_buffer(d, 4 * N), test_buffer(d, 4 * N),
                        test_buffer(cpu1, 4 * N), NULL};
  OK(hcq_buffer_copyin(c.gpu_src, 0, a, sizeof(a)));
  OK(hcq_buffer_copyin(c.cpu_src, 0, b, sizeof(b)));
  OK(hcq_device_synchronize(d));
  OK(hcq_device_synchronize(cpu1));
  hcq_signal_t *gate = NULL;
  OK(hcq_signal_create(d, "gate", 0, &gate));
  hcq_queue_t *q = test_gate_queue(d, HCQ_QUEUE_COPY, gate, 1);
  bounded_call_t call = {do_cpu_gpu_copies, &c};
  bool returned = returns_within(&call, 5000);
  hcq_signal_set(gate, 1);
  pthread_join(call.thread, NULL);
  cr_assert(
      returned,
      "hcq_transfer between CPU:0 and CUDA:0 blocked the host while the copy stream waited on the "
      "gate only the host sets (a synchronous cuMemcpyAsync of pageable memory)");
  OK(c.st);
  OK(hcq_device_synchronize(d));
  OK(hcq_device_synchronize(cpu));
  test_read(c.cpu_dst, got, sizeof(got));
  cr_assert_arr_eq(got, a, sizeof(a), "GPU -> CPU, after the gate");
  test_read(c.gpu_dst, got, sizeof(got));
  cr_assert_arr_eq(got, b, sizeof(b), "CPU -> GPU, after the gate");
  /* Larger than one stage: the chunks stay in order. */
  static uint32_t big[3 * 262144 + 7], big_got[3 * 262144 + 7];
  fill(big, sizeof(big) / 4, 33);
  hcq_buffer_t *cbig = test_buffer(cpu, sizeof(big)), *gbig = test_buffer(d, sizeof(big)),
               *cback = test_buffer(cpu, sizeof(big));
  OK(hcq_buffer_copyin(cbig, 0, big, sizeof(big)));
  OK(hcq_transfer(gbig, cbig, sizeof(big)));
  OK(hcq_transfer(cback, gbig, sizeof(big)));
  test_read(cback, big_got, sizeof(big_got));
  cr_assert_arr_eq(big_got, big, sizeof(big), "a multi-chunk round trip");
  hcq_buffer_t *all[] = {c.cpu_dst, c.gpu_src, c.gpu_dst, c.cpu_src, cbig, gbig, cback};
  for (size_t i = 0; i < sizeof(all) / sizeof(all[0]); i++) hcq_buffer_release(all[i]);
  hcq_queue_destroy(q);
  hcq_signal_destroy(gate);
  test_close(d);
  test_close(cpu);
  test_close(cpu1);
}

typedef struct sync_window {
  hcq_device_t *d;
  hcq_program_t *add;
  hcq_buffer_t *y, *x;
  int phase;
  hcq_status_t st;
} sync_window_t;

static hcq_signal_t *g_window_stamp; /* a signal of the CUDA device, for phase 4 */

static void in_the_window(void *p) {
  sync_window_t *w = p;
  if (w->phase == 0) {
    hcq_memory_usage_t u;
    /* reclaims: the released buffer reaches the backend */
    w->st = hcq_device_memory_usage(w->d, &u);
  } else if (w->phase == 1) {
    hcq_signal_t *late = NULL;
    w->st = hcq_signal_create(w->d, "late", 0, &late);
    if (!w->st) hcq_signal_destroy(late);
  } else if (w->phase == 3) {
    static uint32_t in[N], out[N];
    fill(in, N, 41);
    w->st = hcq_buffer_copyin(w->x, 0, in, sizeof(in)); /* the first host copies: staging buffers */
    if (!w->st) w->st = hcq_buffer_copyout(w->x, 0, out, sizeof(out));
    if (!w->st && memcmp(in, out, sizeof(in)))
      w->st = hcq_status_make(HCQ_INTERNAL, "the copy-out differs from the copy-in");
  } else if (w->phase == 4) {
    /* The first TIMESTAMP into GPU-mapped memory: the timestamp kernel's first launch. */
    hcq_queue_t *tq = NULL;
    w->st = hcq_queue_create(HCQ_QUEUE_COMPUTE, &tq);
    if (!w->st)
      w->st = hcq_queue_timestamp(tq, hcq_imm((int64_t)hcq_signal_address(g_window_stamp)));
    if (!w->st)
      w->st =
          hcq_queue_signal(tq, hcq_imm((int64_t)hcq_signal_address(g_window_stamp)), hcq_imm(1));
    if (!w->st) w->st = hcq_queue_submit(tq, w->d, NULL, 0);
    hcq_queue_destroy(tq);
  } else {
    int32_t v[2] = {N, 5};
    hcq_buffer_t *bufs[2] = {w->y, w->y};
    hcq_launch_desc_t l = {w->add, bufs, 2, v, 2, {N / 256, 1, 1}, {256, 1, 1}};
    w->st = hcq_launch(&l); /* the kernel's first launch */
  }
}

/* With the stand-in's implicit synchronisation (cuMemFree, cuMemFreeHost, cuMemHostAlloc and a
 * lazily loaded function's first launch wait for every stream, as the real driver may), freeing
 * memory, making a signal and launching a new kernel while a stream waits on the host must not
 * block. */
Test(cuda, calls_that_may_synchronise_stay_out_of_a_wait_on_the_host) {
  setenv("HCQ_FAKE_CUDA_IMPLICIT_SYNC", "1", 1);
  hcq_device_t *d = open_or_skip(0);
  sync_window_t w = {
      d, program_or_skip(d, "add_const"), test_buffer(d, 4 * N), test_buffer(d, 4 * N), 0, NULL};
  hcq_buffer_t *doomed = test_buffer(d, 4 * N);
  hcq_signal_t *gate = NULL, *passed = NULL;
  OK(hcq_signal_create(d, "gate", 0, &gate));
  OK(hcq_signal_create(d, "passed", 0, &passed));
  /* Released under pending work: the core keeps it until the compute stream passes that work. */
  hcq_queue_t *q = NULL;
  OK(hcq_queue_create(HCQ_QUEUE_COMPUTE, &q));
  OK(hcq_queue_wait(q, hcq_imm((int64_t)hcq_signal_address(gate)), hcq_imm(1)));
  OK(hcq_queue_signal(q, hcq_imm((int64_t)hcq_signal_address(passed)), hcq_imm(1)));
  OK(hcq_queue_submit(q, d, NULL, 0));
  hcq_buffer_release(doomed);
  hcq_signal_set(gate, 1);
  OK(hcq_signal_wait(passed, 1, 20000));
  static const char *const what[] = {"freeing a released buffer (cuMemFree)",
                                     "making a signal (cuMemHostAlloc)",
                                     "the first launch of a kernel the driver loads lazily",
                                     "the first host copies (staging buffers: cuMemHostAlloc)",
                                     "the first timestamp (the timestamp kernel's first launch)"};
  OK(hcq_signal_create(d, "stamp", 0, &g_window_stamp));
  enum { PHASES = 5 };
  hcq_queue_t *gates[PHASES];
  for (int phase = 0; phase < PHASES; phase++) {
    /* The compute stream waits for the host again. */
    gates[phase] = test_gate_queue(d, HCQ_QUEUE_COMPUTE, gate, (uint64_t)phase + 2);
    w.phase = phase;
    bounded_call_t call = {in_the_window, &w};
    bool returned = returns_within(&call, 3000);
    hcq_signal_set(gate, (uint64_t)phase + 2);
    pthread_join(call.thread, NULL);
    cr_assert(returned,
              "%s blocked the host while the compute stream of CUDA:0 waited on a signal only the "
              "host sets",
              what[phase]);
    OK(w.st);
  }
  OK(hcq_device_synchronize(d));
  uint32_t got[N];
  test_read(w.y, got, sizeof(got));
  for (int i = 0; i < N; i++) cr_assert_eq(got[i], 5u, "y[%d] after the launch behind the gate", i);
  OK(hcq_signal_wait(g_window_stamp, 1, 20000));
  cr_assert_neq(hcq_signal_timestamp(g_window_stamp), 0,
                "the timestamp behind the gate was written");
  for (int i = 0; i < PHASES; i++) hcq_queue_destroy(gates[i]);
  hcq_signal_destroy(g_window_stamp);
  hcq_queue_destroy(q);
  hcq_signal_destroy(gate);
  hcq_signal_destroy(passed);
  hcq_buffer_release(w.y);
  hcq_buffer_release(w.x);
  hcq_program_release(w.add);
  test_close(d);
}
