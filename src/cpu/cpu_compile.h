/* Private pieces of the CPU kernel compiler (cpu_compile.c; the cache key: cpu_compile_key.c),
 * declared for its tests. What the cache key covers and how the cache protects itself:
 * docs/kernel-cache.md. */
#ifndef HCQ_CPU_COMPILE_H
#define HCQ_CPU_COMPILE_H

#include <stddef.h>

#include "hcq/status.h"

/* Splits text (the value of the variable called name, for messages) into words the way a shell
 * splits a simple command, without any expansion: blanks (space, tab, newline) separate words;
 * '...' keeps everything inside literally; "..." keeps everything inside except that a backslash
 * before " \ $ or ` stands for that character; elsewhere a backslash keeps the next character.
 * $VAR, globs, ~ and command substitution are passed on unchanged. On success *out_words is one
 * malloc'd block (free it alone) holding *out_count words and a NULL after them. An unterminated
 * quote or a trailing backslash is INVALID_ARGUMENT naming the variable. */
HCQ_MUST_USE hcq_status_t hcq__cpu_split_words(const char *name, const char *text,
                                               char ***out_words, size_t *out_count);

/* Everything the cache key of one kernel depends on. */
typedef struct hcq__cpu_key_input {
  const char *source;
  const char *entry;
  const char *const *cc_words; /* HCQ_CC split into words, NULL-terminated */
  const char
      *cc_identity; /* the executables among them: resolved path, size, mtime (one per line) */
  const char *const *cflags; /* HCQ_CFLAGS split into words, NULL-terminated */
  const char *cpu_identity;  /* the host CPU; part of the key only when a word contains "native" */
} hcq__cpu_key_input_t;

/* The cache key: 32 lower-case hex digits (a 128-bit XXH3 hash) and a NUL. */
void hcq__cpu_cache_key(const hcq__cpu_key_input_t *in, char out_hex[33]);

/* This machine's CPU as -march=native sees it (architecture, model, feature flags from
 * /proc/cpuinfo), hashed to 32 hex digits; NULL when it cannot be read. Computed once. */
const char *hcq__cpu_host_identity(void);

#endif
