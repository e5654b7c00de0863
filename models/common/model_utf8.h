/* UTF-8 as the models and the tool read text: strictly (Unicode table 3-7). */
#ifndef HCQ_MODELS_UTF8_H
#define HCQ_MODELS_UTF8_H

#include <stddef.h>
#include <stdint.h>

/* Decodes the sequence at s (n > 0 bytes left): its length and *out its code point; 0 when it is
 * malformed (a stray continuation byte, overlong, a surrogate, beyond U+10FFFF, cut short). */
size_t hcq_model_utf8_decode(const unsigned char *s, size_t n, uint32_t *out);
/* Writes code point c (at most U+10FFFF) as UTF-8 to out (room for 4 bytes): its length. */
size_t hcq_model_utf8_encode(uint32_t c, unsigned char *out);

#endif
