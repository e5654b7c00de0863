// The decoder's kernels in GLSL for Vulkan devices (SPEC 2 Vulkan ABI): the same entries, buffers
// and values as kernels.c, which documents what each computes. Only the work split differs: GPUs
// want many small threads, so a matrix-vector kernel gives each invocation one output row (the
// rotary kernel one pair of rows) and each work-group GROUP of them; attention runs one
// invocation per element of a head.
//
// The decoder compiles this file once per entry after a block of #defines: the model's shape (as
// for kernels.c), GROUP (invocations per group of the row kernels) and KERNEL_<entry>, which
// selects the entry's main(). Float sums run in another order than on the CPU, so results match
// the CPU's within rounding, not bit for bit; every group computes its rows in a fixed order, so
// eager steps and graph replays on one device give identical bits.
layout(buffer_reference, std430, buffer_reference_align = 4) buffer f32s { float v[]; };
layout(buffer_reference, std430, buffer_reference_align = 4) buffer i32s { int v[]; };
layout(buffer_reference, std430, buffer_reference_align = 16) buffer v4s { vec4 v[]; };

// Rows of four-float multiples are read as vec4 (a quarter of the loads; lavapipe gathers each).
#if DIM % 4 == 0 && HIDDEN % 4 == 0
#define VEC4 1
#endif

// w[row] . v over n columns, v a buffer.
float dot_row(f32s w, uint row, f32s v, uint n) {
  float s = 0.0;
#ifdef VEC4
  v4s w4 = v4s(uint64_t(w) + uint64_t(row * n) * 4ul), v4 = v4s(uint64_t(v));
  for (uint j = 0u; j < n / 4u; j++) s += dot(w4.v[j], v4.v[j]);
#else
  for (uint j = 0u; j < n; j++) s += w.v[row * n + j] * v.v[j];
#endif
  return s;
}

float neg_inf() { return uintBitsToFloat(0xff800000u); }

#if defined(KERNEL_llama_qkv) || defined(KERNEL_llama_ffn_up) || defined(KERNEL_llama_classify)
// The RMS-normalised input, once per group: every invocation computes the scale (uniform loads),
// the group writes its parts. Every invocation must reach the barrier, so none returns before.
shared float xn[DIM];
void load_norm(f32s x, f32s w) {
  float ss = 0.0;
  for (int j = 0; j < DIM; j++) ss += x.v[j] * x.v[j];
  float inv = 1.0 / sqrt(ss / float(DIM) + 1e-5);
  for (uint j = gl_LocalInvocationID.x; j < uint(DIM); j += gl_WorkGroupSize.x) xn[j] = w.v[j] * (inv * x.v[j]);
  barrier();
}
float dot_xn(f32s w, uint row) {
  float s = 0.0;
#ifdef VEC4
  v4s w4 = v4s(uint64_t(w) + uint64_t(row * uint(DIM)) * 4ul);
  for (uint j = 0u; j < uint(DIM / 4); j++)
    s += dot(w4.v[j], vec4(xn[4u * j], xn[4u * j + 1u], xn[4u * j + 2u], xn[4u * j + 3u]));
#else
  uint b = row * uint(DIM);
  for (uint j = 0u; j < uint(DIM); j++) s += w.v[b + j] * xn[j];
#endif
  return s;
}
#endif

#ifdef KERNEL_llama_embed
void main() {
  uint i = gl_GlobalInvocationID.x;
  if (i >= uint(DIM)) return;
  f32s x = f32s(hcq_buf(0)), emb = f32s(hcq_buf(2));
  i32s tokens = i32s(hcq_buf(1));
  int tok = tokens.v[hcq_val(0)];
  if (tok < 0 || tok >= VOCAB) tok = 0;
  x.v[i] = emb.v[uint(tok) * uint(DIM) + i];
}
#endif

#ifdef KERNEL_llama_qkv
void rope(inout float a, inout float b, uint i, f32s rot, uint row) {
  float c = rot.v[row + i % uint(HEAD_SIZE)], s = rot.v[row + i % uint(HEAD_SIZE) + 1u];
  float a0 = a, b0 = b;
  a = a0 * c - b0 * s;
  b = a0 * s + b0 * c;
}
void main() {
  f32s q = f32s(hcq_buf(0)), kc = f32s(hcq_buf(1)), vc = f32s(hcq_buf(2)), x = f32s(hcq_buf(3));
  f32s rms = f32s(hcq_buf(4)), wq = f32s(hcq_buf(5)), wk = f32s(hcq_buf(6)), wv = f32s(hcq_buf(7));
  f32s rot = f32s(hcq_buf(8));
  uint pos = uint(hcq_val(0));
  load_norm(x, rms);
  uint r = 2u * gl_GlobalInvocationID.x, kv = pos * uint(KV_DIM), row = pos * uint(HEAD_SIZE);
  if (r >= uint(DIM + 2 * KV_DIM)) return;
  if (r < uint(DIM)) {
    float a = dot_xn(wq, r), c = dot_xn(wq, r + 1u);
    rope(a, c, r, rot, row);
    q.v[r] = a;
    q.v[r + 1u] = c;
  } else if (r < uint(DIM + KV_DIM)) {
    uint i = r - uint(DIM);
    float a = dot_xn(wk, i), c = dot_xn(wk, i + 1u);
    rope(a, c, i, rot, row);
    kc.v[kv + i] = a;
    kc.v[kv + i + 1u] = c;
  } else {
    uint i = r - uint(DIM + KV_DIM);
    vc.v[kv + i] = dot_xn(wv, i);
    vc.v[kv + i + 1u] = dot_xn(wv, i + 1u);
  }
}
#endif

#ifdef KERNEL_llama_attn_part
// Group (head, chunk), invocation i: element i of the chunk's weighted value sum. Each invocation
// scores the chunk itself (ATT_CHUNK x HEAD_SIZE multiply-adds), which costs less than sharing.
void main() {
  f32s part = f32s(hcq_buf(0)), q = f32s(hcq_buf(1)), kc = f32s(hcq_buf(2)), vc = f32s(hcq_buf(3));
  int pos = hcq_val(0);
  uint h = gl_WorkGroupID.x, c = gl_WorkGroupID.y, i = gl_LocalInvocationID.x;
  int t0 = int(c) * ATT_CHUNK, t1 = min(t0 + ATT_CHUNK, pos + 1);
  uint qh = h * uint(HEAD_SIZE), kv = (h / uint(KV_MUL)) * uint(HEAD_SIZE);
  float score[ATT_CHUNK], m = neg_inf(), scale = 1.0 / sqrt(float(HEAD_SIZE));
  for (int t = t0; t < t1; t++) {
    float s = 0.0;
    uint k = uint(t) * uint(KV_DIM) + kv;
    for (uint j = 0u; j < uint(HEAD_SIZE); j++) s += q.v[qh + j] * kc.v[k + j];
    s *= scale;
    score[t - t0] = s;
    if (s > m) m = s;
  }
  float sum = 0.0, o = 0.0;
  for (int t = t0; t < t1; t++) {
    float e = exp(score[t - t0] - m);
    sum += e;
    o += e * vc.v[uint(t) * uint(KV_DIM) + kv + i];
  }
  uint dst = (h * uint(MAX_CHUNKS) + c) * uint(HEAD_SIZE + 2);
  if (i == 0u) {
    part.v[dst] = m;
    part.v[dst + 1u] = sum;
  }
  part.v[dst + 2u + i] = o;
}
#endif

#ifdef KERNEL_llama_attn_combine
void main() {
  f32s outv = f32s(hcq_buf(0)), part = f32s(hcq_buf(1));
  uint h = gl_WorkGroupID.x, i = gl_LocalInvocationID.x;
  int chunks = hcq_val(0) / ATT_CHUNK + 1;
  uint p = h * uint(MAX_CHUNKS) * uint(HEAD_SIZE + 2), stride = uint(HEAD_SIZE + 2);
  float m = neg_inf();
  for (int c = 0; c < chunks; c++)
    if (part.v[p + uint(c) * stride] > m) m = part.v[p + uint(c) * stride];
  float total = 0.0, acc = 0.0;
  for (int c = 0; c < chunks; c++) {
    uint at = p + uint(c) * stride;
    float w = exp(part.v[at] - m);
    total += w * part.v[at + 1u];
    acc += w * part.v[at + 2u + i];
  }
  outv.v[h * uint(HEAD_SIZE) + i] = acc / total;
}
#endif

#if defined(KERNEL_llama_wo) || defined(KERNEL_llama_ffn_down)
#ifdef KERNEL_llama_wo
#define N DIM
#else
#define N HIDDEN
#endif
void main() {
  uint r = gl_GlobalInvocationID.x;
  if (r >= uint(DIM)) return;
  f32s x = f32s(hcq_buf(0)), src = f32s(hcq_buf(1)), w = f32s(hcq_buf(2));
  x.v[r] += dot_row(w, r, src, uint(N));
}
#endif

#ifdef KERNEL_llama_ffn_up
void main() {
  f32s hb = f32s(hcq_buf(0)), x = f32s(hcq_buf(1)), rms = f32s(hcq_buf(2)), w1 = f32s(hcq_buf(3));
  f32s w3 = f32s(hcq_buf(4));
  load_norm(x, rms);
  uint r = gl_GlobalInvocationID.x;
  if (r >= uint(HIDDEN)) return;
  float a = dot_xn(w1, r), c = dot_xn(w3, r);
  hb.v[r] = a * (1.0 / (1.0 + exp(-a))) * c;
}
#endif

#ifdef KERNEL_llama_classify
shared float top_v[GROUP];
shared int top_i[GROUP];
void main() {
  f32s logits = f32s(hcq_buf(0)), x = f32s(hcq_buf(2)), rms = f32s(hcq_buf(3)), w = f32s(hcq_buf(4));
  i32s best = i32s(hcq_buf(1));
  load_norm(x, rms);
  // value 0: the first group (a device may run only some groups of the whole classifier)
  uint g = gl_WorkGroupID.x + uint(hcq_val(0)), l = gl_LocalInvocationID.x;
  uint r = g * gl_WorkGroupSize.x + l;
  float z = neg_inf();
  if (r < uint(VOCAB)) {
    z = dot_xn(w, r);
    logits.v[r] = z;
  }
  top_v[l] = z;
  top_i[l] = int(r);
  barrier();
  if (l != 0u) return;
  float top = neg_inf();
  int arg = int(g * gl_WorkGroupSize.x);
  for (uint k = 0u; k < gl_WorkGroupSize.x; k++)
    if (top_v[k] > top) {
      top = top_v[k];
      arg = top_i[k];
    }
  best.v[2u * g] = floatBitsToInt(top);
  best.v[2u * g + 1u] = arg;
}
#endif

#ifdef KERNEL_llama_argmax
void main() {
  i32s tokens = i32s(hcq_buf(0)), best = i32s(hcq_buf(1));
  float top = neg_inf();
  int arg = 0;
  for (int g = 0; g < hcq_val(1); g++) {
    float z = intBitsToFloat(best.v[2 * g]);
    if (z > top) {
      top = z;
      arg = best.v[2 * g + 1];
    }
  }
  tokens.v[hcq_val(0) + 1] = arg;
}
#endif
