// y[i] = x[i] * a + w[i] + b for i < n (uint32 arithmetic), the Vulkan twin of axpb.c.
// bufs: [y, x, w]   vals: [n, a, b]   (hcq_buf / hcq_val come from hcq's GLSL prelude)
layout(buffer_reference, std430, buffer_reference_align = 4) buffer u32s { uint v[]; };
void main() {
  uint i = gl_GlobalInvocationID.x;
  int n = hcq_val(0);
  if (n < 0 || i >= uint(n) || gl_LocalInvocationID.y != 0u || gl_LocalInvocationID.z != 0u) return;
  u32s y = u32s(hcq_buf(0)), x = u32s(hcq_buf(1)), w = u32s(hcq_buf(2));
  y.v[i] = x.v[i] * uint(hcq_val(1)) + w.v[i] + uint(hcq_val(2));
}
