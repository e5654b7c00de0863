/* What the files of src/jit/ share. */
#ifndef HCQ_JIT_INTERNAL_H
#define HCQ_JIT_INTERNAL_H

#include "hcq/jit.h"

/* Keeps vals as values of the capture running on the calling thread (none: nothing happens), the
 * newest value of each variable replacing older ones. A failure to keep them (memory) fails the
 * capture's end. */
void hcq__capture_bind(const hcq_var_value_t *vals, size_t nvals);

#endif
