#include <pthread.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#include "test_util.h"

static hcq_device_t *dev;
static void setup(void) { dev = test_open("CPU:0"); }
static void teardown(void) { test_close(dev); }

TestSuite(signal, .init = setup, .fini = teardown, .timeout = 60);

Test(signal, set_and_wait) {
  hcq_signal_t *s = NULL;
  OK(hcq_signal_create(dev, "flag", 3, &s));
  cr_assert_eq(hcq_signal_value(s), 3);
  OK(hcq_signal_wait(s, 3, 0));
  OK(hcq_signal_wait(s, 1, 0));
  hcq_signal_set(s, 10);
  cr_assert_eq(hcq_signal_value(s), 10);
  OK(hcq_signal_wait(s, 10, 100));
  cr_assert_str_eq(hcq_signal_name(s), "flag");
  cr_assert_eq(hcq_signal_device(s), dev);
  cr_assert_neq(hcq_signal_address(s), 0);
  hcq_signal_destroy(s);
}

typedef struct {
  hcq_signal_t *sig;
  useconds_t delay_us;
  uint64_t value;
} setter_t;

static void *set_later(void *arg) {
  setter_t *st = arg;
  usleep(st->delay_us);
  hcq_signal_set(st->sig, st->value);
  return NULL;
}

Test(signal, wait_satisfied_late_by_another_thread) {
  hcq_signal_t *s = NULL;
  OK(hcq_signal_create(dev, "late", 0, &s));
  /* Long enough that the waiter stops spinning and sleeps on the futex. */
  setter_t st = {s, 50000, 5};
  pthread_t t;
  struct timespec a, b;
  clock_gettime(CLOCK_MONOTONIC, &a);
  pthread_create(&t, NULL, set_later, &st);
  OK(hcq_signal_wait(s, 5, 10000));
  clock_gettime(CLOCK_MONOTONIC, &b);
  pthread_join(t, NULL);
  cr_assert_geq(hcq_signal_value(s), 5);
  double ms = (b.tv_sec - a.tv_sec) * 1e3 + (b.tv_nsec - a.tv_nsec) / 1e6;
  cr_assert_geq(ms, 40.0, "the wait returned before the value was set (%.1f ms)", ms);
  hcq_signal_destroy(s);
}

Test(signal, many_waiters_all_wake) {
  hcq_signal_t *s = NULL;
  OK(hcq_signal_create(dev, "crowd", 0, &s));
  setter_t st = {s, 20000, 1};
  pthread_t t;
  pthread_create(&t, NULL, set_later, &st);
  OK(hcq_signal_wait(s, 1, 10000));
  OK(hcq_signal_wait(s, 1, 0));
  pthread_join(t, NULL);
  hcq_signal_destroy(s);
}

Test(signal, wait_times_out_with_message) {
  hcq_signal_t *s = NULL;
  OK(hcq_signal_create(dev, "never", 4, &s));
  FAILS(hcq_signal_wait(s, 9, 30), HCQ_TIMEOUT, "\"never\"", "reach 9", "seen: 4", "30 ms");
  hcq_signal_destroy(s);
}

Test(signal, device_timeline_signal_tracks_work) {
  hcq_signal_t *tl = NULL;
  uint64_t next = 0;
  hcq_device_timeline(dev, &tl, &next);
  cr_assert_eq(next, 1);
  cr_assert_eq(hcq_signal_value(tl), 0);
  hcq_buffer_t *b = test_buffer(dev, 64);
  int32_t x = 5;
  OK(hcq_buffer_copyin(b, 0, &x, 4));
  OK(hcq_device_synchronize(dev));
  hcq_device_timeline(dev, &tl, &next);
  cr_assert_eq(next, 2);
  cr_assert_eq(hcq_signal_value(tl), 1);
  hcq_buffer_release(b);
}

/* Options are read once, on first use: this test sets the variable before opening anything. */
Test(signal_env, default_timeout_from_environment, .timeout = 60) {
  /* Each Criterion test runs in its own process, and options are read on first use. */
  setenv("HCQ_WAIT_TIMEOUT_MS", "40", 1);
  hcq_device_t *d = test_open("CPU:0");
  hcq_signal_t *s = NULL;
  OK(hcq_signal_create(d, NULL, 0, &s));
  cr_assert(strstr(hcq_signal_name(s), "on CPU:0"), "default name: %s", hcq_signal_name(s));
  FAILS(hcq_signal_wait(s, 1, HCQ_TIMEOUT_DEFAULT), HCQ_TIMEOUT, "after 40 ms", "seen: 0");
  hcq_signal_destroy(s);
  test_close(d);
}
