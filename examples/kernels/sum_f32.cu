// A float sum across blocks in two launches (CUDA twins of sum_f32.c): the same bits on every run.
// sum_groups  bufs: [partial, x]   vals: [n, per]   thread i, a multiple of per, adds x[i ..
// i+per-1] sum_final   bufs: [total, partial]   vals: [parts]   thread 0 adds the partials in order
extern "C" __global__ void sum_groups(float *partial, const float *x, int n, int per) {
  long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n || i % per) return;
  float s = 0.0f;
  for (long long k = i; k < i + per && k < n; k++) s += x[k];
  partial[i / per] = s;
}

extern "C" __global__ void sum_final(float *total, const float *partial, int parts) {
  if (blockIdx.x != 0 || threadIdx.x != 0) return;
  float s = 0.0f;
  for (int g = 0; g < parts; g++) s += partial[g];
  total[0] = s;
}
