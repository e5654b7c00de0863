/* The decoder's forward pass as hcq CPU kernels (SPEC 2 ABI: called once per work-group, each
 * group loops over its own lsz threads).
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
 * position: cos and sin of pos * 10000^(-j/HEAD_SIZE) for each even j, computed once on the host. */
static inline void rope(float *a, float *b, int i, const float *rot) {
  float c = rot[i % HEAD_SIZE], s = rot[i % HEAD_SIZE + 1];
  float a0 = *a, b0 = *b;
  *a = a0 * c - b0 * s;
  *b = a0 * s + b0 * c;
}

#define STEPS(n) (((n) + 7) / 8)

/* The group's rows [*first, return value) of a matrix with `rows` rows of n inputs. */
static inline int group_rows(const hcq_launch_t *l, int n, int rows, int *first) {
  int per_group = (int)l->lsz[0] / STEPS(n);
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
 * so a rotary pair never straddles two groups. k and v go to the caches at row pos. */
void llama_qkv(void *const *b, const int32_t *v, const hcq_launch_t *l) {
  float *q = b[0], *kc = b[1], *vc = b[2];
  const float *x = b[3], *rms = b[4], *wq = b[5], *wk = b[6], *wv = b[7];
  int pos = v[0];
  const float *rot = (const float *)b[8] + (size_t)pos * HEAD_SIZE;
  float xn[DIM];
  rmsnorm(xn, x, rms);
  float *krow = kc + (size_t)pos * KV_DIM, *vrow = vc + (size_t)pos * KV_DIM;
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
      krow[i] = a, krow[i + 1] = c;
    } else {
      int i = r - DIM - KV_DIM;
      vrow[i] = dot(wv + (size_t)i * DIM, xn, DIM);
      vrow[i + 1] = dot(wv + (size_t)(i + 1) * DIM, xn, DIM);
    }
  }
}

/* exp(x) within 2 ulp of expf, in plain arithmetic the compiler vectorises over an array (a call
 * to expf it cannot): x = k ln2 + r, |r| <= ln2 / 2, with ln2 in two parts so that r is exact, e^r
 * by its Taylor series to r^7 (error below 2^-24 there), times 2^k put into the exponent bits.
 * x is first clamped to [-87, 88], where 2^k is a normal float: below, e^-87 (2^-125.5) adds
 * nothing next to the 1 of a softmax's max or of silu's 1 + e^-a; above, e^88 is still finite. */
static inline float exp_clamped(float x) {
  x = x < -87.0f ? -87.0f : x > 88.0f ? 88.0f : x;
  const float shifter = 12582912.0f; /* 1.5 * 2^23: adding it rounds to an integer */
  float k = (x * 1.44269504f + shifter) - shifter;
  float r = (x - k * 0.693145752f) - k * 1.42860677e-6f;
  float p = 1.0f / 5040;
  p = p * r + 1.0f / 720;
  p = p * r + 1.0f / 120;
  p = p * r + 1.0f / 24;
  p = p * r + 1.0f / 6;
  p = p * r + 0.5f;
  p = p * r + 1.0f;
  p = p * r + 1.0f;
  int32_t bits = ((int32_t)k + 127) << 23;
  float two_k;
  __builtin_memcpy(&two_k, &bits, 4);
  return p * two_k;
}

/* bufs: partials, q, key cache, value cache; vals: pos. Grid: N_HEADS x (pos / ATT_CHUNK + 1).
 * Group (h, c) scores positions c*ATT_CHUNK .. min(c*ATT_CHUNK + ATT_CHUNK, pos + 1) - 1 and
 * writes {max, sum of exp(score - max), sum of exp(score - max) * value} for its chunk. The
 * exponentials are taken over the whole chunk (a constant trip count: one vector loop), the slots
 * past the last position set to the max and never used. */
void llama_attn_part(void *const *b, const int32_t *v, const hcq_launch_t *l) {
  float *part = b[0];
  const float *q = b[1], *kc = b[2], *vc = b[3];
  int pos = v[0], h = (int)l->gid[0], c = (int)l->gid[1];
  int t0 = c * ATT_CHUNK, t1 = t0 + ATT_CHUNK < pos + 1 ? t0 + ATT_CHUNK : pos + 1, n = t1 - t0;
  const float *qh = q + h * HEAD_SIZE;
  int kv = (h / KV_MUL) * HEAD_SIZE;
  float score[ATT_CHUNK], m = -INFINITY, scale = 1.0f / sqrtf((float)HEAD_SIZE);
  for (int t = 0; t < n; t++) {
    float s = dot(qh, kc + (size_t)(t0 + t) * KV_DIM + kv, HEAD_SIZE) * scale;
    score[t] = s;
    if (s > m) m = s;
  }
  for (int t = n; t < ATT_CHUNK; t++) score[t] = m;
  for (int t = 0; t < ATT_CHUNK; t++) score[t] = exp_clamped(score[t] - m);
  float sum = 0, o[HEAD_SIZE];
  for (int i = 0; i < HEAD_SIZE; i++) o[i] = 0;
  for (int t = 0; t < n; t++) {
    float e = score[t];
    const float *vt = vc + (size_t)(t0 + t) * KV_DIM + kv;
    sum += e;
    for (int i = 0; i < HEAD_SIZE; i++) o[i] += e * vt[i];
  }
  float *dst = part + ((size_t)h * MAX_CHUNKS + c) * (HEAD_SIZE + 2);
  dst[0] = m, dst[1] = sum;
  for (int i = 0; i < HEAD_SIZE; i++) dst[2 + i] = o[i];
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
#define MATVEC_RESIDUAL(name, N)                                                  \
  void name(void *const *b, const int32_t *v, const hcq_launch_t *l) {           \
    (void)v;                                                                      \
    float *x = b[0];                                                              \
    const float *in = b[1], *w = b[2];                                            \
    int r0, end = group_rows(l, (N), DIM, &r0);                                   \
    for (int r = r0; r < end; r++)                                                \
      x[r] += dot(w + (size_t)r * (N), in, (N));                                  \
  }
MATVEC_RESIDUAL(llama_wo, DIM)
MATVEC_RESIDUAL(llama_ffn_down, HIDDEN)

/* bufs: hb, x, rms weights, w1, w3. hb[r] = silu(w1[r] . xn) * (w3[r] . xn), xn = rmsnorm(x).
 * The rows go in blocks of FFN_BLOCK, whose exponentials are one vector loop. */
#define FFN_BLOCK 32
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
    for (int j = 0; j < FFN_BLOCK; j++) e[j] = exp_clamped(-a[j]);
    for (int j = 0; j < n; j++) hb[base + j] = a[j] * (1.0f / (1.0f + e[j])) * c[j];
  }
}

/* bufs: logits, best, x, final rms weights, classifier. Logits of the group's rows and the group's
 * best one in best[2*g] (value bits) and best[2*g + 1] (index). */
/* vals: the first group (a device may run only groups [v0, v0 + grid) of the whole classifier). */
void llama_classify(void *const *b, const int32_t *v, const hcq_launch_t *l0) {
  hcq_launch_t shifted = *l0, *l = &shifted;
  shifted.gid[0] += (uint32_t)v[0];
  float *logits = b[0];
  int32_t *best = b[1];
  const float *x = b[2], *rms = b[3], *w = b[4];
  float xn[DIM];
  rmsnorm(xn, x, rms);
  int first, end = group_rows(l, DIM, VOCAB, &first), arg = first;
  float top = -INFINITY;
  for (int r = first; r < end; r++) {
    float z = dot(w + (size_t)r * DIM, xn, DIM);
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
