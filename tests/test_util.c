#include "test_util.h"

#include <stdio.h>
#include <string.h>

const char *const test_kernels_source =
    "#define IDX(l, t) ((size_t)(l)->gid[0] * (l)->lsz[0] + (t))\n"
    "void add_scalar(void *const *b, const int32_t *v, const hcq_launch_t *l) {\n"
    "  int32_t *out = b[0]; const int32_t *a = b[1];\n"
    "  for (uint32_t t = 0; t < l->lsz[0]; t++) { size_t i = IDX(l, t); if (i < (size_t)v[1]) out[i] = a[i] + v[0]; }\n"
    "}\n"
    "void mul_add(void *const *b, const int32_t *v, const hcq_launch_t *l) {\n"
    "  uint32_t *x = b[0];\n"
    "  for (uint32_t t = 0; t < l->lsz[0]; t++) { size_t i = IDX(l, t); if (i < (size_t)v[2]) x[i] = x[i] * (uint32_t)v[0] + (uint32_t)v[1]; }\n"
    "}\n"
    "void add2(void *const *b, const int32_t *v, const hcq_launch_t *l) {\n"
    "  int32_t *out = b[0]; const int32_t *x = b[1], *y = b[2];\n"
    "  for (uint32_t t = 0; t < l->lsz[0]; t++) { size_t i = IDX(l, t); if (i < (size_t)v[0]) out[i] = x[i] + y[i]; }\n"
    "}\n"
    "void fill(void *const *b, const int32_t *v, const hcq_launch_t *l) {\n"
    "  int32_t *out = b[0];\n"
    "  for (uint32_t t = 0; t < l->lsz[0]; t++) { size_t i = IDX(l, t); if (i < (size_t)v[1]) out[i] = v[0]; }\n"
    "}\n"
    "void mix(void *const *b, const int32_t *v, const hcq_launch_t *l) {\n"
    "  uint32_t *out = b[0]; const uint32_t *x = b[1], *y = b[2];\n"
    "  for (uint32_t t = 0; t < l->lsz[0]; t++) { size_t i = IDX(l, t); if (i < (size_t)v[2]) out[i] = x[i] * (uint32_t)v[0] + y[i] + (uint32_t)v[1]; }\n"
    "}\n"
    "void record_groups(void *const *b, const int32_t *v, const hcq_launch_t *l) {\n"
    "  (void)v; int32_t *out = b[0];\n"
    "  size_t g = ((size_t)l->gid[2] * l->gsz[1] + l->gid[1]) * l->gsz[0] + l->gid[0];\n"
    "  out[g] += (int32_t)(l->lsz[0] * l->lsz[1] * l->lsz[2]);\n"
    "}\n";

void test_expect_failure(hcq_status_t st, hcq_status_code_t code, const char *what, const char **fragments) {
  if (!st) cr_assert_fail("%s succeeded; expected %s", what, hcq_status_code_name(code));
  char msg[4096];
  snprintf(msg, sizeof(msg), "%s", hcq_status_message(st));
  hcq_status_code_t got = hcq_status_code(st);
  hcq_status_free(st);
  if (got != code) cr_assert_fail("%s failed with %s, expected %s: %s", what, hcq_status_code_name(got), hcq_status_code_name(code), msg);
  for (const char **f = fragments; *f; f++)
    if (!strstr(msg, *f)) cr_assert_fail("%s: message lacks \"%s\": %s", what, *f, msg);
}

hcq_device_t *test_open(const char *name) {
  hcq_device_t *dev = NULL;
  OK(hcq_device_open(name, &dev));
  return dev;
}

void test_close(hcq_device_t *dev) { OK(hcq_device_close(dev)); }

hcq_buffer_t *test_buffer(hcq_device_t *dev, uint64_t size) {
  hcq_buffer_t *b = NULL;
  OK(hcq_buffer_create(dev, size, &b));
  return b;
}

hcq_buffer_t *test_buffer_iota(hcq_device_t *dev, size_t count, int32_t mul, int32_t add) {
  hcq_buffer_t *b = test_buffer(dev, count * 4);
  int32_t *h = malloc(count * 4);
  cr_assert(h);
  for (size_t i = 0; i < count; i++) h[i] = (int32_t)((uint32_t)i * (uint32_t)mul + (uint32_t)add);
  OK(hcq_buffer_copyin(b, 0, h, count * 4));
  /* Raw queues are not ordered after eager work: make the data visible to them too. */
  OK(hcq_device_synchronize(dev));
  free(h);
  return b;
}

void test_read(hcq_buffer_t *buf, void *dst, uint64_t size) { OK(hcq_buffer_copyout(buf, 0, dst, size)); }

hcq_program_t *test_program(hcq_device_t *dev, const char *entry, const char *source) {
  hcq_program_t *p = NULL;
  OK(hcq_program_create(dev, entry, source, &p));
  return p;
}
