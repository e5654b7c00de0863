// y[i] = (x[i] ^ (x[i] >> s)) * 0x9E3779B1 + c for i < n, s taken modulo 32 (CUDA twin of mix.c).
// bufs: [y, x]   vals: [n, s, c]
extern "C" __global__ void mix(unsigned *y, const unsigned *x, int n, int s, int c) {
  long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) {
    unsigned v = x[i];
    y[i] = (v ^ (v >> ((unsigned)s & 31u))) * 0x9E3779B1u + (unsigned)c;
  }
}
