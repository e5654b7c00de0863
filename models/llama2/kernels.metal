// The decoder's kernels in MSL (the MSL ABI of docs/metal.md): the same entries, buffers and values
// as kernels.c, which documents what each computes, with the work split of kernels.cu (one thread
// per output row, or pair of rows for the rotary kernel, in threadgroups of GROUP; attention one
// thread per element of a head). Buffers are at [[buffer(i)]], the values (where a kernel has any)
// at
// [[buffer(nbufs)]]. The decoder compiles it after the block of #defines kernels.cu gets.
// tests/fake_metal/fake_metal_llama2.c has host twins of these kernels for the stand-in: change
// both.
#include <metal_stdlib>
using namespace metal;

// The sentinel below every logit and score: Metal compiles with fast math by default, which may
// assume no infinities, so -FLT_MAX rather than -INFINITY (every real value is above it).
#define LLAMA_LOW (-FLT_MAX)

// The RMS-normalised input into threadgroup xn, once per group; every thread reaches the barrier.
static void load_norm(threadgroup float *xn, device const float *x, device const float *w, uint l,
                      uint n) {
  float ss = 0.0f;
  for (int j = 0; j < DIM; j++) ss += x[j] * x[j];
  float inv = 1.0f / sqrt(ss / (float)DIM + 1e-5f);
  for (uint j = l; j < DIM; j += n) xn[j] = w[j] * (inv * x[j]);
  threadgroup_barrier(mem_flags::mem_threadgroup);
}
static float dot_tg(device const float *w, threadgroup const float *v, int n) {
  float s = 0.0f;
  for (int j = 0; j < n; j++) s += w[j] * v[j];
  return s;
}
static float dot_dev(device const float *w, device const float *v, int n) {
  float s = 0.0f;
  for (int j = 0; j < n; j++) s += w[j] * v[j];
  return s;
}
static void rope(thread float &a, thread float &b, int i, device const float *rot) {
  float c = rot[i % HEAD_SIZE], s = rot[i % HEAD_SIZE + 1];
  float a0 = a, b0 = b;
  a = a0 * c - b0 * s;
  b = a0 * s + b0 * c;
}

kernel void llama_embed(device float *x [[buffer(0)]], device const int *tokens [[buffer(1)]],
                        device const float *emb [[buffer(2)]], constant int *v [[buffer(3)]],
                        uint3 tg [[threadgroup_position_in_grid]],
                        uint3 tid [[thread_position_in_threadgroup]],
                        uint3 ntid [[threads_per_threadgroup]]) {
  int i = (int)(tg.x * ntid.x + tid.x);
  if (i >= DIM) return;
  int tok = tokens[v[0]];
  if (tok < 0 || tok >= VOCAB) tok = 0;
  x[i] = emb[(ulong)tok * DIM + i];
}

kernel void llama_qkv(device float *q [[buffer(0)]], device float *kc [[buffer(1)]],
                      device float *vc [[buffer(2)]], device const float *x [[buffer(3)]],
                      device const float *rms [[buffer(4)]], device const float *wq [[buffer(5)]],
                      device const float *wk [[buffer(6)]], device const float *wv [[buffer(7)]],
                      device const float *rope_table [[buffer(8)]], constant int *v [[buffer(9)]],
                      uint3 tg [[threadgroup_position_in_grid]],
                      uint3 tid [[thread_position_in_threadgroup]],
                      uint3 ntid [[threads_per_threadgroup]]) {
  threadgroup float xn[DIM];
  load_norm(xn, x, rms, tid.x, ntid.x);
  int pos = v[0], r = 2 * (int)(tg.x * ntid.x + tid.x);
  if (r >= DIM + 2 * KV_DIM) return;
  device const float *rot = rope_table + (ulong)pos * HEAD_SIZE;
  device float *krow = kc + (ulong)pos * KV_DIM, *vrow = vc + (ulong)pos * KV_DIM;
  if (r < DIM) {
    float a = dot_tg(wq + (ulong)r * DIM, xn, DIM), c = dot_tg(wq + (ulong)(r + 1) * DIM, xn, DIM);
    rope(a, c, r, rot);
    q[r] = a, q[r + 1] = c;
  } else if (r < DIM + KV_DIM) {
    int i = r - DIM;
    float a = dot_tg(wk + (ulong)i * DIM, xn, DIM), c = dot_tg(wk + (ulong)(i + 1) * DIM, xn, DIM);
    rope(a, c, i, rot);
    krow[i] = a, krow[i + 1] = c;
  } else {
    int i = r - DIM - KV_DIM;
    vrow[i] = dot_tg(wv + (ulong)i * DIM, xn, DIM);
    vrow[i + 1] = dot_tg(wv + (ulong)(i + 1) * DIM, xn, DIM);
  }
}

kernel void llama_attn_part(device float *part [[buffer(0)]], device const float *q [[buffer(1)]],
                            device const float *kc [[buffer(2)]],
                            device const float *vc [[buffer(3)]], constant int *v [[buffer(4)]],
                            uint3 tg [[threadgroup_position_in_grid]],
                            uint3 tid [[thread_position_in_threadgroup]]) {
  int pos = v[0], h = (int)tg.x, c = (int)tg.y, i = (int)tid.x;
  int t0 = c * ATT_CHUNK, t1 = t0 + ATT_CHUNK < pos + 1 ? t0 + ATT_CHUNK : pos + 1;
  device const float *qh = q + h * HEAD_SIZE;
  int kv = (h / KV_MUL) * HEAD_SIZE;
  float score[ATT_CHUNK], m = LLAMA_LOW, scale = 1.0f / sqrt((float)HEAD_SIZE);
  for (int t = t0; t < t1; t++) {
    float s = dot_dev(qh, kc + (ulong)t * KV_DIM + kv, HEAD_SIZE) * scale;
    score[t - t0] = s;
    if (s > m) m = s;
  }
  float sum = 0.0f, o = 0.0f;
  for (int t = t0; t < t1; t++) {
    float e = exp(score[t - t0] - m);
    sum += e;
    o += e * vc[(ulong)t * KV_DIM + kv + i];
  }
  device float *dst = part + ((ulong)h * MAX_CHUNKS + c) * (HEAD_SIZE + 2);
  if (i == 0) dst[0] = m, dst[1] = sum;
  dst[2 + i] = o;
}

kernel void llama_attn_combine(device float *out [[buffer(0)]],
                               device const float *part [[buffer(1)]],
                               constant int *v [[buffer(2)]],
                               uint3 tg [[threadgroup_position_in_grid]],
                               uint3 tid [[thread_position_in_threadgroup]]) {
  int h = (int)tg.x, i = (int)tid.x, chunks = v[0] / ATT_CHUNK + 1;
  device const float *p = part + (ulong)h * MAX_CHUNKS * (HEAD_SIZE + 2);
  float m = LLAMA_LOW;
  for (int c = 0; c < chunks; c++)
    if (p[c * (HEAD_SIZE + 2)] > m) m = p[c * (HEAD_SIZE + 2)];
  float total = 0.0f, acc = 0.0f;
  for (int c = 0; c < chunks; c++) {
    float w = exp(p[c * (HEAD_SIZE + 2)] - m);
    total += w * p[c * (HEAD_SIZE + 2) + 1];
    acc += w * p[c * (HEAD_SIZE + 2) + 2 + i];
  }
  out[h * HEAD_SIZE + i] = acc / total;
}

kernel void llama_wo(device float *x [[buffer(0)]], device const float *xin [[buffer(1)]],
                     device const float *w [[buffer(2)]], uint3 tg [[threadgroup_position_in_grid]],
                     uint3 tid [[thread_position_in_threadgroup]],
                     uint3 ntid [[threads_per_threadgroup]]) {
  int r = (int)(tg.x * ntid.x + tid.x);
  if (r < DIM) x[r] += dot_dev(w + (ulong)r * DIM, xin, DIM);
}

kernel void llama_ffn_down(device float *x [[buffer(0)]], device const float *xin [[buffer(1)]],
                           device const float *w [[buffer(2)]],
                           uint3 tg [[threadgroup_position_in_grid]],
                           uint3 tid [[thread_position_in_threadgroup]],
                           uint3 ntid [[threads_per_threadgroup]]) {
  int r = (int)(tg.x * ntid.x + tid.x);
  if (r < DIM) x[r] += dot_dev(w + (ulong)r * HIDDEN, xin, HIDDEN);
}

kernel void llama_ffn_up(device float *hb [[buffer(0)]], device const float *x [[buffer(1)]],
                         device const float *rms [[buffer(2)]],
                         device const float *w1 [[buffer(3)]], device const float *w3 [[buffer(4)]],
                         uint3 tg [[threadgroup_position_in_grid]],
                         uint3 tid [[thread_position_in_threadgroup]],
                         uint3 ntid [[threads_per_threadgroup]]) {
  threadgroup float xn[DIM];
  load_norm(xn, x, rms, tid.x, ntid.x);
  int r = (int)(tg.x * ntid.x + tid.x);
  if (r >= HIDDEN) return;
  float a = dot_tg(w1 + (ulong)r * DIM, xn, DIM), c = dot_tg(w3 + (ulong)r * DIM, xn, DIM);
  hb[r] = a * (1.0f / (1.0f + exp(-a))) * c;
}

kernel void llama_classify(device float *logits [[buffer(0)]], device int *best [[buffer(1)]],
                           device const float *x [[buffer(2)]],
                           device const float *rms [[buffer(3)]],
                           device const float *w [[buffer(4)]], constant int *v [[buffer(5)]],
                           uint3 tg [[threadgroup_position_in_grid]],
                           uint3 tid [[thread_position_in_threadgroup]],
                           uint3 ntid [[threads_per_threadgroup]]) {
  threadgroup float xn[DIM];
  threadgroup float top_v[GROUP];
  threadgroup int top_i[GROUP];
  load_norm(xn, x, rms, tid.x, ntid.x);
  // v[0]: the first group (a device may run only some groups of the whole classifier)
  int g = (int)tg.x + v[0], r = g * (int)ntid.x + (int)tid.x, l = (int)tid.x;
  float z = LLAMA_LOW;
  if (r < VOCAB) {
    z = dot_tg(w + (ulong)r * DIM, xn, DIM);
    logits[r] = z;
  }
  top_v[l] = z;
  top_i[l] = r;
  threadgroup_barrier(mem_flags::mem_threadgroup);
  if (l != 0) return;
  float top = LLAMA_LOW;
  int arg = g * (int)ntid.x;
  for (int k = 0; k < (int)ntid.x; k++)
    if (top_v[k] > top) top = top_v[k], arg = top_i[k];
  best[2 * g] = as_type<int>(top);
  best[2 * g + 1] = arg;
}

kernel void llama_argmax(device int *tokens [[buffer(0)]], device const int *best [[buffer(1)]],
                         constant int *v [[buffer(2)]]) {
  float top = LLAMA_LOW;
  int arg = 0;
  for (int g = 0; g < v[1]; g++) {
    float z = as_type<float>(best[2 * g]);
    if (z > top) top = z, arg = best[2 * g + 1];
  }
  tokens[v[0] + 1] = arg;
}
