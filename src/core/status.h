/* The library's error idiom, and text for status messages (status.c). */
#ifndef HCQ_CORE_STATUS_H
#define HCQ_CORE_STATUS_H

#include <stdbool.h>
#include <stddef.h>

#include "hcq/status.h"

/* The one error idiom (docs/design.md, "Errors"): a call whose failure ends the function returns it
 * at once through HCQ__TRY; a function with something to undo tests `if ((st = call)) goto fail;`
 * and unwinds under one label. Neither `for (...; ... && !st; ...)` guards nor `if (!st) st = ...`
 * chains: the first failure leaves at once. */
#define HCQ__TRY(call)         \
  do {                         \
    hcq_status_t st_ = (call); \
    if (st_) return st_;       \
  } while (0)

/* [A-Za-z_][A-Za-z0-9_]* */
bool hcq__is_c_identifier(const char *s);
/* s in double quotes, with \n, \t, \", \\ and \xNN for what would not print (cut to fit size). */
void hcq__quote(const char *s, char *out, size_t size);

#endif
