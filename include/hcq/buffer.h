/* hcq buffers: device memory with a 64-bit device address and a size, and views (sub-ranges) of it.
 *
 * Buffers are reference counted: hcq_buffer_create() and hcq_buffer_view_create() return one
 * reference; graphs and views retain what they use. When the last reference goes, the memory is
 * freed once the device's work submitted so far has finished (never under a running kernel).
 * A view aliases its base for every dependency decision; a view of a view is a view of the base.
 */
#ifndef HCQ_BUFFER_H
#define HCQ_BUFFER_H

#include <stdint.h>

#include "hcq/device.h"

#ifdef __cplusplus
extern "C" {
#endif
#pragma GCC visibility push(default) /* exported from libhcq.so (see hcq.h) */

typedef struct hcq_buffer hcq_buffer_t;

/* Allocates size bytes (size > 0) on device. Contents start as zeros. */
HCQ_MUST_USE hcq_status_t hcq_buffer_create(hcq_device_t *device, uint64_t size,
                                            hcq_buffer_t **out_buffer);
/* A view of [offset, offset + size) of buf (size > 0, inside buf). */
HCQ_MUST_USE hcq_status_t hcq_buffer_view_create(hcq_buffer_t *buf, uint64_t offset, uint64_t size,
                                                 hcq_buffer_t **out_view);
hcq_buffer_t *hcq_buffer_retain(hcq_buffer_t *buf);
/* Drops one reference. After the last one buf is gone: passing it again is undefined behaviour
 * that may return OK, unless HCQ_VALIDATE=1 (hcq.h), which reports it by name. */
void hcq_buffer_release(hcq_buffer_t *buf);

uint64_t hcq_buffer_address(const hcq_buffer_t *buf);
uint64_t hcq_buffer_size(const hcq_buffer_t *buf);
/* Offset inside the base (0 for a base buffer). */
uint64_t hcq_buffer_offset(const hcq_buffer_t *buf);
/* The buffer that owns the memory (buf itself for a base buffer). */
hcq_buffer_t *hcq_buffer_base(const hcq_buffer_t *buf);
hcq_device_t *hcq_buffer_device(const hcq_buffer_t *buf);
/* A label for messages ("buffer#3" unless set); set copies it (at most 63 bytes kept). */
const char *hcq_buffer_label(const hcq_buffer_t *buf);
void hcq_buffer_set_label(hcq_buffer_t *buf, const char *label);

/* Copies size bytes from host memory into buf at offset, through staging buffers in chunks,
 * ordered after earlier work on the device. src may be reused when this returns. */
HCQ_MUST_USE hcq_status_t hcq_buffer_copyin(hcq_buffer_t *buf, uint64_t offset, const void *src,
                                            uint64_t size);
/* Copies size bytes from buf at offset into host memory, after earlier work on the device has
 * finished; returns when dst holds them. */
HCQ_MUST_USE hcq_status_t hcq_buffer_copyout(hcq_buffer_t *buf, uint64_t offset, void *dst,
                                             uint64_t size);

/* Device-to-device transfer of size bytes (dst and src may be on different devices): it runs on
 * the source device's copy queue after both devices' earlier work, and later work on either device
 * runs after it. Source and destination must not be overlapping ranges of one buffer (views of one
 * base): INVALID_ARGUMENT, on every backend (GPUs leave such copies undefined); the same range
 * onto itself is allowed. */
HCQ_MUST_USE hcq_status_t hcq_transfer(hcq_buffer_t *dst, hcq_buffer_t *src, uint64_t size);

/* ---- mapped buffers and wrapped memory ----
 *
 * hcq_buffer_map gives the host address of a buffer's bytes where the memory is host-visible: on
 * CPU devices always; on Vulkan devices whose device memory is host-visible and coherent
 * (integrated GPUs, lavapipe: docs/vulkan.md); on Metal (shared storage); on CUDA for buffers from
 * hcq_buffer_create_mapped (pinned host memory the GPU reaches over the bus). Elsewhere UNAVAILABLE
 * with the reason. The address stays valid, and the same, until the buffer's last reference is
 * dropped; no unmap is needed.
 *
 * Coherence: the host and the devices do not order their accesses through the pointer by
 * themselves.
 *  - Reading what device work wrote: wait for that work first (hcq_fence_wait on a fence armed
 *    after it, hcq_device_synchronize, a run with wait, or a copyout from the device, which waits
 *    for everything before it). Reading bytes a kernel may still write is a data race.
 *  - Writing what device work will read: write before submitting that work; a submission orders
 *    the host's earlier writes before it. Writing bytes that submitted work may still read or write
 *    is a race: wait for a fence covering that work first.
 *  - copyin, copyout and transfers are ordered on the device timeline, like kernels: the rules
 *    above hold for them too.
 * No flush or invalidate call is needed: hcq maps only coherent memory.
 */

/* The host address of buf's first byte (a view's: its base's memory + its offset). */
HCQ_MUST_USE hcq_status_t hcq_buffer_map(hcq_buffer_t *buf, void **out_host);
/* As hcq_buffer_create, in memory that both the device's kernels and the host reach, so that
 * hcq_buffer_map works on it: plain device memory where that is host-visible already (CPU, Metal,
 * Vulkan with host-visible device memory), pinned and mapped host memory on CUDA (kernels read it
 * over the bus: slower than device memory, for inputs and outputs rather than working data).
 * UNAVAILABLE where the device has no such memory (a Vulkan GPU with separate memory; a remote MPI
 * device). */
HCQ_MUST_USE hcq_status_t hcq_buffer_create_mapped(hcq_device_t *device, uint64_t size,
                                                   hcq_buffer_t **out_buffer);

/* hcq_buffer_wrap's alignment for host: what malloc returns. */
#define HCQ_WRAP_ALIGN 16
/* A buffer over size bytes at host, memory the application owns (zero-copy inputs and outputs), on
 * a device whose kernels run on this host's memory (HCQ_CAP_HOST_MEMORY: CPU devices); elsewhere
 * UNAVAILABLE. host must be aligned to HCQ_WRAP_ALIGN and stay valid until on_release is called:
 * once the buffer's last reference is gone (graphs and views hold references too) and the device's
 * work submitted until then has finished, on whichever thread notices (a later hcq call on the
 * device, or hcq_device_close at the latest). on_release may be NULL; then keep the memory until
 * the buffer is released and hcq_device_synchronize returned. on_release must not call hcq. hcq
 * never frees or writes host except through work the application submits; the bytes are not
 * zeroed, and do not count in hcq_device_memory_usage. The coherence rules above apply. */
HCQ_MUST_USE hcq_status_t hcq_buffer_wrap(hcq_device_t *device, void *host, uint64_t size,
                                          void (*on_release)(void *ctx, void *host), void *ctx,
                                          hcq_buffer_t **out_buffer);

#pragma GCC visibility pop
#ifdef __cplusplus
}
#endif
#endif
