// y[i] = x[i] * a + w[i] + b for i < n (CUDA twin of axpb.c; uint32 arithmetic).
// bufs: [y, x, w]   vals: [n, a, b]
extern "C" __global__ void axpb(unsigned *y, const unsigned *x, const unsigned *w, int n, int a,
                                int b) {
  long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = x[i] * (unsigned)a + w[i] + (unsigned)b;
}
