// y[i] = (x[i] ^ (x[i] >> s)) * 0x9E3779B1 + c for i < n (s taken modulo 32), the twin of mix.c.
// bufs: [y, x]   vals: [n, s, c]
layout(buffer_reference, std430, buffer_reference_align = 4) buffer u32s { uint v[]; };
void main() {
  uint i = gl_GlobalInvocationID.x;
  int n = hcq_val(0);
  if (n < 0 || i >= uint(n) || gl_LocalInvocationID.y != 0u || gl_LocalInvocationID.z != 0u) return;
  u32s y = u32s(hcq_buf(0)), x = u32s(hcq_buf(1));
  uint v = x.v[i], s = uint(hcq_val(1)) & 31u;
  y.v[i] = (v ^ (v >> s)) * 0x9E3779B1u + uint(hcq_val(2));
}
