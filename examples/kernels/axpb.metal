// y[i] = x[i] * a + w[i] + b for i < n (Metal twin of axpb.c; uint32 arithmetic).
// bufs: [y, x, w]   vals: [n, a, b]
#include <metal_stdlib>
using namespace metal;
kernel void axpb(device uint *y [[buffer(0)]], device const uint *x [[buffer(1)]],
                 device const uint *w [[buffer(2)]], constant int *v [[buffer(3)]],
                 uint3 tg [[threadgroup_position_in_grid]],
                 uint3 tid [[thread_position_in_threadgroup]],
                 uint3 ntid [[threads_per_threadgroup]]) {
  long i = (long)tg.x * ntid.x + tid.x;
  if (i < v[0]) y[i] = x[i] * (uint)v[1] + w[i] + (uint)v[2];
}
