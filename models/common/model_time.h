/* Timing helpers the models and the tool share when they report how long things took. */
#ifndef HCQ_MODELS_TIME_H
#define HCQ_MODELS_TIME_H

#include <time.h>

/* Milliseconds on the monotonic clock. */
static inline double hcq_model_now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

/* qsort order of doubles, for medians. */
static inline int hcq_model_cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

#endif
