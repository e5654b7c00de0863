/* The NVRTC layer's hook for tests (nvrtc.c defines it; production code never includes this
 * header). */
#ifndef HCQ_CUDA_NVRTC_TESTING_H
#define HCQ_CUDA_NVRTC_TESTING_H

#include <stddef.h>

#include "hcq/status.h"

/* The cache file hcq__cuda_nvrtc_compile would use for these arguments (tests plant and inspect
 * it). */
HCQ_MUST_USE hcq_status_t hcq__cuda_nvrtc_cache_path(const char *entry, const char *source,
                                                     int arch, char *out, size_t size);

#endif
