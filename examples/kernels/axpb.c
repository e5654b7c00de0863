/* y[i] = x[i] * a + w[i] + b for i < n.
 * bufs: [y, x, w]   vals: [n, a, b]
 * y may be the same buffer as x or w: each thread reads and writes only element i. */
void axpb(void *const *bufs, const int32_t *vals, const hcq_launch_t *launch) {
  uint32_t *y = bufs[0];
  const uint32_t *x = bufs[1];
  const uint32_t *w = bufs[2];
  uint64_t n = vals[0] < 0 ? 0 : (uint64_t)vals[0];
  uint32_t a = (uint32_t)vals[1];
  uint32_t b = (uint32_t)vals[2];
  for (uint32_t t = 0; t < launch->lsz[0]; t++) {
    uint64_t i = (uint64_t)launch->gid[0] * launch->lsz[0] + t;
    if (i < n) y[i] = x[i] * a + w[i] + b;
  }
}
