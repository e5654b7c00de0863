#include "test_util.h"

#include <stdio.h>
#include <string.h>

const char *const test_kernels_source =
    "#define IDX(l, t) ((size_t)(l)->gid[0] * (l)->lsz[0] + (t))\n"
    "void add_scalar(void *const *b, const int32_t *v, const hcq_launch_t *l) {\n"
    "  int32_t *out = b[0]; const int32_t *a = b[1];\n"
    "  for (uint32_t t = 0; t < l->lsz[0]; t++) { size_t i = IDX(l, t); if (i < (size_t)v[1]) "
    "out[i] = a[i] + v[0]; }\n"
    "}\n"
    "void mul_add(void *const *b, const int32_t *v, const hcq_launch_t *l) {\n"
    "  uint32_t *x = b[0];\n"
    "  for (uint32_t t = 0; t < l->lsz[0]; t++) { size_t i = IDX(l, t); if (i < (size_t)v[2]) x[i] "
    "= x[i] * (uint32_t)v[0] + (uint32_t)v[1]; }\n"
    "}\n"
    "void add2(void *const *b, const int32_t *v, const hcq_launch_t *l) {\n"
    "  int32_t *out = b[0]; const int32_t *x = b[1], *y = b[2];\n"
    "  for (uint32_t t = 0; t < l->lsz[0]; t++) { size_t i = IDX(l, t); if (i < (size_t)v[0]) "
    "out[i] = x[i] + y[i]; }\n"
    "}\n"
    "void fill(void *const *b, const int32_t *v, const hcq_launch_t *l) {\n"
    "  int32_t *out = b[0];\n"
    "  for (uint32_t t = 0; t < l->lsz[0]; t++) { size_t i = IDX(l, t); if (i < (size_t)v[1]) "
    "out[i] = v[0]; }\n"
    "}\n"
    "void mix(void *const *b, const int32_t *v, const hcq_launch_t *l) {\n"
    "  uint32_t *out = b[0]; const uint32_t *x = b[1], *y = b[2];\n"
    "  for (uint32_t t = 0; t < l->lsz[0]; t++) { size_t i = IDX(l, t); if (i < (size_t)v[2]) "
    "out[i] = x[i] * (uint32_t)v[0] + y[i] + (uint32_t)v[1]; }\n"
    "}\n"
    "void record_groups(void *const *b, const int32_t *v, const hcq_launch_t *l) {\n"
    "  (void)v; int32_t *out = b[0];\n"
    "  size_t g = ((size_t)l->gid[2] * l->gsz[1] + l->gid[1]) * l->gsz[0] + l->gid[0];\n"
    "  out[g] += (int32_t)(l->lsz[0] * l->lsz[1] * l->lsz[2]);\n"
    "}\n";

/* Each kernel acts for the x threads of a group's first row, as the CPU kernels loop over lsz[0].
 */
const char *const test_kernels_glsl =
    "layout(buffer_reference, std430, buffer_reference_align = 4) buffer i32s { int v[]; };\n"
    "layout(buffer_reference, std430, buffer_reference_align = 4) buffer u32s { uint v[]; };\n"
    "#define I gl_GlobalInvocationID.x\n"
    "#define ROW0 (gl_LocalInvocationID.y == 0u && gl_LocalInvocationID.z == 0u)\n"
    "#ifdef HCQ_KERNEL_add_scalar\n"
    "void main() { if (ROW0 && I < uint(hcq_val(1))) i32s(hcq_buf(0)).v[I] = i32s(hcq_buf(1)).v[I] "
    "+ hcq_val(0); }\n"
    "#endif\n"
    "#ifdef HCQ_KERNEL_mul_add\n"
    "void main() { u32s x = u32s(hcq_buf(0));\n"
    "  if (ROW0 && I < uint(hcq_val(2))) x.v[I] = x.v[I] * uint(hcq_val(0)) + uint(hcq_val(1)); }\n"
    "#endif\n"
    "#ifdef HCQ_KERNEL_add2\n"
    "void main() { if (ROW0 && I < uint(hcq_val(0)))\n"
    "  i32s(hcq_buf(0)).v[I] = i32s(hcq_buf(1)).v[I] + i32s(hcq_buf(2)).v[I]; }\n"
    "#endif\n"
    "#ifdef HCQ_KERNEL_fill\n"
    "void main() { if (ROW0 && I < uint(hcq_val(1))) i32s(hcq_buf(0)).v[I] = hcq_val(0); }\n"
    "#endif\n"
    "#ifdef HCQ_KERNEL_mix\n"
    "void main() { if (ROW0 && I < uint(hcq_val(2)))\n"
    "  u32s(hcq_buf(0)).v[I] = u32s(hcq_buf(1)).v[I] * uint(hcq_val(0)) + u32s(hcq_buf(2)).v[I] + "
    "uint(hcq_val(1)); }\n"
    "#endif\n"
    "#ifdef HCQ_KERNEL_record_groups\n"
    "void main() { if (gl_LocalInvocationIndex != 0u) return;\n"
    "  uint g = (gl_WorkGroupID.z * gl_NumWorkGroups.y + gl_WorkGroupID.y) * gl_NumWorkGroups.x + "
    "gl_WorkGroupID.x;\n"
    "  i32s(hcq_buf(0)).v[g] += int(gl_WorkGroupSize.x * gl_WorkGroupSize.y * gl_WorkGroupSize.z); "
    "}\n"
    "#endif\n";

/* The same for CUDA devices: the x threads of a block's first row act, as on Vulkan. The stand-in
 * driver (tests/fake_cuda) runs host twins of these, line for line. */
const char *const test_kernels_cuda =
    "#define I ((unsigned long long)blockIdx.x * blockDim.x + threadIdx.x)\n"
    "#define ROW0 (threadIdx.y == 0 && threadIdx.z == 0)\n"
    "#define BELOW(n) (I < (unsigned long long)(n))\n"
    "extern \"C\" __global__ void add_scalar(int *out, const int *a, int k, int n) {\n"
    "  if (ROW0 && BELOW(n)) out[I] = a[I] + k;\n"
    "}\n"
    "extern \"C\" __global__ void mul_add(unsigned *x, int mul, int add, int n) {\n"
    "  if (ROW0 && BELOW(n)) x[I] = x[I] * (unsigned)mul + (unsigned)add;\n"
    "}\n"
    "extern \"C\" __global__ void add2(int *out, const int *x, const int *y, int n) {\n"
    "  if (ROW0 && BELOW(n)) out[I] = x[I] + y[I];\n"
    "}\n"
    "extern \"C\" __global__ void fill(int *out, int value, int n) {\n"
    "  if (ROW0 && BELOW(n)) out[I] = value;\n"
    "}\n"
    "extern \"C\" __global__ void mix(unsigned *out, const unsigned *x, const unsigned *y, int "
    "mul, int add, int n) {\n"
    "  if (ROW0 && BELOW(n)) out[I] = x[I] * (unsigned)mul + y[I] + (unsigned)add;\n"
    "}\n"
    "extern \"C\" __global__ void record_groups(int *out) {\n"
    "  if (threadIdx.x || threadIdx.y || threadIdx.z) return;\n"
    "  unsigned g = (blockIdx.z * gridDim.y + blockIdx.y) * gridDim.x + blockIdx.x;\n"
    "  out[g] += (int)(blockDim.x * blockDim.y * blockDim.z);\n"
    "}\n";

/* The same in Metal Shading Language (the ABI of docs/metal.md). The Metal stand-in
 * (tests/fake_metal) runs host twins of these, line for line. */
const char *const test_kernels_msl =
    "#include <metal_stdlib>\n"
    "using namespace metal;\n"
    "#define ARGS uint3 tg [[threadgroup_position_in_grid]], uint3 tid "
    "[[thread_position_in_threadgroup]], \\\n"
    "  uint3 ntg [[threadgroups_per_grid]], uint3 ntid [[threads_per_threadgroup]]\n"
    "#define I ((ulong)tg.x * ntid.x + tid.x)\n"
    "#define ROW0 (tid.y == 0 && tid.z == 0)\n"
    "kernel void add_scalar(device int *out [[buffer(0)]], device const int *a [[buffer(1)]],\n"
    "                       constant int *v [[buffer(2)]], ARGS) {\n"
    "  if (ROW0 && I < (ulong)(long)v[1]) out[I] = a[I] + v[0];\n"
    "}\n"
    "kernel void mul_add(device uint *x [[buffer(0)]], constant int *v [[buffer(1)]], ARGS) {\n"
    "  if (ROW0 && I < (ulong)(long)v[2]) x[I] = x[I] * (uint)v[0] + (uint)v[1];\n"
    "}\n"
    "kernel void add2(device int *out [[buffer(0)]], device const int *x [[buffer(1)]], device "
    "const int *y [[buffer(2)]],\n"
    "                 constant int *v [[buffer(3)]], ARGS) {\n"
    "  if (ROW0 && I < (ulong)(long)v[0]) out[I] = x[I] + y[I];\n"
    "}\n"
    "kernel void fill(device int *out [[buffer(0)]], constant int *v [[buffer(1)]], ARGS) {\n"
    "  if (ROW0 && I < (ulong)(long)v[1]) out[I] = v[0];\n"
    "}\n"
    "kernel void mix(device uint *out [[buffer(0)]], device const uint *x [[buffer(1)]], device "
    "const uint *y [[buffer(2)]],\n"
    "                constant int *v [[buffer(3)]], ARGS) {\n"
    "  if (ROW0 && I < (ulong)(long)v[2]) out[I] = x[I] * (uint)v[0] + y[I] + (uint)v[1];\n"
    "}\n"
    "kernel void record_groups(device int *out [[buffer(0)]], constant int *v [[buffer(1)]], ARGS) "
    "{\n"
    "  if (tid.x || tid.y || tid.z) return;\n"
    "  uint g = (tg.z * ntg.y + tg.y) * ntg.x + tg.x;\n"
    "  out[g] += (int)(ntid.x * ntid.y * ntid.z);\n"
    "}\n";

const test_backend_t test_backends[] = {
#define TEST_BACKEND_ENTRY(name, text) {text, HCQ_DEVICE_##name},
    HCQ_DEVICE_KINDS(TEST_BACKEND_ENTRY)
#undef TEST_BACKEND_ENTRY
};
const size_t test_backend_count = sizeof(test_backends) / sizeof(test_backends[0]);

const test_backend_t *test_backend_named(const char *kind) {
  for (size_t i = 0; i < test_backend_count; i++)
    if (!strcmp(test_backends[i].kind, kind)) return &test_backends[i];
  return NULL;
}

const char *test_backend_kernels(const test_backend_t *b) {
  uint32_t caps = hcq_device_kind_kernel_caps(b->id);
  return caps & HCQ_CAP_COMPILE_C       ? test_kernels_source
         : caps & HCQ_CAP_COMPILE_GLSL  ? test_kernels_glsl
         : caps & HCQ_CAP_COMPILE_CUDA  ? test_kernels_cuda
         : caps & HCQ_CAP_COMPILE_METAL ? test_kernels_msl
                                        : NULL;
}

void test_device_name(const test_backend_t *b, int i, char *out, size_t size) {
  snprintf(out, size, "%s:%d", b->kind, i);
}

const char *test_backend_absent(const test_backend_t *b, int ndev) {
  static char why[1024];
  setenv("HCQ_VULKAN_VIRTUAL", "1", 0);
  hcq_device_t *devs[8] = {0};
  const char *res = NULL;
  for (int i = 0; i < ndev && i < 8 && !res; i++) {
    char name[32];
    test_device_name(b, i, name, sizeof(name));
    hcq_status_t st = hcq_device_open(name, &devs[i]);
    if (st) {
      snprintf(why, sizeof(why), "%s", hcq_status_message(st));
      hcq_status_destroy(st);
      res = why;
    }
  }
  for (int i = 0; i < ndev && i < 8; i++)
    if (devs[i]) OK(hcq_device_close(devs[i]));
  if (!res && !test_backend_kernels(b)) {
    snprintf(why, sizeof(why),
             "%s: no test kernels in the language its devices compile (test_backend_kernels in "
             "test_util.c)",
             b->kind);
    res = why;
  }
  return res;
}

void test_expect_failure(hcq_status_t st, hcq_status_code_t code, const char *what,
                         const char **fragments) {
  if (!st) cr_assert_fail("%s succeeded; expected %s", what, hcq_status_code_name(code));
  char msg[4096];
  snprintf(msg, sizeof(msg), "%s", hcq_status_message(st));
  hcq_status_code_t got = hcq_status_code(st);
  hcq_status_destroy(st);
  if (got != code)
    cr_assert_fail("%s failed with %s, expected %s: %s", what, hcq_status_code_name(got),
                   hcq_status_code_name(code), msg);
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

void test_read(hcq_buffer_t *buf, void *dst, uint64_t size) {
  OK(hcq_buffer_copyout(buf, 0, dst, size));
}

hcq_status_t test_launch_and_wait(const hcq_launch_desc_t *l, hcq_device_t *d) {
  hcq_status_t st = hcq_launch(l);
  if (st) return st;
  return hcq_device_synchronize(d);
}

hcq_queue_t *test_gate_queue(hcq_device_t *d, hcq_queue_kind_t kind, hcq_signal_t *gate,
                             uint64_t value) {
  hcq_queue_t *q = NULL;
  OK(hcq_queue_create(kind, &q));
  OK(hcq_queue_wait(q, hcq_imm((int64_t)hcq_signal_address(gate)), hcq_imm((int64_t)value)));
  OK(hcq_queue_submit(q, d, NULL, 0));
  return q;
}

hcq_program_t *test_program(hcq_device_t *dev, const char *entry, const char *source) {
  hcq_program_t *p = NULL;
  OK(hcq_program_create(dev, entry, source, &p));
  return p;
}

int test_stderr_begin(void) {
  fflush(stderr);
  FILE *f = tmpfile();
  cr_assert_not_null(f, "no temporary file for stderr");
  int saved = dup(2);
  cr_assert(saved >= 0 && dup2(fileno(f), 2) == 2);
  fclose(f); /* descriptor 2 keeps the file */
  return saved;
}

void test_stderr_end(int saved, char *out, size_t size) {
  fflush(stderr);
  off_t len = lseek(2, 0, SEEK_CUR);
  size_t n = len > 0 ? ((size_t)len < size - 1 ? (size_t)len : size - 1) : 0;
  ssize_t got = n ? pread(2, out, n, 0) : 0;
  out[got > 0 ? got : 0] = '\0';
  cr_assert_eq(dup2(saved, 2), 2);
  close(saved);
}

size_t test_unhex(const char *hex, char *out) {
  size_t n = 0;
  for (; hex[0] && hex[1]; hex += 2) {
    unsigned v;
    cr_assert_eq(sscanf(hex, "%2x", &v), 1, "bad hex \"%s\"", hex);
    out[n++] = (char)v;
  }
  return n;
}
