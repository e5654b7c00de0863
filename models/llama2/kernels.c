/* The decoder's forward pass as hcq CPU kernels (the CPU ABI of hcq/program.h: called once per
 * work-group, each group loops over its own lsz threads).
 *
 * The decoder compiles this file once per kernel entry, after the hcq prelude and a block of
 * #defines that fix the model's shape (DIM, HIDDEN, KV_DIM, N_HEADS, KV_MUL = n_heads / n_kv_heads,
 * HEAD_SIZE, VOCAB, SEQ_LEN, ATT_CHUNK, MAX_CHUNKS): loops then have constant trip counts.
 *
 * Matrix-vector kernels give each work-group a block of output rows; a row's dot product keeps
 * sixteen independent partial sums, which the compiler turns into two vector registers at -O2 (a
 * single running sum cannot be vectorised without reassociating float adds; with one register of
 * eight, a row was one chain of dependent vector adds whose latency held a core to ~25 GB/s of
 * weights, and the 15m step was 20-30% slower). One work-item (one of the group's lsz[0] threads)
 * stands for eight multiply-adds of those sums: a row of an
 * N-input matrix is STEPS(N) threads, so a group of lsz[0] threads holds lsz[0] / STEPS(N) rows.
 * The device shares a launch between its threads when it has enough work-items
 * (HCQ_CPU_MIN_PARALLEL), which so follows the launch's arithmetic. Every group computes its
 * rows in a fixed order, so results do not depend on how the device spreads groups over threads:
 * eager steps and graph replays give identical bits.
 *
 * The key and value caches are stored transposed in blocks (cache_at: per kv head and chunk of
 * ATT_CHUNK positions, a row of the chunk's positions per element of the head; MAX_CHUNKS *
 * ATT_CHUNK positions in all, the decoder's allocation), so that attention runs along the positions
 * of a chunk in vectors instead of one short dot product of a head's elements per position, and
 * reads a chunk's keys and values as two contiguous blocks.
 *
 * Reductions across work-groups are done in two launches: attention keeps, per (head, chunk of
 * ATT_CHUNK positions), the chunk's max score, its sum of exponentials and its weighted value sum,
 * and a second kernel rescales and adds the chunks; the classifier keeps each group's best logit
 * and a one-group kernel picks the overall argmax (lowest index on ties).
 */
#include <math.h>

static inline float dot(const float *restrict a, const float *restrict b, int n) {
  float s[16] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0};
  int j = 0;
  for (; j + 16 <= n; j += 16)
    for (int k = 0; k < 16; k++) s[k] += a[j + k] * b[j + k];
  for (; j < n; j++) s[j & 15] += a[j] * b[j];
  for (int k = 0; k < 8; k++) s[k] += s[k + 8];
  return ((s[0] + s[1]) + (s[2] + s[3])) + ((s[4] + s[5]) + (s[6] + s[7]));
}

/* RMS norm (eps 1e-5) of x into out, scaled by w. Every group that needs the normalised vector
 * computes it itself: DIM multiply-adds, against the group's rows x DIM. */
static inline void rmsnorm(float *restrict out, const float *restrict x, const float *restrict w) {
  float ss = dot(x, x, DIM) / (float)DIM + 1e-5f;
  float inv = 1.0f / sqrtf(ss);
  for (int j = 0; j < DIM; j++) out[j] = w[j] * (inv * x[j]);
}

/* Rotary embedding of the pair (a, b) at even element i of a head; rot is the table row of the
 * position: cos and sin of pos * 10000^(-j/HEAD_SIZE) for each even j, computed once on the host.
 */
static inline void rope(float *a, float *b, int i, const float *rot) {
  float c = rot[i % HEAD_SIZE], s = rot[i % HEAD_SIZE + 1];
  float a0 = *a, b0 = *b;
  *a = a0 * c - b0 * s;
  *b = a0 * s + b0 * c;
}

#define STEPS(n) (((n) + 7) / 8)
/* Where the cache holds element i (of KV_DIM) at position t: per kv head and chunk of positions, a
 * block of HEAD_SIZE rows of ATT_CHUNK positions, contiguous (the hardware prefetches a block). */
static inline size_t cache_at(int i, int t) {
  size_t head = (size_t)(i / HEAD_SIZE), row = (size_t)(i % HEAD_SIZE);
  return ((head * MAX_CHUNKS + (size_t)(t / ATT_CHUNK)) * HEAD_SIZE + row) * ATT_CHUNK +
         (size_t)(t % ATT_CHUNK);
}

/* Rows of n inputs a group computes: one per STEPS(n) of its threads. */
static inline int rows_per_group(const hcq_launch_t *l, int n) { return (int)l->lsz[0] / STEPS(n); }

/* The group's rows [*first, return value) of a matrix with `rows` rows of n inputs. */
static inline int group_rows(const hcq_launch_t *l, int n, int rows, int *first) {
  int per_group = rows_per_group(l, n);
  int end = (int)(l->gid[0] + 1) * per_group;
  *first = (int)l->gid[0] * per_group;
  return end < rows ? end : rows;
}

/* bufs: x, tokens, embedding; vals: pos.  x = embedding row of tokens[pos]. */
void llama_embed(void *const *b, const int32_t *v, const hcq_launch_t *l) {
  (void)l;
  float *x = b[0];
  const int32_t *tokens = b[1];
  const float *emb = b[2];
  int32_t tok = tokens[v[0]];
  if (tok < 0 || tok >= VOCAB) tok = 0;
  for (int i = 0; i < DIM; i++) x[i] = emb[(size_t)tok * DIM + i];
}

/* bufs: q, key cache, value cache, x, rms weights, wq, wk, wv, rotary table; vals: pos.
 * Rows 0..DIM-1 are q, then KV_DIM rows of k, then KV_DIM of v. Groups hold an even number of rows,
 * so a rotary pair never straddles two groups. k and v go to the caches at position pos (cache_at).
 */
void llama_qkv(void *const *b, const int32_t *v, const hcq_launch_t *l) {
  float *q = b[0], *kc = b[1], *vc = b[2];
  const float *x = b[3], *rms = b[4], *wq = b[5], *wk = b[6], *wv = b[7];
  int pos = v[0];
  const float *rot = (const float *)b[8] + (size_t)pos * HEAD_SIZE;
  float xn[DIM];
  rmsnorm(xn, x, rms);
  int r0, end = group_rows(l, DIM, DIM + 2 * KV_DIM, &r0);
  for (int r = r0; r < end; r += 2) {
    if (r < DIM) {
      float a = dot(wq + (size_t)r * DIM, xn, DIM), c = dot(wq + (size_t)(r + 1) * DIM, xn, DIM);
      rope(&a, &c, r, rot);
      q[r] = a, q[r + 1] = c;
    } else if (r < DIM + KV_DIM) {
      int i = r - DIM;
      float a = dot(wk + (size_t)i * DIM, xn, DIM), c = dot(wk + (size_t)(i + 1) * DIM, xn, DIM);
      rope(&a, &c, i, rot);
      kc[cache_at(i, pos)] = a, kc[cache_at(i + 1, pos)] = c;
    } else {
      int i = r - DIM - KV_DIM;
      vc[cache_at(i, pos)] = dot(wv + (size_t)i * DIM, xn, DIM);
      vc[cache_at(i + 1, pos)] = dot(wv + (size_t)(i + 1) * DIM, xn, DIM);
    }
  }
}

/* Vectors of VW floats (GCC's and clang's vector extensions, which the compiler maps onto the
 * host's registers): attention runs along the positions of a chunk, NV vectors of them. */
#if defined(__AVX512F__)
#define VW 16
#else
#define VW 8
#endif
#define NV (ATT_CHUNK / VW)
_Static_assert(ATT_CHUNK % VW == 0, "a chunk of positions is whole vectors");
typedef float vf __attribute__((vector_size(VW * 4)));
typedef int32_t vi __attribute__((vector_size(VW * 4)));
typedef float v4 __attribute__((vector_size(16)));
typedef int32_t vi4 __attribute__((vector_size(16)));

static inline vf vload(const float *p) {
  vf v;
  __builtin_memcpy(&v, p, sizeof(v));
  return v;
}
static inline vf vselect(vi keep, vf a, vf b) { return (vf)((keep & (vi)a) | (~keep & (vi)b)); }
static inline v4 quarter(vf v, int k) {
  v4 r;
  __builtin_memcpy(&r, (const char *)&v + 16 * k, 16);
  return r;
}
/* Horizontal sum and max: the vector folded into four lanes, then those. */
static inline float vsum(vf v) {
  v4 r = quarter(v, 0);
  for (int k = 1; k < VW / 4; k++) r += quarter(v, k);
  return (r[0] + r[1]) + (r[2] + r[3]);
}
static inline float vmax(vf v) {
  v4 r = quarter(v, 0);
  for (int k = 1; k < VW / 4; k++) {
    v4 x = quarter(v, k);
    r = (v4)(((x > r) & (vi4)x) | (~(x > r) & (vi4)r));
  }
  float a = r[0] > r[1] ? r[0] : r[1], c = r[2] > r[3] ? r[2] : r[3];
  return a > c ? a : c;
}

/* exp(x) of each lane within 2 ulp of expf, in plain vector arithmetic (a call to expf is one lane
 * at a time): x = k ln2 + r, |r| <= ln2 / 2, with ln2 in two parts so that r is exact, e^r
 * by its Taylor series to r^7 (error below 2^-24 there), times 2^k put into the exponent bits.
 * x is first clamped to [-87, 88], where 2^k is a normal float: below, e^-87 (2^-125.5) adds
 * nothing next to the 1 of a softmax's max or of silu's 1 + e^-a; above, e^88 is still finite. */
static inline vf vexp_clamped(vf x) {
  vf lo = (vf){0} - 87.0f, hi = (vf){0} + 88.0f;
  x = vselect(x < lo, lo, x);
  x = vselect(x > hi, hi, x);
  const float shifter = 12582912.0f; /* 1.5 * 2^23: adding it rounds to an integer */
  vf k = (x * 1.44269504f + shifter) - shifter;
  vf r = (x - k * 0.693145752f) - k * 1.42860677e-6f;
  vf p = r * (1.0f / 5040) + 1.0f / 720;
  p = p * r + 1.0f / 120;
  p = p * r + 1.0f / 24;
  p = p * r + 1.0f / 6;
  p = p * r + 0.5f;
  p = p * r + 1.0f;
  p = p * r + 1.0f;
  vi bits = (__builtin_convertvector(k, vi) + 127) << 23;
  return p * (vf)bits;
}

/* bufs: partials, q, key cache, value cache; vals: pos. Grid: N_HEADS x (pos / ATT_CHUNK + 1).
 * Group (h, c) scores positions c*ATT_CHUNK .. min(c*ATT_CHUNK + ATT_CHUNK, pos + 1) - 1 and
 * writes {max, sum of exp(score - max), sum of exp(score - max) * value} for its chunk. Every
 * loop runs over the whole chunk, one vector lane per position; lanes past the last position are
 * masked out (their cache slots hold zeros or an earlier run's values). */
void llama_attn_part(void *const *b, const int32_t *v, const hcq_launch_t *l) {
  float *part = b[0];
  const float *q = b[1], *kc = b[2], *vc = b[3];
  int pos = v[0], h = (int)l->gid[0], c = (int)l->gid[1];
  int t0 = c * ATT_CHUNK, n = pos + 1 - t0;
  const float *qh = q + h * HEAD_SIZE;
  size_t block = cache_at((h / KV_MUL) * HEAD_SIZE, t0);
  const float *kt = kc + block, *vt = vc + block;
  /* Scores: two independent sums over the head's elements, NV vectors of positions each. */
  vf even[NV], odd[NV];
  for (int j = 0; j < NV; j++) even[j] = odd[j] = (vf){0};
  int i = 0;
  for (; i + 2 <= HEAD_SIZE; i += 2) {
    float qe = qh[i], qo = qh[i + 1];
    const float *re = kt + (size_t)i * ATT_CHUNK, *ro = re + ATT_CHUNK;
    for (int j = 0; j < NV; j++)
      even[j] += qe * vload(re + j * VW), odd[j] += qo * vload(ro + j * VW);
  }
  if (i < HEAD_SIZE)
    for (int j = 0; j < NV; j++) even[j] += qh[i] * vload(kt + (size_t)i * ATT_CHUNK + j * VW);
  const float scale = 1.0f / sqrtf((float)HEAD_SIZE);
  vi lane;
  for (int k = 0; k < VW; k++) lane[k] = k;
  vf score[NV], top = (vf){0} - INFINITY;
  vi keep[NV];
  for (int j = 0; j < NV; j++) {
    score[j] = (even[j] + odd[j]) * scale;
    keep[j] = lane + j * VW < n;
    top = vselect(keep[j] & (score[j] > top), score[j], top);
  }
  float m = vmax(top);
  vf e[NV], total = (vf){0};
  for (int j = 0; j < NV; j++) {
    e[j] = vselect(keep[j], vexp_clamped(score[j] - m), (vf){0});
    total += e[j];
  }
  float *dst = part + ((size_t)h * MAX_CHUNKS + c) * (HEAD_SIZE + 2);
  dst[0] = m, dst[1] = vsum(total);
  /* Weighted values; a lane past the last position adds nothing, whatever its slot holds. */
  for (int d = 0; d < HEAD_SIZE; d++) {
    const float *row = vt + (size_t)d * ATT_CHUNK;
    vf o = (vf){0};
    for (int j = 0; j < NV; j++) o += vselect(keep[j], e[j] * vload(row + j * VW), (vf){0});
    dst[2 + d] = vsum(o);
  }
}

/* bufs: out, partials; vals: pos. Grid: N_HEADS. Softmax-weighted values of head gid[0]: the
 * chunks rescaled to the overall max. */
void llama_attn_combine(void *const *b, const int32_t *v, const hcq_launch_t *l) {
  float *out = b[0];
  const float *part = b[1];
  int h = (int)l->gid[0], chunks = v[0] / ATT_CHUNK + 1;
  const float *p = part + (size_t)h * MAX_CHUNKS * (HEAD_SIZE + 2);
  float m = -INFINITY, w[MAX_CHUNKS], total = 0, acc[HEAD_SIZE];
  for (int c = 0; c < chunks; c++)
    if (p[c * (HEAD_SIZE + 2)] > m) m = p[c * (HEAD_SIZE + 2)];
  for (int c = 0; c < chunks; c++) {
    w[c] = expf(p[c * (HEAD_SIZE + 2)] - m);
    total += w[c] * p[c * (HEAD_SIZE + 2) + 1];
  }
  for (int i = 0; i < HEAD_SIZE; i++) acc[i] = 0;
  for (int c = 0; c < chunks; c++)
    for (int i = 0; i < HEAD_SIZE; i++) acc[i] += w[c] * p[c * (HEAD_SIZE + 2) + 2 + i];
  for (int i = 0; i < HEAD_SIZE; i++) out[h * HEAD_SIZE + i] = acc[i] / total;
}

/* bufs: x, in, w (DIM x N). x[r] += w[r] . in for the group's rows: the residual add fused into the
 * output projection. */
#define MATVEC_RESIDUAL(name, N)                                              \
  void name(void *const *b, const int32_t *v, const hcq_launch_t *l) {        \
    (void)v;                                                                  \
    float *x = b[0];                                                          \
    const float *in = b[1], *w = b[2];                                        \
    int r0, end = group_rows(l, (N), DIM, &r0);                               \
    for (int r = r0; r < end; r++) x[r] += dot(w + (size_t)r * (N), in, (N)); \
  }
MATVEC_RESIDUAL(llama_wo, DIM)
MATVEC_RESIDUAL(llama_ffn_down, HIDDEN)

/* bufs: hb, x, rms weights, w1, w3. hb[r] = silu(w1[r] . xn) * (w3[r] . xn), xn = rmsnorm(x).
 * The rows go in blocks of FFN_BLOCK, whose exponentials are whole vectors. */
#define FFN_BLOCK 32
_Static_assert(FFN_BLOCK % VW == 0, "a block of rows is whole vectors");
void llama_ffn_up(void *const *b, const int32_t *v, const hcq_launch_t *l) {
  (void)v;
  float *hb = b[0];
  const float *x = b[1], *rms = b[2], *w1 = b[3], *w3 = b[4];
  float xn[DIM];
  rmsnorm(xn, x, rms);
  int r0, end = group_rows(l, DIM, HIDDEN, &r0);
  for (int base = r0; base < end; base += FFN_BLOCK) {
    int n = end - base < FFN_BLOCK ? end - base : FFN_BLOCK;
    float a[FFN_BLOCK], c[FFN_BLOCK], e[FFN_BLOCK];
    for (int j = 0; j < n; j++) {
      a[j] = dot(w1 + (size_t)(base + j) * DIM, xn, DIM);
      c[j] = dot(w3 + (size_t)(base + j) * DIM, xn, DIM);
    }
    for (int j = n; j < FFN_BLOCK; j++) a[j] = 0;
    for (int j = 0; j < FFN_BLOCK; j += VW) {
      vf ex = vexp_clamped(-vload(a + j));
      __builtin_memcpy(e + j, &ex, sizeof(ex));
    }
    for (int j = 0; j < n; j++) hb[base + j] = a[j] * (1.0f / (1.0f + e[j])) * c[j];
  }
}

/* bufs: logits, best, x, final rms weights, classifier. Logits of the group's rows and the group's
 * best one in best[2*g] (value bits) and best[2*g + 1] (index). */
/* vals: the first group (a device may run only groups [v0, v0 + grid) of the whole classifier; its
 * classifier buffer then holds the rows from group v0's first on, its logits and best all rows). */
void llama_classify(void *const *b, const int32_t *v, const hcq_launch_t *l0) {
  hcq_launch_t shifted = *l0, *l = &shifted;
  shifted.gid[0] += (uint32_t)v[0];
  size_t held_from = (size_t)v[0] * (size_t)rows_per_group(l0, DIM);
  float *logits = b[0];
  int32_t *best = b[1];
  const float *x = b[2], *rms = b[3], *w = b[4];
  float xn[DIM];
  rmsnorm(xn, x, rms);
  int first, end = group_rows(l, DIM, VOCAB, &first), arg = first;
  float top = -INFINITY;
  for (int r = first; r < end; r++) {
    float z = dot(w + ((size_t)r - held_from) * DIM, xn, DIM);
    logits[r] = z;
    if (z > top) top = z, arg = r;
  }
  __builtin_memcpy(&best[2 * l->gid[0]], &top, 4);
  best[2 * l->gid[0] + 1] = arg;
}

/* bufs: tokens, best; vals: pos, groups. tokens[pos + 1] = the index of the largest logit. */
void llama_argmax(void *const *b, const int32_t *v, const hcq_launch_t *l) {
  (void)l;
  int32_t *tokens = b[0];
  const int32_t *best = b[1];
  float top = -INFINITY;
  int32_t arg = 0;
  for (int g = 0; g < v[1]; g++) {
    float z;
    __builtin_memcpy(&z, &best[2 * g], 4);
    if (z > top) top = z, arg = best[2 * g + 1];
  }
  tokens[v[0] + 1] = arg;
}
