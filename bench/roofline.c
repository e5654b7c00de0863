/* The machine's limits and a model's demands, for make bench's roofline rows (issue 42, items 2
 * and 3). Prints one JSON object.
 *
 *   bench_roofline machine      {"read_gbs": [1 thread, 2 threads], "int8_gops": [1, 2]}
 *   bench_roofline model FILE   {"bytes_per_token": B, "macs_per_token": M,
 *                                "prompt_macs_per_token": P}
 *
 * read_gbs: the best of several passes of plain vector loads over 1 GiB (far beyond the caches),
 * split between the threads: what streaming weights from memory can reach. int8_gops: the int8
 * dot-product peak, vpdpbusd (AVX-512 VNNI: 64 multiply-adds per instruction) on 16 independent
 * accumulators, two operations per multiply-add; -1 where the CPU lacks AVX-512 VNNI. A model's
 * bytes per token: every tensor a decoding step reads once (all of them but the token embedding,
 * of which a step reads one row, unless it is also the classifier); its multiply-adds: the
 * elements of those matrices (attention over the cache is left out: small at short contexts); a
 * prompt token's: the same but the classifier's (a prompt pass classifies its last token only). */
#include <immintrin.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "gguf.h"

enum { MAX_THREADS = 2, PASSES = 7 };
#define READ_BYTES (1ull << 30)

static double now_s(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/* ---- memory read bandwidth ---- */

typedef struct {
  const uint8_t *from;
  size_t bytes;
  pthread_barrier_t *start;
  double seconds;
  uint64_t sink;
} reader_t;

__attribute__((target("avx512f"))) static uint64_t read_avx512(const uint8_t *p, size_t n) {
  __m512i a = _mm512_setzero_si512(), b = a, c = a, d = a;
  for (size_t i = 0; i + 256 <= n; i += 256) {
    a = _mm512_xor_si512(a, _mm512_load_si512(p + i));
    b = _mm512_xor_si512(b, _mm512_load_si512(p + i + 64));
    c = _mm512_xor_si512(c, _mm512_load_si512(p + i + 128));
    d = _mm512_xor_si512(d, _mm512_load_si512(p + i + 192));
  }
  __m512i all = _mm512_xor_si512(_mm512_xor_si512(a, b), _mm512_xor_si512(c, d));
  return (uint64_t)_mm512_reduce_or_epi64(all);
}

static uint64_t read_plain(const uint8_t *p, size_t n) {
  typedef uint64_t v4 __attribute__((vector_size(32)));
  v4 a = {0}, b = {0};
  for (size_t i = 0; i + 64 <= n; i += 64) {
    v4 x, y;
    memcpy(&x, p + i, 32);
    memcpy(&y, p + i + 32, 32);
    a ^= x, b ^= y;
  }
  a ^= b;
  return a[0] ^ a[1] ^ a[2] ^ a[3];
}

static void *reader_main(void *arg) {
  reader_t *r = arg;
  bool wide = __builtin_cpu_supports("avx512f");
  pthread_barrier_wait(r->start);
  double t0 = now_s();
  r->sink = wide ? read_avx512(r->from, r->bytes) : read_plain(r->from, r->bytes);
  r->seconds = now_s() - t0;
  return NULL;
}

/* GB/s of nthreads reading buf together (each its own slice), the best of PASSES. */
static double read_gbs(const uint8_t *buf, int nthreads) {
  double best = 0;
  for (int pass = 0; pass < PASSES; pass++) {
    pthread_barrier_t start;
    pthread_barrier_init(&start, NULL, (unsigned)nthreads);
    reader_t r[MAX_THREADS];
    pthread_t th[MAX_THREADS];
    size_t slice = READ_BYTES / (size_t)nthreads;
    for (int t = 0; t < nthreads; t++) {
      r[t] = (reader_t){buf + (size_t)t * slice, slice, &start, 0, 0};
      if (t > 0) pthread_create(&th[t], NULL, reader_main, &r[t]);
    }
    reader_main(&r[0]);
    double slowest = r[0].seconds;
    for (int t = 1; t < nthreads; t++) {
      pthread_join(th[t], NULL);
      if (r[t].seconds > slowest) slowest = r[t].seconds;
    }
    pthread_barrier_destroy(&start);
    double gbs = (double)READ_BYTES / slowest / 1e9;
    if (gbs > best) best = gbs;
  }
  return best;
}

/* ---- int8 dot-product peak ---- */

enum { DP_ACCS = 16, DP_ITERS = 40000000 };

/* The accumulators are named variables, not an array: an array lives on the stack and each
 * instruction would wait for a store and a load. */
#define DP_ALL(X) \
  X(0) X(1) X(2) X(3) X(4) X(5) X(6) X(7) X(8) X(9) X(10) X(11) X(12) X(13) X(14) X(15)
#define DP_DECLARE(k) __m512i a##k = _mm512_set1_epi32(k);
#define DP_STEP(k) a##k = _mm512_dpbusd_epi32(a##k, w, x);
#define DP_SUM(k) all = _mm512_add_epi32(all, a##k);

__attribute__((target("avx512f,avx512vnni"))) static void *dp_main(void *arg) {
  double *seconds = arg;
  volatile char wb = 3, xb = 5; /* not constants the compiler could fold */
  __m512i w = _mm512_set1_epi8(wb), x = _mm512_set1_epi8(xb);
  DP_ALL(DP_DECLARE)
  double t0 = now_s();
  for (int i = 0; i < DP_ITERS; i++) {
    DP_ALL(DP_STEP)
  }
  *seconds = now_s() - t0;
  __m512i all = _mm512_setzero_si512();
  DP_ALL(DP_SUM)
  volatile int sink = _mm512_reduce_add_epi32(all);
  (void)sink;
  return NULL;
}

/* GOP/s (two per multiply-add) of nthreads running the micro-kernel at once, the best of 3. */
static double int8_gops(int nthreads) {
  if (!__builtin_cpu_supports("avx512vnni")) return -1;
  double best = 0;
  for (int pass = 0; pass < 3; pass++) {
    pthread_t th[MAX_THREADS];
    double seconds[MAX_THREADS];
    for (int t = 1; t < nthreads; t++) pthread_create(&th[t], NULL, dp_main, &seconds[t]);
    dp_main(&seconds[0]);
    double slowest = seconds[0];
    for (int t = 1; t < nthreads; t++) {
      pthread_join(th[t], NULL);
      if (seconds[t] > slowest) slowest = seconds[t];
    }
    double ops = 2.0 * 64 * DP_ACCS * (double)DP_ITERS * nthreads;
    if (ops / slowest / 1e9 > best) best = ops / slowest / 1e9;
  }
  return best;
}

static int machine(void) {
  uint8_t *buf = aligned_alloc(4096, READ_BYTES);
  if (!buf) {
    fprintf(stderr, "bench_roofline: out of memory for 1 GiB\n");
    return 1;
  }
  for (size_t i = 0; i < READ_BYTES; i += 4096) memset(buf + i, (int)(i >> 12), 4096);
  double r1 = read_gbs(buf, 1), r2 = read_gbs(buf, 2);
  free(buf);
  double g1 = int8_gops(1), g2 = int8_gops(2);
  printf("{\"read_gbs\": [%.2f, %.2f], \"int8_gops\": [%.1f, %.1f]}\n", r1, r2, g1, g2);
  return 0;
}

/* ---- a model's demands ---- */

static int model(const char *path) {
  gguf_file_t *g = NULL;
  hcq_status_t st = gguf_open(path, &g);
  if (st) {
    fprintf(stderr, "bench_roofline: %s\n", hcq_status_message(st));
    hcq_status_destroy(st);
    return 1;
  }
  const char *classifier =
      gguf_find_tensor(g, "output.weight") ? "output.weight" : "token_embd.weight";
  uint64_t bytes = 0, macs = 0, classifier_macs = 0;
  for (size_t i = 0; i < gguf_tensor_count(g); i++) {
    const gguf_tensor_t *t = gguf_tensor_at(g, i);
    bool embedding = !strcmp(t->name, "token_embd.weight");
    if (embedding && strcmp(classifier, t->name)) continue; /* one row a token */
    bytes += t->bytes;
    uint64_t n = t->ne[0] * t->ne[1] * t->ne[2] * t->ne[3];
    if (t->n_dims >= 2) macs += n;
    if (!strcmp(t->name, classifier)) classifier_macs = n;
  }
  /* A prompt pass classifies its last token only: its tokens cost every matrix but that one. */
  printf(
      "{\"bytes_per_token\": %llu, \"macs_per_token\": %llu, "
      "\"prompt_macs_per_token\": %llu}\n",
      (unsigned long long)bytes, (unsigned long long)macs,
      (unsigned long long)(macs - classifier_macs));
  gguf_close(g);
  return 0;
}

int main(int argc, char **argv) {
  if (argc == 2 && !strcmp(argv[1], "machine")) return machine();
  if (argc == 3 && !strcmp(argv[1], "model")) return model(argv[2]);
  fprintf(stderr, "usage: bench_roofline machine | bench_roofline model FILE.gguf\n");
  return 2;
}
