/* Every HCQ_* environment variable, read once (options.c). */
#ifndef HCQ_CORE_OPTIONS_H
#define HCQ_CORE_OPTIONS_H

#include <stdbool.h>
#include <stdint.h>

#include "core/export.h"

/* The CPU kernels' flags when HCQ_CFLAGS is unset (docs/kernel-cache.md). */
#define HCQ__DEFAULT_CFLAGS "-O2 -march=native -ffp-contract=off"

typedef struct hcq__options {
  int64_t wait_timeout_ms; /* HCQ_WAIT_TIMEOUT_MS */
  unsigned cpu_threads; /* HCQ_CPU_THREADS: threads per CPU device (0: the core budget decides) */
  unsigned
      graph_inflight; /* HCQ_GRAPH_INFLIGHT: replays of one graph in flight at once (default 2) */
  uint64_t cpu_min_parallel; /* HCQ_CPU_MIN_PARALLEL: work-items (groups x group size) before a
                                launch is split */
  uint64_t spin_ns;          /* HCQ_SPIN_NS: how long waiters spin before sleeping */
  uint64_t staging_chunk;    /* HCQ_STAGING_CHUNK: bytes per host-transfer staging buffer */
  uint64_t kernargs_ring;    /* HCQ_KERNARGS_RING: bytes of the eager kernel-argument ring */
  unsigned jit_batch_size;   /* HCQ_JIT_BATCH_SIZE: first capture batch size */
  bool validate;       /* HCQ_VALIDATE: check handles (released, double release, closed device) */
  bool cpu_isolate;    /* HCQ_CPU_ISOLATE: a faulting CPU kernel marks its device lost instead of
                          killing */
  bool portable;       /* HCQ_PORTABLE: every device enforces the portable limits (hcq/device.h) */
  bool vulkan_virtual; /* HCQ_VULKAN_VIRTUAL: VULKAN:N past the last GPU opens more logical devices
                        */
  char profile[1024];  /* HCQ_PROFILE: "" off; "1" on; otherwise on, and a path for the trace */
  /* CPU kernel compiler and cache (docs/kernel-cache.md), kept whole: src/cpu/cpu_compile.c splits
   * and checks them. NULL only when memory ran out while reading them. */
  const char *cc;             /* HCQ_CC: compiler command, may carry arguments */
  const char *cflags;         /* HCQ_CFLAGS (default HCQ__DEFAULT_CFLAGS) */
  const char *cache_dir;      /* HCQ_CACHE_DIR, else $XDG_CACHE_HOME/hcq, ~/.cache/hcq,
                                 $TMPDIR/hcq-cache-<euid> */
  const char *cache_dir_from; /* the variable cache_dir came from, for messages */
  uint64_t cache_max_bytes;   /* HCQ_CACHE_MAX_MB in bytes; 0: no cap */
  const char *tmp_dir;        /* TMPDIR, else /tmp: private build directories when not caching */
  char cuda_library[256];     /* HCQ_CUDA_LIBRARY: the driver library (libcuda.so.1; tests name a
                                 stand-in) */
  char nvrtc_library[256];    /* HCQ_NVRTC_LIBRARY: "" finds NVRTC by the names toolkits install */
  char cuda_arch[32]; /* HCQ_CUDA_ARCH: "" compiles for the device; "sm_90" compiles for that */
} hcq__options_t;

HCQ__PRIVATE_EXPORT const hcq__options_t *hcq__options(void);

#endif
