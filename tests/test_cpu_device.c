/* The CPU device: names, independence, work-group spreading, the timeline and its wrap. */
#include <inttypes.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "test_util.h"

TestSuite(cpu_device, .timeout = 120);

Test(cpu_device, names_and_references) {
  hcq_device_t *a = test_open("CPU"), *b = test_open("CPU:0"), *c = test_open("cpu:1");
  cr_assert_eq(a, b, "CPU means CPU:0 and opens the same device");
  cr_assert_neq(a, c);
  cr_assert_str_eq(hcq_device_name(a), "CPU:0");
  cr_assert_str_eq(hcq_device_name(c), "CPU:1");
  cr_assert_eq(hcq_device_kind(a), HCQ_DEVICE_CPU);
  cr_assert(hcq_device_caps(a) & HCQ_CAP_IN_ORDER_QUEUES);
  cr_assert(hcq_device_caps(a) & HCQ_CAP_COMPILE_C);
  test_close(a);
  test_close(b);
  test_close(c);
}

Test(cpu_device, devices_have_their_own_memory_and_timelines) {
  hcq_device_t *d0 = test_open("CPU:0"), *d1 = test_open("CPU:1");
  hcq_buffer_t *b0 = test_buffer_iota(d0, 16, 1, 0), *b1 = test_buffer_iota(d1, 16, 1, 100);
  cr_assert_neq(hcq_buffer_address(b0), hcq_buffer_address(b1));
  hcq_signal_t *t0, *t1;
  uint64_t v0, v1;
  hcq_device_timeline(d0, &t0, &v0);
  hcq_device_timeline(d1, &t1, &v1);
  cr_assert_neq(t0, t1);
  cr_assert_eq(v0, 2);
  cr_assert_eq(v1, 2);
  int32_t got[16];
  test_read(b1, got, sizeof(got));
  for (int i = 0; i < 16; i++) cr_assert_eq(got[i], 100 + i);
  hcq_buffer_release(b0);
  hcq_buffer_release(b1);
  test_close(d0);
  test_close(d1);
}

static atomic_int g_threads_seen[64];
static pthread_t g_thread_ids[64];
static atomic_int g_thread_count;
static atomic_bool g_first_waited;
static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;

/* Records each group once and which thread ran it. */
static void count_groups(void *const *bufs, const int32_t *vals, const hcq_launch_t *l) {
  (void)vals;
  int32_t *hits = bufs[0];
  size_t g = ((size_t)l->gid[2] * l->gsz[1] + l->gid[1]) * l->gsz[0] + l->gid[0];
  __atomic_fetch_add(&hits[g], 1, __ATOMIC_RELAXED);
  pthread_t self = pthread_self();
  pthread_mutex_lock(&g_lock);
  int n = atomic_load(&g_thread_count), found = 0;
  for (int i = 0; i < n; i++) found |= pthread_equal(g_thread_ids[i], self);
  if (!found && n < 64) {
    g_thread_ids[n] = self;
    atomic_fetch_add(&g_threads_seen[n], 1);
    atomic_store(&g_thread_count, n + 1);
  }
  pthread_mutex_unlock(&g_lock);
  /* The first group waits until a second thread took some of the launch's groups (or 5 s passed):
   * a helper on a loaded machine may take milliseconds to wake, and the engine must not finish the
   * launch alone first. Only a launch that is not split (one chunk) waits the whole time, and then
   * fails the test. */
  if (atomic_exchange(&g_first_waited, true)) return;
  struct timespec t0, t;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  while (atomic_load(&g_thread_count) < 2) {
    clock_gettime(CLOCK_MONOTONIC, &t);
    if ((t.tv_sec - t0.tv_sec) * 1000000000L + (t.tv_nsec - t0.tv_nsec) > 5000000000L) break;
    sched_yield();
  }
}

Test(cpu_device, groups_of_a_launch_spread_over_threads) {
  setenv("HCQ_CPU_THREADS", "4", 1);
  setenv("HCQ_CPU_MIN_PARALLEL", "1", 1); /* split even this small launch */
  hcq_device_t *d = test_open("CPU:0");
  cr_assert_eq(hcq_device_thread_count(d), 4);
  hcq_program_t *p = NULL;
  OK(hcq_program_create_fn(d, "count_groups", count_groups, &p));
  enum { GX = 7, GY = 5, GZ = 3 };
  hcq_buffer_t *hits = test_buffer(d, GX * GY * GZ * 4);
  hcq_launch_desc_t ld = {p, &hits, 1, NULL, 0, {GX, GY, GZ}, {2, 3, 1}};
  int32_t got[GX * GY * GZ];
  /* One launch's groups alone are shared (a chunk must not swallow a whole small launch). */
  OK(hcq_launch(&ld));
  test_read(hits, got, sizeof(got));
  cr_assert_gt(atomic_load(&g_thread_count), 1, "all groups of one launch ran on one thread");
  for (int i = 1; i < 20; i++) OK(hcq_launch(&ld));
  test_read(hits, got, sizeof(got));
  for (int i = 0; i < GX * GY * GZ; i++)
    cr_assert_eq(got[i], 20, "group %d ran %d times", i, got[i]);
  hcq_buffer_release(hits);
  hcq_program_release(p);
  test_close(d);
}

Test(cpu_device, launch_dims_reach_the_kernel) {
  hcq_device_t *d = test_open("CPU:0");
  hcq_program_t *p = test_program(d, "record_groups", test_kernels_source);
  hcq_buffer_t *out = test_buffer(d, 4 * 5 * 6 * 4);
  hcq_launch_desc_t ld = {p, &out, 1, NULL, 0, {4, 5, 6}, {3, 2, 2}};
  OK(hcq_launch(&ld));
  int32_t got[4 * 5 * 6];
  test_read(out, got, sizeof(got));
  for (int i = 0; i < 4 * 5 * 6; i++) cr_assert_eq(got[i], 12);
  /* A 0 dim is refused and runs nothing. */
  hcq_launch_desc_t empty = {p, &out, 1, NULL, 0, {0, 5, 6}, {1, 1, 1}};
  FAILS(hcq_launch(&empty), HCQ_INVALID_ARGUMENT, "global[0] is 0");
  test_read(out, got, sizeof(got));
  cr_assert_eq(got[0], 12);
  hcq_buffer_release(out);
  hcq_program_release(p);
  test_close(d);
}

static void twice(void *const *bufs, const int32_t *vals, const hcq_launch_t *l) {
  int32_t *x = bufs[0];
  for (uint32_t t = 0; t < l->lsz[0]; t++)
    x[l->gid[0] * l->lsz[0] + t] = x[l->gid[0] * l->lsz[0] + t] * 2 + vals[0];
}

Test(cpu_device, function_pointer_programs) {
  hcq_device_t *d = test_open("CPU:3");
  hcq_program_t *p = NULL;
  OK(hcq_program_create_fn(d, "twice", twice, &p));
  cr_assert_str_eq(hcq_program_name(p), "twice");
  cr_assert_eq(hcq_program_device(p), d);
  hcq_buffer_t *x = test_buffer_iota(d, 64, 1, 0);
  int32_t one = 1;
  hcq_launch_desc_t ld = {p, &x, 1, &one, 1, {2, 1, 1}, {32, 1, 1}};
  OK(hcq_launch(&ld));
  OK(hcq_launch(&ld));
  int32_t got[64];
  test_read(x, got, sizeof(got));
  for (int i = 0; i < 64; i++) cr_assert_eq(got[i], (i * 2 + 1) * 2 + 1);
  hcq_buffer_release(x);
  hcq_program_release(p);
  test_close(d);
}

/* Starting the timeline just below 2^31: eager work crosses the limit, the device switches to its
 * shadow signal and restarts at 1, and results stay right. */
Test(cpu_device, timeline_wraps_onto_shadow_signal) {
  hcq_device_options_t opts = {.timeline_start = HCQ_TIMELINE_WRAP - 5};
  hcq_device_t *d = NULL;
  OK(hcq_device_open_ex("CPU:2", &opts, &d));
  hcq_signal_t *first, *now;
  uint64_t v;
  hcq_device_timeline(d, &first, &v);
  cr_assert_eq(v, HCQ_TIMELINE_WRAP - 5);
  hcq_program_t *p = test_program(d, "mul_add", test_kernels_source);
  hcq_buffer_t *x = test_buffer_iota(d, 64, 1, 0);
  int32_t vals[] = {3, 1, 64};
  hcq_launch_desc_t ld = {p, &x, 1, vals, 3, {1, 1, 1}, {64, 1, 1}};
  uint32_t model[64];
  for (int i = 0; i < 64; i++) model[i] = (uint32_t)i;
  bool wrapped = false;
  for (int i = 0; i < 20; i++) {
    OK(hcq_launch(&ld));
    for (int k = 0; k < 64; k++) model[k] = model[k] * 3 + 1;
    hcq_device_timeline(d, &now, &v);
    if (now != first) {
      wrapped = true;
      cr_assert_lt(v, 100, "after the wrap the timeline restarts at 1");
    } else {
      cr_assert_leq(v, HCQ_TIMELINE_WRAP + 1);
    }
  }
  cr_assert(wrapped, "the timeline never wrapped");
  uint32_t got[64];
  test_read(x, got, sizeof(got));
  cr_assert_arr_eq(got, model, sizeof(got));
  OK(hcq_device_synchronize(d));
  hcq_buffer_release(x);
  hcq_program_release(p);
  test_close(d);
}

Test(cpu_device, open_ex_on_open_device_is_an_error) {
  hcq_device_t *d = test_open("CPU:0"), *e = NULL;
  hcq_device_options_t opts = {.timeline_start = 100};
  FAILS(hcq_device_open_ex("CPU:0", &opts, &e), HCQ_FAILED_PRECONDITION, "already open");
  hcq_device_options_t none = {0};
  OK(hcq_device_open_ex("CPU:0", &none, &e));
  cr_assert_eq(d, e);
  test_close(e);
  test_close(d);
}

Test(cpu_device, query_lists_cpu_and_cuda) {
  hcq_device_info_t infos[4];
  size_t n = hcq_device_query(infos, 4);
  cr_assert_geq(n, 2);
  cr_assert_eq(infos[0].kind, HCQ_DEVICE_CPU);
  cr_assert(infos[0].available);
  cr_assert_eq(infos[1].kind, HCQ_DEVICE_CUDA);
  cr_assert_neq(strlen(infos[1].description), 0);
}

Test(cpu_device, many_devices_open_and_close) {
  for (int round = 0; round < 3; round++) {
    hcq_device_t *devs[8];
    char name[16];
    for (int i = 0; i < 8; i++) {
      snprintf(name, sizeof(name), "CPU:%d", i);
      devs[i] = test_open(name);
    }
    for (int i = 0; i < 8; i++) test_close(devs[i]);
  }
}

/* CPU memory (src/cpu/cpu_memory.c): buffers of every size class (heap, huge-page arena, mapping of
 * their own) are zero, 64-byte aligned and disjoint, also when allocated after others were written
 * and freed in any order; large ones start on a 2 MiB boundary. */
Test(cpu_device, buffers_of_every_size_are_zero_aligned_and_disjoint) {
  hcq_device_t *d;
  OK(hcq_device_open("CPU:0", &d));
  static const uint64_t sizes[] = {4,       1000,    300 << 10, 700 << 10, (2 << 20) - 64,
                                   1 << 20, 3 << 20, 9 << 20,   512 << 10};
  enum { N = sizeof(sizes) / sizeof(sizes[0]) };
  for (int round = 0; round < 3; round++) {
    hcq_buffer_t *b[N];
    for (int i = 0; i < N; i++) {
      OK(hcq_buffer_create(d, sizes[i], &b[i]));
      uint64_t a = hcq_buffer_address(b[i]);
      cr_assert_eq(a % 64, 0, "buffer of %" PRIu64 " bytes at %#" PRIx64, sizes[i], a);
      if (sizes[i] >= (2 << 20)) cr_assert_eq(a % (2 << 20), 0, "large buffer at %#" PRIx64, a);
      unsigned char *host = malloc(sizes[i]);
      OK(hcq_buffer_copyout(b[i], 0, host, sizes[i]));
      for (uint64_t k = 0; k < sizes[i]; k++)
        cr_assert_eq(host[k], 0, "round %d, buffer %d, byte %" PRIu64, round, i, k);
      memset(host, 0xa5 + i, sizes[i]);
      OK(hcq_buffer_copyin(b[i], 0, host, sizes[i]));
      free(host);
    }
    for (int i = 0; i < N; i++)
      for (int j = 0; j < N; j++) {
        uint64_t ai = hcq_buffer_address(b[i]), aj = hcq_buffer_address(b[j]);
        if (i != j)
          cr_assert(ai + sizes[i] <= aj || aj + sizes[j] <= ai, "buffers %d and %d overlap", i, j);
      }
    /* Each buffer still holds its own bytes: no neighbour wrote over it. */
    for (int i = 0; i < N; i++) {
      unsigned char first, last;
      OK(hcq_buffer_copyout(b[i], 0, &first, 1));
      OK(hcq_buffer_copyout(b[i], sizes[i] - 1, &last, 1));
      cr_assert(first == (unsigned char)(0xa5 + i) && last == first, "buffer %d", i);
    }
    /* Free in another order each round: arenas return when their last buffer goes. */
    for (int i = 0; i < N; i++) {
      int k = round == 0   ? i
              : round == 1 ? N - 1 - i
                           : (2 * i + 1) % N; /* 2 is coprime with N = 9 */
      hcq_buffer_release(b[k]);
    }
  }
  OK(hcq_device_close(d));
}
