// y[i] = a * x[i] + y[i] for i < n, float, the Vulkan twin of saxpy_f32.c; a arrives as its bit
// pattern. bufs: [y, x]   vals: [n, a_bits]   (hcq_buf / hcq_val come from hcq's GLSL prelude)
layout(buffer_reference, std430, buffer_reference_align = 4) buffer f32s { float v[]; };
void main() {
  uint i = gl_GlobalInvocationID.x;
  int n = hcq_val(0);
  if (n < 0 || i >= uint(n) || gl_LocalInvocationID.y != 0u || gl_LocalInvocationID.z != 0u) return;
  f32s y = f32s(hcq_buf(0)), x = f32s(hcq_buf(1));
  y.v[i] = intBitsToFloat(hcq_val(1)) * x.v[i] + y.v[i];
}
