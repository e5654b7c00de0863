/* hcq on Vulkan: VULKAN:N devices and their kernels.
 *
 * Devices. "VULKAN:N" is the N-th physical device the Vulkan loader (libvulkan.so.1, found at run
 * time) lists. Each open device is one logical device with a compute engine and a copy engine (on
 * one VkQueue where the device has only one). With HCQ_VULKAN_VIRTUAL=1, indexes past the last
 * physical device open further logical devices round-robin over the physical ones, each with its
 * own memory, queues and signals, so multi-device graphs run on one GPU or on Mesa's lavapipe.
 * Without a loader or a driver, opening fails with UNAVAILABLE and hcq_device_query() says why.
 *
 * Kernels. A program's source is GLSL compute, compiled at run time with libshaderc and cached on
 * disk as SPIR-V (HCQ_CACHE_DIR/spirv, a directory of the user's alone), or SPIR-V itself: a source
 * whose first line is "#spirv" holds a module in base64 (hcq_program_create_spirv() makes one).
 * GLSL is compiled after hcq_vulkan_glsl_prelude(), which enables buffer references and 64-bit
 * integers, declares the group size as specialization constants 0, 1, 2, and defines
 *
 *   uint64_t hcq_buf(uint i);   device address of buffer argument i
 *   int      hcq_val(uint i);   scalar argument i
 *
 * read from the kernel-argument block (buffer addresses, then 32-bit values; hcq/queue.h) whose
 * address the dispatch passes in a push constant. The source declares the buffer-reference types it
 * needs and `void main()`; the SPIR-V entry point is named after the program. The grid is
 * gl_NumWorkGroups / gl_WorkGroupID, the group gl_WorkGroupSize / gl_LocalInvocationID, so
 * gl_GlobalInvocationID.x is the CPU ABI's gid[0] * lsz[0] + t. Example:
 *
 *   layout(buffer_reference, std430, buffer_reference_align = 4) buffer u32s { uint v[]; };
 *   void main() {
 *     uint i = gl_GlobalInvocationID.x;
 *     if (i < uint(hcq_val(0))) u32s(hcq_buf(0)).v[i] = u32s(hcq_buf(1)).v[i] + 1u;
 *   }
 *
 * Group size. It is a pipeline constant on Vulkan: a graph item's local dims must stay the same
 * from replay to replay. Replays that change them still run correctly, but the engine records that
 * part of the queue's command buffers again instead of patching memory. Grid dims may change freely
 * (they are read by an indirect dispatch from the queue's own words).
 */
#ifndef HCQ_VULKAN_H
#define HCQ_VULKAN_H

#include <stddef.h>

#include "hcq/program.h"

#ifdef __cplusplus
extern "C" {
#endif
#pragma GCC visibility push(default) /* exported from libhcq.so (see hcq.h) */

/* The GLSL text every Vulkan kernel source is compiled after (static storage). */
const char *hcq_vulkan_glsl_prelude(void);

/* A program from a SPIR-V module of size bytes whose GLCompute entry point is called entry, for a
 * device that runs Vulkan kernels. The module is carried as "#spirv" source text, so
 * hcq_program_source() and saved graph files keep it. A module that is not SPIR-V or lacks the
 * entry point is COMPILE_ERROR. */
HCQ_MUST_USE hcq_status_t hcq_program_create_spirv(hcq_device_t *device, const char *entry,
                                                   const void *code, size_t size,
                                                   hcq_program_t **out_program);

#pragma GCC visibility pop
#ifdef __cplusplus
}
#endif
#endif
