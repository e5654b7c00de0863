/* CUDA backend pieces shared between its files and the CUDA graph runner. */
#ifndef HCQ_CUDA_INTERNAL_H
#define HCQ_CUDA_INTERNAL_H

#include "core/program.h"
#include "cuda/cuda_api.h"

/* A loaded kernel: what an EXEC command carries (as its FN operand) on a CUDA device. Its
 * parameters follow the kernargs layout (docs/design.md, "Programs and kernel ABIs"): nptrs 64-bit
 * pointers, then nvals 32-bit values, packed. */
typedef struct hcq__cuda_kernel {
  hcq_CUfunction fn;
  hcq_CUmodule module;
  uint32_t nptrs, nvals;
  uint32_t param_bytes; /* nptrs * 8 + nvals * 4 */
} hcq__cuda_kernel_t;

/* ---- device (cuda_device.c) ---- */

const hcq__cuda_api_t *hcq__cuda_device_api(const hcq_device_t *dev);
hcq_CUcontext hcq__cuda_device_context(const hcq_device_t *dev);
/* "9.0" */
void hcq__cuda_device_arch(const hcq_device_t *dev, int *major, int *minor);
/* Makes dev's primary context current on this thread; pop restores the previous one. */
HCQ_MUST_USE hcq_status_t hcq__cuda_push(hcq_device_t *dev);
void hcq__cuda_pop(hcq_device_t *dev);
/* A failed driver call as a status naming what and the driver's error; errors that leave the
 * context unusable (a kernel that faulted) also mark the device lost. */
HCQ_MUST_USE hcq_status_t hcq__cuda_fail(hcq_device_t *dev, hcq_CUresult rc, const char *fmt, ...)
    HCQ_PRINTF(3, 4);

/* ---- graph launches (cuda_submit.c) ---- */

/* A graph replay on devs (all CUDA, their locks held, devs[0] launches): devs[0]'s compute stream
 * waits for every device's earlier eager work (its timeline), records start, launches exec,
 * records end; every other device's compute stream waits for end. Then each device's compute
 * stream signals its timeline with its current value, which the caller bumps afterwards. Counts as
 * one submission of each device's compute queue (deferred frees wait for it). start may be NULL. */
#define HCQ__CUDA_GRAPH_MAX_DEVICES 64 /* ndevs at most */
HCQ_MUST_USE hcq_status_t hcq__cuda_graph_launch(hcq_device_t *const *devs, size_t ndevs,
                                                 hcq_CUgraphExec exec, hcq_CUevent start,
                                                 hcq_CUevent end);

/* ---- programs (cuda_compile.c) ---- */

/* CUDA C compiled by NVRTC for the device's compute capability (or HCQ_CUDA_ARCH), or PTX text
 * (source starting with PTX directives), cached on disk, loaded, entry resolved. */
HCQ_MUST_USE hcq_status_t hcq__cuda_compile(hcq_device_t *dev, const char *entry,
                                            const char *source, hcq__program_impl_t *out);
void hcq__cuda_unload(hcq_device_t *dev, hcq__program_impl_t *impl);
/* The backend row's binary_compile (core/backend.h): CUDA C to a cubin or PTX, without a device. */
HCQ_MUST_USE hcq_status_t hcq__cuda_binary_compile(const char *entry, const char *source,
                                                   hcq_binary_format_t format, const char *arch,
                                                   void **out, size_t *out_size);
/* Reads the parameter list of entry in PTX text: the kernargs layout (64-bit pointers, then 32-bit
 * values) or a COMPILE_ERROR that says what is wrong. */
HCQ_MUST_USE hcq_status_t hcq__cuda_ptx_params(const char *ptx, const char *entry,
                                               uint32_t *out_nptrs, uint32_t *out_nvals);

#endif
