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
HCQ_MUST_USE hcq_status_t hcq_buffer_create(hcq_device_t *device, uint64_t size, hcq_buffer_t **out_buffer);
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
HCQ_MUST_USE hcq_status_t hcq_buffer_copyin(hcq_buffer_t *buf, uint64_t offset, const void *src, uint64_t size);
/* Copies size bytes from buf at offset into host memory, after earlier work on the device has
 * finished; returns when dst holds them. */
HCQ_MUST_USE hcq_status_t hcq_buffer_copyout(hcq_buffer_t *buf, uint64_t offset, void *dst, uint64_t size);

/* Device-to-device transfer of size bytes (dst and src may be on different devices): it runs on
 * the source device's copy queue after both devices' earlier work, and later work on either device
 * runs after it. Source and destination must not be overlapping ranges of one buffer (views of one
 * base): INVALID_ARGUMENT, on every backend (GPUs leave such copies undefined); the same range
 * onto itself is allowed. */
HCQ_MUST_USE hcq_status_t hcq_transfer(hcq_buffer_t *dst, hcq_buffer_t *src, uint64_t size);

#pragma GCC visibility pop
#ifdef __cplusplus
}
#endif
#endif
