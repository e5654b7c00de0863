/* Text for status messages (status.c). */
#ifndef HCQ_CORE_STATUS_H
#define HCQ_CORE_STATUS_H

#include <stdbool.h>
#include <stddef.h>

/* [A-Za-z_][A-Za-z0-9_]* */
bool hcq__is_c_identifier(const char *s);
/* s in double quotes, with \n, \t, \", \\ and \xNN for what would not print (cut to fit size). */
void hcq__quote(const char *s, char *out, size_t size);

#endif
