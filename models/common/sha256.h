/* SHA-256 (FIPS 180-4), for checking downloaded model files against a published digest. Nothing
 * hcq links provides one (xxHash is not a cryptographic hash). */
#ifndef HCQ_MODELS_SHA256_H
#define HCQ_MODELS_SHA256_H

#include <stddef.h>
#include <stdint.h>

typedef struct hcq_sha256 {
  uint32_t state[8];
  uint64_t length;   /* bytes hashed so far */
  uint8_t block[64]; /* a partial block */
  size_t used;       /* bytes in block */
} hcq_sha256_t;

void hcq_sha256_init(hcq_sha256_t *h);
void hcq_sha256_update(hcq_sha256_t *h, const void *data, size_t size);
/* The 32-byte digest; h must be initialised again before reuse. */
void hcq_sha256_final(hcq_sha256_t *h, uint8_t digest[32]);
/* The digest as 64 lowercase hex digits and a NUL. */
void hcq_sha256_hex(const uint8_t digest[32], char out[65]);
/* The digest of a file's bytes as hex: 0, or -1 with errno when it cannot be read. */
int hcq_sha256_file(const char *path, char out[65]);

#endif
