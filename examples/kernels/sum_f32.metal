// The Metal twins of sum_f32.c: a sum across threadgroups in two launches, in a fixed order.
//   sum_groups  bufs [partial, x], vals [n, per]: thread i, a multiple of per, adds x[i .. i+per-1]
//   sum_final   bufs [total, partial], vals [parts]: thread 0 adds partial[0 .. parts-1]
#include <metal_stdlib>
using namespace metal;
kernel void sum_groups(device float *partial [[buffer(0)]], device const float *x [[buffer(1)]],
                       constant int *v [[buffer(2)]], uint3 tg [[threadgroup_position_in_grid]],
                       uint3 tid [[thread_position_in_threadgroup]],
                       uint3 ntid [[threads_per_threadgroup]]) {
  long i = (long)tg.x * ntid.x + tid.x, n = v[0], per = v[1];
  if (per <= 0 || i >= n || i % per != 0 || tid.y != 0 || tid.z != 0) return;
  float s = 0.0f;
  for (long k = i; k < i + per && k < n; k++) s += x[k];
  partial[i / per] = s;
}
kernel void sum_final(device float *total [[buffer(0)]], device const float *partial [[buffer(1)]],
                      constant int *v [[buffer(2)]], uint3 tg [[threadgroup_position_in_grid]],
                      uint3 tid [[thread_position_in_threadgroup]]) {
  if (tg.x || tg.y || tg.z || tid.x || tid.y || tid.z) return;
  float s = 0.0f;
  for (int k = 0; k < v[0]; k++) s += partial[k];
  total[0] = s;
}
