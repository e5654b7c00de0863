/* The DAGs of the hand-off benchmarks, shared by hcq and its peers: tiny one-int kernels, so that
 * what is measured is scheduling and hand-off, not work.
 *
 *  fan-out/fan-in: produce p; 64 consumers r[i] = f(p, i); fan-in out = sum of r.
 *  chain: 1000 kernels, each x = x + 1 on the result of the previous one.
 */
#ifndef HCQ_BENCH_DAG_H
#define HCQ_BENCH_DAG_H

#include <stdint.h>

enum { DAG_FAN = 64, DAG_CHAIN = 1000 };

static inline void dag_produce(int32_t *p) { p[0] = p[0] * 1103515245 + 12345; }
static inline void dag_consume(int32_t *r, const int32_t *p, int i) {
  r[0] = p[0] ^ (i * 2654435761u);
}
static inline void dag_fanin(int32_t *out, const int32_t *r, int n) {
  int32_t s = 0;
  for (int i = 0; i < n; i++) s += r[i];
  out[0] += s;
}
static inline void dag_step(int32_t *dst, const int32_t *src) { dst[0] = src[0] + 1; }

#endif
