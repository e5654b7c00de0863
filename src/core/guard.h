/* HCQ_VALIDATE=1 bounds canaries on devices whose memory is not the host's (Vulkan, CUDA, Metal):
 * guard.c. The CPU device guards its buffers itself (src/cpu/cpu_memory.c: guard pages and
 * canaries); docs/errors.md, "Out-of-bounds accesses". */
#ifndef HCQ_CORE_GUARD_H
#define HCQ_CORE_GUARD_H

#include <stdbool.h>
#include <stdint.h>

#include "core/buffer.h"
#include "hcq/program.h"

/* Canary bytes on each side of a guarded buffer: a multiple of every backend's address alignment.
 */
#define HCQ__GUARD_BYTES 256u

/* Whether a buffer of dev made with these memory flags gets guards. */
bool hcq__guard_wanted(const hcq_device_t *dev, uint32_t mem_flags);
/* After the backend allocated size + 2 * HCQ__GUARD_BYTES into b->mem: the buffer's bytes start
 * past the front guard, and both guards hold the canary. */
HCQ_MUST_USE hcq_status_t hcq__guard_set_up(hcq_buffer_t *b);
/* The memory as the backend allocated it, for freeing. */
hcq__mem_t hcq__guard_allocation(const hcq_buffer_t *b);
/* After a launch (its work finished): the canaries of the guarded buffers it was given. A changed
 * one marks the device lost, naming the kernel, the argument, the buffer and the bytes, repairs the
 * canary and returns the device's DEVICE_LOST status. */
HCQ_MUST_USE hcq_status_t hcq__guard_check_launch(const hcq_launch_desc_t *d);

#endif
