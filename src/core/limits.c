/* Device limits (hcq_device_limits in hcq/device.h): what each backend's open states, the portable
 * set that portable mode lowers them to, and the errors that name a broken limit. The launch checks
 * that use them are eager.c's hcq__check_dims and hcq__check_arg_limits. */
#include <inttypes.h>
#include <stdio.h>

#include "core/device.h"
#include "core/limits.h"
#include "core/options.h"
#include "hcq/buffer.h"
#include "hcq/program.h"

void hcq__limits_unbounded(hcq_device_limits_t *out) {
  *out = (hcq_device_limits_t){
      /* wrapped host memory; allocations are aligned to 64 */
      .max_group_threads = UINT32_MAX,
      .max_group_size = {UINT32_MAX, UINT32_MAX, UINT32_MAX},
      .max_grid = {UINT32_MAX, UINT32_MAX, UINT32_MAX},
      .max_work_items = UINT64_MAX,
      .max_kernel_buffers = HCQ_MAX_KERNEL_BUFS,
      .max_kernel_values = HCQ_MAX_KERNEL_VALS,
      .max_buffer_size = UINT64_MAX,
      .buffer_alignment = HCQ_WRAP_ALIGN,
      .view_offset_alignment = 1,
      .shared_memory = 0,
  };
}

void hcq_device_limits_portable(hcq_device_limits_t *out) {
  if (!out) return;
  *out = (hcq_device_limits_t){
      .max_group_threads = HCQ_PORTABLE_MAX_GROUP_THREADS,
      .max_group_size = {HCQ_PORTABLE_MAX_GROUP_SIZE_X, HCQ_PORTABLE_MAX_GROUP_SIZE_Y,
                         HCQ_PORTABLE_MAX_GROUP_SIZE_Z},
      .max_grid = {HCQ_PORTABLE_MAX_GRID, HCQ_PORTABLE_MAX_GRID, HCQ_PORTABLE_MAX_GRID},
      .max_work_items = (uint64_t)HCQ_PORTABLE_MAX_GRID * HCQ_PORTABLE_MAX_GRID *
                        HCQ_PORTABLE_MAX_GRID * HCQ_PORTABLE_MAX_GROUP_THREADS,
      .max_kernel_buffers = HCQ_PORTABLE_MAX_KERNEL_BUFFERS,
      .max_kernel_values = HCQ_PORTABLE_MAX_KERNEL_VALUES,
      .max_buffer_size = HCQ_PORTABLE_MAX_BUFFER_SIZE,
      .buffer_alignment = HCQ_WRAP_ALIGN,
      .view_offset_alignment = HCQ_PORTABLE_VIEW_OFFSET_ALIGNMENT,
      .shared_memory = HCQ_PORTABLE_SHARED_MEMORY,
      .portable = true,
  };
}

#define LOWER(field, to) ((field) = (field) < (to) ? (field) : (to))

void hcq__limits_make_portable(hcq_device_limits_t *l) {
  hcq_device_limits_t p;
  hcq_device_limits_portable(&p);
  LOWER(l->max_group_threads, p.max_group_threads);
  for (int i = 0; i < 3; i++) {
    LOWER(l->max_group_size[i], p.max_group_size[i]);
    LOWER(l->max_grid[i], p.max_grid[i]);
  }
  LOWER(l->max_work_items, p.max_work_items);
  LOWER(l->max_kernel_buffers, p.max_kernel_buffers);
  LOWER(l->max_kernel_values, p.max_kernel_values);
  LOWER(l->max_buffer_size, p.max_buffer_size);
  /* Alignments go the other way: the strictest one holds everywhere. */
  if (l->view_offset_alignment < p.view_offset_alignment)
    l->view_offset_alignment = p.view_offset_alignment;
  /* A kernel language without shared memory keeps saying so. */
  if (l->shared_memory) LOWER(l->shared_memory, p.shared_memory);
  l->portable = true;
}

bool hcq__portable_wanted(const hcq_device_options_t *opts) {
  return hcq__options()->portable || (opts && opts->portable);
}

hcq_status_t hcq_device_limits(const hcq_device_t *dev, hcq_device_limits_t *out) {
  if (!out) return hcq_status_make(HCQ_INVALID_ARGUMENT, "hcq_device_limits: out is NULL");
  hcq_status_t st = hcq__device_handle_check(dev, "hcq_device_limits");
  if (st) return st;
  *out = dev->limits;
  return NULL;
}

hcq_status_t hcq__limit_error(const hcq_device_t *dev, const char *who, const char *what,
                              uint64_t value, uint64_t limit, uint64_t portable_limit,
                              const char *unit) {
  if (dev->limits.portable && limit == portable_limit)
    return hcq_status_make(HCQ_OUT_OF_RANGE,
                           "%s: %s %" PRIu64 " exceeds the portable limit of %" PRIu64
                           " %s (HCQ_PORTABLE)",
                           who, what, value, limit, unit);
  return hcq_status_make(HCQ_OUT_OF_RANGE,
                         "%s: %s %" PRIu64 " exceeds %s's limit of %" PRIu64 " %s", who, what,
                         value, dev->name, limit, unit);
}

hcq_status_t hcq__check_arg_limits(const hcq_device_t *dev, size_t nbufs, size_t nvals,
                                   const char *who) {
  const hcq_device_limits_t *l = &dev->limits;
  if (nbufs > l->max_kernel_buffers)
    return hcq__limit_error(dev, who, "buffer argument count", nbufs, l->max_kernel_buffers,
                            HCQ_PORTABLE_MAX_KERNEL_BUFFERS, "buffers per launch");
  if (nvals > l->max_kernel_values)
    return hcq__limit_error(dev, who, "value argument count", nvals, l->max_kernel_values,
                            HCQ_PORTABLE_MAX_KERNEL_VALUES, "values per launch");
  return NULL;
}

/* Past the 32-bit and empty-launch checks: which group or grid limit the launch breaks. */
hcq_status_t hcq__check_group_limits(const hcq_device_t *dev, const uint64_t global[3],
                                     const uint64_t local[3], const char *who) {
  static const uint32_t portable_size[3] = {
      HCQ_PORTABLE_MAX_GROUP_SIZE_X, HCQ_PORTABLE_MAX_GROUP_SIZE_Y, HCQ_PORTABLE_MAX_GROUP_SIZE_Z};
  const hcq_device_limits_t *l = &dev->limits;
  uint64_t threads = local[0] * local[1]; /* each below 2^32: no overflow until the third */
  bool huge = __builtin_mul_overflow(threads, local[2], &threads);
  if (huge || threads > l->max_group_threads) {
    char what[96];
    snprintf(what, sizeof(what), "local size %" PRIu64 "x%" PRIu64 "x%" PRIu64 " =", local[0],
             local[1], local[2]);
    return hcq__limit_error(dev, who, what, huge ? UINT64_MAX : threads, l->max_group_threads,
                            HCQ_PORTABLE_MAX_GROUP_THREADS, "threads per work-group");
  }
  for (int i = 0; i < 3; i++) {
    char what[32];
    snprintf(what, sizeof(what), "local[%d]", i);
    if (local[i] > l->max_group_size[i])
      return hcq__limit_error(dev, who, what, local[i], l->max_group_size[i], portable_size[i],
                              "threads in that dimension");
    snprintf(what, sizeof(what), "global[%d]", i);
    if (global[i] > l->max_grid[i])
      return hcq__limit_error(dev, who, what, global[i], l->max_grid[i], HCQ_PORTABLE_MAX_GRID,
                              "work-groups in that dimension");
  }
  return NULL;
}

hcq_status_t hcq__check_buffer_size(const hcq_device_t *dev, uint64_t size) {
  if (size <= dev->limits.max_buffer_size) return NULL;
  char who[64];
  snprintf(who, sizeof(who), "buffer on %s", dev->name);
  return hcq__limit_error(dev, who, "size", size, dev->limits.max_buffer_size,
                          HCQ_PORTABLE_MAX_BUFFER_SIZE, "bytes");
}

hcq_status_t hcq__check_view_offset(const hcq_device_t *dev, uint64_t offset,
                                    const char *base_label) {
  uint32_t align = dev->limits.view_offset_alignment;
  if (!dev->limits.portable || align <= 1 || offset % align == 0) return NULL;
  return hcq_status_make(
      HCQ_INVALID_ARGUMENT,
      "view of %s at offset %" PRIu64 ": the offset is not a multiple of %" PRIu32
      " bytes, which kernels on some backends need to read any type through it (HCQ_PORTABLE)",
      base_label, offset, align);
}
