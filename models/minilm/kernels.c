/* The MiniLM (BERT) encoder as hcq CPU kernels (the CPU ABI of hcq/program.h: called once per
 * work-group).
 *
 * The encoder compiles this file after the hcq prelude and #defines fixing the model's shape
 * (HIDDEN, HEADS, HEAD_DIM, INTER, VOCAB, MAXLEN: max_seq_len rounded up to 16, LN_EPS) and the
 * tiles (RB rows, CB columns per work-group of a matrix product; EMB_ROWS, QB). vals[0] is always
 * n, the token count: grids depend on it and every kernel stops at row n, so one captured query
 * replays any length.
 *
 * Linear layers are row blocks times transposed weights: out[t][j] = b[j] + sum_k in[t][k] wt[k][j]
 * with wt [K][N] row-major (transposed on upload), so a tile of 4 rows x 64 columns is 16 vector
 * accumulators updated by one broadcast of in[t][k] and four 16-float loads of wt's row k. A
 * work-group's CB columns of wt (K x 64 floats: 96 KB for K = 384) stay in the core's L2 while its
 * RB rows go through them. Every kernel is compiled three times, for AVX-512, AVX2+FMA and the
 * baseline, and the best the CPU has runs, whatever -march HCQ_CFLAGS gives. The clones are tuned
 * generically: -march=native's znver4 tuning folds the weight loads into the multiply-adds (four
 * loads where one would do), which halves the tile's speed.
 *
 * Work-items: the device shares a launch between its threads when it has at least
 * HCQ_CPU_MIN_PARALLEL work-items; the encoder sets each launch's group size to its group's
 * multiply-adds / 64, so that threshold is about a million multiply-adds. Every group computes its
 * rows in a fixed order, so eager queries and replays give identical bits.
 */
#include <math.h>

/* hcq compiles CPU kernels with -ffp-contract=off by default (HCQ_CFLAGS): these kernels want
 * a * b + c fused, twice the multiply-add rate and one rounding instead of two. */
#pragma GCC optimize("fp-contract=fast")

typedef float v16 __attribute__((vector_size(64)));
/* The same vector at any float's address: loads and stores of 16 floats (GCC gives vector types
 * the alias set of their elements). Macros, not functions: a 64-byte vector passed by value would
 * raise GCC's ABI note for targets without AVX-512. */
typedef float v16u __attribute__((vector_size(64), aligned(4)));
#define ld(p) (*(const v16u *)(const void *)(p))
#define st(p, v) (*(v16u *)(void *)(p) = (v))

#define AI static inline __attribute__((always_inline))

/* out[r][0..64) = bias + a_r . wt[.][0..64) for 4 rows a0..a3 (rows past the real ones repeat a0;
 * only nout rows are stored). */
AI void tile4(float *restrict o, int ldo, int nout, const float *restrict a0,
              const float *restrict a1, const float *restrict a2, const float *restrict a3,
              const float *restrict wt, int ldw, int K, const float *restrict bias) {
  v16 c00 = ld(bias), c01 = ld(bias + 16), c02 = ld(bias + 32), c03 = ld(bias + 48);
  v16 c10 = c00, c11 = c01, c12 = c02, c13 = c03, c20 = c00, c21 = c01, c22 = c02, c23 = c03;
  v16 c30 = c00, c31 = c01, c32 = c02, c33 = c03;
  for (int k = 0; k < K; k++) {
    const float *w = wt + (size_t)k * ldw;
    v16 w0 = ld(w), w1 = ld(w + 16), w2 = ld(w + 32), w3 = ld(w + 48);
    float s0 = a0[k], s1 = a1[k], s2 = a2[k], s3 = a3[k];
    c00 += s0 * w0, c01 += s0 * w1, c02 += s0 * w2, c03 += s0 * w3;
    c10 += s1 * w0, c11 += s1 * w1, c12 += s1 * w2, c13 += s1 * w3;
    c20 += s2 * w0, c21 += s2 * w1, c22 += s2 * w2, c23 += s2 * w3;
    c30 += s3 * w0, c31 += s3 * w1, c32 += s3 * w2, c33 += s3 * w3;
  }
  st(o, c00), st(o + 16, c01), st(o + 32, c02), st(o + 48, c03);
  if (nout > 1)
    st(o + ldo, c10), st(o + ldo + 16, c11), st(o + ldo + 32, c12), st(o + ldo + 48, c13);
  if (nout > 2)
    st(o + 2 * ldo, c20), st(o + 2 * ldo + 16, c21), st(o + 2 * ldo + 32, c22),
        st(o + 2 * ldo + 48, c23);
  if (nout > 3)
    st(o + 3 * ldo, c30), st(o + 3 * ldo + 16, c31), st(o + 3 * ldo + 32, c32),
        st(o + 3 * ldo + 48, c33);
}

/* The same for one row: a query of one token, or the last row of an odd block. */
AI void tile1(float *restrict o, const float *restrict a0, const float *restrict wt, int ldw, int K,
              const float *restrict bias) {
  v16 c00 = ld(bias), c01 = ld(bias + 16), c02 = ld(bias + 32), c03 = ld(bias + 48);
  for (int k = 0; k < K; k++) {
    const float *w = wt + (size_t)k * ldw;
    float s0 = a0[k];
    c00 += s0 * ld(w), c01 += s0 * ld(w + 16), c02 += s0 * ld(w + 32), c03 += s0 * ld(w + 48);
  }
  st(o, c00), st(o + 16, c01), st(o + 32, c02), st(o + 48, c03);
}

/* rows rows of out (ldo floats a row) from rows of in (K floats a row), columns [c0, c0 + cols) in
 * tiles of 64: out = bias + in . wt. */
AI void linear_block(float *out, int ldo, const float *in, int rows, const float *wt, int ldw,
                     int K, const float *bias, int c0, int cols) {
  for (int c = c0; c < c0 + cols; c += 64)
    for (int t = 0; t < rows; t += 4) {
      int r = rows - t < 4 ? rows - t : 4;
      const float *a0 = in + (size_t)t * K;
      if (r == 1) {
        tile1(out + (size_t)t * ldo + c, a0, wt + c, ldw, K, bias + c);
        continue;
      }
      const float *a2 = r > 2 ? a0 + 2 * K : a0, *a3 = r > 3 ? a0 + 3 * K : a0;
      tile4(out + (size_t)t * ldo + c, ldo, r, a0, a0 + K, a2, a3, wt + c, ldw, K, bias + c);
    }
}

/* The sum of 16 floats, in a fixed order. */
#define hsum(v)   \
  ({              \
    float t_[16]; \
    st(t_, (v));  \
    hsum16(t_);   \
  })
AI float hsum16(const float *t) {
  float s[8];
  for (int i = 0; i < 8; i++) s[i] = t[i] + t[i + 8];
  return ((s[0] + s[4]) + (s[1] + s[5])) + ((s[2] + s[6]) + (s[3] + s[7]));
}

/* LayerNorm of HIDDEN floats in place: (x - mean) / sqrt(var + eps) * w + b, two passes. */
AI void layernorm(float *x, const float *w, const float *b) {
  v16 s = {0};
  for (int j = 0; j < HIDDEN; j += 16) s += ld(x + j);
  float mean = hsum(s) / HIDDEN;
  v16 q = {0};
  for (int j = 0; j < HIDDEN; j += 16) {
    v16 d = ld(x + j) - mean;
    q += d * d;
  }
  float inv = 1.0f / sqrtf(hsum(q) / HIDDEN + LN_EPS);
  for (int j = 0; j < HIDDEN; j += 16) st(x + j, (ld(x + j) - mean) * inv * ld(w + j) + ld(b + j));
}

/* exp(x) for x <= 0 in plain arithmetic that vectorises (expf does not): x = k ln2 + r, e^r by its
 * Taylor series to r^7, 2^k put in the exponent bits. Relative error below 3e-7 on [-87, 0]; below
 * -87 the result is e^-87, nothing next to the 1 a softmax or an erf adds it to. */
AI float exp_neg(float x) {
  x = x < -87.0f ? -87.0f : x;
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

/* BERT's exact GELU, x (1 + erf(x / sqrt 2)) / 2, with erf from Abramowitz and Stegun 7.1.26
 * (absolute error below 1.5e-7): erff itself does not vectorise. */
AI float gelu(float x) {
  float z = x * 0.70710678f, az = z < 0 ? -z : z;
  float t = 1.0f / (1.0f + 0.3275911f * az);
  float poly =
      t * (0.254829592f +
           t * (-0.284496736f + t * (1.421413741f + t * (-1.453152027f + t * 1.061405429f))));
  float e = 1.0f - poly * exp_neg(-az * az);
  return 0.5f * x * (1.0f + (z < 0 ? -e : e));
}

/* Each kernel's body is compiled three times, for AVX-512, AVX2 + FMA and the baseline x86-64 the
 * default flags target, and the entry runs the best the CPU has. */
static int simd_level(void) {
  static int level = -1;
  int l = __atomic_load_n(&level, __ATOMIC_RELAXED);
  if (l < 0) {
#if defined(__x86_64__)
    l = __builtin_cpu_supports("avx512f")
            ? 2
            : __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
#else
    l = 0;
#endif
    __atomic_store_n(&level, l, __ATOMIC_RELAXED);
  }
  return l;
}

#define KARGS void *const *b, const int32_t *v, const hcq_launch_t *l
#if defined(__x86_64__)
#define DISPATCH(name)                                                                \
  __attribute__((target("avx512f,fma,tune=generic"))) static void name##_512(KARGS) { \
    name##_body(b, v, l);                                                             \
  }                                                                                   \
  __attribute__((target("avx2,fma,tune=generic"))) static void name##_256(KARGS) {    \
    name##_body(b, v, l);                                                             \
  }                                                                                   \
  static void name##_base(KARGS) { name##_body(b, v, l); }                            \
  void name(KARGS) {                                                                  \
    int lv = simd_level();                                                            \
    (lv == 2 ? name##_512 : lv == 1 ? name##_256 : name##_base)(b, v, l);             \
  }
#else
#define DISPATCH(name) \
  void name(KARGS) { name##_body(b, v, l); }
#endif

/* bufs: x, ids, word, position, token type, ln w, ln b; vals: n. Grid: ceil(n / EMB_ROWS).
 * x[t] = LayerNorm(word[ids[t]] + position[t] + type[0]); an id outside the vocab reads row 0
 * (the encoder checks ids before they reach the device). */
AI void mlm_embed_body(KARGS) {
  float *x = b[0];
  const int32_t *ids = b[1];
  const float *word = b[2], *pos = b[3], *type = b[4], *lw = b[5], *lb = b[6];
  int n = v[0], t0 = (int)l->gid[0] * EMB_ROWS, t1 = t0 + EMB_ROWS < n ? t0 + EMB_ROWS : n;
  for (int t = t0; t < t1; t++) {
    int32_t id = ids[t];
    if (id < 0 || id >= VOCAB) id = 0;
    float *row = x + (size_t)t * HIDDEN;
    const float *wr = word + (size_t)id * HIDDEN, *pr = pos + (size_t)t * HIDDEN;
    for (int j = 0; j < HIDDEN; j += 16) st(row + j, ld(wr + j) + ld(pr + j) + ld(type + j));
    layernorm(row, lw, lb);
  }
}
DISPATCH(mlm_embed)

/* bufs: qkv (n x 3 HIDDEN), kt (HIDDEN x MAXLEN), x, wt (HIDDEN x 3 HIDDEN), bias; vals: n.
 * Grid: 3 HIDDEN / CB x ceil(n / RB). q, k and v of every token, and k once more transposed
 * (kt[j][t]): attention's scores then run along t, contiguous. */
AI void mlm_qkv_body(KARGS) {
  float *out = b[0], *kt = b[1];
  const float *in = b[2], *wt = b[3], *bias = b[4];
  int n = v[0], c0 = (int)l->gid[0] * CB, t0 = (int)l->gid[1] * RB, t1 = t0 + RB < n ? t0 + RB : n;
  linear_block(out + (size_t)t0 * 3 * HIDDEN, 3 * HIDDEN, in + (size_t)t0 * HIDDEN, t1 - t0, wt,
               3 * HIDDEN, HIDDEN, bias, c0, CB);
  if (c0 >= HIDDEN && c0 < 2 * HIDDEN)
    for (int j = 0; j < CB; j++)
      for (int t = t0; t < t1; t++)
        kt[(size_t)(c0 - HIDDEN + j) * MAXLEN + t] = out[(size_t)t * 3 * HIDDEN + c0 + j];
}
DISPATCH(mlm_qkv)

/* bufs: h (n x INTER), x, wt (HIDDEN x INTER), bias; vals: n. Grid: INTER / CB x ceil(n / RB).
 * h = GELU(bias + x . wt). */
AI void mlm_ffn_up_body(KARGS) {
  float *out = b[0];
  const float *in = b[1], *wt = b[2], *bias = b[3];
  int n = v[0], c0 = (int)l->gid[0] * CB, t0 = (int)l->gid[1] * RB, t1 = t0 + RB < n ? t0 + RB : n;
  linear_block(out + (size_t)t0 * INTER, INTER, in + (size_t)t0 * HIDDEN, t1 - t0, wt, INTER,
               HIDDEN, bias, c0, CB);
  for (int t = t0; t < t1; t++) {
    float *r = out + (size_t)t * INTER + c0;
    for (int j = 0; j < CB; j++) r[j] = gelu(r[j]);
  }
}
DISPATCH(mlm_ffn_up)

/* bufs: y (n x HIDDEN), in (n x K), wt (K x HIDDEN), bias; vals: n. Grid: HIDDEN / CB x ceil(n /
 * RB). y = bias + in . wt: the attention's output projection (K = HIDDEN) and the FFN's down
 * projection (K = INTER), split by columns like the other products so that a short query's
 * weights (the down projection's are a third of a layer's) are read by every thread, not by the
 * one or two groups whole rows would make. mlm_res_ln adds the residual and normalises. */
#define LINEAR(name, K)                                                                            \
  AI void name##_body(KARGS) {                                                                     \
    float *y = b[0];                                                                               \
    const float *in = b[1], *wt = b[2], *bias = b[3];                                              \
    int n = v[0], c0 = (int)l->gid[0] * CB, t0 = (int)l->gid[1] * RB,                              \
        t1 = t0 + RB < n ? t0 + RB : n;                                                            \
    linear_block(y + (size_t)t0 * HIDDEN, HIDDEN, in + (size_t)t0 * (K), t1 - t0, wt, HIDDEN, (K), \
                 bias, c0, CB);                                                                    \
  }                                                                                                \
  DISPATCH(name)
LINEAR(mlm_proj, HIDDEN)
LINEAR(mlm_down, INTER)

/* bufs: x, y, ln w, ln b; vals: n. Grid: ceil(n / EMB_ROWS). x[t] = LayerNorm(x[t] + y[t]). */
AI void mlm_res_ln_body(KARGS) {
  float *x = b[0];
  const float *y = b[1], *lw = b[2], *lb = b[3];
  int n = v[0], t0 = (int)l->gid[0] * EMB_ROWS, t1 = t0 + EMB_ROWS < n ? t0 + EMB_ROWS : n;
  for (int t = t0; t < t1; t++) {
    float *row = x + (size_t)t * HIDDEN;
    const float *yr = y + (size_t)t * HIDDEN;
    for (int j = 0; j < HIDDEN; j += 16) st(row + j, ld(row + j) + ld(yr + j));
    layernorm(row, lw, lb);
  }
}
DISPATCH(mlm_res_ln)

/* bufs: ctx (n x HIDDEN), qkv, kt; vals: n. Grid: HEADS x ceil(n / QB).
 * ctx[t][head] = softmax_s(q_t . k_s / sqrt(HEAD_DIM)) . v_s over the n tokens s: the padding mask
 * is the bound n, keys past it never count. Queries go four at a time (four independent sums per
 * loaded key vector); scores run 16 keys a vector along kt's rows, the slots past n (up to a
 * multiple of 16: kt is MAXLEN wide) computed and then dropped. A block's last queries repeat its
 * last real one and are not stored. */
AI void mlm_attn_body(KARGS) {
  float *ctx = b[0];
  const float *qkv = b[1], *kt = b[2];
  int n = v[0], h = (int)l->gid[0], t0 = (int)l->gid[1] * QB, t1 = t0 + QB < n ? t0 + QB : n;
  int n16 = (n + 15) / 16;
  const float scale = 1.0f / sqrtf((float)HEAD_DIM);
  const float *kth = kt + (size_t)h * HEAD_DIM * MAXLEN, *V = qkv + 2 * HIDDEN + h * HEAD_DIM;
  float p[4][MAXLEN];
  for (int t = t0; t < t1; t += 4) {
    const float *q[4];
    for (int r = 0; r < 4; r++)
      q[r] = qkv + (size_t)(t + r < t1 ? t + r : t1 - 1) * 3 * HIDDEN + h * HEAD_DIM;
    for (int c = 0; c < n16; c++) {
      v16 d0 = {0}, d1 = {0}, d2 = {0}, d3 = {0}, e0 = {0}, e1 = {0}, e2 = {0}, e3 = {0};
      for (int i = 0; i < HEAD_DIM; i += 2) {
        v16 k0 = ld(kth + (size_t)i * MAXLEN + 16 * c),
            k1 = ld(kth + (size_t)(i + 1) * MAXLEN + 16 * c);
        d0 += q[0][i] * k0, d1 += q[1][i] * k0, d2 += q[2][i] * k0, d3 += q[3][i] * k0;
        e0 += q[0][i + 1] * k1, e1 += q[1][i + 1] * k1, e2 += q[2][i + 1] * k1,
            e3 += q[3][i + 1] * k1;
      }
      st(p[0] + 16 * c, (d0 + e0) * scale), st(p[1] + 16 * c, (d1 + e1) * scale);
      st(p[2] + 16 * c, (d2 + e2) * scale), st(p[3] + 16 * c, (d3 + e3) * scale);
    }
    float inv[4];
    for (int r = 0; r < 4; r++) {
      float m = -INFINITY, *pr = p[r];
      for (int s = 0; s < n; s++) m = pr[s] > m ? pr[s] : m;
      for (int s = n; s < 16 * n16; s++) pr[s] = -INFINITY;
      v16 sumv = {0};
      for (int c = 0; c < n16; c++) {
        float e[16];
        for (int j = 0; j < 16; j++) e[j] = exp_neg(pr[16 * c + j] - m);
        st(pr + 16 * c, ld(e));
        sumv += ld(e);
      }
      inv[r] = 1.0f / hsum(sumv);
    }
    v16 a00 = {0}, a01 = {0}, a10 = {0}, a11 = {0}, a20 = {0}, a21 = {0}, a30 = {0}, a31 = {0};
    for (int s = 0; s < n; s++) {
      const float *vs = V + (size_t)s * 3 * HIDDEN;
      v16 v0 = ld(vs), v1 = ld(vs + 16);
      a00 += p[0][s] * v0, a01 += p[0][s] * v1, a10 += p[1][s] * v0, a11 += p[1][s] * v1;
      a20 += p[2][s] * v0, a21 += p[2][s] * v1, a30 += p[3][s] * v0, a31 += p[3][s] * v1;
    }
    v16 acc[4][2] = {{a00, a01}, {a10, a11}, {a20, a21}, {a30, a31}};
    for (int r = 0; r < 4 && t + r < t1; r++) {
      float *o = ctx + (size_t)(t + r) * HIDDEN + h * HEAD_DIM;
      st(o, acc[r][0] * inv[r]), st(o + 16, acc[r][1] * inv[r]);
    }
  }
}
DISPATCH(mlm_attn)

/* bufs: out (HIDDEN), x; vals: n. One group: the mean of x's n rows, L2-normalised
 * (sentence-transformers' Normalize: divided by max(norm, 1e-12)). */
AI void mlm_pool_body(KARGS) {
  (void)l;
  float *out = b[0];
  const float *x = b[1];
  int n = v[0];
  float acc[HIDDEN];
  for (int j = 0; j < HIDDEN; j += 16) st(acc + j, (v16){0});
  for (int t = 0; t < n; t++)
    for (int j = 0; j < HIDDEN; j += 16) st(acc + j, ld(acc + j) + ld(x + (size_t)t * HIDDEN + j));
  v16 ss = {0};
  for (int j = 0; j < HIDDEN; j += 16) {
    v16 a = ld(acc + j) / (float)n;
    st(acc + j, a);
    ss += a * a;
  }
  float norm = sqrtf(hsum(ss));
  float inv = 1.0f / (norm > 1e-12f ? norm : 1e-12f);
  for (int j = 0; j < HIDDEN; j += 16) st(out + j, ld(acc + j) * inv);
}
DISPATCH(mlm_pool)
