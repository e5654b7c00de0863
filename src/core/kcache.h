/* The kernel cache on disk, shared by every backend: which directories and files to trust, and
 * compiled images (NVRTC output, SPIR-V) stored whole under a hash of their contents. The CPU
 * backend keeps shared objects in the cache directory itself; other backends keep blobs in a
 * subdirectory of it. What is trusted: docs/kernel-cache.md. */
#ifndef HCQ_CORE_KCACHE_H
#define HCQ_CORE_KCACHE_H

#include <limits.h>
#include <stdbool.h>
#include <stddef.h>
#include <sys/stat.h>

/* Directories we write in are at most MAX_CACHE_DIR long, leaving room for "/tmp-XXXXXX.c",
 * "/<32 hex>.so" and the like. */
#define MAX_CACHE_DIR (PATH_MAX - 64)

/* True when only this process's user (and root) can have put files in dir, a resolved path: it is
 * ours and writable by no one else (or only by our private group), and every directory above it
 * is ours or root's and writable by others only when sticky. Else *why says who else could. */
bool hcq__kcache_dir_trusted(const char *dir, char *why, size_t size);
/* Creates dir and its missing parents 0700. 0 or an errno. */
int hcq__kcache_make_dirs(const char *dir);
/* dir (the cache directory), created if missing and resolved into out (PATH_MAX bytes); false with
 * *why when it cannot be created or trusted. */
bool hcq__kcache_open_dir(const char *dir, char *out, char *why, size_t size);
/* A regular file of ours that no one else may write. */
bool hcq__kcache_file_is_ours(const struct stat *st);

/* ---- blobs: whole compiled images in a private subdirectory ---- */

/* The cache directory's subdirectory sub (created 0700), resolved into out; false when it cannot
 * be made or trusted, or is writable by anyone but us: then nothing is cached (the once-per-process
 * warning says why). */
bool hcq__kcache_blob_dir(const char *sub, char *out, size_t size);
/* Every blob records the key it is cached under: the 32 hex digits its file is named by (at most
 * HCQ__KCACHE_KEY characters). */
#define HCQ__KCACHE_KEY 32

/* The payload stored at path (malloc'd, *out_size bytes) when the file is ours, private, starts
 * with magic (8 bytes), was stored under key and its payload hashes as recorded; NULL otherwise
 * (compile again). A file of ours that fails those checks (a flipped bit, truncated, another
 * format, another kernel's file copied or restored over this name, unreadable) is damaged: one
 * warning on stderr names it, and the caller's store replaces it. A file in an earlier version of
 * the format (magic's first 6 bytes equal, its version differs), a missing file, or one we do not
 * trust (someone else's, a link, a FIFO) is skipped silently. The payload is read whole into memory
 * and checked there: what the caller uses cannot change after the check. */
void *hcq__kcache_blob_load(const char *path, const char *magic, const char *key, size_t max_size,
                            size_t *out_size);
/* Writes magic, key, the payload's XXH128 and the payload (0600) to a temporary file in dir and
 * renames it over path: readers see the whole file or none, and one that lost its data in a crash
 * fails its hash. Failing (full disk, quota, read-only file system...) is not an error: nothing is
 * cached, the temporary file is removed and hcq__kcache_warn_uncached says why; returns false. */
bool hcq__kcache_blob_store(const char *dir, const char *path, const char *magic, const char *key,
                            const void *payload, size_t size);
/* Says on stderr that the cached file path is damaged (why) and is compiled again and replaced: for
 * a file that passed the blob checks but does not load (its caller replaces it). */
void hcq__kcache_warn_damaged(const char *path, const char *why);

/* Says on stderr, once per process, that compiled kernels are not cached and why. */
void hcq__kcache_warn_uncached(const char *why);

#endif
