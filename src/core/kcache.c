/* The kernel cache on disk, shared by the backends (see kcache.h). */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <pthread.h>
#include <pwd.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>
#include <xxhash.h>

#include "core/kcache.h"
#include "core/options.h"
#include "core/vec.h"

/* ---- which directories and files to trust ---- */

/* True for a user private group: this user's primary group, named like the user, listing no other
 * member. Distributions that give each user one also give a umask of 002, so everything such a
 * user creates is writable by a group that is only them. Answers are kept (NSS may be slow). */
static bool group_is_only_me(gid_t gid) {
  static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
  static struct known_group {
    gid_t gid;
    bool only;
  } known[8];
  static size_t nknown;
  pthread_mutex_lock(&lock);
  for (size_t i = 0; i < nknown; i++) {
    if (known[i].gid == gid) {
      bool only = known[i].only;
      pthread_mutex_unlock(&lock);
      return only;
    }
  }
  bool only = false;
  struct passwd pw, *p = NULL;
  struct group gr, *g = NULL;
  for (size_t size = 16384; size <= (1u << 22); size *= 4) {
    char *buf = malloc(2 * size);
    if (!buf) break;
    int e1 = getpwuid_r(geteuid(), &pw, buf, size, &p),
        e2 = getgrgid_r(gid, &gr, buf + size, size, &g);
    if (e1 != ERANGE && e2 != ERANGE) {
      only = p && g && p->pw_gid == gid && !strcmp(g->gr_name, p->pw_name);
      for (char **m = only ? g->gr_mem : NULL; m && *m; m++) only = only && !strcmp(*m, p->pw_name);
      free(buf);
      if (nknown < sizeof(known) / sizeof(known[0]))
        known[nknown++] = (struct known_group){gid, only};
      break;
    }
    free(buf);
  }
  pthread_mutex_unlock(&lock);
  return only;
}

/* Who besides the owner may create, rename or delete entries of a directory with this stat: NULL
 * for no one (or only the owner's private group), "others" or "its group". */
static const char *other_writers(const struct stat *st) {
  if (st->st_mode & S_IWOTH) return "others";
  if ((st->st_mode & S_IWGRP) && !group_is_only_me(st->st_gid)) return "its group";
  return NULL;
}

bool hcq__kcache_dir_trusted(const char *dir, char *why, size_t size) {
  uid_t me = geteuid();
  struct stat st;
  if (stat(dir, &st) != 0) {
    snprintf(why, size, "cannot inspect %s: %s", dir, strerror(errno));
    return false;
  }
  if (!S_ISDIR(st.st_mode)) {
    snprintf(why, size, "%s is not a directory", dir);
    return false;
  }
  if (st.st_uid != me) {
    snprintf(why, size, "%s is owned by uid %ld, not by this process's uid %ld", dir,
             (long)st.st_uid, (long)me);
    return false;
  }
  const char *writers = other_writers(&st);
  if (writers) {
    snprintf(why, size, "%s is writable by %s (mode %04o)", dir, writers,
             (unsigned)(st.st_mode & 07777));
    return false;
  }
  /* Whoever may rename entries of a directory above could swap dir for one of theirs. */
  char up[PATH_MAX];
  snprintf(up, sizeof(up), "%s", dir);
  for (char *slash = strrchr(up, '/'); slash; slash = strrchr(up, '/')) {
    if (slash == up)
      slash[1] = '\0';
    else
      *slash = '\0';
    if (stat(up, &st) != 0) {
      snprintf(why, size, "cannot inspect %s: %s", up, strerror(errno));
      return false;
    }
    if (st.st_uid != me && st.st_uid != 0) {
      snprintf(why, size, "%s, which holds %s, is owned by uid %ld", up, dir, (long)st.st_uid);
      return false;
    }
    if (!(st.st_mode & S_ISVTX) && (writers = other_writers(&st))) {
      snprintf(why, size,
               "%s, which holds %s, is writable by %s without the sticky bit (mode %04o)", up, dir,
               writers, (unsigned)(st.st_mode & 07777));
      return false;
    }
    if (slash == up) break;
  }
  return true;
}

/* 0700: what XDG asks of ~/.cache too. */
int hcq__kcache_make_dirs(const char *dir) {
  char tmp[PATH_MAX];
  snprintf(tmp, sizeof(tmp), "%s", dir);
  for (char *p = tmp + 1; *p; p++) {
    if (*p != '/') continue;
    *p = '\0';
    if (mkdir(tmp, 0700) != 0 && errno != EEXIST) return errno;
    *p = '/';
  }
  if (mkdir(tmp, 0700) != 0 && errno != EEXIST) return errno;
  return 0;
}

bool hcq__kcache_open_dir(const char *dir, char *out, char *why, size_t size) {
  int err = hcq__kcache_make_dirs(dir);
  if (err) {
    snprintf(why, size, "cannot create the cache directory %s: %s", dir, strerror(err));
    return false;
  }
  if (!realpath(dir, out)) {
    snprintf(why, size, "cannot resolve the cache directory %s: %s", dir, strerror(errno));
    return false;
  }
  if (strlen(out) > MAX_CACHE_DIR) {
    snprintf(why, size, "the cache directory %s resolves to a path longer than %d bytes", dir,
             MAX_CACHE_DIR);
    return false;
  }
  return hcq__kcache_dir_trusted(out, why, size);
}

bool hcq__kcache_file_is_ours(const struct stat *st) {
  return S_ISREG(st->st_mode) && st->st_uid == geteuid() && !other_writers(st);
}

/* ---- blobs ---- */

/* magic, the key the file is cached under (HCQ__KCACHE_KEY bytes, NUL-padded), the XXH128 of the
 * payload. The key is checked on load: a valid file of another kernel copied or restored over this
 * one's name is refused, not run. */
#define BLOB_HEADER (8 + HCQ__KCACHE_KEY + 16)
#define BLOB_HASH_AT (8 + HCQ__KCACHE_KEY)

bool hcq__kcache_blob_dir(const char *sub, char *out, size_t size) {
  char base[PATH_MAX], why[2 * PATH_MAX + 128];
  if (!hcq__options()->cache_dir) return false;
  if (!hcq__kcache_open_dir(hcq__options()->cache_dir, base, why, sizeof(why))) {
    hcq__kcache_warn_uncached(why);
    return false;
  }
  int n = snprintf(out, size, "%s/%s", base, sub);
  if (n < 0 || (size_t)n >= size) return false;
  if (mkdir(out, 0700) != 0 && errno != EEXIST) {
    snprintf(why, sizeof(why), "cannot create %s: %s", out, strerror(errno));
    hcq__kcache_warn_uncached(why);
    return false;
  }
  /* Ours alone: we made it 0700, and a subdirectory gets no private-group allowance. */
  struct stat st;
  bool ok = lstat(out, &st) == 0 && S_ISDIR(st.st_mode) && st.st_uid == geteuid() &&
            !(st.st_mode & (S_IWGRP | S_IWOTH));
  if (!ok) {
    snprintf(why, sizeof(why), "%s is not a directory of this user's that only this user may write",
             out);
    hcq__kcache_warn_uncached(why);
  }
  return ok;
}

static bool read_all(int fd, void *buf, size_t n) {
  char *p = buf;
  while (n) {
    ssize_t r = read(fd, p, n);
    if (r < 0 && errno == EINTR) continue;
    if (r == 0) errno = 0; /* the file ended early */
    if (r <= 0) return false;
    p += r, n -= (size_t)r;
  }
  return true;
}

static bool write_all(int fd, const void *buf, size_t n) {
  const char *p = buf;
  while (n) {
    ssize_t r = write(fd, p, n);
    if (r < 0 && errno == EINTR) continue;
    if (r == 0) errno = 0;
    if (r <= 0) return false;
    p += r, n -= (size_t)r;
  }
  return true;
}

static void hash_into(uint8_t out[16], const void *payload, size_t size) {
  XXH128_hash_t h = XXH3_128bits(payload, size);
  uint64_t v[2] = {h.high64, h.low64};
  memcpy(out, v, 16);
}

static atomic_bool g_warned_uncached;

void hcq__kcache_warn_uncached(const char *why) {
  if (atomic_exchange(&g_warned_uncached, true)) return;
  fprintf(stderr,
          "hcq: warning: compiled kernels are not cached in this process: %s. Each program is "
          "compiled without the "
          "cache instead (docs/kernel-cache.md).\n",
          why);
}

/* One line per damaged file: each is replaced right after, so the next process says nothing. */
void hcq__kcache_warn_damaged(const char *path, const char *why) {
  fprintf(
      stderr,
      "hcq: warning: the cached kernel %s is damaged (%s); it is compiled again and replaced.\n",
      path, why);
}

static void key_field(uint8_t out[HCQ__KCACHE_KEY], const char *key) {
  memset(out, 0, HCQ__KCACHE_KEY);
  memcpy(out, key, strnlen(key, HCQ__KCACHE_KEY));
}

void *hcq__kcache_blob_load(const char *path, const char *magic, const char *key, size_t max_size,
                            size_t *out_size) {
  int fd = open(path, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) return NULL;
  struct stat st;
  uint8_t header[BLOB_HEADER], want[16], want_key[HCQ__KCACHE_KEY];
  key_field(want_key, key);
  void *payload = NULL;
  size_t size = 0;
  char why[256] = "";
  if (fstat(fd, &st) != 0 || !hcq__kcache_file_is_ours(&st)) {
    /* not ours to judge: skipped */
  } else if (st.st_size < BLOB_HEADER) {
    snprintf(why, sizeof(why), "%lld bytes, shorter than its %d-byte header", (long long)st.st_size,
             BLOB_HEADER);
  } else if ((uint64_t)st.st_size - BLOB_HEADER > max_size) {
    snprintf(why, sizeof(why), "%lld bytes, more than a kernel of this kind can be",
             (long long)st.st_size);
  } else if (!read_all(fd, header, sizeof(header))) {
    snprintf(why, sizeof(why), "its header cannot be read: %s",
             errno ? strerror(errno) : "it shrank");
  } else if (!memcmp(header, magic, 6) && memcmp(header + 6, magic + 6, 2)) {
    /* an earlier version of this format: replaced without a word */
  } else if (memcmp(header, magic, 8)) {
    snprintf(why, sizeof(why), "it does not start with the format tag %.8s", magic);
  } else if (memcmp(header + 8, want_key, HCQ__KCACHE_KEY)) {
    snprintf(why, sizeof(why),
             "it holds the kernel cached under key %.*s, not this one's %.*s: copied or restored "
             "over it",
             (int)strnlen((const char *)header + 8, HCQ__KCACHE_KEY), (const char *)header + 8,
             HCQ__KCACHE_KEY, key);
  } else {
    size = (size_t)st.st_size - BLOB_HEADER;
    payload = malloc(size ? size : 1);
    if (payload && !read_all(fd, payload, size))
      snprintf(why, sizeof(why), "it cannot be read whole: %s",
               errno ? strerror(errno) : "it shrank");
    else if (payload && (hash_into(want, payload, size), memcmp(want, header + BLOB_HASH_AT, 16)))
      snprintf(why, sizeof(why),
               "its contents do not match the hash stored with them: corrupted or truncated");
    if (why[0]) {
      free(payload);
      payload = NULL;
    }
  }
  /* Used now: the size cap (HCQ_CACHE_MAX_MB) removes the least recently used files first. */
  if (payload && hcq__options()->cache_max_bytes) futimens(fd, NULL);
  close(fd);
  if (why[0]) hcq__kcache_warn_damaged(path, why);
  if (payload) *out_size = size;
  return payload;
}

/* ---- the size cap (HCQ_CACHE_MAX_MB) ---- */

typedef struct cached_file {
  char path[PATH_MAX];
  uint64_t size;
  struct timespec used; /* mtime: stored, or last loaded (blob_load touches it) */
} cached_file_t;
typedef HCQ__VEC(cached_file_t) cached_files_t;

/* A cached kernel's name: 32 hex digits of its key, a dot, an extension (".so", ".spv", ".cubin").
 * Temporary files ("tmp-...") of stores in progress are not. */
static bool is_cached_kernel(const char *name) {
  for (int i = 0; i < HCQ__KCACHE_KEY; i++)
    if (!name[i] || !strchr("0123456789abcdef", name[i])) return false;
  return name[HCQ__KCACHE_KEY] == '.' && name[HCQ__KCACHE_KEY + 1];
}

/* The cached kernels of ours in dir, appended to *files. */
static void list_cached(const char *dir, cached_files_t *files, int depth) {
  DIR *d = opendir(dir);
  for (struct dirent *e; d && (e = readdir(d));) {
    if (e->d_name[0] == '.') continue;
    cached_file_t f;
    if (snprintf(f.path, sizeof(f.path), "%s/%s", dir, e->d_name) >= (int)sizeof(f.path)) continue;
    struct stat st;
    if (lstat(f.path, &st) != 0) continue;
    if (S_ISDIR(st.st_mode) && depth == 0 &&
        st.st_uid == geteuid()) { /* a backend's blobs: spirv/, cuda/ */
      list_cached(f.path, files, 1);
      continue;
    }
    if (!is_cached_kernel(e->d_name) || !hcq__kcache_file_is_ours(&st)) continue;
    f.size = (uint64_t)st.st_size;
    f.used = st.st_mtim;
    if (!hcq__vec_push(files, f)) break;
  }
  if (d) closedir(d);
}

static int by_last_use(const void *a, const void *b) {
  const struct timespec *x = &((const cached_file_t *)a)->used,
                        *y = &((const cached_file_t *)b)->used;
  if (x->tv_sec != y->tv_sec) return x->tv_sec < y->tv_sec ? -1 : 1;
  return x->tv_nsec < y->tv_nsec ? -1 : x->tv_nsec > y->tv_nsec;
}

/* Removes the least recently used cached kernels until the cache holds at most cap bytes, never
 * keep (the file just stored). A kernel in use is never affected: every backend reads its file
 * whole into memory before using it (a CPU object is loaded from a memfd), so removing the file
 * removes nothing a process runs; a process opening it at that moment reads it whole or compiles
 * again. */
static void trim_cache(uint64_t cap, const char *keep) {
  char root[PATH_MAX];
  if (!realpath(hcq__options()->cache_dir, root)) return;
  cached_files_t files = {0};
  list_cached(root, &files, 0);
  uint64_t total = 0;
  for (size_t i = 0; i < files.len; i++) total += files.data[i].size;
  if (total > cap) {
    qsort(files.data, files.len, sizeof(cached_file_t), by_last_use);
    for (size_t i = 0; i < files.len && total > cap; i++) {
      if (!strcmp(files.data[i].path, keep)) continue;
      if (unlink(files.data[i].path) == 0 || errno == ENOENT) total -= files.data[i].size;
    }
  }
  hcq__vec_free(&files);
}

/* A full disk (or quota) said as one: the folder, the bytes the file needed and those left. */
static void disk_full_why(char *why, size_t size, const char *dir, const char *path, size_t need,
                          int err) {
  struct statvfs sv;
  char free_text[64] = "";
  if (statvfs(dir, &sv) == 0)
    snprintf(free_text, sizeof(free_text), ", %llu free",
             (unsigned long long)sv.f_bavail * sv.f_frsize);
  snprintf(why, size, "cannot store %s: the disk holding %s is full (%s): %zu bytes needed%s", path,
           dir, strerror(err), need, free_text);
}

bool hcq__kcache_blob_store(const char *dir, const char *path, const char *magic, const char *key,
                            const void *payload, size_t size) {
  char tmp[PATH_MAX + 32], why[2 * PATH_MAX + 128];
  int n = snprintf(tmp, sizeof(tmp), "%s/tmp-XXXXXX", dir);
  if (n < 0 || (size_t)n >= sizeof(tmp)) return false;
  int fd = mkostemp(tmp, O_CLOEXEC);
  if (fd < 0 && (errno == ENOSPC || errno == EDQUOT)) {
    disk_full_why(why, sizeof(why), dir, path, BLOB_HEADER + size, errno);
    hcq__kcache_warn_uncached(why);
    return false;
  }
  if (fd < 0) {
    snprintf(why, sizeof(why), "cannot store %s: cannot create a file in %s: %s", path, dir,
             strerror(errno));
    hcq__kcache_warn_uncached(why);
    return false;
  }
  uint8_t header[BLOB_HEADER];
  memcpy(header, magic, 8);
  key_field(header + 8, key);
  hash_into(header + BLOB_HASH_AT, payload, size);
  errno = 0;
  bool ok = fchmod(fd, 0600) == 0 && write_all(fd, header, sizeof(header)) &&
            write_all(fd, payload, size);
  int err = errno;
  /* close reports what a network file system could not write back. */
  if (close(fd) != 0 && ok) ok = false, err = errno;
  if (ok && rename(tmp, path) != 0) ok = false, err = errno;
  if (!ok) {
    unlink(tmp);
    if (err == ENOSPC || err == EDQUOT)
      disk_full_why(why, sizeof(why), dir, path, sizeof(header) + size, err);
    else
      snprintf(why, sizeof(why), "cannot store %s: %s", path, err ? strerror(err) : "short write");
    hcq__kcache_warn_uncached(why);
  }
  if (ok && hcq__options()->cache_max_bytes) trim_cache(hcq__options()->cache_max_bytes, path);
  return ok;
}
