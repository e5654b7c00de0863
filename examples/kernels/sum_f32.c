/* A sum across work-groups in two launches (no atomics, the same bits on every run):
 *   sum_groups bufs [partial, x], vals [n, per]: the thread with index i = gid*lsz + t, i a
 *   multiple of per, adds x[i .. i + per - 1] (those < n) in order into partial[i / per];
 *   sum_final   bufs [total, partial], vals [parts]: thread 0 adds partial[0 .. parts-1] in order.
 * The graph file launches sum_groups with per = its group size, so each group makes one partial. */
void sum_groups(void *const *b, const int32_t *v, const hcq_launch_t *l) {
  float *partial = b[0];
  const float *x = b[1];
  size_t n = (size_t)v[0], per = (size_t)v[1];
  for (uint32_t t = 0; t < l->lsz[0]; t++) {
    size_t i = (size_t)l->gid[0] * l->lsz[0] + t;
    if (i >= n || i % per) continue;
    float s = 0.0f;
    for (size_t k = i; k < i + per && k < n; k++) s += x[k];
    partial[i / per] = s;
  }
}

void sum_final(void *const *b, const int32_t *v, const hcq_launch_t *l) {
  if (l->gid[0] != 0) return;
  float *total = b[0];
  const float *partial = b[1];
  float s = 0.0f;
  for (int32_t g = 0; g < v[0]; g++) s += partial[g];
  total[0] = s;
}
