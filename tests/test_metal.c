/* The Metal backend (docs/metal.md) against the stand-in runtime in tests/fake_metal (the
 * environment names it: HCQ_OBJC_LIBRARY, HCQ_METAL_FRAMEWORK). What is checked: the device's eager
 * work and copies, the compiler's error text, a failed command buffer marking the device lost, and
 * the Metal graph: results equal to eager ones, the ICB calls a replay makes (none when nothing
 * changed; one per command that uses a swapped input), the resources it declares, the M1/M2
 * workaround's dummy dispatches, its "batched N" label, JIT batches on Metal, and the device's
 * memory as Metal reports it. */
#include <dlfcn.h>
#include <inttypes.h>

#include "graph/graph_internal.h"
#include "hcq/jit.h"
#include "test_util.h"

TestSuite(metal, .timeout = 120);

typedef struct hcq_fake_metal_counts {
  uint64_t icb_sets, icb_executed, dispatches, empty_dispatches, command_buffers, use_resources;
  char last_label[64];
} counts_t;

/* Whether the stand-in plays Metal (tools/metal-check.sh runs this suite on the real framework,
 * where the call counts and the stand-in's fault kernel do not exist and those checks are skipped).
 */
static bool on_stand_in(void) {
  const char *lib = getenv("HCQ_METAL_FRAMEWORK");
  return lib && strstr(lib, "fake_metal");
}

static counts_t counts(void) {
  counts_t c;
  memset(&c, 0, sizeof(c));
  if (!on_stand_in()) return c;
  const char *lib = getenv("HCQ_METAL_FRAMEWORK");
  void *h = lib ? dlopen(lib, RTLD_NOW | RTLD_NOLOAD) : NULL;
  void (*fn)(counts_t *) =
      h ? (void (*)(counts_t *))(uintptr_t)dlsym(h, "hcq_fake_metal_counts") : NULL;
  cr_assert_not_null(fn, "the Metal stand-in is loaded (HCQ_METAL_FRAMEWORK=%s)",
                     lib ? lib : "unset");
  fn(&c);
  dlclose(h);
  return c;
}

static hcq_device_t *open_metal(void) {
  hcq_device_t *d = NULL;
  hcq_status_t st = hcq_device_open("METAL:0", &d);
  if (st) cr_assert_fail("METAL:0 does not open on the stand-in: %s", hcq_status_message(st));
  return d;
}

enum { N = 1000 };

Test(metal, info_names_the_stand_in_device_and_caps) {
  hcq_device_info_t infos[8];
  size_t n = hcq_device_query(infos, 8);
  bool found = false;
  for (size_t i = 0; i < n; i++)
    if (infos[i].kind == HCQ_DEVICE_METAL) {
      found = true;
      cr_assert(infos[i].available, "%s", infos[i].description);
      if (on_stand_in())
        cr_assert(strstr(infos[i].description, "stand-in"), "%s", infos[i].description);
    }
  cr_assert(found, "hcq_device_query lists METAL");
  hcq_device_t *d = open_metal();
  cr_assert(hcq_device_caps(d) & HCQ_CAP_COMPILE_METAL);
  cr_assert(!(hcq_device_caps(d) & HCQ_CAP_HOST_MEMORY));
  FAILS(hcq_device_open("METAL:1", &(hcq_device_t *){NULL}), HCQ_NOT_FOUND, "METAL:1", "METAL:0");
  test_close(d);
}

Test(metal, eager_launches_and_copies_compute_the_host_result) {
  hcq_device_t *d = open_metal();
  hcq_program_t *add = test_program(d, "add_scalar", test_kernels_msl);
  hcq_program_t *mul = test_program(d, "mul_add", test_kernels_msl);
  int32_t a[N], got[N];
  for (int i = 0; i < N; i++) a[i] = i * 7 - 300;
  hcq_buffer_t *ba = test_buffer(d, sizeof(a)), *bo = test_buffer(d, sizeof(a)),
               *bc = test_buffer(d, sizeof(a));
  OK(hcq_buffer_copyin(ba, 0, a, sizeof(a)));
  int32_t v[2] = {11, N - 3};
  hcq_buffer_t *bufs[2] = {bo, ba};
  hcq_launch_desc_t l = {add, bufs, 2, v, 2, {(N + 63) / 64, 1, 1}, {64, 1, 1}};
  OK(hcq_launch(&l));
  int32_t mv[3] = {3, 5, N};
  hcq_launch_desc_t m = {mul, &bo, 1, mv, 3, {(N + 127) / 128, 1, 1}, {128, 1, 1}};
  OK(hcq_launch(&m));
  OK(hcq_transfer(bc, bo, sizeof(a)));
  test_read(bc, got, sizeof(got));
  for (int i = 0; i < N; i++) {
    int32_t want = (int32_t)((uint32_t)(i < N - 3 ? a[i] + 11 : 0) * 3u + 5u);
    cr_assert_eq(got[i], want, "element %d: %d, want %d", i, got[i], want);
  }
  /* A transfer between a CPU device's memory and METAL:0 (a host-memory end). */
  hcq_device_t *cpu = test_open("CPU:0");
  hcq_buffer_t *hc = test_buffer(cpu, sizeof(a));
  OK(hcq_transfer(hc, bc, sizeof(a)));
  int32_t back[N];
  test_read(hc, back, sizeof(back));
  cr_assert_arr_eq(back, got, sizeof(got));
  hcq_buffer_release(hc);
  test_close(cpu);
  hcq_buffer_release(ba);
  hcq_buffer_release(bo);
  hcq_buffer_release(bc);
  hcq_program_release(add);
  hcq_program_release(mul);
  test_close(d);
}

Test(metal, compile_errors_carry_the_compiler_text_and_the_device) {
  hcq_device_t *d = open_metal();
  hcq_program_t *p = NULL;
  FAILS(hcq_program_create(
            d, "k",
            "#include <metal_stdlib>\n#error expected ';' after expression\nkernel void k() {}\n",
            &p),
        HCQ_COMPILE_ERROR, "METAL:0", "program_source:2", "expected ';' after expression");
  FAILS(hcq_program_create(d, "nope", test_kernels_msl, &p), HCQ_COMPILE_ERROR, "METAL:0",
        "no kernel function named nope");
  cr_assert_null(p);
  test_close(d);
}

Test(metal, a_failed_command_buffer_marks_the_device_lost_with_metals_words) {
  if (!on_stand_in()) cr_skip_test("the stand-in's faulting kernel exists on the stand-in only");
  hcq_device_t *d = open_metal();
  hcq_program_t *p = test_program(d, "hcq_fake_fault",
                                  "kernel void hcq_fake_fault(device int *x [[buffer(0)]]) {}\n");
  hcq_buffer_t *b = test_buffer(d, 64);
  hcq_launch_desc_t l = {p, &b, 1, NULL, 0, {1, 1, 1}, {1, 1, 1}};
  OK(hcq_launch(&l));
  FAILS(hcq_device_synchronize(d), HCQ_DEVICE_LOST, "METAL:0", "hcq_fake_fault",
        "GPU Address Fault");
  FAILS(hcq_launch(&l), HCQ_DEVICE_LOST, "METAL:0");
  hcq_buffer_release(b);
  hcq_program_release(p);
  OK(hcq_device_close(d));
}

/* Items: fill(a) -> add_scalar(b = a + k) -> mix(out = b * 3 + c + 1); c is input 0. */
static void graph_case(hcq_device_t *d, hcq_program_t *const *ps, hcq_buffer_t *a, hcq_buffer_t *b,
                       hcq_buffer_t *c, hcq_buffer_t *out, hcq_exec_item_t items[3],
                       hcq_buffer_t *bufs[3][3], hcq_operand_t vals[3][3]) {
  (void)d;
  hcq_operand_t g = hcq_imm((N + 63) / 64), one = hcq_imm(1), l = hcq_imm(64);
  bufs[0][0] = a;
  vals[0][0] = hcq_imm(9), vals[0][1] = hcq_imm(N);
  bufs[1][0] = b, bufs[1][1] = a;
  vals[1][0] = hcq_imm(-4), vals[1][1] = hcq_imm(N);
  bufs[2][0] = out, bufs[2][1] = b, bufs[2][2] = c;
  vals[2][0] = hcq_imm(3), vals[2][1] = hcq_imm(1), vals[2][2] = hcq_imm(N);
  size_t nb[3] = {1, 2, 3}, nv[3] = {2, 2, 3};
  for (int j = 0; j < 3; j++)
    items[j] = (hcq_exec_item_t){.kind = HCQ_ITEM_KERNEL,
                                 .kernel = {.program = ps[j],
                                            .bufs = bufs[j],
                                            .nbufs = nb[j],
                                            .vals = vals[j],
                                            .nvals = nv[j],
                                            .global = {g, one, one},
                                            .local = {l, one, one}}};
}

Test(metal, graph_replays_equal_eager_and_reset_only_what_changed) {
  hcq_device_t *d = open_metal();
  hcq_program_t *ps[3] = {test_program(d, "fill", test_kernels_msl),
                          test_program(d, "add_scalar", test_kernels_msl),
                          test_program(d, "mix", test_kernels_msl)};
  hcq_buffer_t *a = test_buffer(d, 4 * N), *b = test_buffer(d, 4 * N), *out = test_buffer(d, 4 * N);
  hcq_buffer_t *c1 = test_buffer_iota(d, N, 2, 1), *c2 = test_buffer_iota(d, N, -5, 7);
  hcq_exec_item_t items[3];
  hcq_buffer_t *bufs[3][3];
  hcq_operand_t vals[3][3];
  graph_case(d, ps, a, b, c1, out, items, bufs, vals);
  hcq_graph_t *g = NULL;
  OK(hcq_graph_create(items, 3, &c1, 1, NULL, 0, NULL, &g));
  cr_assert_str_eq(hcq_graph_kind(g), "metal");
  counts_t before = counts();
  uint64_t ns = 0;
  for (int rep = 0; rep < 4; rep++) OK(hcq_graph_run(g, &c1, 1, NULL, 0, rep == 3, &ns));
  counts_t after = counts();
  bool fake = on_stand_in();
  if (fake) {
    cr_assert_eq(after.icb_sets, before.icb_sets,
                 "unchanged replays make no ICB calls (%" PRIu64 " made)",
                 after.icb_sets - before.icb_sets);
    cr_assert_eq(after.icb_executed - before.icb_executed, 12, "4 replays ran 3 commands each");
    cr_assert_eq(after.empty_dispatches - before.empty_dispatches, 12,
                 "one dummy dispatch per pipeline per replay");
    cr_assert_eq(after.use_resources - before.use_resources, 4);
    cr_assert_str_eq(after.last_label, "batched 3");
  }
  cr_assert_gt(ns, 0, "a replay with wait reports GPU time");
  uint32_t got[N], c1h[N], c2h[N];
  test_read(c1, c1h, sizeof(c1h));
  test_read(c2, c2h, sizeof(c2h));
  test_read(out, got, sizeof(got));
  for (int i = 0; i < N; i++)
    cr_assert_eq(got[i], (uint32_t)(9 - 4) * 3u + c1h[i] + 1u, "out[%d]", i);
  /* Swapping input 0: only the mix command binds it, so each replay (one per ICB slot) re-sets one
   * buffer binding of one command. */
  before = counts();
  OK(hcq_graph_run(g, &c2, 1, NULL, 0, true, NULL));
  counts_t one = counts();
  if (fake)
    cr_assert_eq(one.icb_sets - before.icb_sets, 1,
                 "one input swap re-sets one binding (%" PRIu64 " calls)",
                 one.icb_sets - before.icb_sets);
  hcq_graph_stats_t stats;
  hcq_graph_stats(g, &stats);
  cr_assert_eq(stats.last_replay_updates, 1);
  test_read(out, got, sizeof(got));
  for (int i = 0; i < N; i++)
    cr_assert_eq(got[i], 5u * 3u + c2h[i] + 1u, "out[%d] after the swap", i);
  /* The same items eagerly: the ground truth. */
  memset(got, 0, sizeof(got));
  uint32_t graph_out[N];
  test_read(out, graph_out, sizeof(graph_out));
  bufs[2][2] = c2;
  for (int j = 0; j < 3; j++) OK(hcq_exec_item_run(&items[j], NULL, 0));
  test_read(out, got, sizeof(got));
  cr_assert_arr_eq(got, graph_out, sizeof(got));
  OK(hcq_graph_destroy(g));
  hcq_buffer_t *all[] = {a, b, out, c1, c2};
  for (size_t i = 0; i < 5; i++) hcq_buffer_release(all[i]);
  for (int j = 0; j < 3; j++) hcq_program_release(ps[j]);
  test_close(d);
}

Test(metal, graph_with_a_symbolic_dim_resets_the_dispatch_only) {
  hcq_device_t *d = open_metal();
  hcq_program_t *p = test_program(d, "fill", test_kernels_msl);
  hcq_buffer_t *out = test_buffer(d, 4 * 256);
  hcq_expr_t *n = NULL;
  OK(hcq_var_create("groups", 1, 4, &n));
  hcq_operand_t vals[2] = {hcq_imm(42), hcq_imm(256)}, one = hcq_imm(1);
  hcq_exec_item_t it = {.kind = HCQ_ITEM_KERNEL,
                        .kernel = {.program = p,
                                   .bufs = &out,
                                   .nbufs = 1,
                                   .vals = vals,
                                   .nvals = 2,
                                   .global = {hcq_sym(n), one, one},
                                   .local = {hcq_imm(64), one, one}}};
  hcq_exec_item_t its[2] = {it, it};
  hcq_var_value_t v = {n, 1};
  hcq_graph_t *g = NULL;
  OK(hcq_graph_create(its, 2, NULL, 0, &v, 1, NULL, &g));
  OK(hcq_graph_run(g, NULL, 0, &v, 1, true, NULL));
  counts_t before = counts();
  v.value = 3;
  OK(hcq_graph_run(g, NULL, 0, &v, 1, true, NULL));
  counts_t after = counts();
  if (on_stand_in())
    cr_assert_eq(after.icb_sets - before.icb_sets, 2,
                 "two commands' dispatch sizes re-set, nothing else");
  int32_t got[256];
  test_read(out, got, sizeof(got));
  for (int i = 0; i < 256; i++) cr_assert_eq(got[i], i < 192 ? 42 : 0, "out[%d]", i);
  OK(hcq_graph_destroy(g));
  hcq_expr_release(n);
  hcq_buffer_release(out);
  hcq_program_release(p);
  test_close(d);
}

Test(metal, jit_graphs_metal_kernel_batches_and_leaves_transfers_eager) {
  hcq_device_t *d = open_metal();
  hcq_program_t *p = test_program(d, "mul_add", test_kernels_msl);
  hcq_buffer_t *x = test_buffer_iota(d, N, 1, 0), *y = test_buffer(d, 4 * N);
  hcq_capture_t *cap = NULL;
  OK(hcq_capture_begin(&cap));
  for (int k = 0; k < 4; k++) {
    int32_t v[3] = {2, 1, N};
    hcq_launch_desc_t l = {p, &x, 1, v, 3, {(N + 63) / 64, 1, 1}, {64, 1, 1}};
    OK(hcq_launch(&l));
  }
  OK(hcq_transfer(y, x, 4 * N));
  hcq_jit_t *jit = NULL;
  OK(hcq_capture_end(cap, &x, 1, NULL, 0, NULL, &jit));
  const hcq_jit_report_t *rep = hcq_jit_report(jit);
  cr_assert_eq(rep->batches, 1, "the four launches are one Metal graph: %s", rep->text);
  cr_assert_eq(rep->graphed_items, 4, "%s", rep->text);
  cr_assert_eq(rep->eager_items, 1, "the transfer runs eagerly: %s", rep->text);
  for (int r = 0; r < 2; r++) OK(hcq_jit_run(jit, &x, 1, NULL, 0, true, NULL));
  uint32_t got[N];
  test_read(y, got, sizeof(got));
  for (int i = 0; i < N; i++) {
    uint32_t want = (uint32_t)i;
    for (int r = 0; r < 12; r++) want = want * 2u + 1u; /* the capture run and two replays */
    cr_assert_eq(got[i], want, "y[%d]", i);
  }
  OK(hcq_jit_destroy(jit));
  hcq_buffer_release(x);
  hcq_buffer_release(y);
  hcq_program_release(p);
  test_close(d);
}

Test(metal, graph_refuses_transfers_and_other_devices_with_a_reason) {
  setenv("HCQ_METAL_VIRTUAL", "1", 1);
  hcq_device_t *d0 = open_metal(), *d1 = test_open("METAL:1");
  hcq_program_t *p0 = test_program(d0, "fill", test_kernels_msl),
                *p1 = test_program(d1, "fill", test_kernels_msl);
  hcq_buffer_t *a = test_buffer(d0, 256), *b = test_buffer(d1, 256);
  hcq_operand_t vals[2] = {hcq_imm(1), hcq_imm(64)}, one = hcq_imm(1);
  hcq_exec_item_t k0 = {.kind = HCQ_ITEM_KERNEL,
                        .kernel = {.program = p0,
                                   .bufs = &a,
                                   .nbufs = 1,
                                   .vals = vals,
                                   .nvals = 2,
                                   .global = {one, one, one},
                                   .local = {hcq_imm(64), one, one}}};
  hcq_exec_item_t k1 = k0;
  k1.kernel.program = p1, k1.kernel.bufs = &b;
  hcq_exec_item_t t = {.kind = HCQ_ITEM_TRANSFER, .transfer = {b, a, 256}};
  hcq_graph_t *g = NULL;
  FAILS(hcq_graph_create((hcq_exec_item_t[]){k0, k1}, 2, NULL, 0, NULL, 0, NULL, &g),
        HCQ_INVALID_ARGUMENT, "Metal graph runs on one device", "2");
  hcq_buffer_t *a2 = test_buffer(d0, 256);
  hcq_exec_item_t t0 = {.kind = HCQ_ITEM_TRANSFER, .transfer = {a2, a, 256}};
  FAILS(hcq_graph_create((hcq_exec_item_t[]){k0, t0}, 2, NULL, 0, NULL, 0, NULL, &g),
        HCQ_INVALID_ARGUMENT, "item 1", "kernel items only");
  hcq_buffer_release(a2);
  cr_assert_null(g);
  /* The JIT graphs each device's kernels apart and runs the transfer eagerly. */
  hcq_jit_t *jit = NULL;
  OK(hcq_jit_create((hcq_exec_item_t[]){k0, k0, t, k1, k1}, 5, NULL, 0, NULL, 0, NULL, &jit));
  const hcq_jit_report_t *rep = hcq_jit_report(jit);
  cr_assert_eq(rep->batches, 2, "%s", rep->text);
  cr_assert_eq(rep->eager_items, 1, "%s", rep->text);
  OK(hcq_jit_run(jit, NULL, 0, NULL, 0, true, NULL));
  int32_t got[64];
  test_read(b, got, sizeof(got));
  for (int i = 0; i < 64; i++) cr_assert_eq(got[i], 1);
  OK(hcq_jit_destroy(jit));
  hcq_buffer_release(a);
  hcq_buffer_release(b);
  hcq_program_release(p0);
  hcq_program_release(p1);
  test_close(d1);
  test_close(d0);
}

Test(metal, a_stuck_wait_is_named_in_the_hang_report_and_runs_once_released) {
  setenv("HCQ_WAIT_TIMEOUT_MS", "300", 1);
  hcq_device_t *d = open_metal();
  hcq_signal_t *gate = NULL;
  OK(hcq_signal_create(d, "gate", 0, &gate));
  hcq_queue_t *q = test_gate_queue(d, HCQ_QUEUE_COMPUTE, gate, 1);
  hcq_program_t *p = test_program(d, "fill", test_kernels_msl);
  hcq_buffer_t *b = test_buffer(d, 256);
  int32_t v[2] = {5, 64};
  hcq_launch_desc_t l = {p, &b, 1, v, 2, {1, 1, 1}, {64, 1, 1}};
  OK(hcq_launch(&l)); /* queued behind the wait */
  FAILS(hcq_device_synchronize(d), HCQ_TIMEOUT, "hang report", "METAL:0", "compute queue",
        "blocked at wait \"gate\" >= 1");
  hcq_signal_set(gate, 1);
  OK(hcq_device_synchronize(d));
  int32_t got[64];
  test_read(b, got, sizeof(got));
  for (int i = 0; i < 64; i++) cr_assert_eq(got[i], 5);
  hcq_queue_destroy(q);
  hcq_buffer_release(b);
  hcq_program_release(p);
  hcq_signal_destroy(gate);
  test_close(d);
}

Test(metal, device_memory_is_the_working_set_less_what_the_device_allocated) {
  hcq_device_t *d = open_metal();
  hcq_device_memory_t before, held, after;
  OK(hcq_device_memory(d, &before)); /* UNAVAILABLE when the backend does not implement it */
  cr_assert_gt(before.total, 0);
  cr_assert_leq(before.available, before.total);
  cr_assert(before.source && strstr(before.source, "recommendedMaxWorkingSetSize"), "source: %s",
            before.source ? before.source : "(null)");
  if (on_stand_in())
    cr_assert_eq(before.total, UINT64_C(48) << 30, "the stand-in recommends 48 GiB");
  const uint64_t size = UINT64_C(64) << 20;
  hcq_buffer_t *b = test_buffer(d, size);
  OK(hcq_device_memory(d, &held));
  cr_assert_eq(held.total, before.total);
  cr_assert_leq(held.available + size, before.available,
                "available %" PRIu64 " with a 64 MiB buffer, %" PRIu64 " before", held.available,
                before.available);
  hcq_buffer_release(b);
  /* a released buffer's memory is freed once the work queued before it finished */
  OK(hcq_device_synchronize(d));
  OK(hcq_device_memory(d, &after));
  cr_assert_geq(after.available, held.available + size,
                "available %" PRIu64 " after the release, %" PRIu64 " with the buffer",
                after.available, held.available);
  test_close(d);
}
