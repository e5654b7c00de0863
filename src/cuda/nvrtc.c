/* NVRTC found at run time, and its on-disk cache (see nvrtc.h for the rules the cache keeps). */
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include "core/kcache.h"
#include "core/options.h"
#include "cuda/cuda_api.h"
#include "cuda/nvrtc.h"
#include "cuda/nvrtc_testing.h"

typedef struct nvrtc_program_st *nvrtc_program;

/* X(name, return, parameters) */
// clang-format off
#define HCQ_NVRTC_ENTRY_POINTS(X)                                                             \
  X(nvrtcGetErrorString, const char *, (int result))                                          \
  X(nvrtcVersion, int, (int *major, int *minor))                                              \
  X(nvrtcCreateProgram, int,                                                                  \
    (nvrtc_program * prog, const char *src, const char *name, int nheaders,                   \
        const char *const *headers,                                                           \
     const char *const *include_names))                                                       \
  X(nvrtcDestroyProgram, int, (nvrtc_program * prog))                                         \
  X(nvrtcCompileProgram, int, (nvrtc_program prog, int noptions, const char *const *options)) \
  X(nvrtcGetPTXSize, int, (nvrtc_program prog, size_t *size))                                 \
  X(nvrtcGetPTX, int, (nvrtc_program prog, char *ptx))                                        \
  X(nvrtcGetCUBINSize, int, (nvrtc_program prog, size_t *size))                               \
  X(nvrtcGetCUBIN, int, (nvrtc_program prog, char *cubin))                                    \
  X(nvrtcGetProgramLogSize, int, (nvrtc_program prog, size_t *size))                          \
  X(nvrtcGetProgramLog, int, (nvrtc_program prog, char *log))                                 \
  X(nvrtcGetNumSupportedArchs, int, (int *n))                                                 \
  X(nvrtcGetSupportedArchs, int, (int *archs))
// clang-format on

static struct {
  void *lib;
  int major, minor;
  char path[512];
  int archs[64];
  int narchs;
#define HCQ__NVRTC_FIELD(name, ret, params) ret(*name) params;
  HCQ_NVRTC_ENTRY_POINTS(HCQ__NVRTC_FIELD)
#undef HCQ__NVRTC_FIELD
} g_nvrtc;
static bool g_ok;
static char g_why[512];
static int g_driver; /* the driver's CUDA version (12080), 0 without one */
static hcq__cuda_nvrtc_fit_t g_fit;
static char g_others[160]; /* the other NVRTC versions found, "13.0, 12.4" */
static pthread_once_t g_once = PTHREAD_ONCE_INIT;

int hcq__cuda_ptx_isa(int cuda_version) {
  int major = cuda_version / 1000, minor = cuda_version % 1000 / 10;
  /* CUDA 11.x and 12.0-12.5 wrote PTX ISA (major - 4).minor; 12.6 kept 8.5, and from 12.7 on the
   * ISA is one behind (12.7: 8.6, 12.8: 8.7, 12.9: 8.8); 13.x writes 9.x again. */
  if (major == 12 && minor >= 6) return minor == 6 ? 85 : 79 + minor;
  return (major - 4) * 10 + minor;
}

static hcq__cuda_nvrtc_fit_t fit_of(int major, int minor, int driver) {
  if (!driver) return HCQ__CUDA_NVRTC_NO_DRIVER;
  int dmajor = driver / 1000, dminor = driver % 1000 / 10;
  if (major < dmajor || (major == dmajor && minor <= dminor)) return HCQ__CUDA_NVRTC_FITS;
  return major == dmajor ? HCQ__CUDA_NVRTC_CUBIN_ONLY : HCQ__CUDA_NVRTC_TOO_NEW;
}

/* An opened candidate's version; false when it is not NVRTC. */
static bool probe(void *lib, int *major, int *minor) {
  int (*version)(int *, int *);
  *(void **)&version = dlsym(lib, "nvrtcVersion");
  return version && version(major, minor) == 0;
}

/* Candidate i of HCQ_NVRTC_LIBRARY's ':'-separated list (or of names), into out; false past the
 * end. */
static bool candidate(const char *forced, size_t i, char *out, size_t size) {
  static const char *const names[] = {
      "libnvrtc.so.13",
      "libnvrtc.so.12",
      "libnvrtc.so.11.2",
      "libnvrtc.so",
      "/usr/local/cuda/lib64/libnvrtc.so.13",
      "/usr/local/cuda/lib64/libnvrtc.so.12",
      "/usr/local/cuda/lib64/libnvrtc.so.11.2",
      "/usr/local/cuda/lib64/libnvrtc.so",
      "/opt/cuda/lib64/libnvrtc.so.13",
      "/opt/cuda/lib64/libnvrtc.so.12",
      "/opt/cuda/lib64/libnvrtc.so",
  };
  if (!*forced) {
    if (i >= sizeof(names) / sizeof(names[0])) return false;
    snprintf(out, size, "%s", names[i]);
    return true;
  }
  const char *p = forced;
  for (size_t k = 0; k < i && p; k++) p = strchr(p, ':') ? strchr(p, ':') + 1 : NULL;
  if (!p || !*p) return false;
  size_t n = strchr(p, ':') ? (size_t)(strchr(p, ':') - p) : strlen(p);
  snprintf(out, size, "%.*s", (int)(n < size ? n : size - 1), p);
  return true;
}

static void load(void) {
  const char *forced = hcq__options()->nvrtc_library;
  bool single = *forced && !strchr(forced, ':');
  const hcq__cuda_api_t *api = hcq__cuda_api(NULL);
  g_driver = api ? api->driver_version : 0;
  char tried[400] = "", name[512];
  int best_rank = -1, found[8], nfound = 0;
  for (size_t i = 0; candidate(forced, i, name, sizeof(name)); i++) {
    if (!*name) continue;
    void *lib = dlopen(name, RTLD_NOW | RTLD_LOCAL);
    int major = 0, minor = 0;
    if (!lib || !probe(lib, &major, &minor)) {
      if (lib) dlclose(lib);
      if (*forced || i < 4) {
        size_t used = strlen(tried);
        snprintf(tried + used, sizeof(tried) - used, "%s%.120s", used ? ", " : "", name);
      }
      continue;
    }
    /* Best: what the driver loads whole, then cubins only, then the newest; newer breaks ties. */
    hcq__cuda_nvrtc_fit_t fit = fit_of(major, minor, g_driver);
    int rank = (fit == HCQ__CUDA_NVRTC_FITS || fit == HCQ__CUDA_NVRTC_NO_DRIVER ? 2
                : fit == HCQ__CUDA_NVRTC_CUBIN_ONLY                             ? 1
                                                                                : 0) *
                   100000 +
               major * 100 + minor;
    if (nfound < 8) found[nfound++] = major * 1000 + minor * 10;
    /* A candidate not chosen stays loaded: NVRTC's static C++ run time allocates when it loads, and
     * unloading it strands that memory (and C++ libraries seldom unload cleanly). Only a machine
     * with several NVRTC versions pays for this, once. */
    if (rank > best_rank) {
      g_nvrtc.lib = lib;
      g_nvrtc.major = major, g_nvrtc.minor = minor;
      g_fit = fit;
      best_rank = rank;
    }
    /* Without a driver, or with one it fits exactly, nothing later can be better. */
    if (fit == HCQ__CUDA_NVRTC_NO_DRIVER ||
        (fit == HCQ__CUDA_NVRTC_FITS && major * 1000 + minor * 10 == g_driver))
      break;
  }
  /* Remembered for messages: which other versions this machine has. */
  for (int i = 0; i < nfound; i++) {
    char v[16];
    snprintf(v, sizeof(v), "%d.%d", found[i] / 1000, found[i] % 1000 / 10);
    if (found[i] == g_nvrtc.major * 1000 + g_nvrtc.minor * 10 || strstr(g_others, v)) continue;
    size_t used = strlen(g_others);
    snprintf(g_others + used, sizeof(g_others) - used, "%s%s", used ? ", " : "", v);
  }
  if (!g_nvrtc.lib) {
    if (single)
      snprintf(g_why, sizeof(g_why), "HCQ_NVRTC_LIBRARY=%.200s could not be loaded", forced);
    else if (*forced)
      snprintf(g_why, sizeof(g_why), "no library of HCQ_NVRTC_LIBRARY loads (tried %s)", tried);
    else
      snprintf(g_why, sizeof(g_why),
               "no NVRTC library found (tried %s, also under /usr/local/cuda/lib64 and "
               "/opt/cuda/lib64; set HCQ_NVRTC_LIBRARY)",
               tried);
    return;
  }
#define HCQ__NVRTC_LOAD(name, ret, params)                                          \
  *(void **)&g_nvrtc.name = dlsym(g_nvrtc.lib, #name);                              \
  if (!g_nvrtc.name) {                                                              \
    snprintf(g_why, sizeof(g_why), "the NVRTC library lacks %s (too old?)", #name); \
    return;                                                                         \
  }
  HCQ_NVRTC_ENTRY_POINTS(HCQ__NVRTC_LOAD)
#undef HCQ__NVRTC_LOAD
  Dl_info info;
  if (dladdr(*(void **)&g_nvrtc.nvrtcVersion, &info) && info.dli_fname)
    snprintf(g_nvrtc.path, sizeof(g_nvrtc.path), "%s", info.dli_fname);
  int na = 0;
  if (g_nvrtc.nvrtcGetNumSupportedArchs(&na) == 0 && na > 0 && na <= 64 &&
      g_nvrtc.nvrtcGetSupportedArchs(g_nvrtc.archs) == 0)
    g_nvrtc.narchs = na;
  g_ok = true;
}

bool hcq__cuda_nvrtc_available(const char **out_why) {
  pthread_once(&g_once, load);
  if (out_why) *out_why = g_why;
  return g_ok;
}

void hcq__cuda_nvrtc_describe(char *out, size_t size) {
  const char *why;
  if (!hcq__cuda_nvrtc_available(&why)) {
    snprintf(out, size, "NVRTC absent: %s", why);
    return;
  }
  int dmajor = g_driver / 1000, dminor = g_driver % 1000 / 10;
  int isa = hcq__cuda_ptx_isa(g_nvrtc.major * 1000 + g_nvrtc.minor * 10),
      disa = hcq__cuda_ptx_isa(g_driver);
  char fit[200] = "";
  switch (g_fit) {
    case HCQ__CUDA_NVRTC_NO_DRIVER: break;
    case HCQ__CUDA_NVRTC_FITS: snprintf(fit, sizeof(fit), " compatible with the driver"); break;
    case HCQ__CUDA_NVRTC_CUBIN_ONLY:
      snprintf(fit, sizeof(fit),
               " newer than the driver's CUDA %d.%d: cubins only (PTX ISA %d.%d > %d.%d)", dmajor,
               dminor, isa / 10, isa % 10, disa / 10, disa % 10);
      break;
    case HCQ__CUDA_NVRTC_TOO_NEW:
      snprintf(fit, sizeof(fit),
               " INCOMPATIBLE: newer than the driver's CUDA %d.%d (PTX ISA %d.%d > %d.%d)", dmajor,
               dminor, isa / 10, isa % 10, disa / 10, disa % 10);
      break;
  }
  snprintf(out, size, "NVRTC %d.%d%s (%s%s%s%.300s)", g_nvrtc.major, g_nvrtc.minor, fit,
           *g_others ? "also found " : "", g_others, *g_others ? "; " : "", g_nvrtc.path);
}

void hcq__cuda_image_free(hcq__cuda_image_t *img) {
  free(img->ptx);
  free(img->cubin);
  memset(img, 0, sizeof(*img));
}

bool hcq__cuda_is_ptx(const char *t) {
  for (;;) {
    while (*t == ' ' || *t == '\t' || *t == '\n' || *t == '\r') t++;
    if (t[0] == '/' && t[1] == '/') {
      while (*t && *t != '\n') t++;
    } else if (t[0] == '/' && t[1] == '*') {
      const char *e = strstr(t + 2, "*/");
      if (!e) return false;
      t = e + 2;
    } else {
      return strncmp(t, ".version", 8) == 0;
    }
  }
}

/* ---- compiling ---- */

/* The architecture to compile for: sm_<arch> when known, else compute_<best below>; 0: none. */
static int pick_arch(int arch, bool *real) {
  *real = false;
  if (!g_nvrtc.narchs) {
    *real = true; /* NVRTC cannot list its architectures: try the one asked for */
    return arch;
  }
  int best = 0;
  for (int i = 0; i < g_nvrtc.narchs; i++) {
    if (g_nvrtc.archs[i] == arch) {
      *real = true;
      return arch;
    }
    if (g_nvrtc.archs[i] < arch && g_nvrtc.archs[i] > best) best = g_nvrtc.archs[i];
  }
  return best;
}

static void options_for(int arch, bool real, char *out, size_t size) {
  snprintf(out, size, "--gpu-architecture=%s_%d", real ? "sm" : "compute", arch);
}

static hcq_status_t run_nvrtc(const char *entry, const char *source, const char *option, bool real,
                              hcq__cuda_image_t *out) {
  nvrtc_program prog = NULL;
  char name[96];
  snprintf(name, sizeof(name), "%.80s.cu", entry);
  int rc = g_nvrtc.nvrtcCreateProgram(&prog, source, name, 0, NULL, NULL);
  if (rc != 0)
    return hcq_status_make(HCQ_COMPILE_ERROR, "nvrtcCreateProgram failed: %s",
                           g_nvrtc.nvrtcGetErrorString(rc));
  const char *opts[] = {option};
  rc = g_nvrtc.nvrtcCompileProgram(prog, 1, opts);
  hcq_status_t st = NULL;
  if (rc != 0) {
    size_t log_size = 0;
    char *log = NULL;
    if (g_nvrtc.nvrtcGetProgramLogSize(prog, &log_size) == 0 && log_size &&
        (log = malloc(log_size + 1))) {
      if (g_nvrtc.nvrtcGetProgramLog(prog, log) != 0) log[0] = '\0';
      log[log_size] = '\0';
    }
    st = hcq_status_make(HCQ_COMPILE_ERROR, "compiling %s with NVRTC %d.%d (%s) failed: %s\n%s",
                         entry, g_nvrtc.major, g_nvrtc.minor, option,
                         g_nvrtc.nvrtcGetErrorString(rc), log ? log : "");
    free(log);
  }
  size_t ptx_size = 0, cubin_size = 0;
  if (!st && (rc = g_nvrtc.nvrtcGetPTXSize(prog, &ptx_size)) == 0 && ptx_size &&
      (out->ptx = malloc(ptx_size + 1))) {
    rc = g_nvrtc.nvrtcGetPTX(prog, out->ptx);
    out->ptx[ptx_size] = '\0';
    out->ptx_len = strlen(out->ptx);
  }
  if (!st && !out->ptx)
    st = hcq_status_make(HCQ_COMPILE_ERROR, "compiling %s: NVRTC gave no PTX", entry);
  if (!st && real && g_nvrtc.nvrtcGetCUBINSize(prog, &cubin_size) == 0 && cubin_size &&
      (out->cubin = malloc(cubin_size))) {
    if (g_nvrtc.nvrtcGetCUBIN(prog, out->cubin) == 0) {
      out->cubin_len = cubin_size;
    } else {
      free(out->cubin);
      out->cubin = NULL;
    }
  }
  g_nvrtc.nvrtcDestroyProgram(&prog);
  if (st) hcq__cuda_image_free(out);
  return st;
}

/* ---- the cache ---- */

#define CACHE_MAGIC "HCQCUDA3" /* HCQCUDA2: before blobs recorded their key */

/* The payload of a cache file (core/kcache.c adds the magic and the checksum): this header, the
 * PTX, then the cubin. The key is checked again against the file name's. */
typedef struct cuda_cache_payload {
  uint64_t key_hi, key_lo;
  uint64_t ptx_len, cubin_len;
  int32_t arch;
  int32_t reserved;
} cuda_cache_payload_t;

static XXH128_hash_t cache_key(const char *entry, const char *source, const char *option) {
  char version[32];
  snprintf(version, sizeof(version), "%d.%d", g_nvrtc.major, g_nvrtc.minor);
  XXH3_state_t *hs = XXH3_createState();
  XXH128_hash_t h = {0, 0};
  if (!hs) return h;
  XXH3_128bits_reset(hs);
  const char *parts[] = {"hcq-cuda-kernel/1", source, entry, version, option};
  for (size_t i = 0; i < sizeof(parts) / sizeof(parts[0]); i++)
    XXH3_128bits_update(hs, parts[i], strlen(parts[i]) + 1);
  h = XXH3_128bits_digest(hs);
  XXH3_freeState(hs);
  return h;
}

static hcq_status_t path_for(const char *entry, const char *source, const char *option, char *dir,
                             size_t dir_size, char *out, size_t size, XXH128_hash_t *key) {
  if (!hcq__kcache_blob_dir("cuda", dir, dir_size))
    return hcq_status_make(HCQ_UNAVAILABLE, "the kernel cache directory is not usable");
  *key = cache_key(entry, source, option);
  snprintf(out, size, "%s/%016" PRIx64 "%016" PRIx64 ".cubin", dir, (uint64_t)key->high64,
           (uint64_t)key->low64);
  return NULL;
}

/* Loads a cache file when it is ours, private, and whole; false otherwise (then it is ignored). */
static void key_text(XXH128_hash_t key, char out[HCQ__KCACHE_KEY + 1]) {
  snprintf(out, HCQ__KCACHE_KEY + 1, "%016" PRIx64 "%016" PRIx64, (uint64_t)key.high64,
           (uint64_t)key.low64);
}

static bool cache_load(const char *path, XXH128_hash_t key, int arch, hcq__cuda_image_t *out) {
  size_t size = 0;
  char text[HCQ__KCACHE_KEY + 1];
  key_text(key, text);
  uint8_t *blob = hcq__kcache_blob_load(path, CACHE_MAGIC, text, UINT64_C(1) << 31, &size);
  if (!blob) return false;
  cuda_cache_payload_t h;
  bool ok = size >= sizeof(h);
  if (ok) memcpy(&h, blob, sizeof(h));
  ok = ok && h.key_hi == key.high64 && h.key_lo == key.low64 && h.arch == arch &&
       h.ptx_len < (UINT64_C(1) << 30) && h.cubin_len < (UINT64_C(1) << 30) &&
       size == sizeof(h) + h.ptx_len + h.cubin_len &&
       memchr(blob + sizeof(h), '\0', h.ptx_len) == NULL;
  if (ok) {
    out->ptx = malloc(h.ptx_len + 1);
    out->cubin = h.cubin_len ? malloc(h.cubin_len) : NULL;
    ok = out->ptx && (!h.cubin_len || out->cubin);
  }
  if (ok) {
    memcpy(out->ptx, blob + sizeof(h), h.ptx_len);
    out->ptx[h.ptx_len] = '\0';
    if (h.cubin_len) memcpy(out->cubin, blob + sizeof(h) + h.ptx_len, h.cubin_len);
  }
  free(blob);
  if (!ok) {
    hcq__cuda_image_free(out);
    return false;
  }
  out->ptx_len = h.ptx_len;
  out->cubin_len = h.cubin_len;
  out->arch = arch;
  out->from_cache = true;
  return true;
}

static void cache_store(const char *dir, const char *path, XXH128_hash_t key,
                        const hcq__cuda_image_t *img) {
  cuda_cache_payload_t h = {key.high64, key.low64, img->ptx_len, img->cubin ? img->cubin_len : 0,
                            img->arch,  0};
  size_t size = sizeof(h) + h.ptx_len + h.cubin_len;
  uint8_t *blob = malloc(size);
  if (!blob) return; /* not cached: the kernel was compiled all the same */
  memcpy(blob, &h, sizeof(h));
  memcpy(blob + sizeof(h), img->ptx, h.ptx_len);
  if (h.cubin_len) memcpy(blob + sizeof(h) + h.ptx_len, img->cubin, h.cubin_len);
  char text[HCQ__KCACHE_KEY + 1];
  key_text(key, text);
  hcq__kcache_blob_store(dir, path, CACHE_MAGIC, text, blob, size);
  free(blob);
}

hcq_status_t hcq__cuda_nvrtc_cache_path(const char *entry, const char *source, int arch, char *out,
                                        size_t size) {
  const char *why;
  if (!hcq__cuda_nvrtc_available(&why))
    return hcq_status_make(HCQ_UNAVAILABLE, "cannot compile CUDA C: %s", why);
  bool real;
  int use = pick_arch(arch, &real);
  char option[64], dir[1100];
  options_for(use, real, option, sizeof(option));
  XXH128_hash_t key = {0, 0};
  return path_for(entry, source, option, dir, sizeof(dir), out, size, &key);
}

/* What this NVRTC makes must be something the driver loads (see hcq__cuda_nvrtc_fit). */
static hcq_status_t check_fit(const char *entry, int arch, bool real) {
  if (g_fit == HCQ__CUDA_NVRTC_FITS || g_fit == HCQ__CUDA_NVRTC_NO_DRIVER ||
      (g_fit == HCQ__CUDA_NVRTC_CUBIN_ONLY && real))
    return NULL;
  int nv = g_nvrtc.major * 1000 + g_nvrtc.minor * 10, isa = hcq__cuda_ptx_isa(nv),
      disa = hcq__cuda_ptx_isa(g_driver);
  char found[sizeof(g_others) + 64] = "";
  if (*g_others)
    snprintf(found, sizeof(found), "; the other NVRTC versions found (%s) fit no better", g_others);
  if (g_fit == HCQ__CUDA_NVRTC_CUBIN_ONLY)
    return hcq_status_make(
        HCQ_UNAVAILABLE,
        "cannot compile %s for compute_%d: NVRTC %d.%d (%s) writes PTX ISA %d.%d, "
        "newer than the driver's CUDA %d.%d loads (%d.%d), and knows no sm_%d to make a cubin "
        "for%s; "
        "install NVRTC %d.%d or older, or a newer driver",
        entry, arch, g_nvrtc.major, g_nvrtc.minor, g_nvrtc.path, isa / 10, isa % 10,
        g_driver / 1000, g_driver % 1000 / 10, disa / 10, disa % 10, arch, found, g_driver / 1000,
        g_driver % 1000 / 10);
  return hcq_status_make(
      HCQ_UNAVAILABLE,
      "cannot compile %s: NVRTC %d.%d (%s) is newer than the driver, which supports "
      "CUDA %d.%d: it writes PTX ISA %d.%d and CUDA %d cubins, the driver loads PTX ISA up to "
      "%d.%d and "
      "cubins up to CUDA %d%s; install NVRTC %d.%d or older (libnvrtc.so.%d), or a driver for CUDA "
      "%d.%d, or name a compatible NVRTC with HCQ_NVRTC_LIBRARY",
      entry, g_nvrtc.major, g_nvrtc.minor, g_nvrtc.path, g_driver / 1000, g_driver % 1000 / 10,
      isa / 10, isa % 10, g_nvrtc.major, disa / 10, disa % 10, g_driver / 1000, found,
      g_driver / 1000, g_driver % 1000 / 10, g_driver / 1000, g_nvrtc.major, g_nvrtc.minor);
}

hcq_status_t hcq__cuda_nvrtc_compile(const char *entry, const char *source, int arch,
                                     hcq__cuda_image_t *out) {
  memset(out, 0, sizeof(*out));
  const char *why;
  if (!hcq__cuda_nvrtc_available(&why))
    return hcq_status_make(HCQ_UNAVAILABLE, "cannot compile CUDA C: %s", why);
  bool real;
  int use = pick_arch(arch, &real);
  hcq_status_t fst = check_fit(entry, use, real);
  if (fst) return fst;
  if (!use)
    return hcq_status_make(
        HCQ_UNAVAILABLE,
        "NVRTC %d.%d cannot compile for compute capability %d.%d (its oldest is %d.%d)",
        g_nvrtc.major, g_nvrtc.minor, arch / 10, arch % 10,
        g_nvrtc.narchs ? g_nvrtc.archs[0] / 10 : 0, g_nvrtc.narchs ? g_nvrtc.archs[0] % 10 : 0);
  char option[64], dir[1100], path[1300];
  options_for(use, real, option, sizeof(option));
  XXH128_hash_t key = {0, 0};
  hcq_status_t cst = path_for(entry, source, option, dir, sizeof(dir), path, sizeof(path), &key);
  bool cache = cst == NULL;
  hcq_status_destroy(cst);
  if (cache && cache_load(path, key, use, out)) return NULL;
  hcq_status_t st = run_nvrtc(entry, source, option, real, out);
  if (st) return st;
  out->arch = use;
  if (cache) cache_store(dir, path, key, out);
  return NULL;
}
