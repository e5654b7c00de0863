#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/object.h"
#include "core/options.h"
#include "trace/trace_internal.h"

static hcq__options_t g_options;
static pthread_once_t g_options_once = PTHREAD_ONCE_INIT;

/* Reads an integer variable in [lo, hi]; anything else keeps the default, with a warning. */
static int64_t env_int(const char *name, int64_t def, int64_t lo, int64_t hi) {
  const char *s = getenv(name);
  if (!s || !*s) return def;
  char *end;
  errno = 0;
  long long v = strtoll(s, &end, 10);
  if (errno || *end || v < lo || v > hi) {
    fprintf(stderr, "hcq: ignoring %s=\"%s\": expected an integer in [%" PRId64 ", %" PRId64 "]\n",
            name, s, lo, hi);
    return def;
  }
  return v;
}

/* A copy of a string variable, whole (no length limit), or def when unset or empty. */
/* A short setting (a library name, an architecture): copied into out. */
static void env_copy(const char *name, const char *def, char *out, size_t size) {
  const char *s = getenv(name);
  snprintf(out, size, "%s", s && *s ? s : def);
}

static const char *env_dup(const char *name, const char *def) {
  const char *s = getenv(name);
  return strdup(s && *s ? s : def);
}

static const char *concat(const char *a, const char *b) {
  size_t n = strlen(a) + strlen(b) + 1;
  char *s = malloc(n);
  if (s) snprintf(s, n, "%s%s", a, b);
  return s;
}

/* The kernel cache is per user: the last resort lives in TMPDIR under a name with the effective uid
 * (cpu_compile.c creates it 0700 and refuses it when someone else owns it). */
static void load_cache_dir(hcq__options_t *o) {
  const char *dir;
  if ((dir = getenv("HCQ_CACHE_DIR")) && *dir) {
    o->cache_dir = strdup(dir);
    o->cache_dir_from = "HCQ_CACHE_DIR";
  } else if ((dir = getenv("XDG_CACHE_HOME")) && *dir) {
    o->cache_dir = concat(dir, "/hcq");
    o->cache_dir_from = "XDG_CACHE_HOME";
  } else if ((dir = getenv("HOME")) && *dir) {
    o->cache_dir = concat(dir, "/.cache/hcq");
    o->cache_dir_from = "HOME";
  } else {
    char name[64];
    snprintf(name, sizeof(name), "/hcq-cache-%ld", (long)geteuid());
    o->cache_dir = concat(o->tmp_dir ? o->tmp_dir : "/tmp", name);
    o->cache_dir_from = "TMPDIR";
  }
}

static void load_options(void) {
  hcq__options_t *o = &g_options;
  o->wait_timeout_ms =
      env_int("HCQ_WAIT_TIMEOUT_MS", HCQ_DEFAULT_WAIT_TIMEOUT_MS, 0, INT64_C(1) << 40);
  o->cpu_threads = (unsigned)env_int("HCQ_CPU_THREADS", 0, 0, 256);
  o->graph_inflight = (unsigned)env_int("HCQ_GRAPH_INFLIGHT", 2, 1, 16);
  o->cpu_min_parallel = (uint64_t)env_int("HCQ_CPU_MIN_PARALLEL", 8192, 1, INT64_MAX);
  o->spin_ns = (uint64_t)env_int("HCQ_SPIN_NS", 20000, 0, INT64_C(10000000000));
  o->staging_chunk = (uint64_t)env_int("HCQ_STAGING_CHUNK", 2 << 20, 64, INT64_C(1) << 32);
  o->kernargs_ring = (uint64_t)env_int("HCQ_KERNARGS_RING", 1 << 20, 4096, INT64_C(1) << 32);
  o->jit_batch_size = (unsigned)env_int("HCQ_JIT_BATCH_SIZE", 32, 1, 1 << 20);
  o->validate = env_int("HCQ_VALIDATE", 0, 0, 1) != 0;
  hcq__validating = o->validate;
  o->cpu_isolate = env_int("HCQ_CPU_ISOLATE", 0, 0, 1) != 0;
  o->portable = env_int("HCQ_PORTABLE", 0, 0, 1) != 0;
  o->vulkan_virtual = env_int("HCQ_VULKAN_VIRTUAL", 0, 0, 1) != 0;
  env_copy("HCQ_PROFILE", "", o->profile, sizeof(o->profile));
  if (!strcmp(o->profile, "0")) o->profile[0] = '\0';
  hcq__trace_start_from_env(o->profile); /* the profiler, on from the first use of the library */
  o->cc = env_dup("HCQ_CC", "cc");
  /* For the machine the kernels run on, as a JIT compiles; no FMA contraction, so that a kernel
   * gives the same bits on hosts with and without FMA and as host code built for the baseline ISA.
   */
  o->cflags = env_dup("HCQ_CFLAGS", HCQ__DEFAULT_CFLAGS);
  o->tmp_dir = env_dup("TMPDIR", "/tmp");
  load_cache_dir(o);
  o->cache_max_bytes = (uint64_t)env_int("HCQ_CACHE_MAX_MB", 0, 0, INT64_C(1) << 30) << 20;
  env_copy("HCQ_CUDA_LIBRARY", "libcuda.so.1", o->cuda_library, sizeof(o->cuda_library));
  env_copy("HCQ_NVRTC_LIBRARY", "", o->nvrtc_library, sizeof(o->nvrtc_library));
  env_copy("HCQ_CUDA_ARCH", "", o->cuda_arch, sizeof(o->cuda_arch));
}

const hcq__options_t *hcq__options(void) {
  pthread_once(&g_options_once, load_options);
  return &g_options;
}
