#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/internal.h"

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
    fprintf(stderr, "hcq: ignoring %s=\"%s\": expected an integer in [%" PRId64 ", %" PRId64 "]\n", name, s, lo, hi);
    return def;
  }
  return v;
}

static void env_str(const char *name, const char *def, char *out, size_t size) {
  const char *s = getenv(name);
  snprintf(out, size, "%s", s && *s ? s : def);
}

static void load_options(void) {
  hcq__options_t *o = &g_options;
  long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
  if (ncpu < 1) ncpu = 1;
  if (ncpu > 64) ncpu = 64;
  o->wait_timeout_ms = env_int("HCQ_WAIT_TIMEOUT_MS", HCQ_DEFAULT_WAIT_TIMEOUT_MS, 0, INT64_C(1) << 40);
  o->cpu_threads = (unsigned)env_int("HCQ_CPU_THREADS", ncpu, 1, 256);
  o->cpu_min_parallel = (uint64_t)env_int("HCQ_CPU_MIN_PARALLEL", 16384, 1, INT64_MAX);
  o->spin_ns = (uint64_t)env_int("HCQ_SPIN_NS", 20000, 0, INT64_C(10000000000));
  o->staging_chunk = (uint64_t)env_int("HCQ_STAGING_CHUNK", 2 << 20, 64, INT64_C(1) << 32);
  o->kernargs_ring = (uint64_t)env_int("HCQ_KERNARGS_RING", 1 << 20, 4096, INT64_C(1) << 32);
  o->jit_batch_size = (unsigned)env_int("HCQ_JIT_BATCH_SIZE", 32, 1, 1 << 20);
  o->validate = env_int("HCQ_VALIDATE", 0, 0, 1) != 0;
  hcq__validating = o->validate;
  o->cpu_isolate = env_int("HCQ_CPU_ISOLATE", 0, 0, 1) != 0;
  o->vulkan_virtual = env_int("HCQ_VULKAN_VIRTUAL", 0, 0, 1) != 0;
  env_str("HCQ_PROFILE", "", o->profile, sizeof(o->profile));
  if (!strcmp(o->profile, "0")) o->profile[0] = '\0';
  env_str("HCQ_CC", "cc", o->cc, sizeof(o->cc));
  env_str("HCQ_CFLAGS", "-O2", o->cflags, sizeof(o->cflags));
  const char *dir = getenv("HCQ_CACHE_DIR");
  if (dir && *dir) {
    snprintf(o->cache_dir, sizeof(o->cache_dir), "%s", dir);
  } else if ((dir = getenv("XDG_CACHE_HOME")) && *dir) {
    snprintf(o->cache_dir, sizeof(o->cache_dir), "%s/hcq", dir);
  } else if ((dir = getenv("HOME")) && *dir) {
    snprintf(o->cache_dir, sizeof(o->cache_dir), "%s/.cache/hcq", dir);
  } else {
    snprintf(o->cache_dir, sizeof(o->cache_dir), "/tmp/hcq-cache-%ld", (long)getuid());
  }
}

const hcq__options_t *hcq__options(void) {
  pthread_once(&g_options_once, load_options);
  return &g_options;
}
