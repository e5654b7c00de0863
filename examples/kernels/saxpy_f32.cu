// y[i] = a * x[i] + y[i] for i < n, float (CUDA twin of saxpy_f32.c); a arrives as its bit pattern.
// bufs: [y, x]   vals: [n, a_bits]
extern "C" __global__ void saxpy_f32(float *y, const float *x, int n, int a_bits) {
  long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = __int_as_float(a_bits) * x[i] + y[i];
}
