/* One benchmark result per line, as JSON, for bench/report.py to gather into the table:
 *   {"section": ..., "name": ..., "value": ..., "unit": ..., "note": ...}
 * A value < 0 means "missing", and the note says why. */
#ifndef HCQ_BENCH_ROWS_H
#define HCQ_BENCH_ROWS_H

#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static inline void emit_json_string(const char *s) {
  putchar('"');
  for (; s && *s; s++) {
    if (*s == '"' || *s == '\\') putchar('\\');
    if ((unsigned char)*s < 0x20)
      printf("\\u%04x", *s);
    else
      putchar(*s);
  }
  putchar('"');
}

static inline void emit_row(const char *section, const char *name, double value, const char *unit,
                            const char *note) {
  printf("{\"section\": ");
  emit_json_string(section);
  printf(", \"name\": ");
  emit_json_string(name);
  printf(", \"value\": %.6g, \"unit\": ", value);
  emit_json_string(unit);
  printf(", \"note\": ");
  emit_json_string(note ? note : "");
  printf("}\n");
  fflush(stdout);
}

static inline double bench_now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static inline int bench_cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

static inline double bench_median(double *v, int n) {
  qsort(v, (size_t)n, sizeof(double), bench_cmp_double);
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

#endif
