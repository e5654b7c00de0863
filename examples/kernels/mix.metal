// y[i] = (x[i] ^ (x[i] >> s)) * 0x9E3779B1 + c for i < n, s modulo 32 (Metal twin of mix.c).
// bufs: [y, x]   vals: [n, s, c]
#include <metal_stdlib>
using namespace metal;
kernel void mix(device uint *y [[buffer(0)]], device const uint *x [[buffer(1)]],
                constant int *v [[buffer(2)]], uint3 tg [[threadgroup_position_in_grid]],
                uint3 tid [[thread_position_in_threadgroup]],
                uint3 ntid [[threads_per_threadgroup]]) {
  long i = (long)tg.x * ntid.x + tid.x;
  if (i < v[0]) {
    uint s = (uint)v[1] & 31u, xv = x[i];
    y[i] = (xv ^ (xv >> s)) * 0x9E3779B1u + (uint)v[2];
  }
}
