/* y[i] = (x[i] ^ (x[i] >> s)) * 0x9E3779B1 + c for i < n (s taken modulo 32).
 * bufs: [y, x]   vals: [n, s, c] */
void mix(void *const *bufs, const int32_t *vals, const hcq_launch_t *launch) {
  uint32_t *y = bufs[0];
  const uint32_t *x = bufs[1];
  uint64_t n = vals[0] < 0 ? 0 : (uint64_t)vals[0];
  uint32_t s = (uint32_t)vals[1] & 31u;
  uint32_t c = (uint32_t)vals[2];
  for (uint32_t t = 0; t < launch->lsz[0]; t++) {
    uint64_t i = (uint64_t)launch->gid[0] * launch->lsz[0] + t;
    if (i < n) {
      uint32_t v = x[i];
      y[i] = (v ^ (v >> s)) * 0x9E3779B1u + c;
    }
  }
}
