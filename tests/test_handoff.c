/* Multi-device CPU graphs (issue 9): pipelined replays equal eager runs, wait=false does not wait
 * for the previous replay, and the CPU devices' threads honour the core budget. */
#include <dirent.h>
#include <sched.h>
#include <stdatomic.h>
#include <time.h>

#include "test_util.h"
#include "world.h"

TestSuite(handoff, .timeout = 120);

/* N replays submitted back to back (wait = false), each with other inputs and values, then one
 * comparison: the instances' patched words and kernel arguments must not bleed into each other. */
static void pipelined_equals_eager(unsigned inflight, uint32_t seed) {
  world_vars_t v;
  world_vars_open(&v);
  for (int round = 0; round < 6; round++) {
    world_t w;
    world_random_t rw;
    world_random(&w, &seed, &v, &rw);
    hcq_exec_item_t its[24];
    for (int j = 0; j < rw.nitems; j++) its[j] = rw.items[j].item;
    hcq_buffer_t *ins[WORLD_MAX_DEVS];
    for (int k = 0; k < rw.ninputs; k++) ins[k] = w.buf[rw.inputs[k]];
    hcq_var_value_t init[] = {{v.n, 64}, {v.k, 1}};
    hcq_graph_options_t opts = {.inflight = inflight};
    hcq_graph_t *g = NULL;
    OK(hcq_graph_create(its, (size_t)rw.nitems, ins, (size_t)rw.ninputs, init, 2, &opts, &g));
    for (int r = 0; r < 12; r++) {
      int swaps[WORLD_MAX_DEVS];
      hcq_var_value_t vals[2];
      world_random_replay(&rw, &seed, &v, swaps, vals);
      hcq_buffer_t *now[WORLD_MAX_DEVS];
      for (int k = 0; k < rw.ninputs; k++) now[k] = w.buf[swaps[k] >= 0 ? swaps[k] : rw.inputs[k]];
      OK(hcq_graph_run(g, now, (size_t)rw.ninputs, vals, 2, false, NULL));
      world_run_eager(&w, rw.items, rw.nitems, rw.inputs, swaps, rw.ninputs, vals, 2);
    }
    char what[96];
    snprintf(what, sizeof(what), "%u in flight, round %d (%d devices, %d items), 12 replays",
             inflight, round, w.ndev, rw.nitems);
    world_compare(&w, what);
    OK(hcq_graph_destroy(g));
    world_close(&w);
  }
  world_vars_close(&v);
}

Test(handoff, pipelined_replays_equal_eager_runs_with_1_2_and_4_in_flight) {
  pipelined_equals_eager(1, 901);
  pipelined_equals_eager(2, 902);
  pipelined_equals_eager(4, 904);
}

/* A kernel that holds its device until the host opens a gate in its buffer. */
static const char *const k_gate =
    "#include <unistd.h>\n"
    "void gate(void *const *b, const int32_t *v, const hcq_launch_t *l) {\n"
    "  (void)v; (void)l; while (!__atomic_load_n((int32_t *)b[0], __ATOMIC_ACQUIRE)) usleep(200);\n"
    "  __atomic_fetch_add((int32_t *)b[1], 1, __ATOMIC_RELAXED);\n"
    "}\n";

Test(handoff, wait_false_queues_up_to_inflight_replays_without_waiting) {
  setenv("HCQ_WAIT_TIMEOUT_MS", "5000", 1);
  hcq_device_t *d0 = test_open("CPU:0"), *d1 = test_open("CPU:1");
  hcq_program_t *p = test_program(d0, "gate", k_gate);
  hcq_buffer_t *gate = test_buffer(d0, 64), *count = test_buffer(d0, 64),
               *far = test_buffer(d1, 64);
  hcq_buffer_t *bufs[] = {gate, count};
  hcq_exec_item_t items[2] = {
      {.kind = HCQ_ITEM_KERNEL,
       .kernel = {p,
                  bufs,
                  2,
                  (uint32_t[]){1},
                  1,
                  NULL,
                  0,
                  {hcq_imm(1), hcq_imm(1), hcq_imm(1)},
                  {hcq_imm(1), hcq_imm(1), hcq_imm(1)}}},
      {.kind = HCQ_ITEM_TRANSFER, .transfer = {far, count, 64}},
  };
  hcq_graph_options_t opts = {.inflight = 3};
  hcq_graph_t *g = NULL;
  OK(hcq_graph_create(items, 2, NULL, 0, NULL, 0, &opts, &g));
  /* Three replays queue while the first is held at the gate: none of these calls waits for it. */
  for (int r = 0; r < 3; r++) OK(hcq_graph_run(g, NULL, 0, NULL, 0, false, NULL));
  /* CPU memory is host memory */
  int32_t *host_gate = (int32_t *)(uintptr_t)hcq_buffer_address(gate);
  int32_t *host_count = (int32_t *)(uintptr_t)hcq_buffer_address(count);
  cr_assert_eq(__atomic_load_n(host_count, __ATOMIC_ACQUIRE), 0, "nothing ran past the gate yet");
  __atomic_store_n(host_gate, 1, __ATOMIC_RELEASE);
  OK(hcq_graph_run(g, NULL, 0, NULL, 0, true, NULL));
  int32_t got = 0;
  test_read(far, &got, 4);
  cr_assert_eq(got, 4, "four replays ran, in order, and the copy saw the last count: %d", got);
  OK(hcq_graph_destroy(g));
  hcq_buffer_release(gate);
  hcq_buffer_release(count);
  hcq_buffer_release(far);
  hcq_program_release(p);
  test_close(d0);
  test_close(d1);
}

/* ---- thread placement ---- */

typedef struct {
  char name[16];
  int cores[64];
  int ncores;
} thread_info_t;

/* The process's threads named hcq*: their names and allowed cores (from /proc). */
static int hcq_threads(thread_info_t *out, int cap) {
  DIR *dir = opendir("/proc/self/task");
  cr_assert_not_null(dir);
  int n = 0;
  struct dirent *de;
  while ((de = readdir(dir)) && n < cap) {
    if (de->d_name[0] == '.') continue;
    char path[300], line[256];
    snprintf(path, sizeof(path), "/proc/self/task/%s/status", de->d_name);
    FILE *f = fopen(path, "r");
    if (!f) continue;
    thread_info_t t = {.ncores = 0};
    while (fgets(line, sizeof(line), f)) {
      if (!strncmp(line, "Name:\t", 6)) {
        size_t len = strcspn(line + 6, "\n");
        if (len >= sizeof(t.name)) len = sizeof(t.name) - 1;
        memcpy(t.name, line + 6, len);
        t.name[len] = '\0';
      } else if (!strncmp(line, "Cpus_allowed_list:\t", 19)) {
        /* "0-1,3" */
        for (char *s = line + 19; *s && *s != '\n';) {
          int a = (int)strtol(s, &s, 10), b = a;
          if (*s == '-') b = (int)strtol(s + 1, &s, 10);
          for (int c = a; c <= b && t.ncores < 64; c++) t.cores[t.ncores++] = c;
          if (*s == ',') s++;
        }
      }
    }
    fclose(f);
    if (!strncmp(t.name, "hcq", 3)) out[n++] = t;
  }
  closedir(dir);
  return n;
}

static const thread_info_t *find_thread(const thread_info_t *ts, int n, const char *name) {
  for (int i = 0; i < n; i++)
    if (!strcmp(ts[i].name, name)) return &ts[i];
  return NULL;
}

Test(handoff, threads_honour_the_core_budget) {
  hcq_device_t *d0 = test_open("CPU:0");
  int total = (int)hcq_device_cores(d0, NULL, 0);
  cr_assert_geq(total, 1);
  cr_assert_eq(hcq_device_thread_count(d0), (unsigned)total, "one device alone uses every core");
  hcq_device_t *d1 = test_open("CPU:1");
  int c0[64], c1[64];
  size_t n0 = hcq_device_cores(d0, c0, 64), n1 = hcq_device_cores(d1, c1, 64);
  if (total >= 2) {
    cr_assert_eq(n0 + n1, (size_t)total, "two devices split the cores");
    for (size_t i = 0; i < n0; i++)
      for (size_t k = 0; k < n1; k++)
        cr_assert_neq(c0[i], c1[k], "the devices' cores are disjoint");
  }
  cr_assert_leq(hcq_device_thread_count(d0) + hcq_device_thread_count(d1),
                (unsigned)(total >= 2 ? total : 2), "never more busy threads than cores");
  /* Each engine runs on the first of its device's cores, and only there. */
  thread_info_t ts[64];
  int nt = hcq_threads(ts, 64);
  const thread_info_t *e0 = find_thread(ts, nt, "hcq0.e0"), *e1 = find_thread(ts, nt, "hcq1.e0");
  cr_assert_not_null(e0);
  cr_assert_not_null(e1);
  cr_assert_eq(e0->ncores, 1);
  cr_assert_eq(e0->cores[0], c0[0]);
  cr_assert_eq(e1->ncores, 1);
  cr_assert_eq(e1->cores[0], c1[0]);
  /* One engine per device serves both queues: no thread per queue kind. */
  int engines = 0;
  for (int i = 0; i < nt; i++) engines += strstr(ts[i].name, ".e") != NULL;
  cr_assert_eq(engines, 2);
  /* Work still runs on both, across the hand-off. */
  hcq_program_t *p = test_program(d0, "add_scalar", test_kernels_source);
  hcq_buffer_t *a = test_buffer_iota(d0, 64, 1, 0), *o = test_buffer(d0, 256),
               *far = test_buffer(d1, 256);
  hcq_buffer_t *b[] = {o, a};
  int32_t v[] = {7, 64};
  hcq_launch_desc_t l = {p, b, 2, v, 2, {1, 1, 1}, {64, 1, 1}, NULL, 0};
  OK(hcq_launch(&l));
  OK(hcq_transfer(far, o, 256));
  int32_t got[64];
  test_read(far, got, sizeof(got));
  for (int i = 0; i < 64; i++) cr_assert_eq(got[i], i + 7);
  hcq_buffer_release(a);
  hcq_buffer_release(o);
  hcq_buffer_release(far);
  hcq_program_release(p);
  /* Closing one gives its cores back to the other. */
  test_close(d1);
  cr_assert_eq(hcq_device_cores(d0, NULL, 0), (size_t)total);
  cr_assert_eq(hcq_device_thread_count(d0), (unsigned)total);
  test_close(d0);
}

Test(handoff, hcq_cpu_threads_overrides_the_budget) {
  setenv("HCQ_CPU_THREADS", "3", 1);
  hcq_device_t *d0 = test_open("CPU:0"), *d1 = test_open("CPU:1");
  cr_assert_eq(hcq_device_thread_count(d0), 3u, "the user asked for 3 threads per device");
  cr_assert_eq(hcq_device_thread_count(d1), 3u);
  /* And they all work: a launch big enough to be shared. */
  hcq_program_t *p = test_program(d1, "add_scalar", test_kernels_source);
  enum { N = 1 << 16 };
  hcq_buffer_t *a = test_buffer_iota(d1, N, 1, 0), *o = test_buffer(d1, N * 4);
  hcq_buffer_t *b[] = {o, a};
  int32_t v[] = {1, N};
  hcq_launch_desc_t l = {p, b, 2, v, 2, {N / 64, 1, 1}, {64, 1, 1}, NULL, 0};
  OK(hcq_launch(&l));
  int32_t *got = malloc(N * 4);
  test_read(o, got, N * 4);
  for (int i = 0; i < N; i++) cr_assert_eq(got[i], i + 1);
  free(got);
  hcq_buffer_release(a);
  hcq_buffer_release(o);
  hcq_program_release(p);
  test_close(d0);
  test_close(d1);
  unsetenv("HCQ_CPU_THREADS");
}

Test(handoff, both_queues_of_a_device_hand_off_on_one_engine) {
  /* The compute queue waits for the copy queue and the copy queue for the compute queue, M times:
   * one thread serving both must switch at every wait instead of blocking. */
  hcq_device_t *d = test_open("CPU:0");
  hcq_signal_t *ping = NULL, *pong = NULL;
  OK(hcq_signal_create(d, "ping", 0, &ping));
  OK(hcq_signal_create(d, "pong", 0, &pong));
  hcq_queue_t *a = NULL, *b = NULL;
  OK(hcq_queue_create(HCQ_QUEUE_COMPUTE, &a));
  OK(hcq_queue_create(HCQ_QUEUE_COPY, &b));
  hcq_operand_t pi = hcq_imm((int64_t)hcq_signal_address(ping)),
                po = hcq_imm((int64_t)hcq_signal_address(pong));
  for (int i = 1; i <= 200; i++) {
    OK(hcq_queue_wait(a, pi, hcq_imm(i)));
    OK(hcq_queue_signal(a, po, hcq_imm(i)));
    OK(hcq_queue_signal(b, pi, hcq_imm(i)));
    OK(hcq_queue_wait(b, po, hcq_imm(i)));
  }
  OK(hcq_queue_bind(a, d));
  OK(hcq_queue_bind(b, d));
  OK(hcq_queue_submit(a, d, NULL, 0));
  OK(hcq_queue_submit(b, d, NULL, 0));
  OK(hcq_signal_wait(pong, 200, HCQ_TIMEOUT_DEFAULT));
  cr_assert_eq(hcq_signal_value(ping), 200);
  hcq_queue_destroy(a);
  hcq_queue_destroy(b);
  hcq_signal_destroy(ping);
  hcq_signal_destroy(pong);
  test_close(d);
}
