/* Precompiled CUDA kernels read before loading (cuda_binary.c): whole, for the device's
 * architecture, and the kernel's parameter list (the kernargs layout: pointers, then 32-bit
 * values). */
#ifndef HCQ_CUDA_BINARY_H
#define HCQ_CUDA_BINARY_H

#include "cuda/cuda_internal.h"

/* dev_arch is the device's compute capability as major * 10 + minor; dev_name names it in
 * messages. COMPILE_ERROR saying what is wrong: not a cubin (and what the bytes look like),
 * truncated, another architecture, no kernel entry (listing the cubin's), a parameter list hcq
 * cannot feed. */
HCQ_MUST_USE hcq_status_t hcq__cuda_cubin_inspect(const uint8_t *bytes, size_t size,
                                                  const char *entry, const char *dev_name,
                                                  int dev_arch, uint32_t *out_nptrs,
                                                  uint32_t *out_nvals);
/* The same for a fatbin, through the image the device would run: its newest cubin for the
 * architecture, else its newest PTX no newer than it; one that is compressed cannot be read. */
HCQ_MUST_USE hcq_status_t hcq__cuda_fatbin_inspect(const uint8_t *bytes, size_t size,
                                                   const char *entry, const char *dev_name,
                                                   int dev_arch, uint32_t *out_nptrs,
                                                   uint32_t *out_nvals);

#endif
