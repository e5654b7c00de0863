/* Shared helpers for the Criterion suites. */
#ifndef HCQ_TEST_UTIL_H
#define HCQ_TEST_UTIL_H

#include <criterion/criterion.h>
#include <hcq/hcq.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Asserts that a call succeeded, printing the status message otherwise. */
#define OK(call)                                                            \
  do {                                                                      \
    hcq_status_t ok_st_ = (call);                                           \
    if (ok_st_) {                                                           \
      char ok_msg_[2048];                                                   \
      snprintf(ok_msg_, sizeof(ok_msg_), "%s", hcq_status_message(ok_st_)); \
      hcq_status_destroy(ok_st_);                                           \
      cr_assert_fail("%s failed: %s", #call, ok_msg_);                      \
    }                                                                       \
  } while (0)

/* Asserts that a call failed with code and that its message contains each given fragment. */
#define FAILS(call, code, ...) \
  test_expect_failure((call), (code), #call, (const char *[]){__VA_ARGS__, NULL})
void test_expect_failure(hcq_status_t st, hcq_status_code_t code, const char *what,
                         const char **fragments);

hcq_device_t *test_open(const char *name);
void test_close(hcq_device_t *dev);
hcq_buffer_t *test_buffer(hcq_device_t *dev, uint64_t size);
/* A buffer filled with int32 values f(i) = i * mul + add, synchronized (raw queues see it). */
hcq_buffer_t *test_buffer_iota(hcq_device_t *dev, size_t count, int32_t mul, int32_t add);
void test_read(hcq_buffer_t *buf, void *dst, uint64_t size);
/* The launch, then d's synchronize: the first failure of the two (a kernel's fault may surface in
 * either), for tests that expect one. */
hcq_status_t test_launch_and_wait(const hcq_launch_desc_t *l, hcq_device_t *d);
/* A raw queue of kind that waits until gate reaches value, submitted to d: work queued on that
 * engine after it waits for the host (free it after the gate opened). */
hcq_queue_t *test_gate_queue(hcq_device_t *d, hcq_queue_kind_t kind, hcq_signal_t *gate,
                             uint64_t value);
hcq_program_t *test_program(hcq_device_t *dev, const char *entry, const char *source);

/* Kernels used across suites (the CPU ABI of hcq/program.h). Every one loops over its group's
 * lsz[0] threads and skips indices >= n where it takes n.
 *   add_scalar(out, a; v0, n): out[i] = a[i] + v0
 *   mul_add(x; mul, add, n):   x[i] = x[i] * mul + add   (in place)
 *   add2(out, a, b; n):        out[i] = a[i] + b[i]
 *   fill(out; value, n):       out[i] = value
 *   mix(out, x, y; mul, add, n): out[i] = x[i] * mul + y[i] + add   (uint32 arithmetic)
 *   record_groups(out):        out[flat group id] += lsz[0] * lsz[1] * lsz[2] */
extern const char *const test_kernels_source;
/* The same kernels in GLSL for Vulkan devices (one source; each kernel under #ifdef
 * HCQ_KERNEL_name). */
extern const char *const test_kernels_glsl;
/* The same kernels in CUDA C for CUDA devices (extern "C" __global__, docs/cuda.md). */
extern const char *const test_kernels_cuda;
/* The same kernels in Metal Shading Language for Metal devices (docs/metal.md). */
extern const char *const test_kernels_msl;

/* The backends the conformance suite runs on: one entry per device kind of the public kind list
 * (HCQ_DEVICE_KINDS, whose kinds are the rows of the backend table, src/backends.c), in kind order.
 * Its test kernels are the ones above in the language its backend row says its devices compile
 * (hcq_device_kind_kernel_caps). A kind whose language has no test kernels, or whose device does
 * not open here, is skipped with the reason. */
typedef struct test_backend {
  const char *kind; /* device name prefix: "CPU", "VULKAN", "CUDA" */
  hcq_device_kind_t id;
} test_backend_t;
extern const test_backend_t test_backends[];
extern const size_t test_backend_count;
/* The entry of the kind named kind ("CPU"); NULL for none. */
const test_backend_t *test_backend_named(const char *kind);
/* The test kernels in the language b's devices compile; NULL when none are written in it. */
const char *test_backend_kernels(const test_backend_t *b);
/* "KIND:i" for a backend. */
void test_device_name(const test_backend_t *b, int i, char *out, size_t size);
/* NULL when the backend's devices 0..ndev-1 open here (they are closed again), else why not (static
 * storage). Vulkan opens extra logical devices over one GPU (HCQ_VULKAN_VIRTUAL=1, set here). */
const char *test_backend_absent(const test_backend_t *b, int ndev);

/* Standard error goes to a temporary file from test_stderr_begin (which returns the saved
 * descriptor) until test_stderr_end, which restores it and gives what was written (NUL-terminated,
 * cut to size). For warnings the library prints. */
int test_stderr_begin(void);
void test_stderr_end(int saved, char *out, size_t size);

/* The bytes a string of hex digit pairs spells ("41ff" -> 'A', 0xff) into out; their count. */
size_t test_unhex(const char *hex, char *out);

#endif
