// y[i] = a[i] + 3 * b[i] + 5 * c[i] for i < n (CUDA twin of sum3.c).
// bufs: [y, a, b, c]   vals: [n]
extern "C" __global__ void sum3(unsigned *y, const unsigned *a, const unsigned *b,
                                const unsigned *c, int n) {
  long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = a[i] + 3u * b[i] + 5u * c[i];
}
