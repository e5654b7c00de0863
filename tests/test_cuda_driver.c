/* What NVIDIA's driver does that a host-run stand-in would hide, against tests/fake_cuda (which is
 * told, test by test, to behave as such a driver does): a driver older than NVRTC, timestamps into
 * ordinary host memory, kernel arguments in GPU memory, errors that end the context, a driver
 * without the PTX JIT. Every test configures the stand-in through its environment before hcq loads
 * it (Criterion runs each test in a process of its own), so the suite runs only on the stand-in and
 * skips elsewhere. Compiling tests skip where NVRTC is missing. */
#include <dlfcn.h>
#include <inttypes.h>
#include <time.h>

#include "test_util.h"

TestSuite(cuda_driver, .timeout = 120);

static const char k_source[] =
    "extern \"C\" __global__ void add_const(unsigned *y, const unsigned *x, int n, int k) {\n"
    "  long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;\n"
    "  if (i < n) y[i] = x[i] + (unsigned)k;\n"
    "}\n"
    "extern \"C\" __global__ void hcq_fake_fault(unsigned *y) {\n"
    "  *(volatile unsigned *)(unsigned long long)y[0] = 1u; /* y[0] is 0: a write to address 0 */\n"
    "}\n";

/* The same add_const as hand-written PTX of a given ISA version (the stand-in runs its host twin).
 */
static void ptx_of_version(const char *version, char *out, size_t size) {
  snprintf(out, size,
           ".version %s\n.target sm_90\n.address_size 64\n"
           ".visible .entry add_const(.param .u64 y, .param .u64 x, .param .u32 n, .param .u32 k)\n"
           "{\n  ret;\n}\n",
           version);
}

/* A kernel as PTX text (no NVRTC needed; the stand-in runs its host twin). */
static hcq_program_t *ptx_program(hcq_device_t *d, const char *entry) {
  char ptx[512];
  if (!strcmp(entry, "add_const"))
    ptx_of_version("8.0", ptx, sizeof(ptx));
  else
    snprintf(ptx, sizeof(ptx),
             ".version 8.0\n.target sm_90\n.address_size 64\n.visible .entry %s(.param .u64 y)\n"
             "{\n  ret;\n}\n",
             entry);
  hcq_program_t *p = NULL;
  OK(hcq_program_create(d, entry, ptx, &p));
  return p;
}

static void fake_or_skip(void) {
  const char *lib = getenv("HCQ_CUDA_LIBRARY");
  if (!lib || !strstr(lib, "fake"))
    cr_skip_test("these tests configure the stand-in driver (tests/fake_cuda)");
}

/* The NVRTC 13 this machine has, or skip: what the version tests need to be newer than a 12.x
 * driver. */
static void nvrtc13_or_skip(void) {
  void *h = dlopen("libnvrtc.so.13", RTLD_NOW | RTLD_LOCAL);
  if (!h) cr_skip_test("no NVRTC 13 here (libnvrtc.so.13)");
  /* Left loaded: unloading NVRTC strands what its static C++ run time allocated at load. */
}

static hcq_device_t *open_cuda(void) {
  hcq_device_t *d = NULL;
  OK(hcq_device_open("CUDA:0", &d));
  return d;
}

static hcq_program_t *program_or_skip(hcq_device_t *d, const char *entry) {
  hcq_program_t *p = NULL;
  hcq_status_t st = hcq_program_create(d, entry, k_source, &p);
  if (st && hcq_status_code(st) == HCQ_UNAVAILABLE &&
      strstr(hcq_status_message(st), "cannot compile CUDA C:")) {
    hcq_status_destroy(st);
    cr_skip_test("NVRTC is not available here");
  }
  OK(st);
  return p;
}

static void cuda_description(char *out, size_t size) {
  hcq_device_info_t infos[8];
  size_t n = hcq_device_query(infos, 8);
  out[0] = '\0';
  for (size_t i = 0; i < n && i < 8; i++)
    if (infos[i].kind == HCQ_DEVICE_CUDA) snprintf(out, size, "%s", infos[i].description);
}

/* add_const over n words of a CUDA buffer, checked against the host. */
static void check_add_const(hcq_device_t *d, hcq_program_t *p) {
  enum { N = 1024 };
  uint32_t x[N], y[N];
  for (uint32_t i = 0; i < N; i++) x[i] = i * 7u + 1u;
  hcq_buffer_t *bx = test_buffer(d, sizeof(x)), *by = test_buffer(d, sizeof(y));
  OK(hcq_buffer_copyin(bx, 0, x, sizeof(x)));
  int32_t vals[2] = {N, 5};
  hcq_buffer_t *bufs[2] = {by, bx};
  hcq_launch_desc_t l = {p, bufs, 2, vals, 2, {N / 128, 1, 1}, {128, 1, 1}};
  OK(hcq_launch(&l));
  test_read(by, y, sizeof(y));
  for (uint32_t i = 0; i < N; i++) cr_assert_eq(y[i], x[i] + 5u, "y[%u]", i);
  hcq_buffer_release(bx);
  hcq_buffer_release(by);
}

/* ---- 1. NVRTC newer than the driver ---- */

Test(cuda_driver, a_driver_older_than_nvrtc_refuses_newer_ptx_and_hcq_names_both_versions) {
  fake_or_skip();
  nvrtc13_or_skip();
  setenv("HCQ_FAKE_CUDA_DRIVER_VERSION", "12.8", 1);
  setenv("HCQ_NVRTC_LIBRARY", "libnvrtc.so.13", 1);
  hcq_device_t *d = open_cuda();
  /* The stand-in, as the driver: PTX ISA 8.7 loads on CUDA 12.8, 9.0 does not. */
  char ptx[512];
  hcq_program_t *p = NULL;
  ptx_of_version("8.7", ptx, sizeof(ptx));
  OK(hcq_program_create(d, "add_const", ptx, &p));
  hcq_program_release(p);
  ptx_of_version("9.0", ptx, sizeof(ptx));
  FAILS(hcq_program_create(d, "add_const", ptx, &p), HCQ_DEVICE_ERROR,
        "CUDA_ERROR_UNSUPPORTED_PTX_VERSION", "PTX ISA 9.0", "CUDA 12.8", "8.7");
  /* CUDA C through NVRTC 13: refused before the driver sees it, naming both versions. */
  FAILS(hcq_program_create(d, "add_const", k_source, &p), HCQ_UNAVAILABLE, "NVRTC 13.0",
        "CUDA 12.8", "PTX ISA 9.0", "8.7", "add_const");
  char desc[256];
  cuda_description(desc, sizeof(desc));
  cr_assert(strstr(desc, "driver 12.8") && strstr(desc, "NVRTC 13.0 INCOMPATIBLE"), "%s", desc);
  test_close(d);
}

Test(cuda_driver, hcq_picks_the_nvrtc_an_older_driver_loads_among_those_found) {
  fake_or_skip();
  nvrtc13_or_skip();
  const char *fake = getenv("HCQ_FAKE_NVRTC");
  cr_assert(fake && *fake, "CTest sets HCQ_FAKE_NVRTC to the stand-in NVRTC 12.8");
  char list[600];
  /* the newest first: order alone would pick it */
  snprintf(list, sizeof(list), "libnvrtc.so.13:%s", fake);
  setenv("HCQ_NVRTC_LIBRARY", list, 1);
  setenv("HCQ_FAKE_CUDA_DRIVER_VERSION", "12.8", 1);
  hcq_device_t *d = open_cuda();
  hcq_program_t *p = program_or_skip(d, "add_const");
  check_add_const(d, p);
  char desc[256];
  cuda_description(desc, sizeof(desc));
  cr_assert(strstr(desc, "NVRTC 12.8 compatible with the driver") &&
                strstr(desc, "also found 13.0") && strstr(desc, "fake_nvrtc"),
            "%s", desc);
  hcq_program_release(p);
  test_close(d);
}

Test(cuda_driver, with_a_driver_as_new_as_both_the_newest_nvrtc_is_chosen) {
  fake_or_skip();
  nvrtc13_or_skip();
  char list[600];
  snprintf(list, sizeof(list), "%s:libnvrtc.so.13", getenv("HCQ_FAKE_NVRTC"));
  setenv("HCQ_NVRTC_LIBRARY", list, 1);
  setenv("HCQ_FAKE_CUDA_DRIVER_VERSION", "13.0", 1);
  hcq_device_t *d = open_cuda();
  hcq_program_t *p = program_or_skip(d, "add_const");
  check_add_const(d, p);
  char desc[256];
  cuda_description(desc, sizeof(desc));
  cr_assert(
      strstr(desc, "NVRTC 13.0 compatible with the driver") && strstr(desc, "also found 12.8"),
      "%s", desc);
  hcq_program_release(p);
  test_close(d);
}

/* ---- 2. TIMESTAMP into ordinary host memory ---- */

static uint64_t mono_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* A CUDA compute queue: timestamp into sig, then set it to 1; waits for it. */
static hcq_status_t timestamp_and_signal(hcq_device_t *d, hcq_signal_t *sig) {
  hcq_queue_t *q = NULL;
  OK(hcq_queue_create(HCQ_QUEUE_COMPUTE, &q));
  OK(hcq_queue_timestamp(q, hcq_imm((int64_t)hcq_signal_address(sig))));
  OK(hcq_queue_signal(q, hcq_imm((int64_t)hcq_signal_address(sig)), hcq_imm(1)));
  hcq_status_t st;
  if ((st = hcq_queue_submit(q, d, NULL, 0))) goto done;
  st = hcq_signal_wait(sig, 1, 20000);
done:
  hcq_queue_destroy(q);
  return st;
}

Test(cuda_driver, a_timestamp_into_a_cpu_devices_signal_is_written_on_the_host_without_hmm) {
  fake_or_skip();
  setenv("HCQ_WAIT_TIMEOUT_MS", "20000", 1);
  hcq_device_t *d = open_cuda(), *cpu = test_open("CPU:0");
  hcq_signal_t *host_sig = NULL, *gpu_sig = NULL;
  OK(hcq_signal_create(cpu, "on the CPU", 0, &host_sig));
  OK(hcq_signal_create(d, "on the GPU", 0, &gpu_sig));
  uint64_t t0 = mono_ns();
  OK(timestamp_and_signal(d, host_sig));
  uint64_t t1 = mono_ns(), ts = hcq_signal_timestamp(host_sig);
  cr_assert(ts >= t0 && ts <= t1,
            "the timestamp %" PRIu64 " is the host clock's, between %" PRIu64 " and %" PRIu64, ts,
            t0, t1);
  /* A signal in memory the GPU maps still gets the kernel's timestamp; the device is fine. */
  OK(timestamp_and_signal(d, gpu_sig));
  cr_assert_gt(hcq_signal_timestamp(gpu_sig), 0u);
  OK(hcq_device_synchronize(d));
  hcq_signal_destroy(host_sig);
  hcq_signal_destroy(gpu_sig);
  test_close(d);
  test_close(cpu);
}

/* ---- 3. kernel arguments in GPU memory ---- */

Test(cuda_driver, kernel_arguments_in_gpu_memory_are_refused_not_read_on_the_host) {
  fake_or_skip();
  hcq_device_t *d = open_cuda(), *cpu = test_open("CPU:0");
  hcq_program_t *p = ptx_program(d, "add_const");
  enum { N = 256 };
  hcq_buffer_t *bx = test_buffer(d, 4 * N), *by = test_buffer(d, 4 * N);
  hcq_buffer_t *gpu_args = test_buffer(d, 64), *host_args = test_buffer(cpu, 64);
  uint8_t block[24];
  uint64_t ptrs[2] = {hcq_buffer_address(by), hcq_buffer_address(bx)};
  int32_t vals[2] = {N, 9};
  memcpy(block, ptrs, 16);
  memcpy(block + 16, vals, 8);
  OK(hcq_buffer_copyin(gpu_args, 0, block, sizeof(block)));
  OK(hcq_buffer_copyin(host_args, 0, block, sizeof(block)));
  /* The queue reads the blocks at submit, outside either device's ordering. */
  OK(hcq_device_synchronize(cpu));
  OK(hcq_device_synchronize(d));
  hcq_operand_t g[3] = {hcq_imm(N / 64), hcq_imm(1), hcq_imm(1)},
                l[3] = {hcq_imm(64), hcq_imm(1), hcq_imm(1)};
  hcq_queue_t *q = NULL;
  OK(hcq_queue_create(HCQ_QUEUE_COMPUTE, &q));
  OK(hcq_queue_exec(q, p, hcq_imm((int64_t)hcq_buffer_address(gpu_args)), 2, g, l));
  FAILS(hcq_queue_submit(q, d, NULL, 0), HCQ_INVALID_ARGUMENT, "add_const", "CUDA:0", "GPU memory",
        "host");
  hcq_queue_destroy(q);
  /* The same block in host memory runs, and the device kept working. */
  OK(hcq_queue_create(HCQ_QUEUE_COMPUTE, &q));
  OK(hcq_queue_exec(q, p, hcq_imm((int64_t)hcq_buffer_address(host_args)), 2, g, l));
  /* A raw submission is not on the device timeline: a signal says when it ran. */
  hcq_signal_t *ran = NULL;
  OK(hcq_signal_create(d, "ran", 0, &ran));
  OK(hcq_queue_signal(q, hcq_imm((int64_t)hcq_signal_address(ran)), hcq_imm(1)));
  OK(hcq_queue_submit(q, d, NULL, 0));
  OK(hcq_signal_wait(ran, 1, 20000));
  hcq_signal_destroy(ran);
  uint32_t y[N];
  test_read(by, y, sizeof(y));
  for (int i = 0; i < N; i++) cr_assert_eq(y[i], 9u, "y[%d] (x is zeros)", i);
  hcq_queue_destroy(q);
  hcq_buffer_release(bx);
  hcq_buffer_release(by);
  hcq_buffer_release(gpu_args);
  hcq_buffer_release(host_args);
  hcq_program_release(p);
  test_close(d);
  test_close(cpu);
}

/* ---- 4. errors that end the context for good ---- */

static void sticky_error_loses_the_device(const char *code, const char *name) {
  fake_or_skip();
  setenv("HCQ_FAKE_CUDA_FAULT", code, 1);
  setenv("HCQ_WAIT_TIMEOUT_MS", "20000", 1);
  hcq_device_t *d = open_cuda();
  hcq_program_t *p = ptx_program(d, "hcq_fake_fault");
  hcq_buffer_t *b = test_buffer(d, 64);
  hcq_launch_desc_t l = {p, &b, 1, NULL, 0, {1, 1, 1}, {1, 1, 1}};
  hcq_status_t st = test_launch_and_wait(&l, d);
  /* Not HCQ_TIMEOUT after 20 s: the error itself says the context is gone. */
  FAILS(st, HCQ_DEVICE_LOST, "CUDA:0", name);
  FAILS(hcq_device_synchronize(d), HCQ_DEVICE_LOST, "CUDA:0");
  hcq_buffer_release(b);
  hcq_program_release(p);
  OK(hcq_device_close(d));
}

Test(cuda_driver, contained_loses_the_device_at_once) {
  sticky_error_loses_the_device("226", "CUDA_ERROR_CONTAINED");
}
Test(cuda_driver, tensor_memory_leak_loses_the_device_at_once) {
  sticky_error_loses_the_device("721", "CUDA_ERROR_TENSOR_MEMORY_LEAK");
}
Test(cuda_driver, launch_failed_loses_the_device_at_once) {
  sticky_error_loses_the_device("719", "CUDA_ERROR_LAUNCH_FAILED");
}

/* ---- 8. the timestamp kernel without the driver's PTX JIT ---- */

Test(cuda_driver, timestamps_work_without_the_ptx_jit_through_an_nvrtc_cubin) {
  fake_or_skip();
  setenv("HCQ_FAKE_CUDA_NO_JIT", "1", 1);
  hcq_device_t *d = open_cuda();
  hcq_program_t *p = program_or_skip(d, "add_const"); /* a cubin: loads without the JIT */
  hcq_signal_t *sig = NULL;
  OK(hcq_signal_create(d, "stamped", 0, &sig));
  OK(timestamp_and_signal(d, sig));
  cr_assert_gt(hcq_signal_timestamp(sig), 0u);
  hcq_signal_destroy(sig);
  hcq_program_release(p);
  test_close(d);
}

Test(cuda_driver, without_the_ptx_jit_or_nvrtc_a_timestamp_says_so_plainly) {
  fake_or_skip();
  setenv("HCQ_FAKE_CUDA_NO_JIT", "1", 1);
  setenv("HCQ_NVRTC_LIBRARY", "/nonexistent/libnvrtc.so.13", 1);
  hcq_device_t *d = open_cuda();
  hcq_signal_t *sig = NULL;
  OK(hcq_signal_create(d, "stamped", 0, &sig));
  hcq_queue_t *q = NULL;
  OK(hcq_queue_create(HCQ_QUEUE_COMPUTE, &q));
  OK(hcq_queue_timestamp(q, hcq_imm((int64_t)hcq_signal_address(sig))));
  OK(hcq_queue_signal(q, hcq_imm((int64_t)hcq_signal_address(sig)), hcq_imm(1)));
  FAILS(hcq_queue_submit(q, d, NULL, 0), HCQ_UNAVAILABLE, "CUDA:0", "timestamp", "PTX JIT",
        "CUDA_ERROR_JIT_COMPILER_NOT_FOUND", "NVRTC");
  /* Nothing of the refused submission ran; the device still works. */
  cr_assert_eq(hcq_signal_value(sig), 0u);
  hcq_queue_destroy(q);
  OK(hcq_queue_create(HCQ_QUEUE_COMPUTE, &q));
  OK(hcq_queue_signal(q, hcq_imm((int64_t)hcq_signal_address(sig)), hcq_imm(2)));
  OK(hcq_queue_submit(q, d, NULL, 0));
  OK(hcq_signal_wait(sig, 2, 20000));
  hcq_queue_destroy(q);
  hcq_signal_destroy(sig);
  test_close(d);
}
