/* The CPU kernel compiler's pieces shared between its files: cpu_compile.c (the compiler from
 * HCQ_CC and HCQ_CFLAGS, compiling, the entry point), cpu_compile_key.c (the cache key and the host
 * CPU in it), cpu_compile_run.c (running the compiler process) and cpu_load.c (loading an object).
 * What tests see of them is in cpu_compile.h. */
#ifndef HCQ_CPU_COMPILE_INTERNAL_H
#define HCQ_CPU_COMPILE_INTERNAL_H

#include <limits.h>
#include <stdbool.h>
#include <stddef.h>

#include "core/program.h"
#include "hcq/status.h"

#define PATH_BUF (PATH_MAX + 64)

/* The blanks that separate words (hcq__cpu_split_words). */
static inline bool is_blank(char c) { return c == ' ' || c == '\t' || c == '\n'; }

/* Runs the compiler (exe, argv) and gives its exact wait status, whatever the application did
 * with SIGCHLD, and its output in output (cap bytes). (cpu_compile_run.c) */
HCQ_MUST_USE hcq_status_t hcq__cpu_run_compiler(const char *exe, char *const argv[], char *output,
                                                size_t cap, int *out_status);

/* A new directory of ours alone (0700) in TMPDIR, else /tmp, locked while we use it; the caller
 * removes it with hcq__cpu_remove_private_dir. The first call of a process removes the
 * hcq-build-* directories of processes that died without removing theirs. (cpu_load.c) */
HCQ_MUST_USE hcq_status_t hcq__cpu_make_private_dir(const char *entry, char dir[PATH_MAX]);
/* Removes dir (and whatever a compile left in it) and lets its lock go. (cpu_load.c) */
void hcq__cpu_remove_private_dir(const char *dir);

/* Writes all n bytes (retrying short writes and EINTR); false on an error. (cpu_load.c) */
bool hcq__cpu_write_bytes(int fd, const void *data, size_t n);

/* Loads the object held in bytes (checked by the caller; key names it), resolving entry in it.
 * *out_bad: it does not load at all. (cpu_load.c) */
HCQ_MUST_USE hcq_status_t hcq__cpu_load_image(const void *bytes, size_t size, const char *key,
                                              const char *entry, hcq__program_impl_t *out,
                                              bool *out_bad);

#endif
