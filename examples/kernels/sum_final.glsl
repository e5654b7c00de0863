// The Vulkan twin of sum_final in sum_f32.c: invocation 0 adds partial[0 .. parts-1] in order.
// bufs: [total, partial]   vals: [parts]
layout(buffer_reference, std430, buffer_reference_align = 4) buffer f32s { float v[]; };
void main() {
  if (gl_GlobalInvocationID.x != 0u || gl_GlobalInvocationID.y != 0u ||
      gl_GlobalInvocationID.z != 0u)
    return;
  f32s total = f32s(hcq_buf(0)), partial = f32s(hcq_buf(1));
  float s = 0.0;
  for (int g = 0; g < hcq_val(0); g++) s += partial.v[g];
  total.v[0] = s;
}
