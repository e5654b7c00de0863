/* The CPU engine's runs of kernels (issue 42, item 1; cpu_engine.c, run_kernels): a graph's chain
 * of one-group kernels runs in order and whole, the clock is read for few of them while they are
 * tiny and for every one while they are slow, a hang report never says a stuck kernel ran longer
 * than it did, and a device lost in the middle of a run stops it at that kernel. And the engine's
 * idle spin (item 4, cadence_budget): work that comes back soon after the queues ran dry finds the
 * engine spinning longer, work after a long idle spell does not. */
#include <stdatomic.h>
#include <time.h>

#include "cpu/cpu_testing.h"
#include "test_util.h"

TestSuite(kernel_runs, .timeout = 120);

static uint64_t mono_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static void sleep_us(long us) {
  struct timespec ts = {us / 1000000, (us % 1000000) * 1000};
  nanosleep(&ts, NULL);
}

/* step(counter; j): item j finds counter[0] == j (else counter[1] counts the kernel out of order)
 * and leaves j + 1. */
static void k_step(void *const *b, const int32_t *v, const hcq_launch_t *l) {
  (void)l;
  int32_t *c = b[0];
  if (c[0] != v[0]) c[1]++;
  c[0] = v[0] + 1;
}

/* A chain of n kernels of fn on one queue, every one on buffer *buf (the graph's input); item j's
 * value is j, or n - 1 - j with countdown (the last item's is 0). */
static hcq_graph_t *chain_ex(hcq_program_t *fn, hcq_buffer_t **buf, size_t n,
                             hcq_exec_item_t *items, hcq_operand_t *vals, bool countdown) {
  static const uint32_t outs[1] = {0};
  for (size_t j = 0; j < n; j++) {
    vals[j] = hcq_imm((int64_t)(countdown ? n - 1 - j : j));
    hcq_kernel_item_t k = {fn,
                           buf,
                           1,
                           outs,
                           1,
                           &vals[j],
                           1,
                           {hcq_imm(1), hcq_imm(1), hcq_imm(1)},
                           {hcq_imm(1), hcq_imm(1), hcq_imm(1)}};
    items[j] = (hcq_exec_item_t){.kind = HCQ_ITEM_KERNEL, .kernel = k};
  }
  hcq_graph_t *g = NULL;
  OK(hcq_graph_create(items, n, buf, 1, NULL, 0, NULL, &g));
  return g;
}

static hcq_graph_t *chain(hcq_program_t *fn, hcq_buffer_t **buf, size_t n, hcq_exec_item_t *items,
                          hcq_operand_t *vals) {
  return chain_ex(fn, buf, n, items, vals, false);
}

enum { CHAIN = 10000 };

/* Before: the engine read the clock (~8 ns) for every kernel, more than an empty kernel costs. */
Test(kernel_runs, a_chain_of_10000_kernels_runs_whole_in_order_reading_the_clock_for_few) {
  hcq_device_t *d = test_open("CPU:0");
  hcq_program_t *p = NULL;
  OK(hcq_program_create_fn(d, "step", k_step, &p));
  hcq_buffer_t *in[2] = {test_buffer(d, 64), test_buffer(d, 64)};
  hcq_exec_item_t *items = calloc(CHAIN, sizeof(*items));
  hcq_operand_t *vals = calloc(CHAIN, sizeof(*vals));
  hcq_graph_t *g = chain(p, &in[0], CHAIN, items, vals);
  enum { REPLAYS = 6 };
  uint64_t stamps0 = hcq__cpu_kernel_stamps(d);
  for (int r = 0; r < REPLAYS; r++) {
    int32_t zero[2] = {0, 0}, got[2];
    OK(hcq_buffer_copyin(in[r % 2], 0, zero, sizeof(zero)));
    OK(hcq_graph_run(g, &in[r % 2], 1, NULL, 0, true, NULL));
    test_read(in[r % 2], got, sizeof(got));
    cr_assert_eq(got[0], CHAIN, "replay %d: the last kernel left %d", r, got[0]);
    cr_assert_eq(got[1], 0, "replay %d: %d kernels ran out of order", r, got[1]);
  }
  uint64_t stamps = hcq__cpu_kernel_stamps(d) - stamps0;
  /* One in up to 256 while they stay fast; a window the scheduler interrupted restarts at 1. Under
   * ThreadSanitizer every kernel is instrumented and slow, so every one may be stamped: only the
   * order and the results are checked there. */
#if !defined(__SANITIZE_THREAD__)
  cr_assert_lt(stamps, (uint64_t)REPLAYS * CHAIN / 8, "%llu kernels of %d stamped",
               (unsigned long long)stamps, REPLAYS * CHAIN);
#else
  (void)stamps;
#endif
  OK(hcq_graph_destroy(g));
  free(items);
  free(vals);
  hcq_buffer_release(in[0]);
  hcq_buffer_release(in[1]);
  hcq_program_release(p);
  test_close(d);
}

static void k_slow(void *const *b, const int32_t *v, const hcq_launch_t *l) {
  (void)v, (void)l;
  sleep_us(300);
  ((int32_t *)b[0])[0]++;
}

/* A slow kernel is timed from its start: the window is 1 (every kernel) once kernels take longer.
 */
Test(kernel_runs, slow_kernels_are_each_stamped) {
  hcq_device_t *d = test_open("CPU:0");
  hcq_program_t *p = NULL;
  OK(hcq_program_create_fn(d, "slow", k_slow, &p));
  hcq_buffer_t *b = test_buffer(d, 64);
  enum { N = 20 };
  hcq_exec_item_t items[N];
  hcq_operand_t vals[N];
  int32_t ran = 0;
  OK(hcq_buffer_copyin(b, 0, &ran, 4));
  hcq_graph_t *g = chain(p, &b, N, items, vals);
  for (int r = 0; r < 3; r++) {
    uint64_t before = hcq__cpu_kernel_stamps(d);
    OK(hcq_graph_run(g, &b, 1, NULL, 0, true, NULL));
    cr_assert_eq(hcq__cpu_kernel_stamps(d) - before, N, "replay %d", r);
  }
  test_read(b, &ran, 4);
  cr_assert_eq(ran, 3 * N);
  OK(hcq_graph_destroy(g));
  hcq_buffer_release(b);
  hcq_program_release(p);
  test_close(d);
}

/* The last kernel of a chain holds the engine until the host opens the gate, and says when it
 * began. */
static atomic_int gate_open, gate_entered;
static _Atomic uint64_t gate_began_ns;

static void k_gate_or_step(void *const *b, const int32_t *v, const hcq_launch_t *l) {
  if (v[0] != 0) {
    k_step(b, v, l);
    return;
  }
  atomic_store(&gate_began_ns, mono_ns());
  atomic_store(&gate_entered, 1);
  while (!atomic_load(&gate_open)) sleep_us(200);
}

static void k_slow_or_gate(void *const *b, const int32_t *v, const hcq_launch_t *l) {
  if (v[0] == 0) {
    k_gate_or_step(b, v, l);
    return;
  }
  sleep_us(2000);
}

/* The "for at least N ms" on the line of report that says what. */
static long report_ms(const char *report, const char *what) {
  const char *at = strstr(report, what), *ms = at ? strstr(at, ", for at least ") : NULL;
  const char *eol = at ? strchr(at, '\n') : NULL;
  if (!ms || (eol && ms > eol)) return -1;
  return strtol(ms + strlen(", for at least "), NULL, 10);
}

/* Runs a chain of n kernels of fn whose last (value 0) is the gate; returns what a report said of
 * it after about held_ms, and how long it had really been running then (ms). */
static long gated_report(hcq_cpu_kernel_fn fn, size_t n, long held_ms, long *true_ms) {
  hcq_device_t *d = test_open("CPU:0");
  hcq_program_t *p = NULL;
  OK(hcq_program_create_fn(d, "gated", fn, &p));
  hcq_buffer_t *b = test_buffer(d, 64);
  hcq_exec_item_t *items = calloc(n, sizeof(*items));
  hcq_operand_t *vals = calloc(n, sizeof(*vals));
  hcq_graph_t *g = chain_ex(p, &b, n, items, vals, true); /* the gate (value 0) last */
  atomic_store(&gate_open, 0);
  atomic_store(&gate_entered, 0);
  OK(hcq_graph_run(g, &b, 1, NULL, 0, false, NULL));
  for (int i = 0; i < 20000 && !atomic_load(&gate_entered); i++) sleep_us(500);
  cr_assert(atomic_load(&gate_entered), "the gate kernel never started");
  sleep_us(held_ms * 1000);
  char report[4096];
  hcq_device_report(d, report, sizeof(report));
  *true_ms = (long)((mono_ns() - atomic_load(&gate_began_ns)) / 1000000u);
  long said = report_ms(report, "running exec kernel gated");
  cr_assert_geq(said, 0, "no line for the running kernel: %s", report);
  atomic_store(&gate_open, 1);
  OK(hcq_device_synchronize(d));
  OK(hcq_graph_destroy(g));
  free(items);
  free(vals);
  hcq_buffer_release(b);
  hcq_program_release(p);
  test_close(d);
  return said;
}

/* A kernel not stamped (inside a window of fast ones) leaves the report to its own first look: it
 * may say less than the truth, never more. */
Test(kernel_runs, a_stuck_kernel_after_fast_ones_is_never_said_to_have_run_longer_than_it_did) {
  long true_ms;
  long said = gated_report(k_gate_or_step, 1000, 300, &true_ms);
  cr_assert_leq(said, true_ms, "said %ld ms, the kernel had run %ld ms", said, true_ms);
}

/* After slow kernels every kernel is stamped: the report times the stuck one from its start, not
 * from when someone first asked (which said 0 ms). */
Test(kernel_runs, a_stuck_kernel_after_slow_ones_is_timed_from_its_start) {
  long true_ms;
  long said = gated_report(k_slow_or_gate, 4, 500, &true_ms);
  cr_assert_geq(said, 400, "said %ld ms, the kernel had run %ld ms", said, true_ms);
  cr_assert_leq(said, true_ms, "said %ld ms, the kernel had run %ld ms", said, true_ms);
}

static hcq_device_t *losing_device;

static void k_lose_at_10(void *const *b, const int32_t *v, const hcq_launch_t *l) {
  k_step(b, v, l);
  if (v[0] == 10)
    hcq_status_destroy(hcq_device_declare_lost(losing_device, "test: lost by kernel 10"));
}

/* The run checks the device after each kernel: none after the one that lost it runs. */
Test(kernel_runs, a_device_lost_inside_a_run_stops_it_at_that_kernel) {
  hcq_device_t *d = test_open("CPU:0");
  losing_device = d;
  hcq_program_t *p = NULL;
  OK(hcq_program_create_fn(d, "lose", k_lose_at_10, &p));
  hcq_buffer_t *b = test_buffer(d, 64);
  /* Mapped first: once the device is lost, copies are refused. */
  int32_t *host = NULL;
  OK(hcq_buffer_map(b, (void **)&host));
  host[0] = host[1] = 0;
  enum { N = 100 };
  hcq_exec_item_t items[N];
  hcq_operand_t vals[N];
  hcq_graph_t *g = chain(p, &b, N, items, vals);
  FAILS(hcq_graph_run(g, &b, 1, NULL, 0, true, NULL), HCQ_DEVICE_LOST, "lost by kernel 10");
  cr_assert_eq(host[0], 11, "kernels 0-10 ran, and no other: the last left %d", host[0]);
  cr_assert_eq(host[1], 0);
  hcq_status_destroy(hcq_graph_destroy(g));
  hcq_buffer_release(b);
  hcq_program_release(p);
  hcq_status_destroy(hcq_device_close(d));
}

static void k_empty(void *const *b, const int32_t *v, const hcq_launch_t *l) {
  (void)b, (void)v, (void)l;
}

/* Launches n empty kernels gap_us apart (each done long before the next: the device goes idle),
 * after a first one and 30 ms of quiet. No waits in between: a wait queues work of its own. */
/* Idle spins lengthened while n launches come gap_us apart; *late: how many of the gaps the machine
 * stretched past 1 ms (CPU_CADENCE_SPIN_MAX_NS: no cadence to follow then). */
static uint64_t cadence_spins_for(long gap_us, int n, int *late) {
  hcq_device_t *d = test_open("CPU:0");
  hcq_program_t *p = NULL;
  OK(hcq_program_create_fn(d, "empty", k_empty, &p));
  hcq_buffer_t *b = test_buffer(d, 64);
  hcq_launch_desc_t ld = {p, &b, 1, NULL, 0, {1, 1, 1}, {1, 1, 1}, NULL, 0};
  OK(hcq_launch(&ld));
  OK(hcq_device_synchronize(d));
  sleep_us(30000);
  uint64_t before = hcq__cpu_cadence_spins(d);
  *late = 0;
  for (int i = 0; i < n; i++) {
    uint64_t t0 = mono_ns();
    OK(hcq_launch(&ld));
    sleep_us(gap_us);
    *late += mono_ns() - t0 > UINT64_C(1000000);
  }
  uint64_t spins = hcq__cpu_cadence_spins(d) - before;
  OK(hcq_device_synchronize(d));
  hcq_buffer_release(b);
  hcq_program_release(p);
  test_close(d);
  return spins;
}

/* Before: the engine spun HCQ_SPIN_NS (20 us) and slept, so each launch 200 us after the last had
 * to wake it (a futex system call on the host's side). A machine too loaded to keep the cadence
 * (most gaps stretched past 1 ms: a sanitizer run beside others) has none to follow: skipped,
 * saying so. */
Test(kernel_runs, work_at_a_short_cadence_finds_the_engine_spinning_longer) {
#if defined(__SANITIZE_THREAD__)
  cr_skip_test(
      "ThreadSanitizer slows every atomic the engine's spin and sleep read, so the idle spells it "
      "times are not the launches' cadence; the normal, ASan and UBSan builds check it");
#endif
  int late = 0;
  uint64_t spins = cadence_spins_for(200, 40, &late);
  if (!spins && late > 20)
    cr_skip_test("the machine stretched %d of 40 gaps of 200 us past 1 ms: no cadence", late);
  cr_assert_gt(spins, 0,
               "no idle spin was lengthened for launches 200 us apart (%d gaps past 1 ms)", late);
}

Test(kernel_runs, work_after_long_idle_spells_does_not_lengthen_the_spin) {
  int late = 0;
  cr_assert_eq(cadence_spins_for(20000, 5, &late), 0,
               "launches 20 ms apart lengthened the engine's idle spin");
}

static void k_sleep_50us(void *const *b, const int32_t *v, const hcq_launch_t *l) {
  (void)b, (void)v, (void)l;
  sleep_us(50);
}

static int cmp_u64(const void *a, const void *b) {
  uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
  return x < y ? -1 : x > y;
}

/* On a contended machine a waiting host lends itself to the device's shared launches (assist) and
 * sleeps between them for up to 1 ms. Before: nothing woke it when the replay it waited for ended,
 * so every replay of work with no shared launch took at least 1 ms (a 10,000-kernel chain measured
 * 107 ns per kernel). Now the end of the replay's queue entry wakes it: its sleeps end by a wake
 * (counted by the pool), where before every one ran to its time limit. Counted, not timed, so a
 * loaded machine cannot fail it. */
Test(kernel_runs, a_host_assisting_on_a_contended_machine_sees_its_replay_end_at_once) {
  atomic_store(&hcq__cpu_force_contended, true);
  hcq_device_t *d = test_open("CPU:0");
  hcq_program_t *p = NULL;
  OK(hcq_program_create_fn(d, "nap", k_sleep_50us, &p));
  hcq_buffer_t *b = test_buffer(d, 64);
  enum { N = 4, REPLAYS = 15 };
  hcq_exec_item_t items[N];
  hcq_operand_t vals[N];
  hcq_graph_t *g = chain(p, &b, N, items, vals);
  uint64_t took[REPLAYS], sleeps0, woken0, sleeps, woken;
  hcq__cpu_assist_sleeps(d, &sleeps0, &woken0);
  for (int r = 0; r < REPLAYS; r++) {
    uint64_t t0 = mono_ns();
    OK(hcq_graph_run(g, &b, 1, NULL, 0, true, NULL));
    took[r] = mono_ns() - t0;
  }
  hcq__cpu_assist_sleeps(d, &sleeps, &woken);
  qsort(took, REPLAYS, sizeof(took[0]), cmp_u64);
  cr_assert_gt(sleeps - sleeps0, 0,
               "the host never slept in assist (is the machine's contention forced?)");
  cr_assert_gt(woken - woken0, 0,
               "no sleep of the assisting host was ended by the replay's end: %llu sleeps ran to "
               "their limit (the replay of 4 naps of 50 us took %llu us, median)",
               (unsigned long long)(sleeps - sleeps0),
               (unsigned long long)(took[REPLAYS / 2] / 1000));
  OK(hcq_graph_destroy(g));
  hcq_buffer_release(b);
  hcq_program_release(p);
  test_close(d);
  atomic_store(&hcq__cpu_force_contended, false);
}
