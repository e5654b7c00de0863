/* A sum across work-groups in two launches (no atomics, same bits on every run):
 *   sum_groups  bufs [partial, x], vals [n]: group g adds x[g*lsz .. g*lsz + lsz - 1] (those < n),
 *               in order, into partial[g];
 *   sum_final   bufs [total, partial], vals [groups]: one group adds partial[0 .. groups-1] in order. */
void sum_groups(void *const *b, const int32_t *v, const hcq_launch_t *l) {
  float *partial = b[0];
  const float *x = b[1];
  float s = 0.0f;
  for (uint32_t t = 0; t < l->lsz[0]; t++) {
    size_t i = (size_t)l->gid[0] * l->lsz[0] + t;
    if (i < (size_t)v[0]) s += x[i];
  }
  partial[l->gid[0]] = s;
}

void sum_final(void *const *b, const int32_t *v, const hcq_launch_t *l) {
  (void)l;
  float *total = b[0];
  const float *partial = b[1];
  float s = 0.0f;
  for (int32_t g = 0; g < v[0]; g++) s += partial[g];
  total[0] = s;
}
