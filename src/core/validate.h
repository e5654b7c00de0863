/* HCQ_VALIDATE=1's check that a launch writes only the buffers its outs declare (validate.c). */
#ifndef HCQ_CORE_VALIDATE_H
#define HCQ_CORE_VALIDATE_H

#include "hcq/program.h"

/* begin copies out the buffers not declared written (nothing when every buffer is: *out NULL);
 * end, after the kernel, compares them again, frees wc, and fails naming the first changed buffer.
 */
typedef struct hcq__write_check hcq__write_check_t;
HCQ_MUST_USE hcq_status_t hcq__write_check_begin(const hcq_launch_desc_t *d,
                                                 hcq__write_check_t **out);
HCQ_MUST_USE hcq_status_t hcq__write_check_end(hcq__write_check_t *wc, const hcq_launch_desc_t *d);
void hcq__write_check_free(hcq__write_check_t *wc);

/* HCQ_LEAK_REPORT (docs/errors.md, "Leak report"), read once: 0 unset or "0", 1 on ("1"), 2 with
 * the creating stack of each object ("backtrace"). Anything else warns once and counts as 0. */
int hcq__leak_report_env(void);

#endif
