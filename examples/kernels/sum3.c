/* y[i] = a[i] + 3 * b[i] + 5 * c[i] for i < n.
 * bufs: [y, a, b, c]   vals: [n] */
void sum3(void *const *bufs, const int32_t *vals, const hcq_launch_t *launch) {
  uint32_t *y = bufs[0];
  const uint32_t *a = bufs[1];
  const uint32_t *b = bufs[2];
  const uint32_t *c = bufs[3];
  uint64_t n = vals[0] < 0 ? 0 : (uint64_t)vals[0];
  for (uint32_t t = 0; t < launch->lsz[0]; t++) {
    uint64_t i = (uint64_t)launch->gid[0] * launch->lsz[0] + t;
    if (i < n) y[i] = a[i] + 3u * b[i] + 5u * c[i];
  }
}
