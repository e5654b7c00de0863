/* Helpers shared by the benchmark files. */
#ifndef HCQ_BENCH_H
#define HCQ_BENCH_H

#include <hcq/hcq.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#define REPS 9

#define CHECK(call)                                                              \
  do {                                                                           \
    hcq_status_t st_ = (call);                                                   \
    if (st_) {                                                                   \
      fprintf(stderr, "bench: %s failed: %s\n", #call, hcq_status_message(st_)); \
      exit(1);                                                                   \
    }                                                                            \
  } while (0)

static inline double now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1e9 + ts.tv_nsec;
}

static inline int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

static inline double median(double *v, int n) {
  qsort(v, (size_t)n, sizeof(double), cmp_double);
  return v[n / 2];
}

#include "rows.h"

/* --rows: one JSON line per result (bench/rows.h) for bench/report.py, instead of the table. */
extern int bench_rows_mode;

static inline void row(const char *what, double value, const char *unit) {
  if (bench_rows_mode)
    emit_row("hcq primitives", what, value, unit, "");
  else
    printf("| %-58s | %12.1f | %-5s |\n", what, value, unit);
}

void bench_empty_kernel(void *const *bufs, const int32_t *vals, const hcq_launch_t *l);
void bench_graph(hcq_device_t *dev, hcq_program_t *empty);

#endif
