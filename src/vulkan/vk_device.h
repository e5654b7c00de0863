/* Declarations shared by the Vulkan backend's files. */
#ifndef HCQ_VK_DEVICE_H
#define HCQ_VK_DEVICE_H

#include "core/hang_report.h"
#include "vulkan/vk_internal.h"

/* memory (vk_memory.c) */
HCQ_MUST_USE hcq_status_t hcq__vk_mem_alloc(hcq_device_t *dev, uint64_t size, uint32_t flags,
                                            hcq__mem_t *out);
void hcq__vk_mem_free(hcq_device_t *dev, hcq__mem_t *mem);
void hcq__vk_memory_destroy(vk_device_t *vd);
/* A block of device memory of its own (engine scratch space). */
HCQ_MUST_USE hcq_status_t hcq__vk_scratch_block(vk_device_t *vd, uint64_t size, vk_block_t **out);
void hcq__vk_block_destroy(vk_block_t *b);

/* engines (vk_engine.c; bound lists and launch checks: vk_record.c) */
HCQ_MUST_USE hcq_status_t hcq__vk_engine_create(vk_device_t *vd, hcq_queue_kind_t kind,
                                                vk_queue_t *queue, struct vk_engine **out);
/* Joins the engine's threads once their work is done (a lost device drops it); true when one is
 * stuck. */
bool hcq__vk_engine_stop(struct vk_engine *e, uint64_t deadline_ns);
void hcq__vk_engine_destroy(struct vk_engine *e);
HCQ_MUST_USE hcq_status_t hcq__vk_engine_reserve(struct vk_engine *e, size_t nwords, bool bound);
HCQ_MUST_USE hcq_status_t hcq__vk_engine_submit(struct vk_engine *e, const uint32_t *words,
                                                size_t nwords, bool bound);
uint64_t hcq__vk_engine_submitted(struct vk_engine *e);
uint64_t hcq__vk_engine_completed(struct vk_engine *e);
HCQ_MUST_USE hcq_status_t hcq__vk_engine_wait_idle(struct vk_engine *e, uint64_t deadline_ns);
void hcq__vk_engine_snapshot(struct vk_engine *e, hcq__engine_snapshot_t *out);
void hcq__vk_engine_wake(struct vk_engine *e);
struct hcq__vk_counters; /* vk_testing.h */
void hcq__vk_engine_counters(struct vk_engine *e, struct hcq__vk_counters *out);
void hcq__vk_engine_slow_completion(struct vk_engine *e, uint64_t ns);
/* Bound command lists in [host, host + size) are gone: their recorded command buffers are dropped.
 */
void hcq__vk_forget_bound(vk_device_t *vd, const void *host, uint64_t size);

/* Checks the launch geometry of every EXEC in words against the device's limits; NULL when fine. */
HCQ_MUST_USE hcq_status_t hcq__vk_check_execs(vk_device_t *vd, const uint32_t *words, size_t nwords,
                                              bool groups_only);

#endif
