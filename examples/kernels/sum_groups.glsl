// The Vulkan twin of sum_groups in sum_f32.c: invocation i, a multiple of per, adds
// x[i .. i + per - 1] (those < n) in order into partial[i / per].
// bufs: [partial, x]   vals: [n, per]
layout(buffer_reference, std430, buffer_reference_align = 4) buffer f32s { float v[]; };
void main() {
  uint i = gl_GlobalInvocationID.x;
  int n = hcq_val(0), per = hcq_val(1);
  if (n < 0 || per <= 0 || i >= uint(n) || i % uint(per) != 0u || gl_LocalInvocationID.y != 0u ||
      gl_LocalInvocationID.z != 0u)
    return;
  f32s partial = f32s(hcq_buf(0)), x = f32s(hcq_buf(1));
  float s = 0.0;
  for (uint k = i; k < i + uint(per) && k < uint(n); k++) s += x.v[k];
  partial.v[i / uint(per)] = s;
}
