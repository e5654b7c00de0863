/* Device limits (limits.c): the defaults a backend's open starts from, portable mode, and the
 * checks that name a broken limit. */
#ifndef HCQ_CORE_LIMITS_H
#define HCQ_CORE_LIMITS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "hcq/device.h"

/* Limits that refuse nothing hcq can express (32-bit dims, the argument arrays' sizes): what a
 * backend's open starts from (set before it is called). */
void hcq__limits_unbounded(hcq_device_limits_t *out);
/* Lowers l to the portable set (raises the alignments) and marks it portable. */
void hcq__limits_make_portable(hcq_device_limits_t *l);
/* Whether a device opened with opts (may be NULL) runs in portable mode: HCQ_PORTABLE=1 or the
 * option. */
bool hcq__portable_wanted(const hcq_device_options_t *opts);

/* OUT_OF_RANGE "who: what value exceeds the portable limit of limit unit (HCQ_PORTABLE)" when
 * portable mode set the limit (limit == portable_limit), else naming dev's own limit. */
HCQ_MUST_USE hcq_status_t hcq__limit_error(const hcq_device_t *dev, const char *who,
                                           const char *what, uint64_t value, uint64_t limit,
                                           uint64_t portable_limit, const char *unit);
/* A launch's argument counts against dev's limits. */
HCQ_MUST_USE hcq_status_t hcq__check_arg_limits(const hcq_device_t *dev, size_t nbufs, size_t nvals,
                                                const char *who);
/* A launch's work-group size and grid (every dim nonzero and below 2^32) against dev's limits. */
HCQ_MUST_USE hcq_status_t hcq__check_group_limits(const hcq_device_t *dev, const uint64_t global[3],
                                                  const uint64_t local[3], const char *who);
/* hcq_buffer_create's size; a view's offset from its base (refused only in portable mode). */
HCQ_MUST_USE hcq_status_t hcq__check_buffer_size(const hcq_device_t *dev, uint64_t size);
HCQ_MUST_USE hcq_status_t hcq__check_view_offset(const hcq_device_t *dev, uint64_t offset,
                                                 const char *base_label);

#endif
