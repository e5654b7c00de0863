/* One conformance suite for every backend (test_backends in test_util.c): eager launches and
 * copies, and every HCQ-graph scenario, written once against the public API and run on the devices
 * of every kind of the public kind list, one suite each (conformance_CPU, conformance_VULKAN:
 * lavapipe in CI, four logical devices over one GPU with HCQ_VULKAN_VIRTUAL=1, conformance_CUDA,
 * conformance_METAL, ...), so that a new backend's kind runs it with no line here. A backend that
 * is absent here is skipped with the reason. Results are compared with eager execution of the same
 * items (the ground truth) or with values computed on the host. */
#include "core/object.h"
#include "core/options.h"
#include "core/queue.h"
#include "graph/graph_internal.h"
#include "graph/graph_testing.h"
#include "vulkan/vk_testing.h"
#include "world.h"

#define CONFORMANCE_SUITE(name, text) TestSuite(conformance_##name, .timeout = 240);
HCQ_DEVICE_KINDS(CONFORMANCE_SUITE)
#undef CONFORMANCE_SUITE

typedef void (*scenario_fn)(const test_backend_t *b);

static void run_on(const char *kind, int ndev, const char *env, scenario_fn fn) {
  /* Environment first: options are read once, by the first hcq call. */
  if (env && *env) {
    char copy[256];
    snprintf(copy, sizeof(copy), "%s", env);
    char *eq = strchr(copy, '=');
    cr_assert_not_null(eq);
    *eq = '\0';
    setenv(copy, eq + 1, 1);
  }
  const test_backend_t *b = test_backend_named(kind);
  cr_assert_not_null(b);
  const char *why = test_backend_absent(b, ndev);
  if (why) cr_skip_test("%s absent: %s", kind, why);
  fn(b);
}

/* A scenario's test in the suite of each kind: args is (name, ndev, env). */
#define SCENARIO_TEST(kind, text, name, ndev, env) \
  Test(conformance_##kind, name) { run_on(text, ndev, env, name); }
#define SCENARIO_EXPAND(...) SCENARIO_TEST(__VA_ARGS__)
#define SCENARIO_UNPACK(...) __VA_ARGS__
#define SCENARIO_ON_KIND(kind, text, args) SCENARIO_EXPAND(kind, text, SCENARIO_UNPACK args)
#define SCENARIO_ENV(name, ndev, env)                       \
  static void name(const test_backend_t *b);                \
  HCQ_DEVICE_KINDS_ARG(SCENARIO_ON_KIND, (name, ndev, env)) \
  static void name(const test_backend_t *b)
#define SCENARIO(name, ndev) SCENARIO_ENV(name, ndev, NULL)

static hcq_device_t *open_dev(const test_backend_t *b, int i) {
  char name[32];
  test_device_name(b, i, name, sizeof(name));
  return test_open(name);
}

static hcq_program_t *kernel(const test_backend_t *b, hcq_device_t *d, const char *entry) {
  return test_program(d, entry, test_backend_kernels(b));
}

static hcq_operand_t I(int64_t v) { return hcq_imm(v); }
/* A graph scenario with transfer items or items on several devices: the Metal graph holds one
 * device's kernels (docs/design.md, "The Metal graph"), so there such graphs are refused
 * (tests/test_metal.c checks how). */
static void needs_general_graph(const test_backend_t *b) {
  if (!strcmp(b->kind, "METAL")) cr_skip_test("a Metal graph holds one device's kernel items only");
}

/* ---- eager work ---- */

SCENARIO(eager_one_kernel, 1) {
  hcq_device_t *d = open_dev(b, 0);
  hcq_program_t *p = kernel(b, d, "add_scalar");
  hcq_buffer_t *a = test_buffer_iota(d, 1000, 2, 1), *out = test_buffer(d, 1000 * 4);
  hcq_buffer_t *bufs[] = {out, a};
  int32_t vals[] = {-5, 1000};
  hcq_launch_desc_t ld = {p, bufs, 2, vals, 2, {4, 1, 1}, {256, 1, 1}};
  OK(hcq_launch(&ld));
  int32_t got[1000];
  test_read(out, got, sizeof(got));
  for (int i = 0; i < 1000; i++) cr_assert_eq(got[i], i * 2 + 1 - 5, "element %d: %d", i, got[i]);
  hcq_buffer_release(a);
  hcq_buffer_release(out);
  hcq_program_release(p);
  test_close(d);
}

/* x = x*3+1 then x = x*5+2, 100 times: any reordering changes the result. */
SCENARIO(eager_two_kernels_in_order, 1) {
  hcq_device_t *d = open_dev(b, 0);
  hcq_program_t *p = kernel(b, d, "mul_add");
  enum { N = 512 };
  hcq_buffer_t *x = test_buffer_iota(d, N, 7, 3);
  int32_t v1[] = {3, 1, N}, v2[] = {5, 2, N};
  hcq_launch_desc_t l1 = {p, &x, 1, v1, 3, {2, 1, 1}, {256, 1, 1}};
  hcq_launch_desc_t l2 = {p, &x, 1, v2, 3, {N / 64, 1, 1}, {64, 1, 1}};
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

SCENARIO(eager_copy_in_and_out_at_offsets, 1) {
  hcq_device_t *d = open_dev(b, 0);
  hcq_buffer_t *buf = test_buffer(d, 100);
  uint8_t zeros[100] = {0}, got[100], src[30];
  test_read(buf, got, 100);
  cr_assert_arr_eq(got, zeros, 100, "new buffers start as zeros");
  for (int i = 0; i < 30; i++) src[i] = (uint8_t)(i + 1);
  OK(hcq_buffer_copyin(buf, 17, src, 30));
  OK(hcq_buffer_copyout(buf, 0, got, 100));
  for (int i = 0; i < 100; i++) cr_assert_eq(got[i], i >= 17 && i < 47 ? i - 16 : 0, "byte %d", i);
  uint8_t part[10];
  OK(hcq_buffer_copyout(buf, 21, part, 10));
  for (int i = 0; i < 10; i++) cr_assert_eq(part[i], 21 - 16 + i);
  hcq_buffer_release(buf);
  /* Released memory comes back zeroed for the next buffer of the same size. */
  buf = test_buffer(d, 100);
  test_read(buf, got, 100);
  cr_assert_arr_eq(got, zeros, 100, "a reused allocation starts as zeros");
  hcq_buffer_release(buf);
  test_close(d);
}

/* Staging chunks of 4 KiB: a 1 MiB + 3 bytes copy crosses 257 chunks both ways. */
SCENARIO_ENV(eager_long_copy_across_staging_chunks, 1, "HCQ_STAGING_CHUNK=4096") {
  hcq_device_t *d = open_dev(b, 0);
  const size_t n = (1 << 20) + 3;
  uint8_t *src = malloc(n), *got = malloc(n);
  for (size_t i = 0; i < n; i++) src[i] = (uint8_t)(i * 131 + (i >> 12));
  hcq_buffer_t *buf = test_buffer(d, n);
  OK(hcq_buffer_copyin(buf, 0, src, n));
  memset(src + 5000, 0xab, 100); /* the host buffer may be reused once copyin returns */
  OK(hcq_buffer_copyout(buf, 0, got, n));
  for (size_t i = 5000; i < 5100; i++) src[i] = (uint8_t)(i * 131 + (i >> 12));
  cr_assert_arr_eq(got, src, n);
  free(src);
  free(got);
  hcq_buffer_release(buf);
  test_close(d);
}

/* A kernel on device 0 writes, a transfer moves the result to device 1, a kernel there reads it,
 * and back: each step waits for the one before, across devices and queues. */
SCENARIO(eager_transfers_between_devices_are_ordered, 2) {
  hcq_device_t *d0 = open_dev(b, 0), *d1 = open_dev(b, 1);
  hcq_program_t *f0 = kernel(b, d0, "mul_add"), *f1 = kernel(b, d1, "mul_add");
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

/* Views share their base's memory: kernels and copies through views land in the base. A transfer
 * between overlapping ranges of one buffer is refused, eagerly and in a graph (GPUs leave it
 * undefined; the CUDA stand-in's copies really go wrong on overlap), and changes nothing; a copy of
 * a range onto itself is allowed. */
SCENARIO(eager_views_alias_their_base, 1) {
  hcq_device_t *d = open_dev(b, 0);
  hcq_program_t *p = kernel(b, d, "fill");
  hcq_buffer_t *base = test_buffer(d, 256 * 4), *v1 = NULL, *v2 = NULL;
  OK(hcq_buffer_view_create(base, 64 * 4, 64 * 4, &v1));
  OK(hcq_buffer_view_create(v1, 16 * 4, 8 * 4, &v2)); /* a view of a view: words 80..87 */
  int32_t f1[] = {7, 64}, f2[] = {9, 8};
  hcq_launch_desc_t l1 = {p, &v1, 1, f1, 2, {1, 1, 1}, {64, 1, 1}},
                    l2 = {p, &v2, 1, f2, 2, {1, 1, 1}, {64, 1, 1}};
  OK(hcq_launch(&l1));
  OK(hcq_launch(&l2));
  int32_t got[256], model[256] = {0};
  for (int i = 64; i < 128; i++) model[i] = 7;
  for (int i = 80; i < 88; i++) model[i] = 9;
  test_read(base, got, sizeof(got));
  cr_assert_arr_eq(got, model, sizeof(got));
  /* Overlapping transfer inside the base: words 60..91 onto 64..95. */
  hcq_buffer_t *src = NULL, *dst = NULL;
  OK(hcq_buffer_view_create(base, 60 * 4, 32 * 4, &src));
  OK(hcq_buffer_view_create(base, 64 * 4, 32 * 4, &dst));
  FAILS(hcq_transfer(dst, src, 32 * 4), HCQ_INVALID_ARGUMENT, "overlap", hcq_buffer_label(src),
        hcq_buffer_label(dst), "240..368", "256..384", "scratch");
  FAILS(hcq_transfer(src, dst, 32 * 4), HCQ_INVALID_ARGUMENT, "overlap");
  hcq_exec_item_t item = {.kind = HCQ_ITEM_TRANSFER, .transfer = {dst, src, 32 * 4}};
  hcq_graph_t *g = NULL;
  FAILS(hcq_graph_create(&item, 1, NULL, 0, NULL, 0, NULL, &g), HCQ_INVALID_ARGUMENT, "item 0",
        "overlap");
  cr_assert_null(g);
  OK(hcq_transfer(src, src, 32 * 4));
  item.transfer.dst = src;
  if (!strcmp(b->kind, "METAL")) { /* the Metal graph holds kernels only (docs/metal.md) */
    FAILS(hcq_graph_create(&item, 1, NULL, 0, NULL, 0, NULL, &g), HCQ_INVALID_ARGUMENT, "item 0",
          "kernel items only");
  } else {
    OK(hcq_graph_create(&item, 1, NULL, 0, NULL, 0, NULL, &g));
    OK(hcq_graph_run(g, NULL, 0, NULL, 0, true, NULL));
    OK(hcq_graph_destroy(g));
  }
  /* The transfer between abutting ranges is no overlap. */
  hcq_buffer_t *next = NULL;
  OK(hcq_buffer_view_create(base, 92 * 4, 32 * 4, &next));
  OK(hcq_transfer(next, src, 32 * 4));
  memcpy(model + 92, model + 60, 32 * 4);
  test_read(base, got, sizeof(got));
  cr_assert_arr_eq(got, model, sizeof(got),
                   "only the transfer between abutting ranges changed the buffer");
  hcq_buffer_release(next);
  hcq_buffer_release(src);
  hcq_buffer_release(dst);
  hcq_buffer_release(v2);
  hcq_buffer_release(v1);
  hcq_buffer_release(base);
  hcq_program_release(p);
  test_close(d);
}

/* A 4 KiB argument ring holds 128 launches' arguments: 600 launches wrap it several times, each
 * waiting for the launches that used its part of the ring. */
SCENARIO_ENV(eager_kernel_argument_ring_wraps, 1, "HCQ_KERNARGS_RING=4096") {
  hcq_device_t *d = open_dev(b, 0);
  hcq_program_t *p = kernel(b, d, "mul_add");
  enum { N = 64 };
  hcq_buffer_t *x = test_buffer_iota(d, N, 1, 1);
  uint32_t model[N];
  for (int i = 0; i < N; i++) model[i] = (uint32_t)i + 1;
  for (int r = 0; r < 600; r++) {
    int32_t v[] = {r % 3 + 1, r, N};
    hcq_launch_desc_t l = {p, &x, 1, v, 3, {1, 1, 1}, {64, 1, 1}};
    OK(hcq_launch(&l));
    for (int i = 0; i < N; i++) model[i] = model[i] * (uint32_t)(r % 3 + 1) + (uint32_t)r;
  }
  uint32_t got[N];
  test_read(x, got, sizeof(got));
  cr_assert_arr_eq(got, model, sizeof(got));
  hcq_buffer_release(x);
  hcq_program_release(p);
  test_close(d);
}

/* Every group of a 3-D grid runs once with the group size it was given; a 0 dim is refused naming
 * it and runs nothing. */
SCENARIO(eager_launch_geometry, 1) {
  hcq_device_t *d = open_dev(b, 0);
  hcq_program_t *p = kernel(b, d, "record_groups");
  hcq_buffer_t *out = test_buffer(d, 64 * 4);
  hcq_launch_desc_t l = {p, &out, 1, NULL, 0, {3, 2, 2}, {4, 2, 1}};
  OK(hcq_launch(&l));
  OK(hcq_launch(&l));
  hcq_launch_desc_t empty = {p, &out, 1, NULL, 0, {2, 0, 2}, {4, 2, 1}};
  FAILS(hcq_launch(&empty), HCQ_INVALID_ARGUMENT, "record_groups", "global[1] is 0");
  hcq_launch_desc_t one_d = {
      .program = p, .bufs = &out, .nbufs = 1, .global = {12}, .local = {16, 1, 1}};
  FAILS(hcq_launch(&one_d), HCQ_INVALID_ARGUMENT, "record_groups", "global[1] is 0");
  int32_t got[64];
  test_read(out, got, sizeof(got));
  for (int g = 0; g < 64; g++) cr_assert_eq(got[g], g < 12 ? 16 : 0, "group %d: %d", g, got[g]);
  hcq_buffer_release(out);
  hcq_program_release(p);
  test_close(d);
}

/* A program that declares its buffer and value counts refuses launches, items and item runs that
 * pass other counts, naming the kernel and both counts, before anything runs (fewer arguments than
 * a kernel reads is garbage on CPU and a crash inside the Vulkan driver). */
SCENARIO(declared_argument_counts_are_checked, 1) {
  hcq_device_t *d = open_dev(b, 0);
  hcq_program_t *p = kernel(b, d, "fill");
  hcq_buffer_t *out = test_buffer(d, 64 * 4);
  size_t nb = 9, nv = 9;
  if (!strcmp(b->kind, "CUDA")) /* the PTX's .entry parameter list tells them */
    cr_assert(hcq_program_args(p, &nb, &nv) && nb == 1 && nv == 2,
              "counts from the PTX: %zu and %zu", nb, nv);
  else
    cr_assert(!hcq_program_args(p, &nb, &nv) && nb == 0 && nv == 0,
              "no counts before the declaration");
  OK(hcq_program_declare_args(p, 1, 2));
  OK(hcq_program_declare_args(p, 1, 2)); /* the same again */
  if (!strcmp(b->kind, "CUDA"))
    FAILS(hcq_program_declare_args(p, 1, 1), HCQ_INVALID_ARGUMENT, "fill",
          "parameter list takes 1 and 2");
  else
    FAILS(hcq_program_declare_args(p, 1, 1), HCQ_FAILED_PRECONDITION, "fill",
          "declared with 1 and 2 already");
  cr_assert(hcq_program_args(p, &nb, &nv) && nb == 1 && nv == 2);
  int32_t v[2] = {7, 64};
  hcq_launch_desc_t few = {p, &out, 1, v, 1, {1, 1, 1}, {64, 1, 1}};
  FAILS(hcq_launch(&few), HCQ_INVALID_ARGUMENT, "launch of fill", "takes 1 buffer and 2 values (",
        "1 buffer and 1 value are passed");
  hcq_launch_desc_t nobuf = {p, NULL, 0, v, 2, {1, 1, 1}, {64, 1, 1}};
  FAILS(hcq_launch(&nobuf), HCQ_INVALID_ARGUMENT, "fill", "0 buffers and 2 values are passed");
  hcq_operand_t ov[2] = {I(7), I(64)};
  hcq_exec_item_t it = {.kind = HCQ_ITEM_KERNEL,
                        .kernel = {.program = p,
                                   .bufs = &out,
                                   .nbufs = 1,
                                   .vals = ov,
                                   .nvals = 1,
                                   .global = {I(1), I(1), I(1)},
                                   .local = {I(64), I(1), I(1)}}};
  hcq_graph_t *g = NULL;
  FAILS(hcq_graph_create(&it, 1, NULL, 0, NULL, 0, NULL, &g), HCQ_INVALID_ARGUMENT, "item 0",
        "fill", "takes 1 buffer and 2 values");
  cr_assert_null(g);
  FAILS(hcq_exec_item_run(&it, NULL, 0), HCQ_INVALID_ARGUMENT, "fill", "1 value are passed");
  int32_t got[64];
  test_read(out, got, sizeof(got));
  for (int i = 0; i < 64; i++)
    cr_assert_eq(got[i], 0, "a refused launch ran: out[%d] = %d", i, got[i]);
  it.kernel.nvals = 2;
  OK(hcq_graph_create(&it, 1, NULL, 0, NULL, 0, NULL, &g));
  OK(hcq_graph_run(g, NULL, 0, NULL, 0, true, NULL));
  OK(hcq_graph_destroy(g));
  test_read(out, got, sizeof(got));
  for (int i = 0; i < 64; i++) cr_assert_eq(got[i], 7, "out[%d] = %d", i, got[i]);
  hcq_buffer_release(out);
  hcq_program_release(p);
  test_close(d);
}

/* The device timeline passes 2^31 and restarts on its shadow signal while launches and copies go
 * on. */
SCENARIO(eager_timeline_wraps, 1) {
  char name[32];
  test_device_name(b, 0, name, sizeof(name));
  hcq_device_options_t opts = {.timeline_start = HCQ_TIMELINE_WRAP - 4};
  hcq_device_t *d = NULL;
  OK(hcq_device_open_ex(name, &opts, &d));
  hcq_program_t *p = kernel(b, d, "mul_add");
  enum { N = 64 };
  hcq_buffer_t *x = test_buffer_iota(d, N, 1, 0);
  uint32_t model[N];
  for (int i = 0; i < N; i++) model[i] = (uint32_t)i;
  hcq_signal_t *first = NULL, *now = NULL;
  hcq_device_timeline(d, &first, NULL);
  for (int r = 0; r < 12; r++) {
    int32_t v[] = {3, r, N};
    hcq_launch_desc_t l = {p, &x, 1, v, 3, {1, 1, 1}, {64, 1, 1}};
    OK(hcq_launch(&l));
    for (int i = 0; i < N; i++) model[i] = model[i] * 3 + (uint32_t)r;
    uint32_t got[N];
    test_read(x, got, sizeof(got));
    cr_assert_arr_eq(got, model, sizeof(got), "after launch %d", r);
  }
  uint64_t next = 0;
  hcq_device_timeline(d, &now, &next);
  cr_assert_neq(now, first, "the timeline moved to its shadow signal");
  cr_assert_lt(next, 100, "and restarted (next value %lu)", (unsigned long)next);
  hcq_buffer_release(x);
  hcq_program_release(p);
  test_close(d);
}

/* ---- HCQ graphs: replays compared with eager execution on mirror buffers ---- */

enum { N = 256 };

/* Write after write, read then write, write then read: each order is kept on one queue. */
SCENARIO(graph_orders_accesses_to_one_buffer, 1) {
  world_t w;
  world_open_on(&w, b, 1);
  int a = world_buffer(&w, 0, N, 1), x = world_buffer(&w, 0, N, 2), c = world_buffer(&w, 0, N, 3);
  world_item_t items[6];
  world_mix(&w, &items[0], a, x, c, I(2), I(1), I(N), NULL);
  world_mix(&w, &items[1], a, c, c, I(3), I(7), I(N / 2), NULL); /* write after write */
  world_mix(&w, &items[2], x, a, a, I(1), I(0), I(N), NULL);     /* write then read */
  world_mix(&w, &items[3], c, a, x, I(5), I(1), I(N), NULL);
  world_mix(&w, &items[4], a, c, c, I(2), I(3), I(N), NULL); /* read then write */
  world_mix(&w, &items[5], x, c, a, I(1), I(1), I(N), NULL);
  hcq_graph_t *g = world_graph(&w, items, 6, NULL, 0, NULL, 0, false);
  world_replay_n(&w, g, items, 6, 4);
  OK(hcq_graph_destroy(g));
  world_close(&w);
}

/* Transfers within and between devices, waits across queues and devices. */
SCENARIO(graph_copies_between_two_devices, 2) {
  needs_general_graph(b);
  world_t w;
  world_open_on(&w, b, 2);
  int a = world_buffer(&w, 0, N, 1), x = world_buffer(&w, 0, N, 2), c = world_buffer(&w, 1, N, 3);
  int d = world_buffer(&w, 1, N, 4), e = world_buffer(&w, 0, N, 5);
  world_item_t items[7];
  world_mix(&w, &items[0], a, x, x, I(2), I(1), I(N), NULL); /* write a */
  world_copy(&w, &items[1], e, a, N * 4);                    /* copy after write, same device */
  world_copy(&w, &items[2], c, a, N * 4);                    /* copy after write, to device 1 */
  world_mix(&w, &items[3], d, c, c, I(3), I(2), I(N), NULL); /* read after copy on device 1 */
  world_mix(&w, &items[4], x, e, a, I(1), I(5), I(N), NULL); /* read after copy on device 0 */
  world_copy(&w, &items[5], a, d, N * 2); /* back, half, overwriting a after reads */
  world_mix(&w, &items[6], c, c, d, I(7), I(1), I(N), NULL);
  hcq_graph_t *g = world_graph(&w, items, 7, NULL, 0, NULL, 0, false);
  cr_assert_eq(hcq_graph_device_count(g), 2);
  world_replay_n(&w, g, items, 7, 5);
  OK(hcq_graph_destroy(g));
  world_close(&w);
}

/* Eager transfers among four devices before and after each replay of a graph that copies around
 * the ring: the timelines order all of it. */
SCENARIO(graph_among_four_devices_with_eager_transfers, 4) {
  needs_general_graph(b);
  world_t w;
  world_open_on(&w, b, 4);
  int buf[4], tmp[4];
  for (int d = 0; d < 4; d++) {
    buf[d] = world_buffer(&w, d, N, 10 + d);
    tmp[d] = world_buffer(&w, d, N, 20 + d);
  }
  world_item_t items[8], before[4], after[4];
  for (int d = 0; d < 4; d++) {
    world_mix(&w, &items[2 * d], tmp[d], buf[d], tmp[d], I(d + 2), I(d), I(N), NULL);
    world_copy(&w, &items[2 * d + 1], buf[(d + 1) % 4], tmp[d], N * 4);
    world_copy(&w, &before[d], tmp[(d + 2) % 4], buf[d], N * 4);
    world_copy(&w, &after[d], buf[(d + 3) % 4], tmp[d], N * 2);
  }
  hcq_graph_t *g = world_graph(&w, items, 8, NULL, 0, NULL, 0, false);
  cr_assert_eq(hcq_graph_device_count(g), 4);
  for (int r = 0; r < 4; r++) {
    for (int d = 0; d < 4; d++) OK(hcq_exec_item_run(&before[d].item, NULL, 0));
    world_run_eager(&w, before, 4, NULL, NULL, 0, NULL, 0);
    world_replay(&w, g, items, 8, NULL, NULL, 0, NULL, 0, false, "graph among four devices");
    for (int d = 0; d < 4; d++) OK(hcq_exec_item_run(&after[d].item, NULL, 0));
    world_run_eager(&w, after, 4, NULL, NULL, 0, NULL, 0);
    world_compare(&w, "after the eager transfers");
  }
  OK(hcq_graph_destroy(g));
  world_close(&w);
}

SCENARIO(graph_views_of_one_buffer, 2) {
  needs_general_graph(b);
  world_t w;
  world_open_on(&w, b, 2);
  int base = world_buffer(&w, 0, 4 * N, 1), other = world_buffer(&w, 0, N, 2),
      far = world_buffer(&w, 1, 2 * N, 3);
  int v0 = world_view(&w, base, 0, N), v1 = world_view(&w, base, N, N),
      v2 = world_view(&w, base, 2 * N, 2 * N);
  int v2a = world_view(&w, v2, N / 2, N); /* a view of a view, overlapping v2 */
  int farv = world_view(&w, far, N, N);
  world_item_t items[6];
  world_mix(&w, &items[0], v0, other, other, I(2), I(1), I(N), NULL); /* writes base via v0 */
  /* reads v0, writes v1: same base */
  world_mix(&w, &items[1], v1, v0, other, I(3), I(0), I(N), NULL);
  world_copy(&w, &items[2], farv, v1, N * 4); /* view as copy source and destination */
  world_mix(&w, &items[3], v2a, v2a, v1, I(1), I(4), I(N), NULL); /* in place on a view of a view */
  world_copy(&w, &items[4], v0, farv, N * 4);                     /* back into the base */
  world_mix(&w, &items[5], other, v2, v0, I(2), I(2), I(N), NULL);
  hcq_graph_t *g = world_graph(&w, items, 6, NULL, 0, NULL, 0, false);
  world_replay_n(&w, g, items, 6, 5);
  OK(hcq_graph_destroy(g));
  world_close(&w);
}

/* Variables in values and grid dims, changed every replay, including each variable's extremes. */
SCENARIO(graph_variables_and_symbolic_grid_dims, 2) {
  needs_general_graph(b);
  world_t w;
  world_open_on(&w, b, 2);
  int a = world_buffer(&w, 0, N, 1), x = world_buffer(&w, 0, N, 2), c = world_buffer(&w, 1, N, 3);
  hcq_expr_t *n = NULL, *k = NULL, *groups = NULL, *add = NULL, *half = NULL, *hgroups = NULL;
  OK(hcq_var_create("n", 1, N, &n));
  OK(hcq_var_create("k", -50, 50, &k));
  const hcq_expr_t *vars[] = {n, k};
  OK(hcq_expr_parse("(n+63)//64", vars, 2, &groups));
  OK(hcq_expr_parse("k*2+1", vars, 2, &add));
  OK(hcq_expr_parse("max(n//2, 1)", vars, 2, &half));
  OK(hcq_expr_parse("(max(n//2, 1)+63)//64", vars, 2, &hgroups));
  world_item_t items[4];
  world_mix(&w, &items[0], a, a, x, hcq_sym(k), hcq_sym(add), hcq_sym(n), groups);
  world_copy(&w, &items[1], c, a, N * 4);
  world_mix(&w, &items[2], c, c, c, I(3), hcq_sym(k), hcq_sym(half), hgroups);
  world_mix(&w, &items[3], x, a, x, hcq_sym(add), I(1), hcq_sym(n), groups);
  hcq_var_value_t init[] = {{n, 10}, {k, 0}};
  hcq_graph_t *g = world_graph(&w, items, 4, NULL, 0, init, 2, false);
  cr_assert_eq(hcq_graph_var_count(g), 2);
  int64_t ns[] = {1, N, 37, 64, 65, 1, N, 200}, ks[] = {-50, 50, 0, 7, -3, 50, -50, 1};
  for (int r = 0; r < 8; r++) {
    hcq_var_value_t vals[] = {{k, ks[r]}, {n, ns[r]}};
    char what[64];
    snprintf(what, sizeof(what), "replay %d (n=%ld k=%ld)", r, (long)ns[r], (long)ks[r]);
    world_replay(&w, g, items, 4, NULL, NULL, 0, vals, 2, r % 3 == 0, what);
  }
  /* A replay may pass only some variables: the others keep their last value. */
  hcq_var_value_t only_k[] = {{k, 5}}, both[] = {{k, 5}, {n, 200}};
  OK(hcq_graph_run(g, NULL, 0, only_k, 1, true, NULL));
  world_run_eager(&w, items, 4, NULL, NULL, 0, both, 2);
  world_compare(&w, "replay with only k");
  OK(hcq_graph_destroy(g));
  hcq_expr_release(n);
  hcq_expr_release(k);
  hcq_expr_release(groups);
  hcq_expr_release(add);
  hcq_expr_release(half);
  hcq_expr_release(hgroups);
  world_close(&w);
}

/* A constant 0 dim in an item is refused at build, naming the item and the dim; a symbolic one that
 * evaluates to 0 at a replay launches nothing there, and the next replay runs as usual. */
SCENARIO(graph_zero_dims, 1) {
  hcq_device_t *d = open_dev(b, 0);
  hcq_program_t *p = kernel(b, d, "record_groups");
  hcq_buffer_t *out = test_buffer(d, 8 * 4);
  hcq_expr_t *n = NULL;
  OK(hcq_var_create("n", 0, 8, &n));
  hcq_exec_item_t it[2];
  for (int i = 0; i < 2; i++)
    it[i] = (hcq_exec_item_t){.kind = HCQ_ITEM_KERNEL,
                              .kernel = {.program = p,
                                         .bufs = &out,
                                         .nbufs = 1,
                                         .global = {I(2), I(1), I(1)},
                                         .local = {I(1), I(1), I(1)}}};
  it[1].kernel.global[2] = I(0);
  hcq_var_value_t v = {n, 3};
  hcq_graph_t *g = NULL;
  FAILS(hcq_graph_create(it, 2, NULL, 0, &v, 1, NULL, &g), HCQ_INVALID_ARGUMENT,
        "item 1 (record_groups)", "global[2] is 0");
  cr_assert_null(g);
  it[1].kernel.global[2] = I(1);
  it[1].kernel.global[0] = hcq_sym(n);
  OK(hcq_graph_create(it, 2, NULL, 0, &v, 1, NULL, &g));
  int64_t ns[] = {3, 0, 5};
  int32_t want[8] = {0};
  for (int r = 0; r < 3; r++) {
    v.value = ns[r];
    OK(hcq_graph_run(g, NULL, 0, &v, 1, true, NULL));
    for (int i = 0; i < 8; i++) want[i] += (i < 2) + (i < ns[r]);
    int32_t got[8];
    test_read(out, got, sizeof(got));
    for (int i = 0; i < 8; i++)
      cr_assert_eq(got[i], want[i], "replay %d (n=%ld): group %d ran %d times, not %d", r,
                   (long)ns[r], i, got[i], want[i]);
  }
  OK(hcq_graph_destroy(g));
  hcq_expr_release(n);
  hcq_buffer_release(out);
  hcq_program_release(p);
  test_close(d);
}

/* Inputs replaced between replays, as kernel arguments and as both ends of copies. */
SCENARIO(graph_input_swaps, 2) {
  needs_general_graph(b);
  world_t w;
  world_open_on(&w, b, 2);
  int x = world_buffer(&w, 0, N, 1), x2 = world_buffer(&w, 0, N, 2), x3 = world_buffer(&w, 0, N, 3);
  int src = world_buffer(&w, 1, N, 4), src2 = world_buffer(&w, 1, N, 5);
  int dst = world_buffer(&w, 0, N, 6), dst2 = world_buffer(&w, 0, N, 7);
  int acc = world_buffer(&w, 0, N, 8);
  world_item_t items[5];
  world_mix(&w, &items[0], acc, x, acc, I(2), I(1), I(N), NULL); /* input as a kernel argument */
  world_copy(&w, &items[1], dst, src, N * 4);                    /* inputs as both copy ends */
  world_mix(&w, &items[2], acc, dst, x, I(1), I(3), I(N), NULL);
  world_copy(&w, &items[3], src, acc, N * 4); /* input as a copy destination, device 0 -> 1 */
  world_copy(&w, &items[4], dst, x, N * 4);   /* both ends inputs on one device */
  int inputs[] = {x, src, dst};
  hcq_graph_t *g = world_graph(&w, items, 5, inputs, 3, NULL, 0, false);
  int swaps[][3] = {{-1, -1, -1},   {x2, -1, -1},   {x3, src2, dst2},
                    {x, src, dst2}, {x2, src2, -1}, {x3, -1, dst}};
  for (int r = 0; r < 6; r++) {
    char what[32];
    snprintf(what, sizeof(what), "replay %d", r);
    world_replay(&w, g, items, 5, inputs, swaps[r], 3, NULL, 0, r % 2, what);
  }
  OK(hcq_graph_destroy(g));
  world_close(&w);
}

/* Eager work queued before a replay runs first; eager work right after runs after. */
SCENARIO(graph_between_eager_work, 2) {
  needs_general_graph(b);
  world_t w;
  world_open_on(&w, b, 2);
  enum { M = 64 * N };
  int a = world_buffer(&w, 0, M, 1), x = world_buffer(&w, 1, M, 2), c = world_buffer(&w, 0, M, 3);
  world_item_t items[3], before[2], after[2];
  world_mix(&w, &items[0], a, a, c, I(3), I(1), I(M), NULL);
  world_copy(&w, &items[1], x, a, M * 4);
  world_mix(&w, &items[2], c, c, a, I(1), I(2), I(M), NULL);
  /* Large eager kernels, so that they are still running when the replay is submitted. */
  world_mix(&w, &before[0], a, c, a, I(5), I(5), I(M), NULL);
  world_mix(&w, &before[1], x, x, x, I(7), I(1), I(M), NULL);
  world_mix(&w, &after[0], c, a, c, I(2), I(0), I(M), NULL);
  world_mix(&w, &after[1], x, x, x, I(3), I(3), I(M), NULL);
  hcq_graph_t *g = world_graph(&w, items, 3, NULL, 0, NULL, 0, false);
  for (int r = 0; r < 5; r++) {
    for (int i = 0; i < 2; i++)
      for (int rep = 0; rep < 3; rep++) OK(hcq_exec_item_run(&before[i].item, NULL, 0));
    OK(hcq_graph_run(g, NULL, 0, NULL, 0, false, NULL));
    for (int i = 0; i < 2; i++) OK(hcq_exec_item_run(&after[i].item, NULL, 0));
    for (int rep = 0; rep < 3; rep++) world_run_eager(&w, before, 2, NULL, NULL, 0, NULL, 0);
    world_run_eager(&w, items, 3, NULL, NULL, 0, NULL, 0);
    world_run_eager(&w, after, 2, NULL, NULL, 0, NULL, 0);
    world_compare(&w, "eager before, graph, eager after");
  }
  OK(hcq_graph_destroy(g));
  world_close(&w);
}

SCENARIO(graph_long_chain_replayed_without_waiting, 1) {
  world_t w;
  world_open_on(&w, b, 1);
  int a = world_buffer(&w, 0, N, 1), x = world_buffer(&w, 0, N, 2);
  world_item_t items[200];
  for (int j = 0; j < 200; j++)
    world_mix(&w, &items[j], j % 2 ? a : x, j % 2 ? x : a, a, I(j % 5 + 1), I(j), I(N), NULL);
  hcq_graph_t *g = world_graph(&w, items, 200, NULL, 0, NULL, 0, false);
  for (int r = 0; r < 20; r++) {
    OK(hcq_graph_run(g, NULL, 0, NULL, 0, false, NULL));
    world_run_eager(&w, items, 200, NULL, NULL, 0, NULL, 0);
  }
  world_compare(&w, "20 replays of a 200-kernel chain");
  OK(hcq_graph_destroy(g));
  world_close(&w);
}

/* A scenario about the HCQ graph's own machinery (docs/design.md, "The HCQ graph"): CUDA devices
 * run the CUDA graph, Metal devices the Metal graph. */
static void needs_hcq_graph(const test_backend_t *b, const char *what) {
  if (!strcmp(b->kind, "CUDA"))
    cr_skip_test("CUDA devices run the CUDA graph, which has no %s", what);
  if (!strcmp(b->kind, "METAL"))
    cr_skip_test("Metal devices run the Metal graph, which has no %s", what);
}

/* The kickoff value restarts before it outgrows its 32-bit payload (docs/design.md,
 * "The HCQ graph", "Replay"). */
SCENARIO(graph_kickoff_value_wraps, 2) {
  needs_hcq_graph(b, "kickoff signal");
  world_t w;
  world_open_on(&w, b, 2);
  int a = world_buffer(&w, 0, N, 1), x = world_buffer(&w, 1, N, 2);
  world_item_t items[3];
  world_mix(&w, &items[0], a, a, a, I(3), I(1), I(N), NULL);
  world_copy(&w, &items[1], x, a, N * 4);
  world_mix(&w, &items[2], x, x, x, I(1), I(2), I(N), NULL);
  hcq_graph_t *g = world_graph(&w, items, 3, NULL, 0, NULL, 0, false);
  OK(hcq_graph_run(g, NULL, 0, NULL, 0, true, NULL));
  world_run_eager(&w, items, 3, NULL, NULL, 0, NULL, 0);
  hcq__graph_pretend_replays_for_tests(g, HCQ_TIMELINE_WRAP - 1);
  for (int r = 0; r < 4; r++) {
    OK(hcq_graph_run(g, NULL, 0, NULL, 0, r % 2, NULL));
    world_run_eager(&w, items, 3, NULL, NULL, 0, NULL, 0);
  }
  cr_assert_lt(hcq__graph_kickoff_value_for_tests(g), 10, "the kickoff value restarted");
  world_compare(&w, "across the kickoff restart");
  OK(hcq_graph_destroy(g));
  world_close(&w);
}

/* A replay rewrites only the words whose values changed, however long the graph; on Vulkan the
 * command buffers recorded for the bound queues are resubmitted as they are. */
static size_t replay_patch_writes(const test_backend_t *b, int nitems, bool swap,
                                  hcq__vk_counters_t *counters) {
  world_t w;
  world_open_on(&w, b, 1);
  int x = world_buffer(&w, 0, N, 1), x2 = world_buffer(&w, 0, N, 2),
      acc = world_buffer(&w, 0, N, 3);
  world_item_t *items = calloc((size_t)nitems, sizeof(*items));
  hcq_expr_t *k = NULL;
  OK(hcq_var_create("k", 0, 100, &k));
  world_mix(&w, &items[0], acc, x, acc, hcq_sym(k), I(1), I(N), NULL);
  for (int j = 1; j < nitems; j++) world_mix(&w, &items[j], acc, acc, acc, I(1), I(j), I(N), NULL);
  int inputs[] = {x}, swaps[] = {x2};
  hcq_var_value_t vals[] = {{k, 3}};
  hcq_graph_t *g = world_graph(&w, items, nitems, inputs, 1, vals, 1, false);
  /* Each replay instance (replays in flight at once) writes everything on its first replay. */
  for (unsigned i = 0; i < hcq__options()->graph_inflight; i++)
    world_replay(&w, g, items, nitems, inputs, NULL, 1, vals, 1, true, "first replay of a slot");
  hcq__vk_counters_t first;
  hcq__vk_counters(w.devs[0], &first);
  for (int r = 0; r < 3; r++) {
    hcq_var_value_t v[] = {{k, 3 + (swap ? r : 0)}};
    world_replay(&w, g, items, nitems, inputs, swap && r % 2 == 0 ? swaps : NULL, 1, v, 1, true,
                 "later replay");
  }
  size_t writes = ((const hcq_queue_t *)hcq_graph_queue(g, 0))->last_patch_writes;
  hcq__vk_counters_t after;
  if (hcq__vk_counters(w.devs[0], &after)) {
    counters->records = after.records - first.records;
    counters->rerecords = after.rerecords - first.rerecords;
  }
  OK(hcq_graph_destroy(g));
  hcq_expr_release(k);
  free(items);
  world_close(&w);
  return writes;
}

/* The CUDA and Metal graphs' counterpart: a replay sets parameters only for the nodes (ICB
 * commands) that changed. want: per run, the driver calls (CUDA: node parameter sets; Metal: ICB
 * calls, where a value is a memory write and each of the two ICB slots holds its own bindings). */
static void replay_sets_only_what_changed(const test_backend_t *b, const uint64_t want[6]) {
  world_t w;
  world_open_on(&w, b, 1);
  int x = world_buffer(&w, 0, N, 1), x2 = world_buffer(&w, 0, N, 2),
      acc = world_buffer(&w, 0, N, 3);
  enum { ITEMS = 200 };
  world_item_t *items = calloc(ITEMS, sizeof(*items));
  hcq_expr_t *k = NULL;
  OK(hcq_var_create("k", 0, 100, &k));
  world_mix(&w, &items[0], acc, x, acc, hcq_sym(k), I(1), I(N), NULL);
  for (int j = 1; j < ITEMS; j++) world_mix(&w, &items[j], acc, acc, acc, I(1), I(j), I(N), NULL);
  int inputs[] = {x}, swaps[] = {x2};
  hcq_graph_t *g = world_graph(&w, items, ITEMS, inputs, 1, (hcq_var_value_t[]){{k, 3}}, 1, false);
  struct {
    int64_t k;
    bool swap;
    uint64_t updates;
  } runs[] = {{3, false, 0}, {3, false, 0}, {4, false, 0},
              {4, true, 0},  {5, false, 0}, {5, false, 0}};
  for (size_t r = 0; r < sizeof(runs) / sizeof(runs[0]); r++) {
    runs[r].updates = want[r];
    hcq_var_value_t v[] = {{k, runs[r].k}};
    world_replay(&w, g, items, ITEMS, inputs, runs[r].swap ? swaps : NULL, 1, v, 1, true, "replay");
    hcq_graph_stats_t stats;
    hcq_graph_stats(g, &stats);
    cr_assert_eq(stats.last_replay_updates, runs[r].updates,
                 "replay %zu of %d items set %llu nodes", r, ITEMS,
                 (unsigned long long)stats.last_replay_updates);
  }
  OK(hcq_graph_destroy(g));
  hcq_expr_release(k);
  free(items);
  world_close(&w);
}

SCENARIO(graph_replay_patches_only_what_changed, 1) {
  if (!strcmp(b->kind, "CUDA")) {
    replay_sets_only_what_changed(b, (const uint64_t[6]){0, 0, 1, 1, 1, 0});
    return;
  }
  if (!strcmp(b->kind, "METAL")) {
    cr_assert_eq(hcq__options()->graph_inflight, 2);
    replay_sets_only_what_changed(b, (const uint64_t[6]){0, 0, 0, 1, 0, 1});
    return;
  }
  if (hcq__validating)
    cr_skip_test("HCQ_VALIDATE=1 replays these graphs item by item (graph.h): no patch to count");
  hcq__vk_counters_t c1 = {0}, c2 = {0}, c3 = {0};
  size_t small = replay_patch_writes(b, 20, false, &c1),
         big = replay_patch_writes(b, 200, false, &c2);
  cr_assert_eq(small, big, "a replay rewrote %zu words for 20 items but %zu for 200", small, big);
  cr_assert_eq(small, 5, "kickoff three times, timeline value twice; got %zu", small);
  /* The last replay swapped the input and changed k since its slot's previous replay: k's value,
   * and the input's argument unless that slot's previous replay had swapped it too (two slots: it
   * had). */
  size_t swapped = replay_patch_writes(b, 200, true, &c3);
  cr_assert_eq(swapped, hcq__options()->graph_inflight == 2 ? 6u : 7u, "got %zu", swapped);
  cr_assert_eq(c1.records + c2.records + c3.records, 0, "replays recorded %lu new command buffers",
               (unsigned long)(c1.records + c2.records + c3.records));
  cr_assert_eq(c1.rerecords + c2.rerecords + c3.rerecords, 0,
               "replays re-recorded %lu command buffers",
               (unsigned long)(c1.rerecords + c2.rerecords + c3.rerecords));
}

/* Profiling: every entry has a start and an end timestamp, and a kernel that waits for a transfer
 * starts after the transfer ended, on a clock shared by the devices. */
SCENARIO(graph_profile_timestamps, 2) {
  needs_hcq_graph(b, "per-item profile");
  world_t w;
  world_open_on(&w, b, 2);
  int a = world_buffer(&w, 0, N, 1), x = world_buffer(&w, 1, N, 2);
  world_item_t items[4];
  world_mix(&w, &items[0], a, a, a, I(2), I(1), I(N), NULL);
  world_mix(&w, &items[1], a, a, a, I(2), I(1), I(N), NULL);
  world_copy(&w, &items[2], x, a, N * 4);
  world_mix(&w, &items[3], x, x, x, I(3), I(1), I(N), NULL);
  hcq_graph_t *g = world_graph(&w, items, 4, NULL, 0, NULL, 0, true);
  for (int r = 0; r < 3; r++)
    world_replay(&w, g, items, 4, NULL, NULL, 0, NULL, 0, r == 2, "profiled replay");
  const hcq_profile_event_t *ev = NULL;
  OK(hcq_graph_profile(g, &ev));
  cr_assert_eq(ev->nentries, 4);
  cr_assert_eq(ev->replay, 3);
  for (size_t i = 0; i < ev->nentries; i++) {
    uint64_t st = ev->timestamps[ev->entries[i].start_slot],
             en = ev->timestamps[ev->entries[i].end_slot];
    cr_assert_gt(st, 0, "entry %zu has no start timestamp", i);
    cr_assert_leq(st, en, "entry %zu ends before it starts", i);
  }
  cr_assert_leq(ev->timestamps[ev->entries[2].end_slot], ev->timestamps[ev->entries[3].start_slot],
                "the kernel after the transfer starts after it ended");
  OK(hcq_graph_destroy(g));
  world_close(&w);
}

/* Random graphs over 1-4 devices: kernels with constant and symbolic operands, transfers, views,
 * input swaps, replayed with new values and compared with eager execution. */
SCENARIO(graph_randomized, 4) {
  needs_general_graph(b);
  world_graph_fuzz(b, 20261130, 8, 4);
}

/* Captured eager work replays as graphs (the JIT) with new inputs, equal to eager execution. */
SCENARIO(jit_capture_replays_equal_eager, 2) {
  world_t w;
  world_open_on(&w, b, 2);
  int x = world_buffer(&w, 0, N, 1), x2 = world_buffer(&w, 0, N, 2), a = world_buffer(&w, 0, N, 3);
  int c = world_buffer(&w, 1, N, 4);
  world_item_t items[5];
  world_mix(&w, &items[0], a, x, a, I(2), I(1), I(N), NULL);
  world_copy(&w, &items[1], c, a, N * 4);
  world_mix(&w, &items[2], c, c, c, I(3), I(2), I(N), NULL);
  world_copy(&w, &items[3], a, c, N * 4);
  world_mix(&w, &items[4], a, a, x, I(1), I(5), I(N), NULL);
  hcq_capture_t *cap = NULL;
  OK(hcq_capture_begin(&cap));
  for (int j = 0; j < 5; j++) OK(hcq_exec_item_run(&items[j].item, NULL, 0));
  hcq_buffer_t *ins[] = {w.buf[x]};
  hcq_jit_t *jit = NULL;
  OK(hcq_capture_end(cap, ins, 1, NULL, 0, NULL, &jit));
  int inputs[] = {x}, swaps[] = {x2};
  world_run_eager(&w, items, 5, inputs, NULL, 1, NULL, 0);
  world_compare(&w, "the capture run");
  for (int r = 0; r < 4; r++) {
    hcq_buffer_t *run_ins[] = {w.buf[r % 2 ? x2 : x]};
    OK(hcq_jit_run(jit, run_ins, 1, NULL, 0, r == 3, NULL));
    world_run_eager(&w, items, 5, inputs, r % 2 ? swaps : NULL, 1, NULL, 0);
  }
  OK(hcq_device_synchronize(w.devs[0]));
  OK(hcq_device_synchronize(w.devs[1]));
  world_compare(&w, "after four JIT replays");
  OK(hcq_jit_destroy(jit));
  world_close(&w);
}

/* ---- fences and mapped buffers (hcq/fence.h, hcq_buffer_map) ---- */

/* fill(out; value, n) replayed with value = v, as a graph of one item. */
static hcq_graph_t *fill_graph(hcq_program_t *fill, hcq_buffer_t *out, const hcq_expr_t *v) {
  hcq_operand_t vals[] = {hcq_sym(v), I(N)};
  hcq_exec_item_t item = {
      .kind = HCQ_ITEM_KERNEL,
      .kernel = {fill, &out, 1, NULL, 0, vals, 2, {I(N / 64), I(1), I(1)}, {I(64), I(1), I(1)}}};
  hcq_var_value_t init = {v, 0};
  hcq_graph_t *g = NULL;
  OK(hcq_graph_create(&item, 1, NULL, 0, &init, 1, NULL, &g));
  return g;
}

static void expect_filled(const int32_t *host, int32_t value, const char *when) {
  for (int i = 0; i < N; i++)
    cr_assert_eq(host[i], value, "%s: element %d is %d, not %d", when, i, host[i], value);
}

/* Replay 1's fence is reached, and its output read through the mapped pointer, while replay 2 is
 * held behind a gate on the same device: a fence waits for its own replay, not for all. */
SCENARIO(fence_of_a_replay_is_reached_while_a_later_replay_is_held, 1) {
  hcq_device_t *d = open_dev(b, 0);
  hcq_program_t *fill = kernel(b, d, "fill");
  hcq_buffer_t *out1 = NULL, *out2 = NULL;
  OK(hcq_buffer_create_mapped(d, N * 4, &out1));
  OK(hcq_buffer_create_mapped(d, N * 4, &out2));
  int32_t *host1 = NULL, *host2 = NULL;
  OK(hcq_buffer_map(out1, (void **)&host1));
  OK(hcq_buffer_map(out2, (void **)&host2));
  hcq_expr_t *v = NULL;
  OK(hcq_var_create("v", 0, 1000, &v));
  hcq_graph_t *g1 = fill_graph(fill, out1, v), *g2 = fill_graph(fill, out2, v);
  hcq_fence_t *f1 = NULL, *f2 = NULL;
  OK(hcq_fence_create(&f1));
  OK(hcq_fence_create(&f2));
  hcq_signal_t *gate = NULL;
  OK(hcq_signal_create(d, "gate", 0, &gate));

  hcq_var_value_t one = {v, 1}, two = {v, 2};
  OK(hcq_graph_submit(g1, NULL, 0, &one, 1, f1));
  cr_assert_eq(hcq_fence_device_count(f1), 1);
  hcq_queue_t *held = test_gate_queue(d, HCQ_QUEUE_COMPUTE, gate, 1);
  OK(hcq_graph_submit(g2, NULL, 0, &two, 1, f2));
  OK(hcq_fence_wait(f1, HCQ_TIMEOUT_DEFAULT));
  expect_filled(host1, 1, "after replay 1's fence");
  bool done = true;
  OK(hcq_fence_poll(f2, &done));
  cr_assert(!done, "replay 2 is behind the gate");
  FAILS(hcq_fence_wait(f2, 50), HCQ_TIMEOUT, "fence on", hcq_device_name(d));
  expect_filled(host2, 0, "replay 2 held");
  hcq_signal_set(gate, 1);
  OK(hcq_fence_wait(f2, HCQ_TIMEOUT_DEFAULT));
  OK(hcq_fence_poll(f2, &done));
  cr_assert(done);
  expect_filled(host2, 2, "after replay 2's fence");
  OK(hcq_fence_poll(f1, &done));
  cr_assert(done, "a reached fence stays reached");

  /* Eager work: a fence recorded after a launch. */
  int32_t vals[] = {7, N};
  hcq_launch_desc_t l = {fill, &out1, 1, vals, 2, {N / 64, 1, 1}, {64, 1, 1}};
  OK(hcq_launch(&l));
  OK(hcq_fence_record(f1, &d, 1));
  OK(hcq_fence_wait(f1, HCQ_TIMEOUT_DEFAULT));
  expect_filled(host1, 7, "after an eager launch's fence");

  OK(hcq_graph_destroy(g1));
  OK(hcq_graph_destroy(g2));
  hcq_queue_destroy(held);
  hcq_signal_destroy(gate);
  hcq_fence_destroy(f1);
  hcq_fence_destroy(f2);
  hcq_expr_release(v);
  hcq_buffer_release(out1);
  hcq_buffer_release(out2);
  hcq_program_release(fill);
  test_close(d);
}

/* Host writes through a mapped pointer are what a kernel submitted after them reads; a view maps
 * to its base's bytes at its offset. */
SCENARIO(mapped_buffers_are_read_and_written_by_host_and_kernels, 1) {
  hcq_device_t *d = open_dev(b, 0);
  hcq_program_t *add = kernel(b, d, "add_scalar");
  hcq_buffer_t *in = NULL, *out = NULL, *view = NULL;
  OK(hcq_buffer_create_mapped(d, N * 4, &in));
  OK(hcq_buffer_create_mapped(d, N * 4, &out));
  OK(hcq_buffer_view_create(in, 64, 128, &view));
  int32_t *hin = NULL, *hout = NULL;
  char *hview = NULL;
  OK(hcq_buffer_map(in, (void **)&hin));
  OK(hcq_buffer_map(out, (void **)&hout));
  OK(hcq_buffer_map(view, (void **)&hview));
  cr_assert_eq(hview, (char *)hin + 64, "a view maps at its offset");
  hcq_fence_t *f = NULL;
  OK(hcq_fence_create(&f));
  for (int round = 0; round < 3; round++) {
    for (int i = 0; i < N; i++) hin[i] = i * (round + 1);
    hcq_buffer_t *bufs[] = {out, in};
    int32_t vals[] = {100 * round, N};
    hcq_launch_desc_t l = {add, bufs, 2, vals, 2, {N / 64, 1, 1}, {64, 1, 1}};
    OK(hcq_launch(&l));
    OK(hcq_fence_record(f, &d, 1));
    OK(hcq_fence_wait(f, HCQ_TIMEOUT_DEFAULT));
    for (int i = 0; i < N; i++)
      cr_assert_eq(hout[i], i * (round + 1) + 100 * round, "round %d element %d", round, i);
  }
  /* copyout agrees with the mapped bytes */
  int32_t got[N];
  test_read(out, got, sizeof(got));
  cr_assert_arr_eq(got, hout, sizeof(got));

  /* A plain buffer maps where the device memory is the host's, and says why not elsewhere. */
  hcq_buffer_t *plain = test_buffer(d, 64);
  void *hp = NULL;
  if (!strcmp(b->kind, "CUDA")) {
    FAILS(hcq_buffer_map(plain, &hp), HCQ_UNAVAILABLE, "not host-visible",
          "hcq_buffer_create_mapped");
    cr_assert_null(hp);
  } else {
    OK(hcq_buffer_map(plain, &hp));
    cr_assert_not_null(hp);
  }
  /* Wrapping the application's memory: only where kernels run on host memory. */
  static int32_t mine[N] __attribute__((aligned(64)));
  hcq_buffer_t *wrapped = NULL;
  if (hcq_device_caps(d) & HCQ_CAP_HOST_MEMORY) {
    OK(hcq_buffer_wrap(d, mine, sizeof(mine), NULL, NULL, &wrapped));
    hcq_buffer_release(wrapped);
  } else {
    FAILS(hcq_buffer_wrap(d, mine, sizeof(mine), NULL, NULL, &wrapped), HCQ_UNAVAILABLE,
          hcq_device_name(d), "do not run on host memory");
    cr_assert_null(wrapped);
  }
  hcq_buffer_release(plain);
  hcq_fence_destroy(f);
  hcq_buffer_release(view);
  hcq_buffer_release(in);
  hcq_buffer_release(out);
  hcq_program_release(add);
  test_close(d);
}

/* ---- HCQ_VALIDATE: writes the outs do not declare (graph.h, the rule of hcq_kernel_item_t) ----
 */

/* add_scalar(out, a; v, n) writes out (buffer 0). Eager launches and graph replays that declare
 * something else are caught with the kernel, item and buffer named; honest declarations pass. */
SCENARIO_ENV(validate_catches_undeclared_writes, 1, "HCQ_VALIDATE=1") {
  hcq_device_t *d = open_dev(b, 0);
  hcq_program_t *p = kernel(b, d, "add_scalar");
  hcq_buffer_t *x = test_buffer_iota(d, N, 1, 0), *t = test_buffer(d, N * 4),
               *y = test_buffer(d, N * 4);
  hcq_buffer_set_label(x, "x");
  hcq_buffer_set_label(t, "t");
  hcq_buffer_set_label(y, "y");
  hcq_buffer_t *bt[] = {t, x}, *by[] = {y, t};
  static const uint32_t none[1], first[] = {0}, second[] = {1};
  int32_t v[] = {5, N}, v0[] = {5, 0};
  /* Eager: declaring x (read) instead of t (written) is caught at the first changed byte. */
  hcq_launch_desc_t wrong = {p, bt, 2, v, 2, {N / 64, 1, 1}, {64, 1, 1}, second, 1};
  FAILS(hcq_launch(&wrong), HCQ_INVALID_ARGUMENT, "launch of add_scalar", "wrote buffer 0 (t)",
        "offset 0 of 1024", "HCQ_VALIDATE");
  /* outs given and empty: writes nothing. A kernel that writes nothing passes; one that writes is
   * caught. */
  hcq_launch_desc_t quiet = {p, bt, 2, v0, 2, {N / 64, 1, 1}, {64, 1, 1}, none, 0};
  OK(hcq_launch(&quiet));
  hcq_launch_desc_t loud = {p, by, 2, v, 2, {N / 64, 1, 1}, {64, 1, 1}, none, 0};
  FAILS(hcq_launch(&loud), HCQ_INVALID_ARGUMENT, "wrote buffer 0 (y)",
        "declared that it writes nothing");
  /* Honest outs, and no outs array (every buffer written), pass and compute. */
  hcq_launch_desc_t honest = {p, bt, 2, v, 2, {N / 64, 1, 1}, {64, 1, 1}, first, 1};
  OK(hcq_launch(&honest));
  hcq_launch_desc_t all = {p, by, 2, v, 2, {N / 64, 1, 1}, {64, 1, 1}, NULL, 0};
  OK(hcq_launch(&all));
  int32_t got[N];
  test_read(y, got, sizeof(got));
  for (int i = 0; i < N; i++) cr_assert_eq(got[i], i + 10, "eager y[%d]", i);

  /* A graph: item 1 writes t but declares x; item 2 reads t. Replays run item by item, checked. */
  hcq_operand_t ov[] = {I(1), I(N)};
  hcq_exec_item_t items[3] = {
      {.kind = HCQ_ITEM_KERNEL,
       .kernel = {p, by, 2, first, 1, ov, 2, {I(N / 64), I(1), I(1)}, {I(64), I(1), I(1)}}},
      {.kind = HCQ_ITEM_KERNEL,
       .kernel = {p, bt, 2, second, 1, ov, 2, {I(N / 64), I(1), I(1)}, {I(64), I(1), I(1)}}},
      {.kind = HCQ_ITEM_KERNEL,
       .kernel = {p, by, 2, first, 1, ov, 2, {I(N / 64), I(1), I(1)}, {I(64), I(1), I(1)}}}};
  hcq_graph_t *g = NULL;
  OK(hcq_graph_create(items, 3, NULL, 0, NULL, 0, NULL, &g));
  FAILS(hcq_graph_run(g, NULL, 0, NULL, 0, true, NULL), HCQ_INVALID_ARGUMENT, "item 1 (add_scalar",
        "wrote buffer 0 (t)");
  OK(hcq_graph_destroy(g));
  /* The same graph declared honestly replays (item by item under HCQ_VALIDATE) with the right
   * result. */
  items[1].kernel.outs = first;
  OK(hcq_graph_create(items, 3, NULL, 0, NULL, 0, NULL, &g));
  for (int r = 0; r < 3; r++) OK(hcq_graph_run(g, NULL, 0, NULL, 0, r == 2, NULL));
  test_read(y, got, sizeof(got));
  for (int i = 0; i < N; i++) cr_assert_eq(got[i], i + 2, "graph y[%d]", i);
  OK(hcq_graph_destroy(g));
  /* In a capture, a launch that fails the check is not recorded. */
  hcq_capture_t *cap = NULL;
  OK(hcq_capture_begin(&cap));
  FAILS(hcq_launch(&wrong), HCQ_INVALID_ARGUMENT, "wrote buffer 0 (t)");
  cr_assert_eq(hcq_capture_item_count(cap), 0);
  hcq_capture_abort(cap);
  hcq_buffer_release(x);
  hcq_buffer_release(t);
  hcq_buffer_release(y);
  hcq_program_release(p);
  test_close(d);
}
