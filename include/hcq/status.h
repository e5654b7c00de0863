/* hcq status: how every public call reports failure.
 *
 * A status is a pointer. NULL means success and costs nothing; a failure is a heap object holding a
 * code and a message that names the thing at fault (device, buffer, item, variable, signal). The
 * caller owns a failure status and must release it with hcq_status_destroy() (passing NULL is
 * fine). Out-of-memory failures return a preallocated status, so reporting never needs memory it
 * lacks.
 */
#ifndef HCQ_STATUS_H
#define HCQ_STATUS_H

#include <stdarg.h>

#ifdef __cplusplus
extern "C" {
#endif
#pragma GCC visibility push(default) /* exported from libhcq.so (see hcq.h) */

#if defined(__GNUC__) || defined(__clang__)
#define HCQ_MUST_USE __attribute__((warn_unused_result))
#define HCQ_PRINTF(fmt, args) __attribute__((format(printf, fmt, args)))
#else
#define HCQ_MUST_USE
#define HCQ_PRINTF(fmt, args)
#endif

/* The closed set of failure kinds: X(name, short description). */
// clang-format off
#define HCQ_STATUS_CODES(X)                     \
  X(OK, "ok")                                   \
  X(INVALID_ARGUMENT, "invalid argument")       \
  X(NOT_FOUND, "not found")                     \
  X(OUT_OF_RANGE, "out of range")               \
  X(OUT_OF_MEMORY, "out of memory")             \
  X(COMPILE_ERROR, "compile error")             \
  X(TIMEOUT, "timeout")                         \
  X(UNAVAILABLE, "unavailable")                 \
  X(FAILED_PRECONDITION, "failed precondition") \
  X(DEVICE_ERROR, "device error")               \
  X(DEVICE_LOST, "device lost")                 \
  X(UNIMPLEMENTED, "unimplemented")             \
  X(INTERNAL, "internal error")
// clang-format on

typedef enum hcq_status_code {
#define HCQ__STATUS_ENUM(name, desc) HCQ_##name,
  HCQ_STATUS_CODES(HCQ__STATUS_ENUM)
#undef HCQ__STATUS_ENUM
      HCQ_STATUS_CODE_COUNT
} hcq_status_code_t;

typedef struct hcq_status *hcq_status_t;

/* HCQ_OK for NULL, else the failure's code. */
hcq_status_code_t hcq_status_code(hcq_status_t status);
/* "" for NULL, else the failure's message. Valid until hcq_status_destroy(). */
const char *hcq_status_message(hcq_status_t status);
/* Stable upper-case name of a code ("TIMEOUT"); "UNKNOWN" for values outside the set. */
const char *hcq_status_code_name(hcq_status_code_t code);
/* Releases a failure status; NULL and the preallocated out-of-memory status are ignored. */
void hcq_status_destroy(hcq_status_t status);

/* Builds a failure status with a printf-style message (fmt NULL: an empty one). Returns the
 * out-of-memory status when the message cannot be allocated. code must not be HCQ_OK (it becomes
 * HCQ_INTERNAL). hcq_status_makev is the same with a va_list. */
hcq_status_t hcq_status_make(hcq_status_code_t code, const char *fmt, ...) HCQ_PRINTF(2, 3);
hcq_status_t hcq_status_makev(hcq_status_code_t code, const char *fmt, va_list ap);
/* Returns a new status with "prefix: " put before the message of status, which it consumes.
 * NULL stays NULL; a NULL or empty prefix leaves status as it is. */
hcq_status_t hcq_status_annotate(hcq_status_t status, const char *fmt, ...) HCQ_PRINTF(2, 3);

#pragma GCC visibility pop
#ifdef __cplusplus
}
#endif
#endif
