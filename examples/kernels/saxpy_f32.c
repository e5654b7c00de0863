/* bufs [y, x], vals [n, a_bits]: y[i] = a * x[i] + y[i] for i < n, float arithmetic. The scalar a
 * travels as the 32-bit pattern of a float (values are int32 in the kernel ABI). */
void saxpy_f32(void *const *b, const int32_t *v, const hcq_launch_t *l) {
  float *y = b[0];
  const float *x = b[1];
  float a;
  __builtin_memcpy(&a, &v[1], sizeof(a));
  for (uint32_t t = 0; t < l->lsz[0]; t++) {
    size_t i = (size_t)l->gid[0] * l->lsz[0] + t;
    if (i < (size_t)v[0]) y[i] = a * x[i] + y[i];
  }
}
