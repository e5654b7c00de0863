// y[i] = a[i] + 3 * b[i] + 5 * c[i] for i < n, the twin of sum3.c.
// bufs: [y, a, b, c]   vals: [n]
layout(buffer_reference, std430, buffer_reference_align = 4) buffer u32s { uint v[]; };
void main() {
  uint i = gl_GlobalInvocationID.x;
  int n = hcq_val(0);
  if (n < 0 || i >= uint(n) || gl_LocalInvocationID.y != 0u || gl_LocalInvocationID.z != 0u) return;
  u32s y = u32s(hcq_buf(0)), a = u32s(hcq_buf(1)), b = u32s(hcq_buf(2)), c = u32s(hcq_buf(3));
  y.v[i] = a.v[i] + 3u * b.v[i] + 5u * c.v[i];
}
