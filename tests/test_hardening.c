/* Faults, hangs, misuse and hostile environments (docs/errors.md, issue 7): one test (or more) per
 * class of failure. Each asserts behaviour: no crash, no hang (every wait is bounded by a short
 * HCQ_WAIT_TIMEOUT_MS), no wrong result, and the culprit named in the message. */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <sys/wait.h>
#include <time.h>

#include "core/signal.h"
#include "graph/graph_internal.h"
#include "test_util.h"

TestSuite(hardening, .timeout = 60);

/* Kernels that misbehave (the CPU ABI of hcq/program.h). */
static const char *const k_bad_kernels =
    "#include <unistd.h>\n"
    "void forever(void *const *b, const int32_t *v, const hcq_launch_t *l) {\n"
    "  (void)b; (void)v; (void)l; for (;;) usleep(1000);\n"
    "}\n"
    "void slow_fill(void *const *b, const int32_t *v, const hcq_launch_t *l) {\n"
    "  (void)l; int32_t *out = b[0]; usleep(50000); for (int i = 0; i < v[1]; i++) out[i] = v[0];\n"
    "}\n"
    "void boom(void *const *b, const int32_t *v, const hcq_launch_t *l) {\n"
    "  (void)b; (void)l; volatile int *p = (volatile int *)(size_t)(uint32_t)v[0]; *p = 1;\n"
    "}\n"
    "void count_calls(void *const *b, const int32_t *v, const hcq_launch_t *l) {\n"
    "  (void)v; (void)l; __atomic_fetch_add((int32_t *)b[0], 1, __ATOMIC_RELAXED);\n"
    "}\n";

/* Short enough to keep the suite quick, long enough for a fault to be handled on a loaded machine.
 */
static void short_timeouts(void) { setenv("HCQ_WAIT_TIMEOUT_MS", "1000", 1); }

static void sleep_ms(long ms) {
  struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
  nanosleep(&ts, NULL);
}

/* Asserts b holds want(i) = i * mul + add for n int32. */
static void expect_iota(hcq_buffer_t *b, size_t n, int32_t mul, int32_t add, const char *what) {
  int32_t *got = malloc(n * 4);
  test_read(b, got, n * 4);
  for (size_t i = 0; i < n; i++) {
    int32_t want = (int32_t)((uint32_t)i * (uint32_t)mul + (uint32_t)add);
    cr_assert_eq(got[i], want, "%s: element %zu is %d, expected %d", what, i, got[i], want);
  }
  free(got);
}

static hcq_exec_item_t kernel_item(hcq_program_t *p, hcq_buffer_t **bufs, size_t nbufs,
                                   const uint32_t *outs, size_t nouts, hcq_operand_t *vals,
                                   size_t nvals, uint32_t groups, uint32_t local) {
  hcq_exec_item_t it = {.kind = HCQ_ITEM_KERNEL,
                        .kernel = {p,
                                   bufs,
                                   nbufs,
                                   outs,
                                   nouts,
                                   vals,
                                   nvals,
                                   {hcq_imm(groups), hcq_imm(1), hcq_imm(1)},
                                   {hcq_imm(local), hcq_imm(1), hcq_imm(1)}}};
  return it;
}

/* ---- 1. objects freed while raw queued work still references them ---- */

Test(hardening, raw_queue_freed_with_its_objects_under_pending_work) {
  short_timeouts();
  hcq_device_t *d = test_open("CPU:0");
  hcq_program_t *p = test_program(d, "fill", test_kernels_source);
  hcq_buffer_t *out = test_buffer(d, 256), *args = test_buffer(d, 64);
  hcq_signal_t *gate = NULL;
  OK(hcq_signal_create(d, "gate", 0, &gate));
  hcq_queue_t *q = NULL;
  OK(hcq_queue_create(HCQ_QUEUE_COMPUTE, &q));
  hcq_operand_t bufs[] = {hcq_imm((int64_t)hcq_buffer_address(out))},
                vals[] = {hcq_imm(7), hcq_imm(64)};
  OK(hcq_queue_kernargs(q, args, 0, bufs, 1, vals, 2));
  hcq_operand_t g[3] = {hcq_imm(1), hcq_imm(1), hcq_imm(1)},
                l[3] = {hcq_imm(64), hcq_imm(1), hcq_imm(1)};
  OK(hcq_queue_wait(q, hcq_imm((int64_t)hcq_signal_address(gate)), hcq_imm(1)));
  OK(hcq_queue_exec(q, p, hcq_imm((int64_t)hcq_buffer_address(args)), 1, g, l));
  OK(hcq_queue_bind(q, d));
  OK(hcq_queue_submit(q, d, NULL, 0));
  /* The application lets go of everything the pending work uses: the queue's words, the program
   * (its shared object), the kernel arguments and the signal it waits on. */
  hcq_queue_destroy(q);
  hcq_program_release(p);
  hcq_buffer_release(args);
  hcq_signal_t *gate_alias = gate;
  hcq_signal_set(gate_alias, 1);
  hcq_signal_destroy(gate);
  sleep_ms(30);
  int32_t got[64];
  test_read(out, got, sizeof(got)); /* copyout is ordered after eager work only: wait by hand */
  for (int tries = 0; tries < 100 && got[63] != 7; tries++) {
    sleep_ms(10);
    test_read(out, got, sizeof(got));
  }
  for (int i = 0; i < 64; i++)
    cr_assert_eq(got[i], 7, "the kernel ran with its released arguments intact");
  hcq_buffer_release(out);
  test_close(d);
}

/* ---- 2. graph replays across two timeline wraps ---- */

/* Moves the device's timeline close to the wrap while it is idle (white box). */
static void timeline_near_wrap(hcq_device_t *d) {
  OK(hcq_device_synchronize(d));
  pthread_mutex_lock(&d->lock);
  hcq__signal_words_set(d->timeline->words, HCQ_TIMELINE_WRAP - 4);
  d->timeline_value = HCQ_TIMELINE_WRAP - 3;
  pthread_mutex_unlock(&d->lock);
}

Test(hardening, graph_replays_survive_two_timeline_wraps) {
  short_timeouts();
  hcq_device_t *d = test_open("CPU:0");
  hcq_program_t *p = test_program(d, "add_scalar", test_kernels_source);
  hcq_buffer_t *a = test_buffer_iota(d, 64, 1, 0), *o = test_buffer(d, 256);
  hcq_buffer_t *bufs[] = {o, a};
  hcq_operand_t vals[] = {hcq_imm(5), hcq_imm(64)};
  hcq_exec_item_t it = kernel_item(p, bufs, 2, (uint32_t[]){0}, 1, vals, 2, 1, 64);
  hcq_graph_t *g = NULL;
  OK(hcq_graph_create(&it, 1, NULL, 0, NULL, 0, NULL, &g));
  hcq_signal_t *first = NULL;
  hcq_device_timeline(d, &first, NULL);
  for (int wrap = 0; wrap < 2; wrap++) {
    timeline_near_wrap(d);
    /* remembered by the graph across the wraps */
    OK(hcq_graph_run(g, NULL, 0, NULL, 0, false, NULL));
    int32_t v[] = {1, 64};
    hcq_launch_desc_t ld = {p, bufs, 2, v, 2, {1, 1, 1}, {64, 1, 1}, NULL, 0};
    for (int i = 0; i < 6; i++) OK(hcq_launch(&ld));
    OK(hcq_device_synchronize(d));
    hcq_signal_t *now = NULL;
    hcq_device_timeline(d, &now, NULL);
    cr_assert_eq(now == first, wrap == 1,
                 "wrap %d: the timeline alternates between its two signals", wrap);
    cr_assert_str_eq(hcq_signal_name(now), "CPU:0 timeline",
                     "the live timeline keeps the plain name");
  }
  /* The first signal was reset to 0 and reused: a wait on (signal, old value) would never end. */
  OK(hcq_graph_run(g, NULL, 0, NULL, 0, true, NULL));
  expect_iota(o, 64, 1, 5, "after two wraps");
  OK(hcq_graph_destroy(g));
  hcq_buffer_release(a);
  hcq_buffer_release(o);
  hcq_program_release(p);
  test_close(d);
}

/* ---- 3. huge timeouts mean "that long" ---- */

static void *set_later(void *arg) {
  sleep_ms(100);
  hcq_signal_set(arg, (UINT64_C(1) << 32) + 1);
  return NULL;
}

Test(hardening, huge_timeouts_saturate_and_64bit_values_wake_waiters) {
  hcq_device_t *d = test_open("CPU:0");
  hcq_signal_t *s = NULL;
  OK(hcq_signal_create(d, "far", 1, &s));
  /* The value changes by exactly 2^32: its low half stays 1. A waiter sleeping on the low half
   * would miss it; INT64_MAX must not wrap into "already expired" either. */
  pthread_t t;
  pthread_create(&t, NULL, set_later, s);
  OK(hcq_signal_wait(s, (UINT64_C(1) << 32) + 1, INT64_MAX));
  pthread_join(t, NULL);
  OK(hcq_signal_wait(s, 1, INT64_MAX / 1000));
  hcq_signal_destroy(s);
  test_close(d);
}

/* ---- 6. one rule for kernels that do not say what they write ---- */

Test(hardening, kernel_without_outs_writes_every_buffer_in_graphs) {
  short_timeouts();
  hcq_device_t *d = test_open("CPU:0"), *d1 = test_open("CPU:1");
  hcq_program_t *p = test_program(d, "slow_fill", k_bad_kernels);
  hcq_buffer_t *a = test_buffer(d, 256), *dst = test_buffer(d1, 256);
  hcq_buffer_t *bufs[] = {a};
  hcq_operand_t vals[] = {hcq_imm(9), hcq_imm(64)};
  hcq_exec_item_t items[2] = {kernel_item(p, bufs, 1, NULL, 0, vals, 2, 1, 1),
                              {.kind = HCQ_ITEM_TRANSFER, .transfer = {dst, a, 256}}};
  hcq_graph_t *g = NULL;
  OK(hcq_graph_create(items, 2, NULL, 0, NULL, 0, NULL, &g));
  hcq_graph_item_schedule_t s;
  OK(hcq_graph_item_schedule(g, 1, &s));
  cr_assert_eq(s.ndeps, 1, "the copy depends on the kernel that (by default) writes its source");
  /* The kernel takes 50 ms before it writes: a copy not ordered after it would copy zeros. */
  OK(hcq_graph_run(g, NULL, 0, NULL, 0, true, NULL));
  int32_t got[64];
  test_read(dst, got, sizeof(got));
  for (int i = 0; i < 64; i++)
    cr_assert_eq(got[i], 9, "element %d was copied before the kernel wrote it", i);
  OK(hcq_graph_destroy(g));
  hcq_buffer_release(a);
  hcq_buffer_release(dst);
  hcq_program_release(p);
  test_close(d);
  test_close(d1);
}

/* ---- 7. a replay input that aliases another buffer of the graph ---- */

Test(hardening, aliasing_replay_inputs_are_refused_by_name) {
  hcq_device_t *d = test_open("CPU:0");
  hcq_program_t *p = test_program(d, "add_scalar", test_kernels_source);
  hcq_buffer_t *in = test_buffer_iota(d, 64, 1, 0), *mid = test_buffer(d, 256),
               *out = test_buffer(d, 256);
  hcq_buffer_t *other = test_buffer_iota(d, 64, 2, 0);
  hcq_buffer_set_label(mid, "mid");
  hcq_buffer_set_label(other, "other");
  hcq_buffer_t *b0[] = {mid, in}, *b1[] = {out, mid};
  hcq_operand_t v0[] = {hcq_imm(1), hcq_imm(64)}, v1[] = {hcq_imm(10), hcq_imm(64)};
  hcq_exec_item_t items[2] = {kernel_item(p, b0, 2, (uint32_t[]){0}, 1, v0, 2, 1, 64),
                              kernel_item(p, b1, 2, (uint32_t[]){0}, 1, v1, 2, 1, 64)};
  hcq_graph_t *g = NULL;
  OK(hcq_graph_create(items, 2, &in, 1, NULL, 0, NULL, &g));
  hcq_buffer_t *view = NULL;
  OK(hcq_buffer_view_create(mid, 0, 256, &view));
  hcq_buffer_set_label(view, "view of mid");
  FAILS(hcq_graph_run(g, &mid, 1, NULL, 0, true, NULL), HCQ_INVALID_ARGUMENT, "input 0", "mid",
        "aliases");
  FAILS(hcq_graph_run(g, &view, 1, NULL, 0, true, NULL), HCQ_INVALID_ARGUMENT, "input 0",
        "view of mid", "aliases");
  /* A buffer of its own is fine, and the refused replays changed nothing. */
  OK(hcq_graph_run(g, &other, 1, NULL, 0, true, NULL));
  expect_iota(out, 64, 2, 11, "replay with a separate input");
  OK(hcq_graph_destroy(g));
  hcq_buffer_release(view);
  hcq_buffer_release(in);
  hcq_buffer_release(mid);
  hcq_buffer_release(out);
  hcq_buffer_release(other);
  hcq_program_release(p);
  test_close(d);
}

/* ---- 8. hang reports, lost devices, closing without blocking others ---- */

Test(hardening, kernel_that_never_returns_is_named_and_the_device_can_be_closed) {
  short_timeouts();
  hcq_device_t *d = test_open("CPU:0");
  hcq_program_t *p = test_program(d, "forever", k_bad_kernels);
  hcq_buffer_t *b = test_buffer(d, 64);
  hcq_buffer_t *bufs[] = {b};
  hcq_exec_item_t items[2] = {kernel_item(p, bufs, 1, NULL, 0, NULL, 0, 1, 1),
                              kernel_item(p, bufs, 1, NULL, 0, NULL, 0, 1, 1)};
  hcq_graph_t *g = NULL;
  OK(hcq_graph_create(items, 2, NULL, 0, NULL, 0, NULL, &g));
  FAILS(hcq_graph_run(g, NULL, 0, NULL, 0, true, NULL), HCQ_TIMEOUT, "hang report", "CPU:0",
        "running exec kernel forever", "graph item 0", "compute queue of CPU:0", "for at least");
  char report[4096];
  hcq_device_report(d, report, sizeof(report));
  cr_assert(strstr(report, "kernel forever"), "on demand too: %s", report);
  FAILS(hcq_device_synchronize(d), HCQ_TIMEOUT, "kernel forever");
  FAILS(hcq_device_close(d), HCQ_FAILED_PRECONDITION, "still alive");
  OK(hcq_device_declare_lost(d, "test: the kernel never returns"));
  FAILS(hcq_device_health(d), HCQ_DEVICE_LOST, "CPU:0", "never returns");
  FAILS(hcq_device_synchronize(d), HCQ_DEVICE_LOST, "CPU:0");
  FAILS(hcq_graph_run(g, NULL, 0, NULL, 0, true, NULL), HCQ_DEVICE_LOST, "CPU:0");
  hcq_buffer_t *more = NULL;
  FAILS(hcq_buffer_create(d, 64, &more), HCQ_DEVICE_LOST, "CPU:0");
  /* Closing a lost device succeeds with objects alive; they are released afterwards. */
  OK(hcq_device_close(d));
  OK(hcq_graph_destroy(g));
  hcq_buffer_release(b);
  hcq_program_release(p);
  /* The name opens a fresh device that works. */
  hcq_device_t *again = test_open("CPU:0");
  cr_assert_neq(again, d);
  hcq_program_t *p2 = test_program(again, "fill", test_kernels_source);
  hcq_buffer_t *b2 = test_buffer(again, 256);
  int32_t v[] = {3, 64};
  hcq_launch_desc_t ld = {p2, &b2, 1, v, 2, {1, 1, 1}, {64, 1, 1}, NULL, 0};
  OK(hcq_launch(&ld));
  expect_iota(b2, 64, 0, 3, "the reopened device");
  hcq_buffer_release(b2);
  hcq_program_release(p2);
  test_close(again);
}

static void *declare_lost_later(void *dev) {
  sleep_ms(300);
  hcq_status_destroy(hcq_device_declare_lost(dev, "test: lost while a replay ran"));
  return NULL;
}

/* A replay waited for while its device is declared lost: its work is dropped, and the message says
 * so (it said the replay "stays queued and runs when the device gets to it"). */
Test(hardening, a_replay_whose_device_is_lost_says_its_work_was_dropped) {
  setenv("HCQ_WAIT_TIMEOUT_MS", "20000", 1);
  hcq_device_t *d = test_open("CPU:0");
  hcq_program_t *p = test_program(d, "forever", k_bad_kernels);
  hcq_buffer_t *b = test_buffer(d, 64);
  hcq_buffer_t *bufs[] = {b};
  hcq_exec_item_t items[1] = {kernel_item(p, bufs, 1, NULL, 0, NULL, 0, 1, 1)};
  hcq_graph_t *g = NULL;
  OK(hcq_graph_create(items, 1, NULL, 0, NULL, 0, NULL, &g));
  pthread_t t;
  cr_assert_eq(pthread_create(&t, NULL, declare_lost_later, d), 0);
  hcq_status_t st = hcq_graph_run(g, NULL, 0, NULL, 0, true, NULL);
  pthread_join(t, NULL);
  cr_assert(st, "the replay cannot have finished");
  char msg[4096];
  snprintf(msg, sizeof(msg), "%s", hcq_status_message(st));
  cr_assert_eq(hcq_status_code(st), HCQ_DEVICE_LOST, "%s", msg);
  hcq_status_destroy(st);
  cr_assert(strstr(msg, "dropped") && !strstr(msg, "stays queued"), "%s", msg);
  OK(hcq_device_close(d));
  OK(hcq_graph_destroy(g));
  hcq_buffer_release(b);
  hcq_program_release(p);
}

Test(hardening, wait_on_a_signal_nobody_sets_names_signal_values_and_item) {
  short_timeouts();
  hcq_device_t *d = test_open("CPU:0"), *d1 = test_open("CPU:1");
  hcq_program_t *p = test_program(d, "fill", test_kernels_source);
  hcq_buffer_t *a = test_buffer(d, 256), *b = test_buffer(d1, 256);
  hcq_signal_t *never = NULL;
  OK(hcq_signal_create(d1, "never set", 3, &never));
  /* A raw queue holds CPU:0's compute engine at a wait on a CPU:1 signal; the graph's kernel queues
   * behind it, and its copy to CPU:1 waits for the kernel. */
  hcq_queue_t *q = NULL;
  OK(hcq_queue_create(HCQ_QUEUE_COMPUTE, &q));
  OK(hcq_queue_wait(q, hcq_imm((int64_t)hcq_signal_address(never)), hcq_imm(17)));
  OK(hcq_queue_submit(q, d, NULL, 0));
  hcq_operand_t vals[] = {hcq_imm(4), hcq_imm(64)};
  hcq_exec_item_t items[2] = {kernel_item(p, &a, 1, (uint32_t[]){0}, 1, vals, 2, 1, 64),
                              {.kind = HCQ_ITEM_TRANSFER, .transfer = {b, a, 256}}};
  hcq_graph_t *g = NULL;
  OK(hcq_graph_create(items, 2, NULL, 0, NULL, 0, NULL, &g));
  FAILS(hcq_graph_run(g, NULL, 0, NULL, 0, true, NULL), HCQ_TIMEOUT,
        "compute queue: blocked at wait \"never set\" >= 17 (value 3)", "CPU:1:");
  /* It is not lost by itself: setting the signal lets everything finish. */
  hcq_signal_set(never, 17);
  OK(hcq_device_synchronize(d));
  OK(hcq_device_synchronize(d1));
  int32_t got[64];
  test_read(b, got, sizeof(got));
  for (int i = 0; i < 64; i++) cr_assert_eq(got[i], 4);
  OK(hcq_graph_destroy(g));
  hcq_queue_destroy(q);
  hcq_signal_destroy(never);
  hcq_buffer_release(a);
  hcq_buffer_release(b);
  hcq_program_release(p);
  test_close(d);
  test_close(d1);
}

Test(hardening, graph_queue_blocked_at_its_wait_is_named_with_the_item) {
  short_timeouts();
  hcq_device_t *d = test_open("CPU:0");
  hcq_program_t *p = test_program(d, "fill", test_kernels_source);
  hcq_buffer_t *a = test_buffer(d, 256);
  hcq_signal_t *gate = NULL;
  OK(hcq_signal_create(d, "gate", 0, &gate));
  /* A raw queue holds the compute engine at a wait; the graph queues behind it. */
  hcq_queue_t *q = NULL;
  q = test_gate_queue(d, HCQ_QUEUE_COMPUTE, gate, 1);
  hcq_operand_t vals[] = {hcq_imm(4), hcq_imm(64)};
  hcq_exec_item_t it = kernel_item(p, &a, 1, (uint32_t[]){0}, 1, vals, 2, 1, 64);
  hcq_graph_t *g = NULL;
  OK(hcq_graph_create(&it, 1, NULL, 0, NULL, 0, NULL, &g));
  FAILS(hcq_graph_run(g, NULL, 0, NULL, 0, true, NULL), HCQ_TIMEOUT, "this replay of graph#",
        "was queued but did not finish on CPU:0 in time", "do not run it again",
        "blocked at wait \"gate\" >= 1 (value 0)");
  hcq_signal_set(gate, 1);
  OK(hcq_graph_run(g, NULL, 0, NULL, 0, true, NULL));
  OK(hcq_graph_destroy(g));
  hcq_queue_destroy(q);
  hcq_signal_destroy(gate);
  hcq_buffer_release(a);
  hcq_program_release(p);
  test_close(d);
}

static void message_of(hcq_status_t st, hcq_status_code_t code, char *out, size_t size) {
  cr_assert(st, "expected %s", hcq_status_code_name(code));
  cr_assert_eq(hcq_status_code(st), code, "%s", hcq_status_message(st));
  snprintf(out, size, "%s", hcq_status_message(st));
  hcq_status_destroy(st);
}

static size_t count_of(const char *hay, const char *needle) {
  size_t n = 0;
  for (const char *p = strstr(hay, needle); p; p = strstr(p + 1, needle)) n++;
  return n;
}

/* A caller that retries on TIMEOUT must know whether its replay is queued: the count of kernel runs
 * is the ground truth for each message. */
Test(hardening, a_timed_out_replay_says_whether_it_was_queued) {
  short_timeouts();
  hcq_device_t *d = test_open("CPU:0");
  hcq_program_t *p = test_program(d, "count_calls", k_bad_kernels);
  hcq_buffer_t *calls = test_buffer_iota(d, 16, 0, 0);
  hcq_signal_t *gate = NULL;
  OK(hcq_signal_create(d, "gate", 0, &gate));
  hcq_queue_t *q = NULL;
  q = test_gate_queue(d, HCQ_QUEUE_COMPUTE, gate, 1);
  hcq_exec_item_t it = kernel_item(p, &calls, 1, NULL, 0, NULL, 0, 1, 1);
  hcq_graph_options_t opt = {.inflight = 1};
  hcq_graph_t *g = NULL;
  OK(hcq_graph_create(&it, 1, NULL, 0, NULL, 0, &opt, &g));
  /* Replay 1 queues behind the gate; replay 2 cannot take the only instance, so it is not queued.
   */
  OK(hcq_graph_run(g, NULL, 0, NULL, 0, false, NULL));
  char msg[8192];
  message_of(hcq_graph_run(g, NULL, 0, NULL, 0, true, NULL), HCQ_TIMEOUT, msg, sizeof(msg));
  cr_assert(strstr(msg, "waiting for the previous replay of graph#"), "%s", msg);
  cr_assert(strstr(msg, "this replay was NOT queued: running it again is safe"), "%s", msg);
  cr_assert(!strstr(msg, "do not run it again"), "%s", msg);
  hcq_signal_set(gate, 1);
  OK(hcq_device_synchronize(d));
  int32_t n = 0;
  test_read(calls, &n, sizeof(n));
  cr_assert_eq(n, 1, "only the first replay was queued; the kernel ran %d times", n);

  /* Its own replay timing out: queued, and it runs once, with no retry. */
  hcq_signal_set(gate, 0);
  OK(hcq_queue_submit(q, d, NULL, 0));
  message_of(hcq_graph_run(g, NULL, 0, NULL, 0, true, NULL), HCQ_TIMEOUT, msg, sizeof(msg));
  cr_assert(strstr(msg, "this replay of graph#"), "%s", msg);
  cr_assert(strstr(msg, "was queued but did not finish on CPU:0 in time"), "%s", msg);
  cr_assert(strstr(msg, "do not run it again"), "%s", msg);
  cr_assert(!strstr(msg, "previous replay") && !strstr(msg, "NOT queued"), "%s", msg);
  cr_assert_eq(count_of(msg, "hang report"), 1, "one hang report: %s", msg);
  hcq_signal_set(gate, 1);
  OK(hcq_device_synchronize(d));
  test_read(calls, &n, sizeof(n));
  cr_assert_eq(n, 2, "the timed-out replay ran once; the kernel ran %d times", n);
  OK(hcq_graph_destroy(g));
  hcq_queue_destroy(q);
  hcq_signal_destroy(gate);
  hcq_buffer_release(calls);
  hcq_program_release(p);
  test_close(d);
}

Test(hardening, a_close_that_times_out_carries_one_hang_report) {
  short_timeouts();
  hcq_device_t *d = test_open("CPU:0"), *d1 = test_open("CPU:1");
  hcq_signal_t *gate = NULL;
  OK(hcq_signal_create(d1, "gate", 0, &gate));
  hcq_queue_t *q = NULL;
  q = test_gate_queue(d, HCQ_QUEUE_COMPUTE, gate, 1);
  /* Eager work behind the gate puts the close's wait on the device timeline. */
  hcq_program_t *p = test_program(d, "fill", test_kernels_source);
  hcq_buffer_t *b = test_buffer(d, 256);
  int32_t v[] = {3, 64};
  hcq_launch_desc_t ld = {p, &b, 1, v, 2, {1, 1, 1}, {64, 1, 1}, NULL, 0};
  OK(hcq_launch(&ld));
  hcq_buffer_release(b);
  hcq_program_release(p);
  char msg[8192];
  message_of(hcq_device_close(d), HCQ_TIMEOUT, msg, sizeof(msg));
  cr_assert(strstr(msg, "cannot close CPU:0: its work did not finish"), "%s", msg);
  cr_assert(strstr(msg, "blocked at wait \"gate\" >= 1 (value 0)"), "%s", msg);
  cr_assert_eq(count_of(msg, "hang report"), 1, "the hang report once: %s", msg);
  cr_assert_eq(count_of(msg, "compute queue:"), 1, "the queue once: %s", msg);
  hcq_signal_set(gate, 1);
  test_close(d);
  hcq_queue_destroy(q);
  hcq_signal_destroy(gate);
  test_close(d1);
}

typedef struct {
  hcq_device_t *dev;
  hcq_status_t st;
  atomic_int done;
} close_arg_t;

static void *close_thread(void *arg) {
  close_arg_t *c = arg;
  c->st = hcq_device_close(c->dev);
  atomic_store(&c->done, 1);
  return NULL;
}

Test(hardening, a_waiting_close_does_not_block_other_devices) {
  setenv("HCQ_WAIT_TIMEOUT_MS", "1500", 1);
  hcq_device_t *d = test_open("CPU:0");
  hcq_device_t *d1 = test_open("CPU:1");
  hcq_signal_t *gate = NULL;
  OK(hcq_signal_create(d1, "gate", 0, &gate));
  hcq_queue_t *q = NULL;
  q = test_gate_queue(d, HCQ_QUEUE_COMPUTE, gate, 1);
  close_arg_t c = {d, NULL, 0};
  pthread_t t;
  pthread_create(&t, NULL, close_thread, &c);
  sleep_ms(100);
  /* While CPU:0's close waits for its work, other devices open and close. */
  hcq_device_t *d5 = test_open("CPU:5");
  test_close(d5);
  cr_assert_eq(atomic_load(&c.done), 0,
               "the other device opened while the close was still waiting");
  hcq_signal_set(gate, 1);
  pthread_join(t, NULL);
  OK(c.st);
  hcq_queue_destroy(q);
  hcq_signal_destroy(gate);
  test_close(d1);
}

/* ---- 9. a kernel that faults ---- */

/* Runs fn in a child process with stderr captured; returns the child's wait status. */
static int in_child(void (*fn)(void), char *err, size_t size) {
  int fds[2];
  cr_assert_eq(pipe(fds), 0);
  fflush(NULL);
  pid_t pid = fork();
  if (pid == 0) {
    dup2(fds[1], 2);
    close(fds[0]);
    fn();
    _exit(0);
  }
  close(fds[1]);
  size_t len = 0;
  for (;;) {
    ssize_t n = read(fds[0], err + len, size - 1 - len);
    if (n <= 0) break;
    len += (size_t)n;
  }
  err[len] = '\0';
  close(fds[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  return status;
}

static void launch_boom(void) {
  hcq_device_t *d = test_open("CPU:0");
  hcq_program_t *p = test_program(d, "boom", k_bad_kernels);
  hcq_buffer_t *b = test_buffer(d, 64);
  hcq_operand_t vals[] = {hcq_imm(16)};
  hcq_exec_item_t items[2] = {kernel_item(p, &b, 1, NULL, 0, vals, 1, 1, 1),
                              kernel_item(p, &b, 1, NULL, 0, vals, 1, 1, 1)};
  hcq_graph_t *g = NULL;
  OK(hcq_graph_create(items, 2, NULL, 0, NULL, 0, NULL, &g));
  hcq_status_destroy(hcq_graph_run(g, NULL, 0, NULL, 0, true, NULL));
  sleep_ms(2000);
}

Test(hardening, faulting_kernel_is_named_before_the_process_dies) {
  char err[8192];
  int status = in_child(launch_boom, err, sizeof(err));
  cr_assert(!(WIFEXITED(status) && WEXITSTATUS(status) == 0),
            "the process must not go on as if nothing happened");
  cr_assert(
      strstr(err, "hcq: kernel boom (graph item 0) on CPU:0 faulted with SIGSEGV at address 0x10"),
      "stderr: %s", err);
  /* The likeliest cause of a wild address, as the Vulkan path says it: too few arguments. */
  cr_assert(strstr(err,
                   "was it given fewer buffers or values than it reads? hcq_program_declare_args "
                   "checks every launch"),
            "stderr: %s", err);
}

/* The "for at least N ms" of the line in report that contains what; -1 when there is none. */
static long report_ms(const char *report, const char *what) {
  const char *at = strstr(report, what), *ms = at ? strstr(at, ", for at least ") : NULL;
  const char *eol = at ? strchr(at, '\n') : NULL;
  if (!ms || (eol && ms > eol)) return -1;
  return strtol(ms + strlen(", for at least "), NULL, 10);
}

/* A hang report gives how long a queue has been at its command: from when the engine began it,
 * not from when someone first asked (asked once, late, that said 0 ms), with and without
 * isolation (whose reports said 0 ms after a 2 s wait). */
Test(hardening, hang_report_says_how_long_the_queue_has_been_there) {
  short_timeouts();
  for (int isolate = 0; isolate < 2; isolate++) {
    hcq_device_options_t opts = {.isolate = isolate};
    hcq_device_t *d = NULL;
    OK(hcq_device_open_ex("CPU:0", &opts, &d));
    hcq_program_t *p = test_program(d, "forever", k_bad_kernels);
    hcq_buffer_t *b = test_buffer(d, 64);
    hcq_signal_t *gate = NULL;
    OK(hcq_signal_create(d, "gate", 0, &gate));
    hcq_queue_t *q = NULL;
    OK(hcq_queue_create(HCQ_QUEUE_COPY, &q));
    OK(hcq_queue_wait(q, hcq_imm((int64_t)hcq_signal_address(gate)), hcq_imm(1)));
    OK(hcq_queue_submit(q, d, NULL, 0));
    char report[4096];
    for (int i = 0; i < 5000 && (hcq_device_report(d, report, sizeof(report)),
                                 !strstr(report, "blocked at wait"));
         i++)
      sleep_ms(1);
    hcq_launch_desc_t ld = {p, &b, 1, NULL, 0, {1, 1, 1}, {1, 1, 1}, NULL, 0};
    OK(hcq_launch(&ld));
    sleep_ms(700);
    hcq_device_report(d, report, sizeof(report));
    long kernel = report_ms(report, "running exec kernel forever"),
         wait = report_ms(report, "blocked at wait \"gate\"");
    cr_assert(kernel >= 600 && kernel < 60000, "isolate=%d: the kernel has run 700 ms: %s", isolate,
              report);
    cr_assert(wait >= 600 && wait < 60000, "isolate=%d: the copy queue has waited 700 ms: %s",
              isolate, report);
    /* Asked again: the same start, not a new one. */
    sleep_ms(100);
    hcq_device_report(d, report, sizeof(report));
    cr_assert_geq(report_ms(report, "running exec kernel forever"), kernel + 50, "%s", report);
    OK(hcq_device_declare_lost(d, "test: the kernel never returns"));
    OK(hcq_device_close(d));
    hcq_queue_destroy(q);
    hcq_signal_destroy(gate);
    hcq_buffer_release(b);
    hcq_program_release(p);
  }
}

Test(hardening, faulting_kernel_with_isolation_marks_the_device_lost) {
  short_timeouts();
  hcq_device_options_t opts = {.isolate = true};
  hcq_device_t *d = NULL;
  OK(hcq_device_open_ex("CPU:0", &opts, &d));
  hcq_program_t *p = test_program(d, "boom", k_bad_kernels);
  hcq_buffer_t *b = test_buffer(d, 64);
  int32_t v[] = {16};
  hcq_launch_desc_t ld = {p, &b, 1, v, 1, {1, 1, 1}, {1, 1, 1}, NULL, 0};
  OK(hcq_launch(&ld)); /* queued; the fault happens on the device */
  FAILS(hcq_device_synchronize(d), HCQ_DEVICE_LOST, "CPU:0", "kernel boom", "SIGSEGV");
  FAILS(hcq_launch(&ld), HCQ_DEVICE_LOST, "kernel boom");
  OK(hcq_device_close(d));
  hcq_buffer_release(b);
  hcq_program_release(p);
  /* Other devices never noticed; the name reopens healthy. */
  hcq_device_t *again = test_open("CPU:0");
  OK(hcq_device_health(again));
  test_close(again);
}

/* ---- 10. two threads on one graph ---- */

typedef struct {
  hcq_graph_t *g;
  hcq_status_t st;
} run_arg_t;

static void *run_thread(void *arg) {
  run_arg_t *r = arg;
  r->st = hcq_graph_run(r->g, NULL, 0, NULL, 0, true, NULL);
  return NULL;
}

Test(hardening, two_threads_on_one_graph_get_an_error_not_a_jam) {
  short_timeouts();
  hcq_device_t *d = test_open("CPU:0");
  hcq_program_t *p = test_program(d, "slow_fill", k_bad_kernels);
  hcq_buffer_t *a = test_buffer(d, 256);
  hcq_operand_t vals[] = {hcq_imm(2), hcq_imm(64)};
  hcq_exec_item_t items[2] = {kernel_item(p, &a, 1, (uint32_t[]){0}, 1, vals, 2, 1, 1),
                              kernel_item(p, &a, 1, (uint32_t[]){0}, 1, vals, 2, 1, 1)};
  hcq_graph_t *g = NULL;
  OK(hcq_graph_create(items, 2, NULL, 0, NULL, 0, NULL, &g));
  run_arg_t r = {g, NULL};
  pthread_t t;
  pthread_create(&t, NULL, run_thread, &r);
  /* Wait until the other thread is inside, waiting for its 100 ms replay. */
  for (int i = 0; i < 2000 && !atomic_load(&g->runner.busy); i++) sleep_ms(1);
  FAILS(hcq_graph_run(g, NULL, 0, NULL, 0, true, NULL), HCQ_FAILED_PRECONDITION, "another thread");
  FAILS(hcq_graph_destroy(g), HCQ_FAILED_PRECONDITION, "another thread");
  pthread_join(t, NULL);
  OK(r.st);
  /* Nothing is jammed: it replays and closes normally. */
  OK(hcq_graph_run(g, NULL, 0, NULL, 0, true, NULL));
  OK(hcq_graph_destroy(g));
  hcq_buffer_release(a);
  hcq_program_release(p);
  test_close(d);
}

/* ---- 11. a replay runs whole or not at all ---- */

Test(hardening, replay_with_a_full_ring_on_one_device_submits_nothing_anywhere) {
  short_timeouts();
  hcq_device_t *d0 = test_open("CPU:0"), *d1 = test_open("CPU:1");
  hcq_signal_t *gate = NULL;
  OK(hcq_signal_create(d1, "gate", 0, &gate));
  /* Fill CPU:1's compute ring: a wait, then as many words as fit. */
  hcq_queue_t *block = NULL, *filler = NULL;
  OK(hcq_queue_create(HCQ_QUEUE_COMPUTE, &block));
  OK(hcq_queue_wait(block, hcq_imm((int64_t)hcq_signal_address(gate)), hcq_imm(1)));
  OK(hcq_queue_submit(block, d1, NULL, 0));
  OK(hcq_queue_create(HCQ_QUEUE_COMPUTE, &filler));
  /* The ring holds 2^18 words: the 5-word wait and two fillers of 131069 leave one word free. */
  for (int i = 0; i < 131069; i++) OK(hcq_queue_memory_barrier(filler));
  OK(hcq_queue_submit(filler, d1, NULL, 0));
  OK(hcq_queue_submit(filler, d1, NULL, 0));
  hcq_program_t *p0 = test_program(d0, "fill", test_kernels_source),
                *p1 = test_program(d1, "fill", test_kernels_source);
  hcq_buffer_t *a = test_buffer(d0, 256), *b = test_buffer(d1, 256);
  hcq_operand_t vals[] = {hcq_imm(6), hcq_imm(64)};
  hcq_exec_item_t items[2] = {kernel_item(p0, &a, 1, (uint32_t[]){0}, 1, vals, 2, 1, 64),
                              kernel_item(p1, &b, 1, (uint32_t[]){0}, 1, vals, 2, 1, 64)};
  hcq_graph_t *g = NULL;
  OK(hcq_graph_create(items, 2, NULL, 0, NULL, 0, NULL, &g));
  uint64_t before = d0->vt->submitted(d0, HCQ_QUEUE_COMPUTE);
  FAILS(hcq_graph_run(g, NULL, 0, NULL, 0, false, NULL), HCQ_TIMEOUT, "CPU:1", "ring stayed full");
  cr_assert_eq(d0->vt->submitted(d0, HCQ_QUEUE_COMPUTE), before, "CPU:0 was given nothing");
  hcq_signal_set(gate, 1);
  OK(hcq_device_synchronize(d1));
  OK(hcq_graph_run(g, NULL, 0, NULL, 0, true, NULL));
  expect_iota(a, 64, 0, 6, "CPU:0 after the replay");
  expect_iota(b, 64, 0, 6, "CPU:1 after the replay");
  OK(hcq_graph_destroy(g));
  hcq_queue_destroy(block);
  hcq_queue_destroy(filler);
  hcq_signal_destroy(gate);
  hcq_buffer_release(a);
  hcq_buffer_release(b);
  hcq_program_release(p0);
  hcq_program_release(p1);
  test_close(d0);
  test_close(d1);
}

/* ---- 12. launch dims ---- */

Test(hardening, launch_dims_overflow_and_constant_zeros_are_refused_symbolic_zeros_run_nothing) {
  hcq_device_t *d = test_open("CPU:0");
  hcq_program_t *p = test_program(d, "count_calls", k_bad_kernels);
  hcq_buffer_t *c = test_buffer(d, 4);
  hcq_launch_desc_t ld = {p, &c, 1, NULL, 0, {0xFFFFFFFFu, 0xFFFFFFFFu, 1}, {1, 1, 1}, NULL, 0};
  FAILS(hcq_launch(&ld), HCQ_OUT_OF_RANGE, "count_calls", "4294967295x4294967295x1", "work-items");
  ld = (hcq_launch_desc_t){p,         &c,   1, NULL, 0, {0xFFFFFFFFu, 0xFFFFFFFFu, 0xFFFFFFFFu},
                           {2, 1, 1}, NULL, 0};
  FAILS(hcq_launch(&ld), HCQ_OUT_OF_RANGE, "over 2^64");
  /* A zero anywhere in the group size or the grid is refused naming the dim; the kernel is not
   * called. */
  uint32_t zero[][6] = {
      {4, 1, 1, 0, 1, 1}, {4, 1, 1, 1, 1, 0}, {0, 1, 1, 1, 1, 1}, {4, 0, 9, 2, 2, 2}};
  const char *named[] = {"local[0] is 0", "local[2] is 0", "global[0] is 0", "global[1] is 0"};
  for (size_t i = 0; i < 4; i++) {
    ld = (hcq_launch_desc_t){p,
                             &c,
                             1,
                             NULL,
                             0,
                             {zero[i][0], zero[i][1], zero[i][2]},
                             {zero[i][3], zero[i][4], zero[i][5]},
                             NULL,
                             0};
    FAILS(hcq_launch(&ld), HCQ_INVALID_ARGUMENT, "launch of count_calls", named[i],
          "use 1 for unused dims");
  }
  /* The mistake this catches: {n} for a 1-D grid leaves y and z 0 (dim3 would make them 1). */
  ld = (hcq_launch_desc_t){.program = p, .bufs = &c, .nbufs = 1, .global = {3}, .local = {1, 1, 1}};
  FAILS(hcq_launch(&ld), HCQ_INVALID_ARGUMENT, "count_calls", "global[1] is 0");
  /* Constant zeros in items: refused at build and by hcq_exec_item_run, naming the item. */
  hcq_exec_item_t zi[2] = {kernel_item(p, &c, 1, NULL, 0, NULL, 0, 1, 1),
                           kernel_item(p, &c, 1, NULL, 0, NULL, 0, 1, 1)};
  zi[1].kernel.local[2] = hcq_imm(0);
  hcq_graph_t *zg = NULL;
  FAILS(hcq_graph_create(zi, 2, NULL, 0, NULL, 0, NULL, &zg), HCQ_INVALID_ARGUMENT,
        "item 1 (count_calls)", "local[2] is 0");
  cr_assert_null(zg);
  FAILS(hcq_exec_item_run(&zi[1], NULL, 0), HCQ_INVALID_ARGUMENT, "count_calls", "local[2] is 0");
  hcq_expr_t *zero_expr = hcq_expr_const(0);
  cr_assert_not_null(zero_expr);
  zi[1].kernel.local[2] = hcq_imm(1);
  zi[1].kernel.global[1] = hcq_sym(zero_expr); /* a constant expression is a constant */
  FAILS(hcq_graph_create(zi, 2, NULL, 0, NULL, 0, NULL, &zg), HCQ_INVALID_ARGUMENT, "item 1",
        "global[1] is 0");
  hcq_expr_release(zero_expr);
  ld = (hcq_launch_desc_t){p, &c, 1, NULL, 0, {3, 1, 1}, {1, 1, 1}, NULL, 0};
  OK(hcq_launch(&ld));
  int32_t calls = 0;
  test_read(c, &calls, 4);
  cr_assert_eq(calls, 3, "only the non-empty launch ran (3 groups), got %d calls", calls);
  /* In a graph, symbolic dims are checked at build and again at every replay. */
  hcq_expr_t *n = NULL;
  OK(hcq_var_create("n", 0, INT32_MAX, &n));
  hcq_exec_item_t it = kernel_item(p, &c, 1, NULL, 0, NULL, 0, 1, 1);
  it.kernel.global[0] = it.kernel.global[1] = hcq_sym(n);
  hcq_var_value_t v = {n, 2};
  hcq_graph_t *g = NULL;
  OK(hcq_graph_create(&it, 1, NULL, 0, &v, 1, NULL, &g));
  OK(hcq_graph_run(g, NULL, 0, &v, 1, true, NULL));
  v.value = INT32_MAX;
  FAILS(hcq_graph_run(g, NULL, 0, &v, 1, true, NULL), HCQ_OUT_OF_RANGE, "item 0 (count_calls)",
        "work-items");
  v.value = 0;
  OK(hcq_graph_run(g, NULL, 0, &v, 1, true, NULL)); /* empty */
  test_read(c, &calls, 4);
  cr_assert_eq(calls, 3 + 4, "the refused replay ran nothing, the empty one nothing: got %d",
               calls);
  /* The same item run eagerly with n = 0 launches nothing too, and is no error. */
  OK(hcq_exec_item_run(&it, &v, 1));
  v.value = 1;
  OK(hcq_exec_item_run(&it, &v, 1));
  test_read(c, &calls, 4);
  cr_assert_eq(calls, 3 + 4 + 1, "only the n = 1 run ran: got %d", calls);
  OK(hcq_graph_destroy(g));
  hcq_expr_release(n);
  hcq_buffer_release(c);
  hcq_program_release(p);
  test_close(d);
}

/* ---- 13. untouched memory stays untouched ---- */

static long rss_pages(void) {
  FILE *f = fopen("/proc/self/statm", "r");
  long size = 0, rss = 0;
  if (f) {
    if (fscanf(f, "%ld %ld", &size, &rss) != 2) rss = 0;
    fclose(f);
  }
  return rss;
}

Test(hardening, big_buffers_are_not_touched_and_impossible_ones_fail_cleanly) {
#if defined(__SANITIZE_ADDRESS__)
  cr_skip_test("AddressSanitizer maps its own shadow memory: RSS says nothing here");
#endif
  hcq_device_t *d = test_open("CPU:0");
  long before = rss_pages();
  hcq_buffer_t *big = test_buffer(d, UINT64_C(1) << 30);
  long after = rss_pages();
  long page_kb = sysconf(_SC_PAGESIZE) / 1024;
  cr_assert_lt((after - before) * page_kb, 64 * 1024, "a 1 GiB buffer made RSS grow by %ld KiB",
               (after - before) * page_kb);
  /* Its contents still read as zeros, and a write lands. */
  int32_t probe[4] = {1, 2, 3, 4}, got[4];
  OK(hcq_buffer_copyin(big, (UINT64_C(1) << 30) - 16, probe, 16));
  test_read(big, got, 16);
  cr_assert_eq(got[0], 0);
  OK(hcq_buffer_copyout(big, (UINT64_C(1) << 30) - 16, got, 16));
  cr_assert_eq(got[3], 4);
  hcq_buffer_release(big);
  hcq_buffer_t *huge = NULL;
  FAILS(hcq_buffer_create(d, UINT64_C(1) << 45, &huge), HCQ_OUT_OF_MEMORY, "CPU:0");
  cr_assert_null(huge);
  test_close(d);
}

/* ---- 14. messages name the culprit ---- */

Test(hardening, replay_range_errors_name_item_and_operand) {
  hcq_device_t *d = test_open("CPU:0");
  hcq_program_t *p = test_program(d, "fill", test_kernels_source);
  hcq_buffer_t *a = test_buffer(d, 256);
  hcq_expr_t *n = NULL, *shifted = NULL;
  OK(hcq_var_create("n", -100, 100, &n));
  const hcq_expr_t *vars[] = {n};
  OK(hcq_expr_parse("n-50", vars, 1, &shifted));
  /* Item 1's group count is n-50: fine at build (n = 60), negative at n = 10. */
  hcq_operand_t vals[] = {hcq_imm(1), hcq_imm(64)};
  hcq_exec_item_t items[2] = {kernel_item(p, &a, 1, (uint32_t[]){0}, 1, vals, 2, 1, 64),
                              kernel_item(p, &a, 1, (uint32_t[]){0}, 1, vals, 2, 1, 64)};
  items[1].kernel.global[0] = hcq_sym(shifted);
  hcq_var_value_t v = {n, 60};
  hcq_graph_t *g = NULL;
  OK(hcq_graph_create(items, 2, NULL, 0, &v, 1, NULL, &g));
  v.value = 10;
  FAILS(hcq_graph_run(g, NULL, 0, &v, 1, true, NULL), HCQ_OUT_OF_RANGE, "item 1", "fill",
        "global[0]", "n-50", "-40");
  OK(hcq_graph_destroy(g));
  hcq_expr_release(shifted);
  hcq_expr_release(n);
  hcq_buffer_release(a);
  hcq_program_release(p);
  test_close(d);
}

Test(hardening, entry_names_must_be_c_identifiers) {
  hcq_device_t *d = test_open("CPU:0");
  hcq_program_t *p = NULL;
  const char *bad[] = {"a/b", "../x", "1st", "has space", "semi;colon"};
  for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
    FAILS(hcq_program_create(d, bad[i], "void x(void) {}", &p), HCQ_INVALID_ARGUMENT, bad[i],
          "not a C identifier");
    cr_assert_null(p);
  }
  test_close(d);
}

/* ---- 15. the environment is read once ---- */

Test(hardening, hcq_profile_is_read_once) {
  hcq_device_t *d = test_open("CPU:0"); /* options are read now, without HCQ_PROFILE */
  setenv("HCQ_PROFILE", "1", 1);
  hcq_program_t *p = test_program(d, "fill", test_kernels_source);
  hcq_buffer_t *a = test_buffer(d, 256);
  hcq_operand_t vals[] = {hcq_imm(1), hcq_imm(64)};
  hcq_exec_item_t it = kernel_item(p, &a, 1, (uint32_t[]){0}, 1, vals, 2, 1, 64);
  hcq_graph_t *g = NULL;
  OK(hcq_graph_create(&it, 1, NULL, 0, NULL, 0, NULL, &g));
  OK(hcq_graph_run(g, NULL, 0, NULL, 0, true, NULL));
  const hcq_profile_event_t *ev = NULL;
  FAILS(hcq_graph_profile(g, &ev), HCQ_FAILED_PRECONDITION, "without profiling");
  OK(hcq_graph_destroy(g));
  hcq_buffer_release(a);
  hcq_program_release(p);
  test_close(d);
  unsetenv("HCQ_PROFILE");
}

/* ---- validation mode ---- */

Test(hardening, validation_names_released_objects_and_double_releases) {
  setenv("HCQ_VALIDATE", "1", 1);
  hcq_device_t *d = test_open("CPU:0");
  hcq_program_t *p = test_program(d, "fill", test_kernels_source);
  hcq_buffer_t *a = test_buffer(d, 256);
  hcq_buffer_set_label(a, "activations");
  hcq_buffer_release(a);
  int32_t v[] = {1, 64};
  hcq_launch_desc_t ld = {p, &a, 1, v, 2, {1, 1, 1}, {64, 1, 1}, NULL, 0};
  FAILS(hcq_launch(&ld), HCQ_FAILED_PRECONDITION, "buffer 0", "\"activations\"", "released");
  int32_t host[4];
  FAILS(hcq_buffer_copyout(a, 0, host, 16), HCQ_FAILED_PRECONDITION, "activations", "released");
  unsigned long errors = hcq_validation_error_count();
  hcq_buffer_release(a); /* double release: reported and ignored */
  cr_assert_eq(hcq_validation_error_count(), errors + 1);
  hcq_program_release(p);
  FAILS(hcq_launch(&ld), HCQ_FAILED_PRECONDITION, "program", "released");
  test_close(d);
  FAILS(hcq_device_close(d), HCQ_FAILED_PRECONDITION, "CPU:0", "closed");
  unsetenv("HCQ_VALIDATE");
}

Test(hardening, validation_names_objects_of_a_closed_lost_device) {
  setenv("HCQ_VALIDATE", "1", 1);
  hcq_device_t *d = test_open("CPU:2");
  hcq_buffer_t *a = test_buffer(d, 64);
  hcq_buffer_set_label(a, "left behind");
  OK(hcq_device_declare_lost(d, "test"));
  OK(hcq_device_close(d));
  int32_t host[4];
  FAILS(hcq_buffer_copyout(a, 0, host, 16), HCQ_FAILED_PRECONDITION, "left behind", "CPU:2",
        "closed");
  hcq_buffer_release(a);
  unsetenv("HCQ_VALIDATE");
}

/* ---- closed device handles ---- */

static void nop_fn(void *const *b, const int32_t *v, const hcq_launch_t *l) {
  (void)b, (void)v, (void)l;
}

/* A handle used after its close is refused by the device's name, without reading the freed device
 * (AddressSanitizer builds prove that part); opens and closes pair up like references. */
Test(hardening, closed_device_handles_are_refused_by_name) {
  hcq_device_t *d = test_open("CPU:3"), *again = NULL;
  OK(hcq_device_open("CPU:3", &again));
  cr_assert_eq(again, d, "a second open returns the same device");
  OK(hcq_device_close(again)); /* the first open still holds it */
  OK(hcq_device_synchronize(d));
  OK(hcq_device_close(d));
  FAILS(hcq_device_close(d), HCQ_FAILED_PRECONDITION, "hcq_device_close: device CPU:3 was closed");
  hcq_buffer_t *b = NULL;
  FAILS(hcq_buffer_create(d, 64, &b), HCQ_FAILED_PRECONDITION,
        "hcq_buffer_create: device CPU:3 was closed");
  cr_assert_null(b);
  hcq_program_t *p = NULL;
  FAILS(hcq_program_create_fn(d, "nop", nop_fn, &p), HCQ_FAILED_PRECONDITION,
        "device CPU:3 was closed");
  FAILS(hcq_program_create(d, "nop", "void nop(void) {}", &p), HCQ_FAILED_PRECONDITION,
        "device CPU:3 was closed");
  cr_assert_null(p);
  hcq_signal_t *s = NULL;
  FAILS(hcq_signal_create(d, "s", 0, &s), HCQ_FAILED_PRECONDITION,
        "hcq_signal_create: device CPU:3 was closed");
  FAILS(hcq_device_synchronize(d), HCQ_FAILED_PRECONDITION, "device CPU:3 was closed");
  FAILS(hcq_device_health(d), HCQ_FAILED_PRECONDITION, "device CPU:3 was closed");
  FAILS(hcq_device_declare_lost(d, "x"), HCQ_FAILED_PRECONDITION, "device CPU:3 was closed");
  hcq_memory_usage_t usage;
  FAILS(hcq_device_memory_usage(d, &usage), HCQ_FAILED_PRECONDITION, "device CPU:3 was closed");
  /* Opened again: a new handle that works, while the stale one stays refused. */
  hcq_device_t *d2 = test_open("CPU:3");
  cr_assert_neq(d2, d,
                "a device opened right after a close does not reuse the closed handle's address");
  OK(hcq_device_synchronize(d2));
  FAILS(hcq_device_close(d), HCQ_FAILED_PRECONDITION, "device CPU:3 was closed");
  test_close(d2);
  /* Something that never was a device. */
  int not_a_device = 0;
  FAILS(hcq_device_close((hcq_device_t *)&not_a_device), HCQ_INVALID_ARGUMENT,
        "is not an open device");
}
