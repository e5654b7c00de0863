// The MiniLM encoder's kernels in CUDA C (the CUDA ABI of docs/cuda.md): the same entries, buffers
// and values (n, the token count, last) as kernels.c, which documents what each computes, with the
// work split of kernels.glsl: a thread per output element of the matrix products (COLS threads a
// block along a row), a block of GROUP threads per token row for the row kernels, a block of
// HEAD_DIM threads per (head, query) for attention. The encoder compiles it after the block of
// #defines kernels.glsl gets. tests/fake_cuda/fake_cuda_minilm.c has host twins of these kernels
// for the stand-in driver: change both.

// Names the shape in the module: the stand-in driver's twins read it there (a GPU never runs it).
// LN_EPS goes in as its float's bits (LN_EPS_BITS).
#define MLM_SHAPE_NAME2(a, b, c, d, e, f, g, h, i) \
  minilm_shape_##a##_##b##_##c##_##d##_##e##_##f##_##g##_##h##_##i
#define MLM_SHAPE_NAME(...) MLM_SHAPE_NAME2(__VA_ARGS__)
extern "C" __global__ void MLM_SHAPE_NAME(HIDDEN, HEADS, HEAD_DIM, INTER, VOCAB, MAXLEN, GROUP,
                                          COLS, LN_EPS_BITS)() {}

#define MLM_NEG_INF __int_as_float(0xff800000)

// BERT's exact GELU with erf from Abramowitz and Stegun 7.1.26, as kernels.c computes it.
__device__ float gelu(float x) {
  float z = x * 0.70710678f, az = fabsf(z);
  float t = 1.0f / (1.0f + 0.3275911f * az);
  float poly =
      t * (0.254829592f +
           t * (-0.284496736f + t * (1.421413741f + t * (-1.453152027f + t * 1.061405429f))));
  float e = 1.0f - poly * expf(-az * az);
  return 0.5f * x * (1.0f + (z < 0.0f ? -e : e));
}

// The sum over the block of GROUP threads, in a fixed tree order; every thread reaches the
// barriers.
__device__ float group_sum(float *red, float v) {
  int l = threadIdx.x;
  red[l] = v;
  __syncthreads();
  for (int s = GROUP / 2; s > 0; s >>= 1) {
    if (l < s) red[l] += red[l + s];
    __syncthreads();
  }
  float r = red[0];
  __syncthreads();
  return r;
}

// LayerNorm of the shared row into x at row t.
__device__ void layernorm_store(float *x, int t, const float *row, float *red, const float *w,
                                const float *b) {
  float s = 0.0f;
  for (int j = threadIdx.x; j < HIDDEN; j += GROUP) s += row[j];
  float mean = group_sum(red, s) / (float)HIDDEN;
  float q = 0.0f;
  for (int j = threadIdx.x; j < HIDDEN; j += GROUP) q += (row[j] - mean) * (row[j] - mean);
  float inv = 1.0f / sqrtf(group_sum(red, q) / (float)HIDDEN + LN_EPS);
  for (int j = threadIdx.x; j < HIDDEN; j += GROUP)
    x[(size_t)t * HIDDEN + j] = (row[j] - mean) * inv * w[j] + b[j];
}

extern "C" __global__ void mlm_embed(float *x, const int *ids, const float *word, const float *pos,
                                     const float *type, const float *lw, const float *lb, int n) {
  __shared__ float row[HIDDEN], red[GROUP];
  (void)n;
  int t = blockIdx.x;
  int id = ids[t];
  if (id < 0 || id >= VOCAB) id = 0;
  for (int j = threadIdx.x; j < HIDDEN; j += GROUP)
    row[j] = word[(size_t)id * HIDDEN + j] + pos[(size_t)t * HIDDEN + j] + type[j];
  __syncthreads();
  layernorm_store(x, t, row, red, lw, lb);
}

__device__ float linear(const float *in, const float *wt, const float *bias, int t, int j, int K,
                        int N) {
  float s = bias[j];
  for (int k = 0; k < K; k++) s += in[(size_t)t * K + k] * wt[(size_t)k * N + j];
  return s;
}

extern "C" __global__ void mlm_qkv(float *out, float *kt, const float *in, const float *wt,
                                   const float *bias, int n) {
  (void)kt, (void)n;
  int j = blockIdx.x * blockDim.x + threadIdx.x, t = blockIdx.y;
  out[(size_t)t * 3 * HIDDEN + j] = linear(in, wt, bias, t, j, HIDDEN, 3 * HIDDEN);
}

extern "C" __global__ void mlm_ffn_up(float *out, const float *in, const float *wt,
                                      const float *bias, int n) {
  (void)n;
  int j = blockIdx.x * blockDim.x + threadIdx.x, t = blockIdx.y;
  out[(size_t)t * INTER + j] = gelu(linear(in, wt, bias, t, j, HIDDEN, INTER));
}

__device__ void linear_ln(float *x, const float *in, const float *wt, const float *bias,
                          const float *lw, const float *lb, int K) {
  __shared__ float row[HIDDEN], red[GROUP];
  int t = blockIdx.x;
  for (int j = threadIdx.x; j < HIDDEN; j += GROUP)
    row[j] = x[(size_t)t * HIDDEN + j] + linear(in, wt, bias, t, j, K, HIDDEN);
  __syncthreads();
  layernorm_store(x, t, row, red, lw, lb);
}
extern "C" __global__ void mlm_proj_ln(float *x, const float *in, const float *wt,
                                       const float *bias, const float *lw, const float *lb, int n) {
  (void)n;
  linear_ln(x, in, wt, bias, lw, lb, HIDDEN);
}
extern "C" __global__ void mlm_down_ln(float *x, const float *in, const float *wt,
                                       const float *bias, const float *lw, const float *lb, int n) {
  (void)n;
  linear_ln(x, in, wt, bias, lw, lb, INTER);
}

extern "C" __global__ void mlm_attn(float *ctx, const float *qkv, const float *kt, int n) {
  __shared__ float p[MAXLEN], red[HEAD_DIM];
  (void)kt;
  int h = blockIdx.x, t = blockIdx.y, i = threadIdx.x, stride = 3 * HIDDEN;
  const float *q = qkv + (size_t)t * stride + h * HEAD_DIM;
  float scale = 1.0f / sqrtf((float)HEAD_DIM), m = MLM_NEG_INF;
  for (int s = i; s < n; s += HEAD_DIM) {
    const float *k = qkv + (size_t)s * stride + HIDDEN + h * HEAD_DIM;
    float d = 0.0f;
    for (int c = 0; c < HEAD_DIM; c++) d += q[c] * k[c];
    p[s] = d * scale;
    m = fmaxf(m, p[s]);
  }
  red[i] = m;
  __syncthreads();
  m = MLM_NEG_INF;
  for (int c = 0; c < HEAD_DIM; c++) m = fmaxf(m, red[c]);
  __syncthreads();
  float sum = 0.0f;
  for (int s = i; s < n; s += HEAD_DIM) {
    p[s] = expf(p[s] - m);
    sum += p[s];
  }
  red[i] = sum;
  __syncthreads();
  sum = 0.0f;
  for (int c = 0; c < HEAD_DIM; c++) sum += red[c];
  float acc = 0.0f;
  for (int s = 0; s < n; s++) acc += p[s] * qkv[(size_t)s * stride + 2 * HIDDEN + h * HEAD_DIM + i];
  ctx[(size_t)t * HIDDEN + h * HEAD_DIM + i] = acc / sum;
}

extern "C" __global__ void mlm_pool(float *out, const float *x, int n) {
  __shared__ float row[HIDDEN], red[GROUP];
  float ss = 0.0f;
  for (int j = threadIdx.x; j < HIDDEN; j += GROUP) {
    float a = 0.0f;
    for (int t = 0; t < n; t++) a += x[(size_t)t * HIDDEN + j];
    row[j] = a / (float)n;
    ss += row[j] * row[j];
  }
  float inv = 1.0f / fmaxf(sqrtf(group_sum(red, ss)), 1e-12f);
  for (int j = threadIdx.x; j < HIDDEN; j += GROUP) out[j] = row[j] * inv;
}
