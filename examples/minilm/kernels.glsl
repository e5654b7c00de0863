// The MiniLM encoder's kernels in GLSL for Vulkan devices (SPEC 2 Vulkan ABI): the same entries,
// buffers and values (hcq_val(0) is n, the token count) as kernels.c, which documents what each
// computes, and as there the output and down projections (mlm_proj, mlm_down) are split from their
// residual and LayerNorm (mlm_res_ln). The work split is a GPU's: the matrix products give each
// invocation four neighbouring output columns of a block of four rows (16 invocations a group
// along a row), the row kernels (embedding, residual + LayerNorm, pooling) one work-group of GROUP
// invocations per token row, attention one group of HEAD_DIM invocations per (head, query).
// kt (the transposed keys) is the CPU's layout trick: the GPU kernels read keys from qkv.
//
// The encoder compiles this file once per entry after a block of #defines: the model's shape (as
// for kernels.c), GROUP, COLS and KERNEL_<entry>, which selects the entry's main(). Sums run in
// another order than on the CPU, so results match within rounding, not bit for bit; every group
// computes its outputs in a fixed order, so eager queries and replays give identical bits.
layout(buffer_reference, std430, buffer_reference_align = 4) buffer f32s { float v[]; };
layout(buffer_reference, std430, buffer_reference_align = 4) buffer i32s { int v[]; };
layout(buffer_reference, std430, buffer_reference_align = 16) buffer v4s { vec4 v[]; };

float neg_inf() { return uintBitsToFloat(0xff800000u); }

// BERT's exact GELU with erf from Abramowitz and Stegun 7.1.26 (absolute error below 1.5e-7),
// as kernels.c computes it.
float gelu(float x) {
  float z = x * 0.70710678, az = abs(z);
  float t = 1.0 / (1.0 + 0.3275911 * az);
  float poly = t * (0.254829592 + t * (-0.284496736 + t * (1.421413741 + t * (-1.453152027 + t * 1.061405429))));
  float e = 1.0 - poly * exp(-az * az);
  return 0.5 * x * (1.0 + (z < 0.0 ? -e : e));
}

#if defined(KERNEL_mlm_embed) || defined(KERNEL_mlm_res_ln) || defined(KERNEL_mlm_pool)
// A row of HIDDEN floats, GROUP invocations a row; the sum over the group in a fixed tree order.
shared float row[HIDDEN];
shared float red[GROUP];
float group_sum(float v) {
  uint l = gl_LocalInvocationID.x;
  red[l] = v;
  barrier();
  for (uint s = uint(GROUP) / 2u; s > 0u; s >>= 1u) {
    if (l < s) red[l] += red[l + s];
    barrier();
  }
  float r = red[0];
  barrier();
  return r;
}
// LayerNorm of the shared row into x at row t.
void layernorm_store(f32s x, uint t, f32s w, f32s b) {
  uint l = gl_LocalInvocationID.x;
  float s = 0.0;
  for (uint j = l; j < uint(HIDDEN); j += uint(GROUP)) s += row[j];
  float mean = group_sum(s) / float(HIDDEN);
  float q = 0.0;
  for (uint j = l; j < uint(HIDDEN); j += uint(GROUP)) q += (row[j] - mean) * (row[j] - mean);
  float inv = 1.0 / sqrt(group_sum(q) / float(HIDDEN) + LN_EPS);
  for (uint j = l; j < uint(HIDDEN); j += uint(GROUP)) x.v[t * uint(HIDDEN) + j] = (row[j] - mean) * inv * w.v[j] + b.v[j];
}
#endif

#ifdef KERNEL_mlm_embed
void main() {
  f32s x = f32s(hcq_buf(0)), word = f32s(hcq_buf(2)), pos = f32s(hcq_buf(3)), type = f32s(hcq_buf(4));
  f32s lw = f32s(hcq_buf(5)), lb = f32s(hcq_buf(6));
  i32s ids = i32s(hcq_buf(1));
  uint t = gl_WorkGroupID.x, l = gl_LocalInvocationID.x;
  int id = ids.v[t];
  if (id < 0 || id >= VOCAB) id = 0;
  for (uint j = l; j < uint(HIDDEN); j += uint(GROUP))
    row[j] = word.v[uint(id) * uint(HIDDEN) + j] + pos.v[t * uint(HIDDEN) + j] + type.v[j];
  barrier();
  layernorm_store(x, t, lw, lb);
}
#endif

#if defined(KERNEL_mlm_qkv) || defined(KERNEL_mlm_ffn_up) || defined(KERNEL_mlm_proj) || defined(KERNEL_mlm_down)
#ifdef KERNEL_mlm_down
#define K INTER
#else
#define K HIDDEN
#endif
// The products: grid N / (4 COLS) x ceil(n / 4), each invocation four neighbouring columns of four
// rows t0.. (one 16-byte load of wt a step: lavapipe gathers every load lane by lane, so fewer,
// wider ones pay, and each weight loaded serves the block's rows), the rows' inputs read once per
// group into shared memory, KC floats at a time (four rows of K = INTER would not fit lavapipe's
// 32 KB). A block of one row (a one-token query) skips the other three.
#define KC (K < 768 ? K : 768)
shared vec4 xin[4][KC / 4];
void linear4(f32s inp, v4s wt, v4s bias, uint t0, uint rows, uint N, out vec4 s[4]) {
  uint j4 = gl_GlobalInvocationID.x, n4 = N / 4u, l = gl_LocalInvocationID.x;
  vec4 s0 = bias.v[j4], s1 = s0, s2 = s0, s3 = s0;
  for (uint k0 = 0u; k0 < uint(K); k0 += uint(KC)) {
    for (uint i = l; i < uint(KC); i += gl_WorkGroupSize.x)
      for (uint r = 0u; r < 4u; r++) xin[r][i / 4u][i % 4u] = r < rows ? inp.v[(t0 + r) * uint(K) + k0 + i] : 0.0;
    barrier();
    if (rows == 1u) {
      for (uint k = 0u; k < uint(KC / 4); k++) {
        vec4 a = xin[0][k];
        uint w = (k0 + 4u * k) * n4 + j4;
        s0 += a.x * wt.v[w] + a.y * wt.v[w + n4] + a.z * wt.v[w + 2u * n4] + a.w * wt.v[w + 3u * n4];
      }
    } else {
      for (uint k = 0u; k < uint(KC / 4); k++) {
        uint w = (k0 + 4u * k) * n4 + j4;
        vec4 w0 = wt.v[w], w1 = wt.v[w + n4], w2 = wt.v[w + 2u * n4], w3 = wt.v[w + 3u * n4];
        vec4 a = xin[0][k], b = xin[1][k], c = xin[2][k], d = xin[3][k];
        s0 += a.x * w0 + a.y * w1 + a.z * w2 + a.w * w3;
        s1 += b.x * w0 + b.y * w1 + b.z * w2 + b.w * w3;
        s2 += c.x * w0 + c.y * w1 + c.z * w2 + c.w * w3;
        s3 += d.x * w0 + d.y * w1 + d.z * w2 + d.w * w3;
      }
    }
    barrier();
  }
  s[0] = s0, s[1] = s1, s[2] = s2, s[3] = s3;
}
#endif

#if defined(KERNEL_mlm_proj) || defined(KERNEL_mlm_down)
// y = bias + in . wt, before mlm_res_ln: split by columns like the other products, so that a short
// query's few rows still make work-groups for every lavapipe thread.
void main() {
  v4s outv = v4s(hcq_buf(0)), wt = v4s(hcq_buf(2)), bias = v4s(hcq_buf(3));
  f32s inp = f32s(hcq_buf(1));
  uint t0 = 4u * gl_WorkGroupID.y, rows = min(4u, uint(hcq_val(0)) - t0);
  vec4 s[4];
  linear4(inp, wt, bias, t0, rows, uint(HIDDEN), s);
  for (uint r = 0u; r < rows; r++) outv.v[(t0 + r) * uint(HIDDEN / 4) + gl_GlobalInvocationID.x] = s[r];
}
#endif

#ifdef KERNEL_mlm_qkv
void main() {
  v4s outv = v4s(hcq_buf(0)), wt = v4s(hcq_buf(3)), bias = v4s(hcq_buf(4));
  f32s inp = f32s(hcq_buf(2));
  uint t0 = 4u * gl_WorkGroupID.y, rows = min(4u, uint(hcq_val(0)) - t0);
  vec4 s[4];
  linear4(inp, wt, bias, t0, rows, uint(3 * HIDDEN), s);
  for (uint r = 0u; r < rows; r++) outv.v[(t0 + r) * uint(3 * HIDDEN / 4) + gl_GlobalInvocationID.x] = s[r];
}
#endif

#ifdef KERNEL_mlm_ffn_up
void main() {
  v4s outv = v4s(hcq_buf(0)), wt = v4s(hcq_buf(2)), bias = v4s(hcq_buf(3));
  f32s inp = f32s(hcq_buf(1));
  uint t0 = 4u * gl_WorkGroupID.y, rows = min(4u, uint(hcq_val(0)) - t0);
  vec4 s[4];
  linear4(inp, wt, bias, t0, rows, uint(INTER), s);
  for (uint r = 0u; r < rows; r++)
    outv.v[(t0 + r) * uint(INTER / 4) + gl_GlobalInvocationID.x] = vec4(gelu(s[r].x), gelu(s[r].y), gelu(s[r].z), gelu(s[r].w));
}
#endif

#ifdef KERNEL_mlm_res_ln
void main() {
  f32s x = f32s(hcq_buf(0)), y = f32s(hcq_buf(1)), lw = f32s(hcq_buf(2)), lb = f32s(hcq_buf(3));
  uint t = gl_WorkGroupID.x, l = gl_LocalInvocationID.x;
  for (uint j = l; j < uint(HIDDEN); j += uint(GROUP)) row[j] = x.v[t * uint(HIDDEN) + j] + y.v[t * uint(HIDDEN) + j];
  barrier();
  layernorm_store(x, t, lw, lb);
}
#endif

#ifdef KERNEL_mlm_attn
shared float p[MAXLEN];
shared float red[HEAD_DIM];
void main() {
  f32s ctx = f32s(hcq_buf(0)), qkv = f32s(hcq_buf(1));
  uint h = gl_WorkGroupID.x, t = gl_WorkGroupID.y, i = gl_LocalInvocationID.x;
  uint n = uint(hcq_val(0)), stride = uint(3 * HIDDEN), q = t * stride + h * uint(HEAD_DIM);
  float scale = 1.0 / sqrt(float(HEAD_DIM));
  // Scores: invocation i takes keys i, i + HEAD_DIM, ...; then the max and the sum, each over the
  // invocations' partial results in a fixed order.
  float m = neg_inf();
  for (uint s = i; s < n; s += uint(HEAD_DIM)) {
    uint k = s * stride + uint(HIDDEN) + h * uint(HEAD_DIM);
    float d = 0.0;
    for (uint c = 0u; c < uint(HEAD_DIM); c++) d += qkv.v[q + c] * qkv.v[k + c];
    p[s] = d * scale;
    m = max(m, p[s]);
  }
  red[i] = m;
  barrier();
  m = neg_inf();
  for (uint c = 0u; c < uint(HEAD_DIM); c++) m = max(m, red[c]);
  barrier();
  float sum = 0.0;
  for (uint s = i; s < n; s += uint(HEAD_DIM)) {
    p[s] = exp(p[s] - m);
    sum += p[s];
  }
  red[i] = sum;
  barrier();
  sum = 0.0;
  for (uint c = 0u; c < uint(HEAD_DIM); c++) sum += red[c];
  float acc = 0.0;
  for (uint s = 0u; s < n; s++) acc += p[s] * qkv.v[s * stride + uint(2 * HIDDEN) + h * uint(HEAD_DIM) + i];
  ctx.v[t * uint(HIDDEN) + h * uint(HEAD_DIM) + i] = acc / sum;
}
#endif

#ifdef KERNEL_mlm_pool
void main() {
  f32s outv = f32s(hcq_buf(0)), x = f32s(hcq_buf(1));
  uint l = gl_LocalInvocationID.x, n = uint(hcq_val(0));
  float ss = 0.0;
  for (uint j = l; j < uint(HIDDEN); j += uint(GROUP)) {
    float a = 0.0;
    for (uint t = 0u; t < n; t++) a += x.v[t * uint(HIDDEN) + j];
    row[j] = a / float(n);
    ss += row[j] * row[j];
  }
  float inv = 1.0 / max(sqrt(group_sum(ss)), 1e-12);
  for (uint j = l; j < uint(HIDDEN); j += uint(GROUP)) outv.v[j] = row[j] * inv;
}
#endif
