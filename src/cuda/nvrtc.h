/* NVRTC, CUDA's run-time compiler, found at run time (dlopen) by the names toolkits install, and
 * the on-disk cache of what it compiled. Needs no GPU: tests compile for a named architecture. */
#ifndef HCQ_CUDA_NVRTC_H
#define HCQ_CUDA_NVRTC_H

#include <stdbool.h>
#include <stddef.h>

#include "hcq/status.h"

/* Loads NVRTC once per process. Candidates: HCQ_NVRTC_LIBRARY (one library, or several separated
 * by ':'), else libnvrtc.so.13, .12, .11.2, libnvrtc.so on the library path, then the same names
 * under /usr/local/cuda/lib64 and /opt/cuda/lib64. Where a CUDA driver loads (hcq__cuda_api), the
 * choice follows what it can load: the newest NVRTC no newer than the driver's CUDA version, else
 * one of the driver's major version (its cubins load, its PTX does not), else the newest found
 * (then compiling fails saying why). Without a driver: the first that loads. false, with why, when
 * none loads. */
bool hcq__cuda_nvrtc_available(const char **out_why);
/* "NVRTC 13.0 compatible with the driver (/usr/local/cuda/lib64/libnvrtc.so.13)", with "too new"
 * and the PTX ISA versions when it is not, or "NVRTC absent: why". */
void hcq__cuda_nvrtc_describe(char *out, size_t size);

/* How the chosen NVRTC's output fits the driver's CUDA version. */
typedef enum hcq__cuda_nvrtc_fit {
  HCQ__CUDA_NVRTC_NO_DRIVER,  /* no driver loaded: nothing to compare */
  HCQ__CUDA_NVRTC_FITS,       /* NVRTC <= driver: its PTX and cubins load */
  HCQ__CUDA_NVRTC_CUBIN_ONLY, /* same major, newer minor: cubins load, its PTX is too new */
  HCQ__CUDA_NVRTC_TOO_NEW,    /* newer major: neither loads */
} hcq__cuda_nvrtc_fit_t;
/* The PTX ISA version (major * 10 + minor) that the toolkit of a CUDA version writes, which is also
 * the newest a driver of that version loads: 12.8 -> 87, 13.0 -> 90. */
int hcq__cuda_ptx_isa(int cuda_version);

/* What NVRTC made for one kernel: PTX text always, and a cubin when compiled for a real
 * architecture (sm_XY). Owned by the caller: hcq__cuda_image_free. */
typedef struct hcq__cuda_image {
  char *ptx;      /* NUL-terminated */
  size_t ptx_len; /* without the NUL */
  void *cubin;    /* NULL: PTX only (the driver compiles it when loading) */
  size_t cubin_len;
  int arch;        /* e.g. 90 */
  bool from_cache; /* read from the disk cache rather than compiled */
} hcq__cuda_image_t;

void hcq__cuda_image_free(hcq__cuda_image_t *img);

/* Compiles CUDA C for arch (major * 10 + minor): a cubin for sm_<arch> when this NVRTC knows that
 * architecture, else PTX for the newest one it knows below it. The result is cached under
 * HCQ_CACHE_DIR/cuda keyed by source, entry, NVRTC version, options and architecture; the cache
 * directory is created private (0700) and is used only while it and each file in it belong to
 * this user and are writable by nobody else; files are written whole (temporary file, then
 * rename) and checked (key, sizes, checksum) before use. COMPILE_ERROR carries NVRTC's log;
 * UNAVAILABLE says why NVRTC is missing. */
HCQ_MUST_USE hcq_status_t hcq__cuda_nvrtc_compile(const char *entry, const char *source, int arch,
                                                  hcq__cuda_image_t *out);

/* True when text is PTX (its first directive, after comments, is .version). */
bool hcq__cuda_is_ptx(const char *text);

#endif
