/* Hang reports (hang_report.c): what each engine of a device is doing, one line per queue
 * (hcq_device_report), added to timeouts and close failures. */
#ifndef HCQ_CORE_HANG_REPORT_H
#define HCQ_CORE_HANG_REPORT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/command.h"
#include "hcq/device.h"

typedef struct hcq__engine_snapshot {
  bool present;       /* the queue kind exists on the device */
  uint64_t submitted; /* progress counters (backend units) */
  uint64_t completed;
  const uint32_t *cur;       /* the command running or blocked now; NULL when idle */
  const uint32_t *prev;      /* the last command completed in the same command list; may be NULL */
  const uint32_t *call_base; /* the bound command list cur belongs to (NULL: the device ring) */
  /* When the engine began cur (hcq__now_ns's clock), where it says; 0 when it does not, and the
   * report falls back to when it first saw cur there. */
  uint64_t cur_since_ns;
  /* A backend that frees command words once they ran copies cur's and prev's here, under the lock
   * its engine frees them under, and sets words_copied: the report reads these, and uses cur and
   * prev only as identities. */
  bool words_copied;
  uint32_t cur_words[HCQ__MAX_CMD_WORDS], prev_words[HCQ__MAX_CMD_WORDS];
} hcq__engine_snapshot_t;

/* Appends dev's hang report (one line per queue, see hcq_device_report) to st's message. */
HCQ_MUST_USE hcq_status_t hcq__device_annotate_report(hcq_status_t st, hcq_device_t *const *devs,
                                                      size_t ndevs);
/* Notes, for the hang report's "for at least N ms", what each engine of devs is doing now. */
void hcq__device_touch_watch(hcq_device_t *const *devs, size_t ndevs);

#endif
