/* Precompiled kernels inside hcq: their text form and what the core, the backends and the
 * graph-file loader share about them (the public side is hcq/program.h).
 *
 * A binary travels as source text, "#FORMAT" then a line break then its bytes in base64, so that
 * everything that carries sources (hcq_program_source, saved graph files, the MPI layer, captures)
 * carries binaries unchanged, and each backend's program_compile takes both. */
#ifndef HCQ_CORE_BINARY_H
#define HCQ_CORE_BINARY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "hcq/program.h"

/* The most bytes one binary may have. */
#define HCQ__BINARY_MAX_BYTES (256u << 20)

/* Base64 (RFC 4648 alphabet, '=' padding). decode ignores whitespace and takes missing padding;
 * NULL and a reason when malformed. encode breaks lines every 76 characters. Both allocate. */
uint8_t *hcq__b64_decode(const char *text, size_t *out_len, const char **why);
char *hcq__b64_encode(const uint8_t *data, size_t n);

/* The text form of a binary (malloc'd); NULL when out of memory. */
char *hcq__binary_text(hcq_binary_format_t format, const void *bytes, size_t size);
/* The format when source is a binary's text form ("#cubin\n..."), else HCQ_BINARY_NONE. */
hcq_binary_format_t hcq__binary_of_source(const char *source);
/* The bytes of a binary's text form (malloc'd). COMPILE_ERROR naming entry when the base64 is bad.
 */
HCQ_MUST_USE hcq_status_t hcq__binary_decode(const char *source, const char *entry, uint8_t **out,
                                             size_t *out_len);

/* What bytes look like, for messages: "a SPIR-V module", "an ELF file (a cubin?)", "text starting
 * \"__global__ v\"", ... Writes into out. */
void hcq__binary_describe(const void *bytes, size_t size, char *out, size_t out_size);
/* The format the bytes' header says (magic numbers, or PTX's .version), or HCQ_BINARY_NONE. */
hcq_binary_format_t hcq__binary_sniff(const void *bytes, size_t size);

/* A CUDA architecture, "sm_90", "90", "9.0" or "compute_90", as major * 10 + minor; 0 when it is
 * none of those (or NULL). */
int hcq__binary_arch(const char *arch);

/* "spirv, cubin" into out: the formats set in mask (bit 1 << format); "none" when empty. */
void hcq__binary_list(unsigned mask, char *out, size_t size);

#endif
