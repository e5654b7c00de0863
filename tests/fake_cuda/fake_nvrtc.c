/* A stand-in for an older NVRTC, for the tests of how hcq chooses among the NVRTC libraries a
 * machine has (tests/test_cuda_driver.c): it says it is NVRTC HCQ_FAKE_NVRTC_VERSION (default 12.8)
 * and compiles with the real NVRTC it finds (HCQ_FAKE_NVRTC_REAL, else libnvrtc.so.13, .12), then
 * writes its own version's PTX ISA into the PTX's ".version" line (12.8: 8.7) and gives no cubin,
 * so what it makes is PTX that a driver of its version loads. The kernels themselves run as host
 * twins in tests/fake_cuda/fake_cuda.c, so the PTX body is never executed; what it proves is which
 * library hcq picks and that the driver is given what it accepts. */
#include <dlfcn.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define EXPORT __attribute__((visibility("default")))

typedef struct nvrtc_program_st *nvrtc_program;

static struct {
  void *lib;
  const char *(*nvrtcGetErrorString)(int);
  int (*nvrtcCreateProgram)(nvrtc_program *, const char *, const char *, int, const char *const *,
                            const char *const *);
  int (*nvrtcDestroyProgram)(nvrtc_program *);
  int (*nvrtcCompileProgram)(nvrtc_program, int, const char *const *);
  int (*nvrtcGetPTXSize)(nvrtc_program, size_t *);
  int (*nvrtcGetPTX)(nvrtc_program, char *);
  int (*nvrtcGetProgramLogSize)(nvrtc_program, size_t *);
  int (*nvrtcGetProgramLog)(nvrtc_program, char *);
  int (*nvrtcGetNumSupportedArchs)(int *);
  int (*nvrtcGetSupportedArchs)(int *);
} g_real;
static pthread_once_t g_once = PTHREAD_ONCE_INIT;

static void load(void) {
  const char *names[] = {getenv("HCQ_FAKE_NVRTC_REAL"), "libnvrtc.so.13", "libnvrtc.so.12",
                         "/usr/local/cuda/lib64/libnvrtc.so.13"};
  for (size_t i = 0; i < sizeof(names) / sizeof(names[0]) && !g_real.lib; i++)
    if (names[i] && *names[i]) g_real.lib = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
  if (!g_real.lib) return;
#define REAL(name) *(void **)&g_real.name = dlsym(g_real.lib, #name)
  REAL(nvrtcGetErrorString);
  REAL(nvrtcCreateProgram);
  REAL(nvrtcDestroyProgram);
  REAL(nvrtcCompileProgram);
  REAL(nvrtcGetPTXSize);
  REAL(nvrtcGetPTX);
  REAL(nvrtcGetProgramLogSize);
  REAL(nvrtcGetProgramLog);
  REAL(nvrtcGetNumSupportedArchs);
  REAL(nvrtcGetSupportedArchs);
#undef REAL
}

static bool ready(void) {
  pthread_once(&g_once, load);
  return g_real.lib && g_real.nvrtcCreateProgram && g_real.nvrtcGetPTX &&
         g_real.nvrtcGetSupportedArchs;
}

enum { NVRTC_ERROR_INTERNAL_ERROR = 11 };

static void version(int *major, int *minor) {
  const char *v = getenv("HCQ_FAKE_NVRTC_VERSION");
  if (!v || sscanf(v, "%d.%d", major, minor) != 2) *major = 12, *minor = 8;
}

/* The PTX ISA a toolkit of CUDA major.minor writes (the PTX ISA release notes' table). */
static int ptx_isa(int major, int minor) {
  if (major == 12 && minor >= 6) return minor == 6 ? 85 : 79 + minor;
  return (major - 4) * 10 + minor;
}

EXPORT const char *nvrtcGetErrorString(int rc) {
  return ready() && g_real.nvrtcGetErrorString ? g_real.nvrtcGetErrorString(rc)
                                               : "fake NVRTC: no real NVRTC found";
}
EXPORT int nvrtcVersion(int *major, int *minor) {
  version(major, minor);
  return 0;
}
EXPORT int nvrtcCreateProgram(nvrtc_program *p, const char *src, const char *name, int n,
                              const char *const *h, const char *const *inc) {
  return ready() ? g_real.nvrtcCreateProgram(p, src, name, n, h, inc) : NVRTC_ERROR_INTERNAL_ERROR;
}
EXPORT int nvrtcDestroyProgram(nvrtc_program *p) {
  return ready() ? g_real.nvrtcDestroyProgram(p) : 0;
}
EXPORT int nvrtcCompileProgram(nvrtc_program p, int n, const char *const *opts) {
  return ready() ? g_real.nvrtcCompileProgram(p, n, opts) : NVRTC_ERROR_INTERNAL_ERROR;
}
EXPORT int nvrtcGetPTXSize(nvrtc_program p, size_t *size) {
  return ready() ? g_real.nvrtcGetPTXSize(p, size) : NVRTC_ERROR_INTERNAL_ERROR;
}
EXPORT int nvrtcGetPTX(nvrtc_program p, char *ptx) {
  if (!ready()) return NVRTC_ERROR_INTERNAL_ERROR;
  int rc = g_real.nvrtcGetPTX(p, ptx);
  char *v = rc == 0 ? strstr(ptx, ".version ") : NULL;
  int major, minor;
  version(&major, &minor);
  int isa = ptx_isa(major, minor);
  /* "9.0" becomes "8.7": the same length, so the size already reported stays right. */
  if (v && v[9] >= '0' && v[9] <= '9' && v[10] == '.' && isa >= 10 && isa < 100) {
    v[9] = (char)('0' + isa / 10);
    v[11] = (char)('0' + isa % 10);
  }
  return rc;
}
EXPORT int nvrtcGetCUBINSize(nvrtc_program p, size_t *size) {
  (void)p;
  *size = 0; /* PTX only */
  return 0;
}
EXPORT int nvrtcGetCUBIN(nvrtc_program p, char *cubin) {
  (void)p, (void)cubin;
  return NVRTC_ERROR_INTERNAL_ERROR;
}
EXPORT int nvrtcGetProgramLogSize(nvrtc_program p, size_t *size) {
  return ready() ? g_real.nvrtcGetProgramLogSize(p, size) : NVRTC_ERROR_INTERNAL_ERROR;
}
EXPORT int nvrtcGetProgramLog(nvrtc_program p, char *log) {
  return ready() ? g_real.nvrtcGetProgramLog(p, log) : NVRTC_ERROR_INTERNAL_ERROR;
}
EXPORT int nvrtcGetNumSupportedArchs(int *n) {
  return ready() ? g_real.nvrtcGetNumSupportedArchs(n) : NVRTC_ERROR_INTERNAL_ERROR;
}
EXPORT int nvrtcGetSupportedArchs(int *archs) {
  return ready() ? g_real.nvrtcGetSupportedArchs(archs) : NVRTC_ERROR_INTERNAL_ERROR;
}
