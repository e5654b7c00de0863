/* Spinning on a busy host (issue 45, item 5): the policy that cuts spins short once spinners saw
 * themselves taken off their cores, driven with made-up times, and a CPU device whose threads all
 * wait that way still computing what it should; the sample that calls a host contended (other
 * processes' runnable threads), and a waiting host thread taking part in shared launches then. */
#include <stdatomic.h>
#include <time.h>

#include "core/host_wait.h"
#include "cpu/cpu_engine.h"
#include "cpu/cpu_testing.h"
#include "test_util.h"

TestSuite(spin_policy, .timeout = 120);

#define MS UINT64_C(1000000)

Test(spin_policy, one_gap_is_noise_two_close_gaps_mean_contended) {
  hcq__spin_policy_t p = {0};
  uint64_t t = 1000 * MS;
  cr_assert(!hcq__spin_policy_observe(&p, HCQ__SPIN_GAP_NS * 4, t),
            "a single gap (an interrupt) contends");
  cr_assert(!hcq__spin_policy_contended(&p, t));
  cr_assert(hcq__spin_policy_observe(&p, HCQ__SPIN_GAP_NS * 4, t + 10 * MS),
            "a second gap 10 ms later does not");
  cr_assert(hcq__spin_policy_contended(&p, t + 10 * MS));
  cr_assert(hcq__spin_policy_contended(&p, t + 10 * MS + HCQ__SPIN_CONTENDED_HOLD_NS - 1));
  cr_assert(!hcq__spin_policy_contended(&p, t + 10 * MS + HCQ__SPIN_CONTENDED_HOLD_NS),
            "the hold never ends");
  cr_assert_eq(atomic_load(&p.contended_spells), 1);
}

Test(spin_policy, short_or_distant_gaps_never_contend) {
  hcq__spin_policy_t p = {0};
  uint64_t t = 1000 * MS;
  /* Gaps no longer than the threshold are steps of a spin that kept its core. */
  for (int i = 0; i < 100; i++)
    cr_assert(!hcq__spin_policy_observe(&p, HCQ__SPIN_GAP_NS, t + (uint64_t)i * MS));
  /* Real gaps, but each further from the last than the window. */
  for (int i = 0; i < 5; i++)
    cr_assert(
        !hcq__spin_policy_observe(&p, 10 * MS, t + (uint64_t)i * (HCQ__SPIN_GAP_WINDOW_NS + 1)));
  cr_assert(!hcq__spin_policy_contended(&p, t + 5 * HCQ__SPIN_GAP_WINDOW_NS));
  cr_assert_eq(atomic_load(&p.contended_spells), 0);
}

Test(spin_policy, gaps_during_a_hold_extend_it_and_count_one_spell) {
  hcq__spin_policy_t p = {0};
  uint64_t t = 1000 * MS;
  hcq__spin_policy_observe(&p, 2 * MS, t);
  cr_assert(hcq__spin_policy_observe(&p, 2 * MS, t + MS));
  uint64_t later = t + HCQ__SPIN_GAP_WINDOW_NS / 2; /* within the window of the last gap */
  cr_assert(hcq__spin_policy_observe(&p, 2 * MS, later));
  cr_assert(hcq__spin_policy_contended(&p, later + HCQ__SPIN_CONTENDED_HOLD_NS - 1),
            "the hold was not renewed");
  cr_assert_eq(atomic_load(&p.contended_spells), 1);
  /* A clock that went back (another thread's older reading) is no evidence. */
  hcq__spin_policy_t q = {0};
  hcq__spin_policy_observe(&q, 2 * MS, t);
  cr_assert(!hcq__spin_policy_observe(&q, 2 * MS, t - MS));
}

static bool never(const void *ctx) {
  (void)ctx;
  return false;
}

/* Ready before the spin first reads the clock (64 steps): no gap can be seen, whatever the
 * machine's load. */
static bool after_calls(const void *ctx) {
  return atomic_fetch_add((_Atomic unsigned *)(uintptr_t)ctx, 1) >= 50;
}

/* Sleeps 2 ms on two of its calls once the spin has read the clock: the spinner taken off its core.
 */
static bool descheduled_twice(const void *ctx) {
  unsigned n = atomic_fetch_add((_Atomic unsigned *)(uintptr_t)ctx, 1);
  if (n == 100 || n == 170) nanosleep(&(struct timespec){0, 2000000}, NULL);
  return false;
}

static uint64_t now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

Test(spin_policy, a_spin_stops_early_when_contended_and_detects_being_descheduled) {
  hcq__spin_policy_t p = {0};
  _Atomic unsigned calls = 0;
  cr_assert(hcq__spin_until_with(&p, after_calls, &calls, UINT64_C(10000000000)),
            "a ready wait failed");
  /* Uncontended, a wait that is never ready lasts its budget. */
  uint64_t t0 = now_ns();
  cr_assert(!hcq__spin_until_with(&p, never, NULL, 2 * MS));
  /* ... unless this busy machine took the spinner off its core twice: then it stopped early, as it
   * should. */
  if (!atomic_load(&p.contended_spells)) cr_assert_geq(now_ns() - t0, 2 * MS);
  atomic_store(&p.contended_until_ns, 0);
  /* Contended, it stops after its first 64 steps (all pauses) whatever the budget: a 100 s budget
   * would time the test out. */
  atomic_store(&p.contended_until_ns, UINT64_MAX);
  cr_assert(!hcq__spin_until_with(&p, never, NULL, UINT64_C(100000000000)));
  /* Two 2 ms gaps inside one spin: the spin stops at the second and the host is contended. */
  hcq__spin_policy_t q = {0};
  calls = 0;
  t0 = now_ns();
  cr_assert(!hcq__spin_until_with(&q, descheduled_twice, &calls, UINT64_C(100000000000)));
  cr_assert(hcq__spin_policy_contended(&q, now_ns()), "two gaps of 2 ms were not seen");
  cr_assert_eq(atomic_load(&q.contended_spells), 1);
}

static void add_one(void *const *bufs, const int32_t *vals, const hcq_launch_t *l) {
  (void)vals;
  int32_t *x = bufs[0];
  for (uint32_t t = 0; t < l->lsz[0]; t++) x[l->gid[0] * l->lsz[0] + t] += 1;
}

/* Every wait of the engine and its helpers sleeps at once (the process's policy held contended),
 * with more threads than cores: 200 shared launches still each add one to every element. */
Test(spin_policy, results_stay_exact_with_every_spin_cut_short) {
  atomic_store(&hcq__host_spin_policy.contended_until_ns, UINT64_MAX);
  setenv("HCQ_CPU_THREADS", "4", 1);
  setenv("HCQ_CPU_MIN_PARALLEL", "1", 1);
  hcq_device_t *d = test_open("CPU:0");
  hcq_program_t *p = NULL;
  OK(hcq_program_create_fn(d, "add_one", add_one, &p));
  enum { N = 4096 };
  hcq_buffer_t *x = test_buffer_iota(d, N, 1, 0);
  hcq_launch_desc_t ld = {p, &x, 1, NULL, 0, {N / 16, 1, 1}, {16, 1, 1}};
  for (int i = 0; i < 200; i++) OK(hcq_launch(&ld));
  int32_t got[N];
  test_read(x, got, sizeof(got));
  for (int i = 0; i < N; i++) cr_assert_eq(got[i], i + 200, "element %d is %d", i, got[i]);
  hcq_buffer_release(x);
  hcq_program_release(p);
  test_close(d);
  atomic_store(&hcq__host_spin_policy.contended_until_ns, 0);
}

/* ---- a waiting host thread lends itself to shared launches on a contended host ---- */

Test(spin_policy, other_processes_runnable_threads_mean_contended) {
  /* 2 cores, this process's 3 busy threads (engine, helper, the caller) */
  cr_assert(!hcq__cpu_foreign_load_contends(3, 3, 2), "only this process runs");
  cr_assert(!hcq__cpu_foreign_load_contends(2, 3, 2), "fewer than its own");
  cr_assert(hcq__cpu_foreign_load_contends(4, 3, 2),
            "one other thread on 2 cores is half a core each");
  cr_assert(hcq__cpu_foreign_load_contends(8, 3, 2), "2.5 per core");
  cr_assert(!hcq__cpu_foreign_load_contends(-1, 3, 2), "unknown");
  /* 16 cores: a few others are not contention, eight are */
  cr_assert(!hcq__cpu_foreign_load_contends(20, 17, 16));
  cr_assert(hcq__cpu_foreign_load_contends(25, 17, 16));
}

/* With the host held contended, a thread waiting for replays of shared launches takes part in them
 * (the pool counts it) and every replay still adds exactly one to every element. */
Test(spin_policy, a_waiting_host_helps_with_shared_launches_and_results_stay_exact) {
  atomic_store(&hcq__cpu_force_contended, true);
  setenv("HCQ_CPU_THREADS", "2", 1);
  setenv("HCQ_CPU_MIN_PARALLEL", "1", 1);
  hcq_device_t *d = test_open("CPU:0");
  hcq_program_t *p = NULL;
  OK(hcq_program_create_fn(d, "add_one", add_one, &p));
  enum { N = 1 << 16 };
  hcq_buffer_t *x = test_buffer_iota(d, N, 1, 0);
  hcq_exec_item_t item = {.kind = HCQ_ITEM_KERNEL,
                          .kernel = {.program = p,
                                     .bufs = &x,
                                     .nbufs = 1,
                                     .global = {hcq_imm(N / 16), hcq_imm(1), hcq_imm(1)},
                                     .local = {hcq_imm(16), hcq_imm(1), hcq_imm(1)}}};
  hcq_graph_t *g = NULL;
  OK(hcq_graph_create(&item, 1, NULL, 0, NULL, 0, NULL, &g));
  const cpu_pool_t *pool = &engine_of(d)->pool;
  int runs = 0;
  while (runs < 400 && (runs < 50 || !atomic_load(&pool->assisted))) {
    OK(hcq_graph_run(g, NULL, 0, NULL, 0, true, NULL));
    runs++;
  }
  cr_expect_gt(atomic_load(&pool->assisted), 0, "the waiting thread never took part in %d replays",
               runs);
  int32_t *got = malloc(N * sizeof(int32_t));
  test_read(x, got, N * sizeof(int32_t));
  for (int i = 0; i < N; i++)
    cr_assert_eq(got[i], i + runs, "element %d is %d after %d replays", i, got[i], runs);
  free(got);
  OK(hcq_graph_destroy(g));
  hcq_buffer_release(x);
  hcq_program_release(p);
  test_close(d);
  atomic_store(&hcq__cpu_force_contended, false);
}
