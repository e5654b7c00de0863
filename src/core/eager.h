/* The checks every launch and transfer passes, eager or in a graph (eager.c), and eager queue
 * helpers. */
#ifndef HCQ_CORE_EAGER_H
#define HCQ_CORE_EAGER_H

#include <stdbool.h>
#include <stdint.h>

#include "core/export.h"
#include "hcq/buffer.h"
#include "hcq/device.h"

/* Launch geometry check: the grid in groups and the group size; OUT_OF_RANGE naming who when the
 * work-item count overflows or passes the device's limit. */
HCQ_MUST_USE hcq_status_t hcq__check_dims(const hcq_device_t *dev, const uint64_t global[3],
                                          const uint64_t local[3], const char *who);
/* The same check without a message: true when the launch is fine (cheap, for hot paths). */
bool hcq__dims_ok(const hcq_device_t *dev, const uint64_t global[3], const uint64_t local[3]);
/* INVALID_ARGUMENT "<who>: global[1] is 0 (launch dims must be >= 1; ...)": a constant 0 in a
 * launch dim is refused everywhere (eager launches, items, graph files); only a symbolic dim that
 * evaluates to 0 at replay makes an empty launch. */
HCQ_MUST_USE hcq_status_t hcq__zero_dim_error(const char *dim, int index, const char *who_fmt, ...)
    HCQ_PRINTF(3, 4);
/* A transfer of size bytes whose source and destination share memory without being the same
 * range: INVALID_ARGUMENT naming both (who says which transfer). One rule for every backend, eager
 * and in graphs: CUDA and Vulkan leave such copies undefined. An identical range is allowed (every
 * byte keeps its value, whatever order the copy runs in). */
HCQ_MUST_USE hcq_status_t hcq__transfer_overlap_check(const hcq_buffer_t *dst,
                                                      const hcq_buffer_t *src, uint64_t size,
                                                      const char *who);

/* size bytes between the host and dev's memory at a device address, through the eager copy queue
 * and the staging buffers, each waiting for the device's earlier work (read: and its own copies).
 * What hcq_buffer_copyin / copyout do once checked; HCQ_VALIDATE's guards (guard.c) reach bytes
 * outside any buffer with them. Neither is traced as the application's or recorded by a capture. */
HCQ_MUST_USE hcq_status_t hcq__device_write(hcq_device_t *dev, uint64_t addr, const void *src,
                                            uint64_t size);
HCQ_MUST_USE hcq_status_t hcq__device_read(hcq_device_t *dev, uint64_t addr, void *dst,
                                           uint64_t size);

#endif
