/* The HCQ graph's schedule (docs/design.md, "The HCQ graph"), inspected item by item; its profile;
 * its errors. */
#include "core/command.h"
#include "core/options.h"
#include "core/queue.h"
#include "graph/graph_internal.h"
#include "graph/graph_testing.h"
#include "world.h"

TestSuite(graph_schedule, .timeout = 120);

static hcq_operand_t I(int64_t v) { return hcq_imm(v); }
enum { N = 64 };

static hcq_graph_t *build_opts(world_item_t *items, int n, bool profile) {
  hcq_exec_item_t its[64];
  for (int j = 0; j < n; j++) its[j] = items[j].item;
  hcq_graph_options_t opts = {.profile = profile};
  hcq_graph_t *g = NULL;
  OK(hcq_graph_create(its, (size_t)n, NULL, 0, NULL, 0, &opts, &g));
  return g;
}

static hcq_graph_item_schedule_t sched(hcq_graph_t *g, size_t j) {
  hcq_graph_item_schedule_t s;
  OK(hcq_graph_item_schedule(g, j, &s));
  return s;
}

/* Counts the commands of an opcode in a graph queue. */
static int count_ops(const hcq_queue_t *q, uint32_t op) {
  int n = 0;
  for (size_t i = 0; i < hcq_queue_size(q);) {
    uint32_t h = hcq_queue_word(q, i);
    if (HCQ__HDR_OP(h) == op) n++;
    i += HCQ__HDR_LEN(h);
  }
  return n;
}

Test(graph_schedule, chain_on_one_queue_carries_no_waits) {
  world_t w;
  world_open(&w, 1);
  int a = world_buffer(&w, 0, N, 1);
  world_item_t items[5];
  for (int j = 0; j < 5; j++) world_mix(&w, &items[j], a, a, a, I(2), I(j), I(N), NULL);
  hcq_graph_t *g = build_opts(items, 5, false);
  for (size_t j = 0; j < 5; j++) {
    hcq_graph_item_schedule_t s = sched(g, j);
    cr_assert_eq(s.queue, 0, "every kernel runs on CPU:0's compute queue");
    cr_assert_eq(s.nwaits, 0, "item %zu waits on its own in-order queue", j);
    cr_assert_eq(s.nready, 0, "the compute queue knows its own device is ready");
    cr_assert_eq(s.signal_value, 0, "nothing waits for item %zu, so it signals nothing", j);
    cr_assert_eq(s.ndeps, j ? 1 : 0);
    if (j) cr_assert_eq(s.deps[0], j - 1);
  }
  /* The queue: prologue (barrier, 2 waits, signal), 5 execs, epilogue (timeline signal, done
   * signal). */
  const hcq_queue_t *q = hcq_graph_queue(g, 0);
  cr_assert_not_null(q);
  cr_assert_null(hcq_graph_queue(g, 1), "no transfers: no copy queue");
  cr_assert_eq(count_ops(q, HCQ__OP_EXEC), 5);
  cr_assert_eq(count_ops(q, HCQ__OP_WAIT), 2);
  cr_assert_eq(count_ops(q, HCQ__OP_SIGNAL), 3);
  cr_assert_eq(count_ops(q, HCQ__OP_BARRIER), 1);
  OK(hcq_graph_destroy(g));
  world_close(&w);
}

/* K0 writes a and b; copy a waits for the compute queue reaching 1; copy b needs the same and
 * already has it; K2 writes c; copy c needs compute >= 3 and the older dependency is covered. */
Test(graph_schedule, waits_already_implied_are_not_repeated) {
  world_t w;
  world_open(&w, 2);
  int a = world_buffer(&w, 0, N, 1), b = world_buffer(&w, 0, N, 2), c = world_buffer(&w, 0, N, 3);
  int x = world_buffer(&w, 1, N, 4), y = world_buffer(&w, 1, N, 5), z = world_buffer(&w, 1, N, 6);
  world_item_t items[6];
  world_mix(&w, &items[0], a, a, a, I(2), I(1), I(N), NULL);
  items[0].outs[0] = 0;
  world_mix(&w, &items[1], b, a, b, I(1), I(1), I(N), NULL); /* writes b after a */
  world_copy(&w, &items[2], x, a, N * 4);                    /* waits compute >= 1 */
  world_copy(&w, &items[3], y, b, N * 4);                    /* waits compute >= 2 */
  world_copy(&w, &items[4], z, a, N * 4);                    /* compute >= 1: implied */
  world_mix(&w, &items[5], c, c, c, I(3), I(0), I(N), NULL);
  hcq_graph_t *g = build_opts(items, 6, false);
  hcq_graph_item_schedule_t s2 = sched(g, 2), s3 = sched(g, 3), s4 = sched(g, 4);
  cr_assert_eq(s2.queue, 1, "transfers run on the source device's copy queue");
  cr_assert_eq(s2.nwaits, 1);
  cr_assert_eq(s2.waits[0].queue, 0);
  cr_assert_eq(s2.waits[0].value, 1);
  cr_assert_eq(s2.nready, 1, "it learned CPU:0 through item 0 and waits for CPU:1 only");
  cr_assert_eq(s2.ready_devices[0], 1);
  cr_assert_eq(s2.signal_value, 3, "transfers always signal");
  cr_assert_eq(s3.nwaits, 1);
  cr_assert_eq(s3.waits[0].value, 2);
  cr_assert_eq(s3.nready, 0, "it learned both devices are ready");
  cr_assert_eq(s4.nwaits, 0, "the wait for compute >= 1 is implied by the earlier wait for >= 2");
  cr_assert_eq(s4.ndeps, 1);
  cr_assert_eq(s4.deps[0], 0);
  hcq_graph_item_schedule_t s0 = sched(g, 0), s1 = sched(g, 1), s5 = sched(g, 5);
  cr_assert_eq(s0.signal_value, 1, "the copy queue waits for item 0");
  cr_assert_eq(s1.signal_value, 2);
  cr_assert_eq(s5.signal_value, 0);
  cr_assert_eq(s5.nwaits, 0);
  /* CPU:1's compute queue ends waiting for CPU:0's copy queue (which copied into CPU:1). */
  const hcq_queue_t *q1 = hcq_graph_queue(g, 2);
  cr_assert_eq(count_ops(q1, HCQ__OP_WAIT), 2 + 1);
  FAILS(hcq_graph_item_schedule(g, 6, &s0), HCQ_OUT_OF_RANGE, "item 6");
  OK(hcq_graph_destroy(g));
  world_close(&w);
}

/* Highest values first: a dependency on (compute, 1) after one on (compute, 3) in the same item is
 * dropped. A queue that waited on another queue learns what that queue knew about devices. */
Test(graph_schedule, highest_first_and_readiness_learned_through_waits) {
  world_t w;
  world_open(&w, 3);
  int a0 = world_buffer(&w, 0, N, 1), b0 = world_buffer(&w, 0, N, 2),
      c0 = world_buffer(&w, 0, N, 3);
  int a1 = world_buffer(&w, 1, N, 4), a2 = world_buffer(&w, 2, N, 5),
      b2 = world_buffer(&w, 2, N, 6);
  world_item_t items[6];
  world_copy(&w, &items[0], a1, a0, N * 4); /* CPU:0 copy queue, ready {0,1} */
  world_mix(&w, &items[1], b0, b0, b0, I(1), I(1), I(N), NULL);
  world_mix(&w, &items[2], c0, c0, c0, I(1), I(1), I(N), NULL);
  world_copy(&w, &items[3], a2, a0, N * 4); /* copy queue learns device 2 */
  /* deps: items 0 (copy), 1 and 2 (compute, in order) */
  world_mix(&w, &items[4], a0, b0, c0, I(1), I(1), I(N), NULL);
  world_copy(&w, &items[5], b2, a1, N * 4); /* CPU:1 copy queue */
  hcq_graph_t *g = build_opts(items, 6, false);
  hcq_graph_item_schedule_t s4 = sched(g, 4);
  /* Dependencies (copy0, 4) [item 3 read a0], (copy0, 1), (compute0, 3), (compute0, 2): the
   * compute queue drops its own; of the copy queue's only the highest stays. */
  cr_assert_eq(s4.ndeps, 4);
  cr_assert_eq(s4.nwaits, 1);
  cr_assert_eq(s4.waits[0].queue, 1);
  cr_assert_eq(s4.waits[0].value, 4);
  hcq_graph_item_schedule_t s5 = sched(g, 5);
  cr_assert_eq(s5.queue, 2 * 1 + 1);
  /* It waits for item 0 (wrote a1): the CPU:0 copy queue knew devices 0 and 1 then, not 2. */
  cr_assert_eq(s5.nwaits, 1);
  cr_assert_eq(s5.waits[0].queue, 1);
  cr_assert_eq(s5.waits[0].value, 1);
  cr_assert_eq(s5.nready, 1, "device 2 is not known through item 0");
  cr_assert_eq(s5.ready_devices[0], 2);
  OK(hcq_graph_destroy(g));
  world_close(&w);
}

Test(graph_schedule, profile_records_entries_dependencies_and_timestamps) {
  world_t w;
  world_open(&w, 2);
  int a = world_buffer(&w, 0, N, 1), b = world_buffer(&w, 1, N, 2);
  world_item_t items[4];
  world_mix(&w, &items[0], a, a, a, I(2), I(1), I(N), NULL);
  world_mix(&w, &items[1], a, a, a, I(2), I(1), I(N), NULL);
  world_copy(&w, &items[2], b, a, N * 4);
  world_mix(&w, &items[3], b, b, b, I(3), I(1), I(N), NULL);
  hcq_graph_t *g = build_opts(items, 4, true);
  const hcq_profile_event_t *ev = NULL;
  FAILS(hcq_graph_profile(g, &ev), HCQ_FAILED_PRECONDITION, "not run");
  for (int r = 0; r < 3; r++) OK(hcq_graph_run(g, NULL, 0, NULL, 0, r == 2, NULL));
  OK(hcq_graph_profile(g, &ev));
  cr_assert_eq(ev->nentries, 4);
  cr_assert_eq(ev->replay, 3);
  cr_assert_str_eq(ev->entries[0].name, "mix");
  cr_assert_str_eq(ev->entries[0].device, "CPU:0");
  cr_assert_str_eq(ev->entries[2].name, "CPU:0 -> CPU:1");
  cr_assert(ev->entries[2].is_copy);
  cr_assert_not(ev->entries[1].is_copy);
  cr_assert_eq(ev->entries[0].start_slot, 0);
  cr_assert_eq(ev->entries[1].start_slot, 1, "a chained item reuses the previous end timestamp");
  cr_assert_eq(ev->entries[1].end_slot, 3);
  cr_assert_eq(ev->entries[2].start_slot, 4, "the transfer waits, so it has its own start");
  cr_assert_eq(ev->ndeps[1], 1);
  cr_assert_eq(ev->deps[1][0], 0);
  cr_assert_eq(ev->ndeps[3], 1);
  cr_assert_eq(ev->deps[3][0], 2);
  for (size_t i = 0; i < ev->nentries; i++) {
    uint64_t st = ev->timestamps[ev->entries[i].start_slot],
             en = ev->timestamps[ev->entries[i].end_slot];
    cr_assert_gt(st, 0, "entry %zu has no start timestamp", i);
    cr_assert_leq(st, en, "entry %zu ends before it starts", i);
  }
  cr_assert_leq(ev->timestamps[ev->entries[2].end_slot], ev->timestamps[ev->entries[3].start_slot],
                "the kernel after the transfer starts after it ended");
  cr_assert_eq(ev->timestamps[2], 0, "slot 2 (item 1's own start) is unused");
  OK(hcq_graph_destroy(g));
  world_close(&w);
}

Test(graph_schedule, build_errors_name_the_item) {
  world_t w;
  world_open(&w, 2);
  int a = world_buffer(&w, 0, N, 1), b = world_buffer(&w, 1, N, 2),
      big = world_buffer(&w, 0, 2 * N, 3);
  hcq_graph_t *g = (hcq_graph_t *)1;
  world_item_t items[3];
  world_mix(&w, &items[0], a, a, a, I(1), I(1), I(N), NULL);
  world_mix(&w, &items[1], a, a, a, I(1), I(1), I(N), NULL);
  items[1].bufs[2] = w.buf[b];
  hcq_exec_item_t its[3] = {items[0].item, items[1].item};
  FAILS(hcq_graph_create(its, 2, NULL, 0, NULL, 0, NULL, &g), HCQ_INVALID_ARGUMENT, "item 1 (mix)",
        "buffer 2 (b1)", "is on CPU:1");
  cr_assert_null(g);
  FAILS(hcq_graph_create(its, 0, NULL, 0, NULL, 0, NULL, &g), HCQ_INVALID_ARGUMENT,
        "at least one item");
  FAILS(hcq_graph_create(its, 1, NULL, 0, NULL, 0, NULL, NULL), HCQ_INVALID_ARGUMENT, "out_graph");
  world_copy(&w, &items[2], a, big, 2 * N * 4);
  its[1] = items[2].item;
  FAILS(hcq_graph_create(its, 2, NULL, 0, NULL, 0, NULL, &g), HCQ_OUT_OF_RANGE, "item 1",
        "larger than a buffer");
  items[0].outs[0] = 3;
  its[0] = items[0].item;
  FAILS(hcq_graph_create(its, 1, NULL, 0, NULL, 0, NULL, &g), HCQ_OUT_OF_RANGE,
        "item 0 (mix): out 0 names buffer 3");
  items[0].outs[0] = 0;
  items[0].item.kernel.global[0] = I(-1);
  its[0] = items[0].item;
  FAILS(hcq_graph_create(its, 1, NULL, 0, NULL, 0, NULL, &g), HCQ_OUT_OF_RANGE,
        "item 0: global[0] -1");
  /* Symbolic operands: initial values present, in range, and evaluating into their fields. */
  hcq_expr_t *n = NULL, *d = NULL;
  OK(hcq_var_create("n", 0, 100, &n));
  const hcq_expr_t *vars[] = {n};
  OK(hcq_expr_parse("64//n", vars, 1, &d));
  world_mix(&w, &items[0], a, a, a, I(1), I(1), I(N), NULL);
  items[0].item.kernel.global[0] = hcq_sym(d);
  its[0] = items[0].item;
  FAILS(hcq_graph_create(its, 1, NULL, 0, NULL, 0, NULL, &g), HCQ_NOT_FOUND,
        "variable n has no initial value");
  hcq_var_value_t zero = {n, 0}, high = {n, 101}, ok = {n, 4};
  FAILS(hcq_graph_create(its, 1, NULL, 0, &zero, 1, NULL, &g), HCQ_OUT_OF_RANGE,
        "item 0 (mix): global[0]", "division by zero");
  FAILS(hcq_graph_create(its, 1, NULL, 0, &high, 1, NULL, &g), HCQ_OUT_OF_RANGE, "variable n = 101",
        "[0, 100]");
  FAILS(hcq_exec_item_run(&its[0], NULL, 0), HCQ_NOT_FOUND, "kernel: global[0]",
        "variable n has no value");
  FAILS(hcq_exec_item_run(&its[0], &zero, 1), HCQ_OUT_OF_RANGE, "division by zero");
  FAILS(hcq_exec_item_run(NULL, NULL, 0), HCQ_INVALID_ARGUMENT, "item is NULL");
  OK(hcq_exec_item_run(&its[0], &ok, 1));
  hcq_buffer_t *dup[] = {w.buf[a], w.buf[a]};
  FAILS(hcq_graph_create(its, 1, dup, 2, &ok, 1, NULL, &g), HCQ_INVALID_ARGUMENT, "input 1",
        "listed twice");
  /* Failed builds leave nothing behind: the devices close (world_close) and nothing leaks (ASan).
   */
  hcq_expr_release(d);
  hcq_expr_release(n);
  world_close(&w);
}

Test(graph_schedule, replay_errors_change_nothing) {
  world_t w;
  world_open(&w, 2);
  int x = world_buffer(&w, 0, N, 1), x_small = world_buffer(&w, 0, N / 2, 2),
      x_far = world_buffer(&w, 1, N, 3);
  int out = world_buffer(&w, 0, N, 4), x2 = world_buffer(&w, 0, N, 5);
  hcq_expr_t *n = NULL, *m = NULL, *d = NULL;
  OK(hcq_var_create("n", 1, N, &n));
  OK(hcq_var_create("m", -4, 4, &m));
  const hcq_expr_t *vars[] = {n, m};
  OK(hcq_expr_parse("(n+63)//64 + 4//m - 4//m", vars, 2, &d));
  world_item_t items[1];
  world_mix(&w, &items[0], out, x, out, I(2), I(1), hcq_sym(n), d);
  hcq_exec_item_t its[] = {items[0].item};
  hcq_buffer_t *ins[] = {w.buf[x]};
  hcq_var_value_t init[] = {{n, N}, {m, 1}};
  hcq_graph_t *g = NULL;
  OK(hcq_graph_create(its, 1, ins, 1, init, 2, NULL, &g));
  hcq_buffer_t *small[] = {w.buf[x_small]}, *far[] = {w.buf[x_far]}, *missing[] = {NULL};
  FAILS(hcq_graph_run(g, small, 1, NULL, 0, true, NULL), HCQ_INVALID_ARGUMENT, "input 0",
        "128 bytes", "has 256");
  FAILS(hcq_graph_run(g, far, 1, NULL, 0, true, NULL), HCQ_INVALID_ARGUMENT, "input 0",
        "is on CPU:1");
  FAILS(hcq_graph_run(g, missing, 1, NULL, 0, true, NULL), HCQ_INVALID_ARGUMENT,
        "input 0 is missing");
  FAILS(hcq_graph_run(g, NULL, 0, NULL, 0, true, NULL), HCQ_INVALID_ARGUMENT,
        "1 inputs but the replay passed 0");
  hcq_var_value_t bad_range[] = {{n, N + 1}};
  FAILS(hcq_graph_run(g, ins, 1, bad_range, 1, true, NULL), HCQ_OUT_OF_RANGE, "variable n = 65");
  hcq_var_value_t div0[] = {{m, 0}};
  FAILS(hcq_graph_run(g, ins, 1, div0, 1, true, NULL), HCQ_OUT_OF_RANGE, "division by zero");
  FAILS(hcq_graph_run(NULL, ins, 1, NULL, 0, true, NULL), HCQ_INVALID_ARGUMENT, "graph is NULL");
  /* Nothing ran and nothing changed: the next good replay matches the eager ground truth. */
  world_compare(&w, "after failed replays");
  hcq_buffer_t *ins2[] = {w.buf[x2]};
  hcq_var_value_t good[] = {{n, 17}, {m, -3}};
  OK(hcq_graph_run(g, ins2, 1, good, 2, true, NULL));
  int inputs[] = {x}, swaps[] = {x2};
  world_run_eager(&w, items, 1, inputs, swaps, 1, good, 2);
  world_compare(&w, "after a good replay");
  /* The graph keeps its devices open. */
  FAILS(hcq_device_close(w.devs[0]), HCQ_FAILED_PRECONDITION, "still alive");
  OK(hcq_graph_destroy(g));
  OK(hcq_graph_destroy(NULL));
  hcq_expr_release(n);
  hcq_expr_release(m);
  hcq_expr_release(d);
  world_close(&w);
}

/* The graph holds its buffers: the caller may drop them right after building. */
Test(graph_schedule, graph_retains_its_buffers_and_programs) {
  hcq_device_t *d = test_open("CPU:0");
  hcq_program_t *p = test_program(d, "mul_add", test_kernels_source);
  hcq_buffer_t *x = test_buffer_iota(d, 64, 1, 0);
  hcq_operand_t vals[] = {I(2), I(1), I(64)};
  hcq_kernel_item_t k = {
      p, &x, 1, (uint32_t[]){0}, 1, vals, 3, {I(1), I(1), I(1)}, {I(64), I(1), I(1)}};
  hcq_exec_item_t it = {.kind = HCQ_ITEM_KERNEL, .kernel = k};
  hcq_graph_t *g = NULL;
  OK(hcq_graph_create(&it, 1, NULL, 0, NULL, 0, NULL, &g));
  hcq_buffer_t *keep = hcq_buffer_retain(x);
  hcq_buffer_release(x);
  hcq_program_release(p);
  for (int r = 0; r < 3; r++) OK(hcq_graph_run(g, NULL, 0, NULL, 0, false, NULL));
  OK(hcq_graph_destroy(g));
  uint32_t got[64];
  test_read(keep, got, sizeof(got));
  for (uint32_t i = 0; i < 64; i++) cr_assert_eq(got[i], ((i * 2 + 1) * 2 + 1) * 2 + 1);
  hcq_buffer_release(keep);
  test_close(d);
}

/* The kickoff value restarts before it outgrows its 32-bit payload. */
Test(graph_schedule, kickoff_value_wraps) {
  world_t w;
  world_open(&w, 2);
  int a = world_buffer(&w, 0, N, 1), b = world_buffer(&w, 1, N, 2);
  world_item_t items[2];
  world_mix(&w, &items[0], a, a, a, I(3), I(1), I(N), NULL);
  world_copy(&w, &items[1], b, a, N * 4);
  hcq_graph_t *g = build_opts(items, 2, false);
  /* White box: pretend two billion replays happened. */
  OK(hcq_graph_run(g, NULL, 0, NULL, 0, true, NULL));
  world_run_eager(&w, items, 2, NULL, NULL, 0, NULL, 0);
  cr_assert_eq(hcq__graph_kickoff_value_for_tests(g), 1);
  hcq__graph_pretend_replays_for_tests(g, HCQ_TIMELINE_WRAP - 1);
  for (int r = 0; r < 4; r++) {
    OK(hcq_graph_run(g, NULL, 0, NULL, 0, r % 2, NULL));
    world_run_eager(&w, items, 2, NULL, NULL, 0, NULL, 0);
  }
  cr_assert_lt(hcq__graph_kickoff_value_for_tests(g), 10, "the kickoff value restarted");
  world_compare(&w, "across the kickoff restart");
  OK(hcq_graph_destroy(g));
  world_close(&w);
}

/* A replay rewrites only the words whose values changed: the same count for 20 items as for 400
 * (kickoff, timeline value, and the swapped input), however long the graph. */
static size_t replay_patch_writes(int nitems, bool swap) {
  world_t w;
  world_open(&w, 1);
  int x = world_buffer(&w, 0, N, 1), x2 = world_buffer(&w, 0, N, 2),
      acc = world_buffer(&w, 0, N, 3);
  world_item_t *items = calloc((size_t)nitems, sizeof(*items));
  hcq_expr_t *k = NULL;
  OK(hcq_var_create("k", 0, 100, &k));
  world_mix(&w, &items[0], acc, x, acc, hcq_sym(k), I(1), I(N), NULL);
  for (int j = 1; j < nitems; j++) world_mix(&w, &items[j], acc, acc, acc, I(1), I(j), I(N), NULL);
  hcq_exec_item_t *its = calloc((size_t)nitems, sizeof(*its));
  for (int j = 0; j < nitems; j++) its[j] = items[j].item;
  hcq_buffer_t *ins[] = {w.buf[x]}, *ins2[] = {w.buf[x2]};
  hcq_var_value_t vals[] = {{k, 3}};
  hcq_graph_t *g = NULL;
  OK(hcq_graph_create(its, (size_t)nitems, ins, 1, vals, 1, NULL, &g));
  /* Every replay instance submits once with everything written, then only what changed since its
   * own last replay. */
  for (unsigned i = 0; i < hcq__options()->graph_inflight; i++)
    OK(hcq_graph_run(g, ins, 1, vals, 1, true, NULL));
  OK(hcq_graph_run(g, swap ? ins2 : ins, 1, vals, 1, true, NULL));
  size_t writes = ((const hcq_queue_t *)hcq_graph_queue(g, 0))->last_patch_writes;
  OK(hcq_graph_destroy(g));
  hcq_expr_release(k);
  free(items);
  free(its);
  world_close(&w);
  return writes;
}

Test(graph_schedule, replay_patches_only_what_changed) {
  size_t small = replay_patch_writes(20, false), big = replay_patch_writes(400, false);
  cr_assert_eq(small, big, "a replay rewrote %zu words for 20 items but %zu for 400", small, big);
  /* The kickoff value (waited for, signalled as the device signal, and as the done signal at the
   * end) and the timeline value (waited for, and plus one signalled at the end): 5 words. */
  cr_assert_eq(small, 5, "kickoff three times, timeline value twice; got %zu", small);
  cr_assert_eq(replay_patch_writes(400, true), 6,
               "a swapped input rewrites its one kernel argument");
}
