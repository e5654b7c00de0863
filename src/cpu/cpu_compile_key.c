/* The kernel cache key (docs/kernel-cache.md): a hash of the source, the entry, the compiler's
 * words and identity, the flags and, when they ask for it ("native"), the host CPU. */
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/utsname.h>

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif
#define XXH_STATIC_LINKING_ONLY /* a hash state on the stack */
#include <xxhash.h>

#include "cpu/cpu_compile.h"
#include "cpu/cpu_compile_internal.h"
#include "hcq/program.h"

/* What follows the flags on every command line (OUT and SRC stand for the two paths): the
 * arguments compile_into (cpu_compile.c) adds. */
static const char k_fixed_args[] = "-shared -fPIC -o OUT SRC -lm";

/* ---- the host CPU, for -march=native and friends ---- */

static char g_cpu_identity[33];
static pthread_once_t g_cpu_once = PTHREAD_ONCE_INIT;

static int compare_lines(const void *a, const void *b) {
  return strcmp(*(char *const *)a, *(char *const *)b);
}

/* The fields of /proc/cpuinfo that say which instructions and which core: x86, Arm, RISC-V and
 * POWER spell them differently. Clock speeds, core numbers and the like are left out. */
static bool is_cpu_field(const char *line) {
  static const char *const fields[] = {"vendor_id",
                                       "cpu family",
                                       "model",
                                       "model name",
                                       "stepping",
                                       "flags",
                                       "CPU implementer",
                                       "CPU architecture",
                                       "CPU variant",
                                       "CPU part",
                                       "CPU revision",
                                       "Features",
                                       "isa",
                                       "uarch",
                                       "cpu",
                                       NULL};
  const char *colon = strchr(line, ':');
  if (!colon) return false;
  size_t klen = (size_t)(colon - line);
  while (klen && is_blank(line[klen - 1])) klen--;
  for (const char *const *f = fields; *f; f++)
    if (strlen(*f) == klen && !strncmp(line, *f, klen)) return true;
  return false;
}

/* Without /proc (a chroot, a container that does not mount it) on x86: what -march=native itself
 * reads, the CPUID leaves of the vendor, family, model and stepping and the feature bits, so that
 * the default (native) flags still get a key. Elsewhere no identity, and no caching. */
static void cpuid_identity(void) {
#if defined(__x86_64__) || defined(__i386__)
  static const unsigned leaves[][2] = {{0, 0},    {1, 0},          {7, 0},
                                       {7, 1},    {0xd, 1},        {0x14, 0},
                                       {0x19, 0}, {0x80000001, 0}, {0x80000008, 0}};
  unsigned regs[sizeof(leaves) / sizeof(leaves[0])][4];
  memset(regs, 0, sizeof(regs));
  unsigned max = __get_cpuid_max(0, NULL), max_ext = __get_cpuid_max(0x80000000, NULL);
  if (max == 0) return;
  for (size_t i = 0; i < sizeof(leaves) / sizeof(leaves[0]); i++) {
    unsigned leaf = leaves[i][0];
    if (leaf < 0x80000000 ? leaf > max : leaf > max_ext) continue;
    __cpuid_count(leaf, leaves[i][1], regs[i][0], regs[i][1], regs[i][2], regs[i][3]);
  }
  /* Leaf 1's EBX holds the APIC id and logical count of the core that ran it: not the ISA. */
  regs[1][1] = 0;
  XXH128_hash_t h = XXH3_128bits_withSeed(regs, sizeof(regs), 0x637075);
  snprintf(g_cpu_identity, sizeof(g_cpu_identity), "%016" PRIx64 "%016" PRIx64, (uint64_t)h.high64,
           (uint64_t)h.low64);
#endif
}

/* The distinct CPU lines over all processors (a machine of identical cores gives the same identity
 * whatever their number), sorted, with the machine name from uname. */
static void load_cpu_identity(void) {
  FILE *f = fopen("/proc/cpuinfo", "re");
  if (!f) {
    cpuid_identity();
    return;
  }
  char **lines = NULL, *line = NULL;
  size_t n = 0, cap = 0, size = 0;
  bool ok = true;
  while (ok && getline(&line, &size, f) > 0) {
    if (!is_cpu_field(line)) continue;
    if (n == cap) {
      char **grown = realloc(lines, (cap ? cap * 2 : 64) * sizeof(char *));
      if (!grown) {
        ok = false;
        break;
      }
      lines = grown;
      cap = cap ? cap * 2 : 64;
    }
    if (!(lines[n] = strdup(line)))
      ok = false;
    else
      n++;
  }
  free(line);
  fclose(f);
  if (ok && n > 0) {
    qsort(lines, n, sizeof(char *), compare_lines);
    XXH3_state_t state;
    XXH3_INITSTATE(&state);
    XXH3_128bits_reset(&state);
    struct utsname u;
    if (uname(&u) == 0) XXH3_128bits_update(&state, u.machine, strlen(u.machine) + 1);
    for (size_t i = 0; i < n; i++)
      if (i == 0 || strcmp(lines[i], lines[i - 1]))
        XXH3_128bits_update(&state, lines[i], strlen(lines[i]) + 1);
    XXH128_hash_t h = XXH3_128bits_digest(&state);
    snprintf(g_cpu_identity, sizeof(g_cpu_identity), "%016" PRIx64 "%016" PRIx64,
             (uint64_t)h.high64, (uint64_t)h.low64);
  }
  for (size_t i = 0; i < n; i++) free(lines[i]);
  free(lines);
}

const char *hcq__cpu_host_identity(void) {
  pthread_once(&g_cpu_once, load_cpu_identity);
  return g_cpu_identity[0] ? g_cpu_identity : NULL;
}

/* ---- the key ---- */

/* Each part goes in with its length first, so that no two different inputs feed the same bytes. */
static void feed(XXH3_state_t *state, const char *s) {
  uint64_t len = strlen(s);
  XXH3_128bits_update(state, &len, sizeof(len));
  XXH3_128bits_update(state, s, len);
}

static void feed_words(XXH3_state_t *state, const char *const *words, bool *native) {
  uint64_t n = 0;
  while (words[n]) n++;
  XXH3_128bits_update(state, &n, sizeof(n));
  for (uint64_t i = 0; i < n; i++) {
    feed(state, words[i]);
    *native |= strstr(words[i], "native") != NULL;
  }
}

void hcq__cpu_cache_key(const hcq__cpu_key_input_t *in, char out_hex[33]) {
  XXH3_state_t state;
  XXH3_INITSTATE(&state);
  XXH3_128bits_reset(&state);
  bool native = false;
  feed(&state, "hcq-cpu-kernel/4");
  feed(&state, hcq_cpu_prelude());
  feed(&state, in->entry);
  feed(&state, in->source);
  feed_words(&state, in->cc_words, &native);
  feed(&state, in->cc_identity);
  feed_words(&state, in->cflags, &native);
  feed(&state, k_fixed_args);
  feed(&state, native && in->cpu_identity ? in->cpu_identity : "");
  XXH128_hash_t h = XXH3_128bits_digest(&state);
  snprintf(out_hex, 33, "%016" PRIx64 "%016" PRIx64, (uint64_t)h.high64, (uint64_t)h.low64);
}
