/* The models' one shorthand for hcq's status convention: return the first failure. */
#ifndef HCQ_MODELS_STATUS_H
#define HCQ_MODELS_STATUS_H

#include <hcq/hcq.h>

#define TRY(call)              \
  do {                         \
    hcq_status_t st_ = (call); \
    if (st_) return st_;       \
  } while (0)

#endif
