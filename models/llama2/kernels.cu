// The decoder's kernels in CUDA C (the CUDA ABI of docs/cuda.md): the same entries, buffers and
// values as kernels.c, which documents what each computes, with one thread per output row, or pair
// of rows for the rotary kernel, in blocks of GROUP; attention one thread per element of a head
// (the split kernels.glsl had before it was rewritten for lavapipe). The decoder compiles it after
// the block of shape #defines and GROUP. tests/fake_cuda/fake_cuda.c has host twins of these
// kernels for the stand-in driver: change both.
#define LLAMA_NEG_INF __int_as_float(0xff800000)

// Names the shape in the module: the stand-in driver's twins read it there (a GPU never runs it).
#define LLAMA_SHAPE_NAME2(a, b, c, d, e, f, g, h, i, j, k) \
  llama2_shape_##a##_##b##_##c##_##d##_##e##_##f##_##g##_##h##_##i##_##j##_##k
#define LLAMA_SHAPE_NAME(...) LLAMA_SHAPE_NAME2(__VA_ARGS__)
extern "C" __global__ void LLAMA_SHAPE_NAME(DIM, HIDDEN, KV_DIM, N_HEADS, KV_MUL, HEAD_SIZE, VOCAB,
                                            SEQ_LEN, ATT_CHUNK, MAX_CHUNKS, GROUP)() {}

// The RMS-normalised input into shared xn, once per block; every thread reaches the barrier.
__device__ void load_norm(float *xn, const float *x, const float *w) {
  float ss = 0.0f;
  for (int j = 0; j < DIM; j++) ss += x[j] * x[j];
  float inv = 1.0f / sqrtf(ss / (float)DIM + 1e-5f);
  for (int j = threadIdx.x; j < DIM; j += blockDim.x) xn[j] = w[j] * (inv * x[j]);
  __syncthreads();
}
__device__ float dot_n(const float *w, const float *v, int n) {
  float s = 0.0f;
  for (int j = 0; j < n; j++) s += w[j] * v[j];
  return s;
}
__device__ void rope(float *a, float *b, int i, const float *rot) {
  float c = rot[i % HEAD_SIZE], s = rot[i % HEAD_SIZE + 1];
  float a0 = *a, b0 = *b;
  *a = a0 * c - b0 * s;
  *b = a0 * s + b0 * c;
}

extern "C" __global__ void llama_embed(float *x, const int *tokens, const float *emb, int pos) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= DIM) return;
  int tok = tokens[pos];
  if (tok < 0 || tok >= VOCAB) tok = 0;
  x[i] = emb[(size_t)tok * DIM + i];
}

extern "C" __global__ void llama_qkv(float *q, float *kc, float *vc, const float *x,
                                     const float *rms, const float *wq, const float *wk,
                                     const float *wv, const float *rope_table, int pos) {
  __shared__ float xn[DIM];
  load_norm(xn, x, rms);
  int r = 2 * (blockIdx.x * blockDim.x + threadIdx.x);
  if (r >= DIM + 2 * KV_DIM) return;
  const float *rot = rope_table + (size_t)pos * HEAD_SIZE;
  float *krow = kc + (size_t)pos * KV_DIM, *vrow = vc + (size_t)pos * KV_DIM;
  if (r < DIM) {
    float a = dot_n(wq + (size_t)r * DIM, xn, DIM), c = dot_n(wq + (size_t)(r + 1) * DIM, xn, DIM);
    rope(&a, &c, r, rot);
    q[r] = a, q[r + 1] = c;
  } else if (r < DIM + KV_DIM) {
    int i = r - DIM;
    float a = dot_n(wk + (size_t)i * DIM, xn, DIM), c = dot_n(wk + (size_t)(i + 1) * DIM, xn, DIM);
    rope(&a, &c, i, rot);
    krow[i] = a, krow[i + 1] = c;
  } else {
    int i = r - DIM - KV_DIM;
    vrow[i] = dot_n(wv + (size_t)i * DIM, xn, DIM);
    vrow[i + 1] = dot_n(wv + (size_t)(i + 1) * DIM, xn, DIM);
  }
}

extern "C" __global__ void llama_attn_part(float *part, const float *q, const float *kc,
                                           const float *vc, int pos) {
  int h = blockIdx.x, c = blockIdx.y, i = threadIdx.x;
  int t0 = c * ATT_CHUNK, t1 = t0 + ATT_CHUNK < pos + 1 ? t0 + ATT_CHUNK : pos + 1;
  const float *qh = q + h * HEAD_SIZE;
  int kv = (h / KV_MUL) * HEAD_SIZE;
  float score[ATT_CHUNK], m = LLAMA_NEG_INF, scale = 1.0f / sqrtf((float)HEAD_SIZE);
  for (int t = t0; t < t1; t++) {
    float s = dot_n(qh, kc + (size_t)t * KV_DIM + kv, HEAD_SIZE) * scale;
    score[t - t0] = s;
    if (s > m) m = s;
  }
  float sum = 0.0f, o = 0.0f;
  for (int t = t0; t < t1; t++) {
    float e = expf(score[t - t0] - m);
    sum += e;
    o += e * vc[(size_t)t * KV_DIM + kv + i];
  }
  float *dst = part + ((size_t)h * MAX_CHUNKS + c) * (HEAD_SIZE + 2);
  if (i == 0) dst[0] = m, dst[1] = sum;
  dst[2 + i] = o;
}

extern "C" __global__ void llama_attn_combine(float *out, const float *part, int pos) {
  int h = blockIdx.x, i = threadIdx.x, chunks = pos / ATT_CHUNK + 1;
  const float *p = part + (size_t)h * MAX_CHUNKS * (HEAD_SIZE + 2);
  float m = LLAMA_NEG_INF;
  for (int c = 0; c < chunks; c++)
    if (p[c * (HEAD_SIZE + 2)] > m) m = p[c * (HEAD_SIZE + 2)];
  float total = 0.0f, acc = 0.0f;
  for (int c = 0; c < chunks; c++) {
    float w = expf(p[c * (HEAD_SIZE + 2)] - m);
    total += w * p[c * (HEAD_SIZE + 2) + 1];
    acc += w * p[c * (HEAD_SIZE + 2) + 2 + i];
  }
  out[h * HEAD_SIZE + i] = acc / total;
}

extern "C" __global__ void llama_wo(float *x, const float *in, const float *w) {
  int r = blockIdx.x * blockDim.x + threadIdx.x;
  if (r < DIM) x[r] += dot_n(w + (size_t)r * DIM, in, DIM);
}

extern "C" __global__ void llama_ffn_down(float *x, const float *in, const float *w) {
  int r = blockIdx.x * blockDim.x + threadIdx.x;
  if (r < DIM) x[r] += dot_n(w + (size_t)r * HIDDEN, in, HIDDEN);
}

extern "C" __global__ void llama_ffn_up(float *hb, const float *x, const float *rms,
                                        const float *w1, const float *w3) {
  __shared__ float xn[DIM];
  load_norm(xn, x, rms);
  int r = blockIdx.x * blockDim.x + threadIdx.x;
  if (r >= HIDDEN) return;
  float a = dot_n(w1 + (size_t)r * DIM, xn, DIM), c = dot_n(w3 + (size_t)r * DIM, xn, DIM);
  hb[r] = a * (1.0f / (1.0f + expf(-a))) * c;
}

// first: the first group (a device may run only some groups of the whole classifier)
extern "C" __global__ void llama_classify(float *logits, int *best, const float *x,
                                          const float *rms, const float *w, int first) {
  __shared__ float xn[DIM];
  __shared__ float top_v[GROUP];
  __shared__ int top_i[GROUP];
  load_norm(xn, x, rms);
  int g = blockIdx.x + first, r = g * blockDim.x + threadIdx.x, l = threadIdx.x;
  float z = LLAMA_NEG_INF;
  if (r < VOCAB) {
    z = dot_n(w + (size_t)r * DIM, xn, DIM);
    logits[r] = z;
  }
  top_v[l] = z;
  top_i[l] = r;
  __syncthreads();
  if (l != 0) return;
  float top = LLAMA_NEG_INF;
  int arg = g * blockDim.x;
  for (int k = 0; k < (int)blockDim.x; k++)
    if (top_v[k] > top) top = top_v[k], arg = top_i[k];
  best[2 * g] = __float_as_int(top);
  best[2 * g + 1] = arg;
}

extern "C" __global__ void llama_argmax(int *tokens, const int *best, int pos, int groups) {
  float top = LLAMA_NEG_INF;
  int arg = 0;
  for (int g = 0; g < groups; g++) {
    float z = __int_as_float(best[2 * g]);
    if (z > top) top = z, arg = best[2 * g + 1];
  }
  tokens[pos + 1] = arg;
}
