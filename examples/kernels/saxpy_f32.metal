// y[i] = a * x[i] + y[i] for i < n, a the float whose bits are vals[1] (Metal twin of saxpy_f32.c).
// bufs: [y, x]   vals: [n, a_bits]
#include <metal_stdlib>
using namespace metal;
kernel void saxpy_f32(device float *y [[buffer(0)]], device const float *x [[buffer(1)]],
                      constant int *v [[buffer(2)]], uint3 tg [[threadgroup_position_in_grid]],
                      uint3 tid [[thread_position_in_threadgroup]],
                      uint3 ntid [[threads_per_threadgroup]]) {
  long i = (long)tg.x * ntid.x + tid.x;
  float a = as_type<float>(v[1]);
  if (i < v[0]) y[i] = a * x[i] + y[i];
}
