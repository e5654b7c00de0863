/* Out-of-bounds accesses of CPU kernels under HCQ_VALIDATE=1 (docs/errors.md, "Out-of-bounds
 * accesses").
 *
 * The suite runs twice (tests/CMakeLists.txt): as "bounds" with HCQ_VALIDATE=1, where each mistake
 * must be reported naming the kernel, the argument, the buffer and the offset, and as "bounds_off"
 * without it, where correct kernels give the same results and nothing is guarded or reported. */
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "test_util.h"

static const char *const k_bounds =
    "void poke(void *const *b, const int32_t *v, const hcq_launch_t *l) {\n"
    "  (void)l; ((volatile float *)b[0])[v[0]] = 7.0f;\n"
    "}\n"
    "void fill(void *const *b, const int32_t *v, const hcq_launch_t *l) {\n"
    "  (void)l; volatile float *out = b[0]; for (int i = 0; i < v[0]; i++) out[i] = (float)i;\n"
    "}\n"
    "void peek(void *const *b, const int32_t *v, const hcq_launch_t *l) {\n"
    "  (void)l; ((float *)b[0])[0] = ((const volatile float *)b[1])[v[0]];\n"
    "}\n"
    /* y[i] = a * x[i] + y[i], one work-item per element: a correct kernel over odd sizes. */
    "void axpy(void *const *b, const int32_t *v, const hcq_launch_t *l) {\n"
    "  size_t i = (size_t)l->gid[0] * l->lsz[0];\n"
    "  for (size_t k = 0; k < l->lsz[0] && i + k < (size_t)v[1]; k++)\n"
    "    ((float *)b[1])[i + k] += (float)v[0] * ((const float *)b[0])[i + k];\n"
    "}\n";

static bool validating(void) {
  const char *v = getenv("HCQ_VALIDATE");
  return v && !strcmp(v, "1");
}

static void needs_validation(void) {
  if (!validating()) cr_skip_test("runs in the HCQ_VALIDATE=1 suite (bounds)");
}

/* An open CPU device with the suite's kernels. */
typedef struct {
  hcq_device_t *dev;
  hcq_program_t *prog[4];
} rig_t;

static rig_t rig_open(void) {
  rig_t r = {test_open("CPU:0"), {NULL}};
  const char *names[4] = {"poke", "fill", "peek", "axpy"};
  for (int i = 0; i < 4; i++) r.prog[i] = test_program(r.dev, names[i], k_bounds);
  return r;
}

/* Releases what the device still has, then closes it (lost or not). */
static void rig_close(rig_t *r, hcq_buffer_t **bufs, size_t n) {
  for (size_t i = 0; i < n; i++) hcq_buffer_release(bufs[i]);
  for (int i = 0; i < 4; i++) hcq_program_release(r->prog[i]);
  OK(hcq_device_close(r->dev));
}

static hcq_buffer_t *labelled(hcq_device_t *d, uint64_t size, const char *label) {
  hcq_buffer_t *b = test_buffer(d, size);
  hcq_buffer_set_label(b, label);
  return b;
}

static hcq_status_t launch1(hcq_program_t *p, hcq_buffer_t **bufs, size_t nbufs, int32_t v) {
  hcq_launch_desc_t ld = {p, bufs, nbufs, &v, 1, {1, 1, 1}, {1, 1, 1}, NULL, 0};
  return hcq_launch(&ld);
}

/* ---- eager launches ---- */

Test(bounds, write_one_element_past_the_end_is_named_at_synchronize) {
  needs_validation();
  rig_t r = rig_open();
  hcq_buffer_t *small = labelled(r.dev, 16, "small");
  OK(launch1(r.prog[0], &small, 1, 4)); /* floats 0..3 are the buffer; 4 is the next one */
  FAILS(hcq_device_synchronize(r.dev), HCQ_DEVICE_LOST, "kernel poke on CPU:0",
        "wrote past the end of buffer \"small\"", "argument 0", "16 bytes", "bytes 16 to 19 of it",
        "0 to 3 bytes past its end");
  /* Nothing runs on the device after it: the next launch is refused with the same story. */
  FAILS(launch1(r.prog[0], &small, 1, 0), HCQ_DEVICE_LOST,
        "wrote past the end of buffer \"small\"");
  rig_close(&r, &small, 1);
  /* The process is healthy: a new device works. */
  hcq_device_t *again = test_open("CPU:0");
  OK(hcq_device_health(again));
  test_close(again);
}

Test(bounds, a_launch_whose_write_check_waits_reports_it_itself) {
  needs_validation();
  rig_t r = rig_open();
  hcq_buffer_t *bufs[2] = {labelled(r.dev, 16, "small"), labelled(r.dev, 16, "other")};
  /* outs lists buffer 0 only: the undeclared-write check copies buffer 1 after the kernel, which
   * waits for it, so hcq_launch returns the kernel's error. */
  int32_t v = 4;
  hcq_launch_desc_t ld = {r.prog[0], bufs, 2, &v, 1, {1, 1, 1}, {1, 1, 1}, (uint32_t[]){0}, 1};
  FAILS(hcq_launch(&ld), HCQ_DEVICE_LOST, "kernel poke",
        "wrote past the end of buffer \"small\" (argument 0, 16 bytes)");
  rig_close(&r, bufs, 2);
}

Test(bounds, write_far_past_the_end_is_cut_short_at_the_guard_page) {
  needs_validation();
  rig_t r = rig_open();
  hcq_buffer_t *bufs[2] = {labelled(r.dev, 64, "ok"), labelled(r.dev, 16, "small")};
  /* 512 floats into 16 bytes: byte 64 is the guard page's first (the buffer ends 48 bytes before).
   */
  hcq_launch_desc_t ld = {r.prog[1], bufs + 1, 1, (int32_t[]){512}, 1, {1, 1, 1},
                          {1, 1, 1}, NULL,     0};
  OK(hcq_launch(&ld));
  FAILS(hcq_device_synchronize(r.dev), HCQ_DEVICE_LOST, "kernel fill on CPU:0", "SIGSEGV",
        "byte 64 of buffer \"small\"", "argument 0", "48 bytes past its end", "guard page",
        "cut short");
  rig_close(&r, bufs, 2);
}

Test(bounds, write_before_the_start_is_named) {
  needs_validation();
  rig_t r = rig_open();
  hcq_buffer_t *b = labelled(r.dev, 256, "under");
  OK(launch1(r.prog[0], &b, 1, -1));
  FAILS(hcq_device_synchronize(r.dev), HCQ_DEVICE_LOST, "kernel poke",
        "wrote before the start of buffer \"under\"", "argument 0",
        "4 to 1 bytes before its start");
  rig_close(&r, &b, 1);
}

Test(bounds, write_far_before_the_start_meets_the_front_guard_page) {
  needs_validation();
  rig_t r = rig_open();
  hcq_buffer_t *b = labelled(r.dev, 4096, "page");
  /* A whole page: the buffer starts its pages, so 4 bytes before it is the guard page. */
  OK(launch1(r.prog[0], &b, 1, -1));
  FAILS(hcq_device_synchronize(r.dev), HCQ_DEVICE_LOST, "kernel poke", "SIGSEGV",
        "4 bytes before the start of buffer \"page\" (argument 0, 4096 bytes", "guard page");
  rig_close(&r, &b, 1);
}

Test(bounds, read_past_the_end_names_the_argument_read) {
  needs_validation();
  rig_t r = rig_open();
  hcq_buffer_t *bufs[2] = {labelled(r.dev, 4, "out"), labelled(r.dev, 16, "in")};
  /* Float 16 is byte 64: the guard page after "in" (reads of the 48 bytes before it are not seen).
   */
  OK(launch1(r.prog[2], bufs, 2, 16));
  FAILS(hcq_device_synchronize(r.dev), HCQ_DEVICE_LOST, "kernel peek",
        "byte 64 of buffer \"in\" (argument 1, 16 bytes)", "48 bytes past its end");
  rig_close(&r, bufs, 2);
}

Test(bounds, a_view_is_named_with_its_base_and_offset) {
  needs_validation();
  rig_t r = rig_open();
  hcq_buffer_t *base = labelled(r.dev, 40, "whole"), *view = NULL;
  OK(hcq_buffer_view_create(base, 16, 16, &view));
  /* Inside the base, past the view: not seen (guards are around base buffers). Past the base: seen.
   */
  OK(launch1(r.prog[0], &view, 1, 4));
  OK(hcq_device_synchronize(r.dev));
  OK(launch1(r.prog[0], &view, 1, 6));
  FAILS(hcq_device_synchronize(r.dev), HCQ_DEVICE_LOST, "wrote past the end of buffer \"whole\"",
        "argument 0, a view at its byte 16, 40 bytes", "bytes 40 to 43 of it",
        "0 to 3 bytes past its end");
  hcq_buffer_t *bufs[2] = {view, base};
  rig_close(&r, bufs, 2);
}

Test(bounds, a_launch_shared_by_the_device_threads_is_checked_too) {
  needs_validation();
  rig_t r = rig_open();
  enum { N = 1 << 20 };
  /* y is 16 floats short: the last group (64 work-items) writes past its end, on whichever thread.
   */
  hcq_buffer_t *bufs[2] = {labelled(r.dev, N * sizeof(float), "x"),
                           labelled(r.dev, (N - 16) * sizeof(float), "y")};
  hcq_launch_desc_t ld = {r.prog[3],  bufs, 2, (int32_t[]){1, N}, 2, {N / 64, 1, 1},
                          {64, 1, 1}, NULL, 0};
  OK(hcq_launch(&ld));
  FAILS(hcq_device_synchronize(r.dev), HCQ_DEVICE_LOST, "kernel axpy on CPU:0",
        "buffer \"y\" (argument 1, 4194240 bytes)", "past its end");
  rig_close(&r, bufs, 2);
}

/* Each group counts itself in b[0] (the application's own memory) and takes a while; group v[0]
 * also writes into the guard page after the 16-byte b[1] (byte 64: past the slack). */
static const char *const k_slow_groups =
    "void count_slow(void *const *b, const int32_t *v, const hcq_launch_t *l) {\n"
    "  __atomic_fetch_add((int *)b[0], 1, __ATOMIC_RELAXED);\n"
    "  if (l->gid[0] == (uint32_t)v[0]) ((volatile float *)b[1])[16] = 1.0f;\n"
    "  for (volatile int i = 0; i < 20000; i++) {\n"
    "  }\n"
    "}\n";

static _Atomic int g_count_at_release = -1;

static void note_count(void *ctx, void *host) {
  (void)ctx;
  atomic_store(&g_count_at_release, __atomic_load_n((int *)host, __ATOMIC_RELAXED));
}

/* A fault loses the device in the middle of a launch the device's threads share: the chunks not
 * yet started never run, and the ones running finish before the launch's buffers are handed back,
 * so no thread writes into memory the application may have freed. */
Test(bounds, no_group_runs_after_a_fault_hands_the_buffers_back) {
  needs_validation();
  hcq_device_t *dev = test_open("CPU:0");
  hcq_program_t *prog = test_program(dev, "count_slow", k_slow_groups);
  static int count __attribute__((aligned(HCQ_WRAP_ALIGN)));
  hcq_buffer_t *bufs[2] = {NULL, labelled(dev, 16, "small")};
  OK(hcq_buffer_wrap(dev, &count, sizeof(count), note_count, NULL, &bufs[0]));
  enum { GROUPS = 4096 };
  hcq_launch_desc_t ld = {prog, bufs, 2, (int32_t[]){64}, 1, {GROUPS, 1, 1}, {64, 1, 1}, NULL, 0};
  OK(hcq_launch(&ld));
  FAILS(hcq_device_synchronize(dev), HCQ_DEVICE_LOST, "kernel count_slow on CPU:0",
        "buffer \"small\"");
  hcq_buffer_release(bufs[0]);
  for (int i = 0; i < 2000 && atomic_load(&g_count_at_release) < 0; i++) {
    hcq_memory_usage_t usage; /* a call that hands back what has become free */
    OK(hcq_device_memory_usage(dev, &usage));
    nanosleep(&(struct timespec){0, 1000000}, NULL);
  }
  int at_release = atomic_load(&g_count_at_release);
  cr_assert(at_release >= 0, "the wrapped buffer was not handed back within 2 s of the fault");
  nanosleep(&(struct timespec){0, 100000000}, NULL);
  int later = __atomic_load_n(&count, __ATOMIC_RELAXED);
  cr_assert_eq(later, at_release,
               "%d groups ran after the buffer was handed back (%d had run by then, of %d)",
               later - at_release, at_release, GROUPS);
  cr_assert_lt(later, GROUPS, "the launch ran to the end although a group faulted early");
  hcq_buffer_release(bufs[1]);
  hcq_program_release(prog);
  OK(hcq_device_close(dev));
}

/* ---- graph replays and the JIT ---- */

static hcq_exec_item_t poke_item(hcq_program_t *p, hcq_buffer_t **b, const hcq_operand_t *v) {
  static const uint32_t out0[1] = {0};
  hcq_exec_item_t it = {.kind = HCQ_ITEM_KERNEL,
                        .kernel = {p,
                                   b,
                                   1,
                                   out0,
                                   1,
                                   v,
                                   1,
                                   {hcq_imm(1), hcq_imm(1), hcq_imm(1)},
                                   {hcq_imm(1), hcq_imm(1), hcq_imm(1)}}};
  return it;
}

Test(bounds, graph_replay_names_the_item) {
  needs_validation();
  rig_t r = rig_open();
  hcq_buffer_t *bufs[2] = {labelled(r.dev, 64, "fine"), labelled(r.dev, 16, "small")};
  hcq_operand_t in_bounds = hcq_imm(3), past = hcq_imm(4);
  hcq_exec_item_t items[2] = {poke_item(r.prog[0], &bufs[0], &in_bounds),
                              poke_item(r.prog[0], &bufs[1], &past)};
  hcq_graph_t *g = NULL;
  OK(hcq_graph_create(items, 2, NULL, 0, NULL, 0, NULL, &g));
  FAILS(hcq_graph_run(g, NULL, 0, NULL, 0, true, NULL), HCQ_DEVICE_LOST,
        "kernel poke (graph item 1) on CPU:0",
        "wrote past the end of buffer \"small\" (argument 0, 16 bytes)",
        "0 to 3 bytes past its end");
  OK(hcq_graph_destroy(g));
  rig_close(&r, bufs, 2);
}

Test(bounds, jit_replay_is_checked) {
  needs_validation();
  rig_t r = rig_open();
  hcq_buffer_t *small = labelled(r.dev, 16, "small");
  hcq_operand_t far = hcq_imm(1024);
  hcq_exec_item_t items[1] = {poke_item(r.prog[0], &small, &far)};
  hcq_jit_t *jit = NULL;
  OK(hcq_jit_create(items, 1, NULL, 0, NULL, 0, NULL, &jit));
  /* Float 1024 is byte 4096: in the guard page that starts 48 bytes after the buffer's end. */
  FAILS(hcq_jit_run(jit, NULL, 0, NULL, 0, true, NULL), HCQ_DEVICE_LOST, "kernel poke",
        "byte 4096 of buffer \"small\" (argument 0, 16 bytes)", "4080 bytes past its end",
        "guard page");
  hcq_status_destroy(hcq_jit_destroy(jit)); /* the device is lost: the jit's last replay failed */
  rig_close(&r, &small, 1);
}

/* ---- correct kernels: the same results, validation on or off ---- */

Test(bounds, correct_kernels_give_the_eager_results_and_the_device_stays_healthy) {
  rig_t r = rig_open();
  enum { N = 1001 }; /* not a multiple of 64 bytes: the buffer ends inside its last line */
  float *x = malloc(N * sizeof(float)), *y = malloc(N * sizeof(float)),
        *got = malloc(N * sizeof(float));
  for (int i = 0; i < N; i++) x[i] = (float)i, y[i] = (float)(2 * i + 1);
  hcq_buffer_t *bufs[2] = {labelled(r.dev, N * sizeof(float), "x"),
                           labelled(r.dev, N * sizeof(float), "y")};
  OK(hcq_buffer_copyin(bufs[0], 0, x, N * sizeof(float)));
  OK(hcq_buffer_copyin(bufs[1], 0, y, N * sizeof(float)));
  /* Eagerly (3 * x + y), then as a graph (3 * x again): y = 6i + 2i + 1 = 8i + 1. */
  hcq_launch_desc_t ld = {r.prog[3],  bufs, 2, (int32_t[]){3, N}, 2, {(N + 63) / 64, 1, 1},
                          {64, 1, 1}, NULL, 0};
  OK(hcq_launch(&ld));
  hcq_operand_t vals[2] = {hcq_imm(3), hcq_imm(N)};
  hcq_exec_item_t it = {.kind = HCQ_ITEM_KERNEL,
                        .kernel = {r.prog[3],
                                   bufs,
                                   2,
                                   (uint32_t[]){1},
                                   1,
                                   vals,
                                   2,
                                   {hcq_imm((N + 63) / 64), hcq_imm(1), hcq_imm(1)},
                                   {hcq_imm(64), hcq_imm(1), hcq_imm(1)}}};
  hcq_graph_t *g = NULL;
  OK(hcq_graph_create(&it, 1, NULL, 0, NULL, 0, NULL, &g));
  OK(hcq_graph_run(g, NULL, 0, NULL, 0, true, NULL));
  OK(hcq_device_synchronize(r.dev));
  test_read(bufs[1], got, N * sizeof(float));
  for (int i = 0; i < N; i++) cr_assert_eq(got[i], (float)(8 * i + 1), "y[%d] = %g", i, got[i]);
  /* A fresh buffer reads as zeros, in bounds to its last byte (3 bytes: all slack after it). */
  hcq_buffer_t *odd = test_buffer(r.dev, 3);
  unsigned char bytes[3] = {1, 1, 1};
  test_read(odd, bytes, 3);
  cr_assert(!bytes[0] && !bytes[1] && !bytes[2]);
  OK(hcq_device_health(r.dev));
  OK(hcq_graph_destroy(g));
  hcq_buffer_t *all[3] = {bufs[0], bufs[1], odd};
  rig_close(&r, all, 3);
  free(x), free(y), free(got);
}

Test(bounds, mapped_buffers_are_guarded_and_readable_by_the_host) {
  rig_t r = rig_open();
  hcq_buffer_t *m = NULL;
  OK(hcq_buffer_create_mapped(r.dev, 12, &m));
  void *host = NULL;
  OK(hcq_buffer_map(m, &host));
  cr_assert_eq((uintptr_t)host % 64, 0, "a buffer starts 64-byte aligned, guarded or not");
  OK(launch1(r.prog[0], &m, 1, 2));
  OK(hcq_device_synchronize(r.dev));
  cr_assert_eq(((float *)host)[2], 7.0f);
  if (validating()) {
    OK(launch1(r.prog[0], &m, 1, 3));
    FAILS(hcq_device_synchronize(r.dev), HCQ_DEVICE_LOST, "kernel poke",
          "wrote past the end of buffer#", "(argument 0, 12 bytes)", "bytes 12 to 15");
  }
  rig_close(&r, &m, 1);
}

Test(bounds_off, without_validation_nothing_is_guarded_or_reported) {
  if (validating()) cr_skip_test("runs in the suite without HCQ_VALIDATE (bounds_off)");
  rig_t r = rig_open();
  hcq_buffer_t *small = labelled(r.dev, 16, "small");
  /* The 4 bytes after a 16-byte buffer are the rest of its 64-byte allocation: harmless, and
   * unseen. */
  OK(launch1(r.prog[0], &small, 1, 4));
  OK(hcq_device_synchronize(r.dev));
  OK(hcq_device_health(r.dev));
  rig_close(&r, &small, 1);
}

/* ---- devices whose memory is not the host's (core/guard.c): Vulkan here, CUDA and Metal on their
 * stand-ins where the test environment loads them ---- */

/* fill(out; value, n) over n threads on backend b: OK, or the launch's status. */
static hcq_status_t gpu_fill(hcq_program_t *p, hcq_buffer_t *out, int32_t n) {
  int32_t vals[] = {7, n};
  hcq_launch_desc_t d = {p, &out, 1, vals, 2, {1, 1, 1}, {(uint32_t)n, 1, 1}};
  return hcq_launch(&d);
}

static void gpu_overflow(const char *kind) {
  needs_validation();
  const test_backend_t *b = test_backend_named(kind);
  cr_assert_not_null(b);
  const char *why = test_backend_absent(b, 1);
  if (why) cr_skip_test("%s absent: %s", kind, why);
  char name[32];
  test_device_name(b, 0, name, sizeof(name));
  hcq_device_t *dev = test_open(name);
  hcq_program_t *p = test_program(dev, "fill", test_backend_kernels(b));
  hcq_buffer_t *ok = labelled(dev, 32, "fits"), *small = labelled(dev, 16, "small");
  /* a kernel that stays inside its buffer: the guards change nothing it computes */
  OK(gpu_fill(p, ok, 8));
  int32_t got[8];
  OK(hcq_buffer_copyout(ok, 0, got, sizeof(got)));
  for (int i = 0; i < 8; i++) cr_expect_eq(got[i], 7);
  char where[64];
  snprintf(where, sizeof(where), "kernel fill on %s", name);
  FAILS(gpu_fill(p, small, 8), HCQ_DEVICE_LOST, where, "wrote past the end of buffer \"small\"",
        "(argument 0, 16 bytes)", "bytes 16 to 31 of it, 0 to 15 bytes past its end",
        "HCQ_VALIDATE canary");
  FAILS(hcq_device_synchronize(dev), HCQ_DEVICE_LOST, "wrote past the end of buffer \"small\"");
  hcq_buffer_release(ok);
  hcq_buffer_release(small);
  hcq_program_release(p);
  OK(hcq_device_close(dev));
  /* the same name opens a healthy device */
  dev = test_open(name);
  OK(hcq_device_health(dev));
  OK(hcq_device_close(dev));
}

Test(bounds, vulkan_kernel_writing_past_a_buffer_is_named) { gpu_overflow("VULKAN"); }
Test(bounds, cuda_kernel_writing_past_a_buffer_is_named) { gpu_overflow("CUDA"); }
Test(bounds, metal_kernel_writing_past_a_buffer_is_named) { gpu_overflow("METAL"); }
