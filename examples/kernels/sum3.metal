// y[i] = a[i] + 3 * b[i] + 5 * c[i] for i < n (Metal twin of sum3.c).
// bufs: [y, a, b, c]   vals: [n]
#include <metal_stdlib>
using namespace metal;
kernel void sum3(device uint *y [[buffer(0)]], device const uint *a [[buffer(1)]],
                 device const uint *b [[buffer(2)]], device const uint *c [[buffer(3)]],
                 constant int *v [[buffer(4)]], uint3 tg [[threadgroup_position_in_grid]],
                 uint3 tid [[thread_position_in_threadgroup]],
                 uint3 ntid [[threads_per_threadgroup]]) {
  long i = (long)tg.x * ntid.x + tid.x;
  if (i < v[0]) y[i] = a[i] + 3u * b[i] + 5u * c[i];
}
