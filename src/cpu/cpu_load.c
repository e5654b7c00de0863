/* Loading a compiled CPU kernel: from checked bytes in memory (a sealed memfd), else from a file
 * in a private directory of ours, never by mapping the cache file (docs/kernel-cache.md). */
#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <link.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/kcache.h"
#include "core/options.h"
#include "core/status.h"
#include "cpu/cpu_compile_internal.h"

/* ---- loading ---- */

/* dlopens path and resolves entry in that object itself (not in libm or libc behind it). *out_bad
 * is set when the object does not load at all. */
static hcq_status_t load_object(const char *path, const char *entry, hcq__program_impl_t *out,
                                bool *out_bad) {
  *out_bad = false;
  void *handle = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (!handle) {
    const char *err = dlerror();
    *out_bad = true;
    return hcq_status_make(HCQ_COMPILE_ERROR, "cannot load compiled kernel %s: %s", path,
                           err ? err : "?");
  }
  dlerror();
  void *sym = dlsym(handle, entry);
  Dl_info info;
  struct link_map *map = NULL;
  if (sym && (!dladdr(sym, &info) || dlinfo(handle, RTLD_DI_LINKMAP, &map) != 0 || !map ||
              !info.dli_fname || strcmp(info.dli_fname, map->l_name) != 0))
    sym = NULL;
  if (!sym) {
    dlclose(handle);
    return hcq_status_make(HCQ_COMPILE_ERROR, "entry point \"%s\" is not defined by the source",
                           entry);
  }
  out->object = handle;
  out->handle = (uint64_t)(uintptr_t)sym;
  return NULL;
}

/* ---- a private directory, for compiling and as a last resort for loading ----
 *
 * A process killed while it compiles (kill -9, the OOM killer) cannot remove its directory. So
 * each directory is flocked by its owner for as long as the owner uses it, and the first compile of
 * a later process removes every hcq-build-* directory of ours whose lock it can take: the kernel
 * drops a dead process's locks, whatever pid namespace it ran in, and a reused pid changes nothing.
 * The lock is held on the directory itself (no file inside to remove first). */

typedef struct cpu_held_dir {
  char *path;
  int fd;
} cpu_held_dir_t;

static pthread_mutex_t g_held_lock = PTHREAD_MUTEX_INITIALIZER;
static cpu_held_dir_t *g_held;
static size_t g_held_len, g_held_cap;

static int remove_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw) {
  (void)sb, (void)ftw;
  if (flag == FTW_DP)
    rmdir(path);
  else
    unlink(path);
  return 0; /* what cannot be removed stays; the rest goes */
}

static void remove_tree(const char *dir) { nftw(dir, remove_entry, 16, FTW_DEPTH | FTW_PHYS); }

/* Removes base's hcq-build-* directories of ours whose owner is gone (their lock is free). */
static void reap_stale_dirs(const char *base) {
  DIR *d = opendir(base);
  if (!d) return;
  char path[PATH_BUF];
  for (struct dirent *e; (e = readdir(d));) {
    if (strncmp(e->d_name, "hcq-build-", 10)) continue;
    int n = snprintf(path, sizeof(path), "%s/%s", base, e->d_name);
    if (n < 0 || (size_t)n >= sizeof(path)) continue;
    struct stat sb;
    if (lstat(path, &sb) || !S_ISDIR(sb.st_mode) || sb.st_uid != geteuid()) continue;
    int fd = open(path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) continue;
    if (flock(fd, LOCK_EX | LOCK_NB) == 0)
      remove_tree(path); /* removed while locked: see lock_new_dir */
    close(fd);
  }
  closedir(d);
}

/* Takes the lock of the directory mkdtemp just made and records it: false when the directory was
 * reaped before the lock was taken (a later process saw it unlocked), or cannot be locked. */
static bool lock_new_dir(const char *dir) {
  int fd = open(dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) return false;
  struct stat sb;
  /* a reaper holding the lock is removing the directory: once it lets go, no link is left */
  if (flock(fd, LOCK_EX) != 0 || fstat(fd, &sb) != 0 || sb.st_nlink == 0) {
    close(fd);
    return false;
  }
  pthread_mutex_lock(&g_held_lock);
  bool kept = false;
  if (g_held_len == g_held_cap) {
    size_t cap = g_held_cap ? 2 * g_held_cap : 8;
    cpu_held_dir_t *grown = realloc(g_held, cap * sizeof(*grown));
    if (grown) g_held = grown, g_held_cap = cap;
  }
  char *copy = g_held_len < g_held_cap ? strdup(dir) : NULL;
  if (copy) g_held[g_held_len++] = (cpu_held_dir_t){copy, fd}, kept = true;
  pthread_mutex_unlock(&g_held_lock);
  if (!kept) close(fd); /* out of memory: the directory is used unlocked (a reaper may take it) */
  return true;
}

void hcq__cpu_remove_private_dir(const char *dir) {
  remove_tree(dir);
  pthread_mutex_lock(&g_held_lock);
  for (size_t i = 0; i < g_held_len; i++)
    if (!strcmp(g_held[i].path, dir)) {
      close(g_held[i].fd);
      free(g_held[i].path);
      g_held[i] = g_held[--g_held_len];
      break;
    }
  pthread_mutex_unlock(&g_held_lock);
}

static atomic_bool g_reaped;

hcq_status_t hcq__cpu_make_private_dir(const char *entry, char dir[PATH_MAX]) {
  const hcq__options_t *o = hcq__options();
  const char *bases[] = {o->tmp_dir, "/tmp"};
  if (!atomic_exchange(&g_reaped, true))
    for (size_t i = 0; i < 2; i++)
      if (i == 0 || strcmp(bases[0], bases[1])) reap_stale_dirs(bases[i]);
  char made[PATH_BUF], why[2 * PATH_MAX] = "";
  for (size_t i = 0, tries = 0; i < 2; i++) {
    if (strlen(bases[i]) > MAX_CACHE_DIR) continue;
    snprintf(made, sizeof(made), "%s/hcq-build-XXXXXX", bases[i]);
    if (!mkdtemp(made)) {
      snprintf(why, sizeof(why), "cannot create %s: %s", made, strerror(errno));
      continue;
    }
    if (!realpath(made, dir)) {
      snprintf(why, sizeof(why), "cannot resolve %s: %s", made, strerror(errno));
      rmdir(made);
      continue;
    }
    if (!lock_new_dir(dir)) {
      rmdir(dir);
      if (++tries < 4)
        i--; /* reaped before it was locked: another name */
      else
        snprintf(why, sizeof(why), "cannot lock %s", dir);
      continue;
    }
    if (strlen(dir) <= MAX_CACHE_DIR && hcq__kcache_dir_trusted(dir, why, sizeof(why))) return NULL;
    hcq__cpu_remove_private_dir(dir);
  }
  return hcq_status_make(HCQ_UNAVAILABLE, "no private directory to compile %s in: %s", entry, why);
}

bool hcq__cpu_write_bytes(int fd, const void *data, size_t n) {
  for (const char *p = data; n;) {
    ssize_t w = write(fd, p, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return false;
    p += w;
    n -= (size_t)w;
  }
  return true;
}

/* ---- loading from memory ----
 *
 * dlopen maps the file it is given: if that file shrinks while mapped (truncated by another
 * process, or cut short on disk and checked before it was), touching the lost pages is SIGBUS.
 * So an object is only ever loaded from bytes already in memory and checked (the cache's hash),
 * copied into a sealed memfd nobody can write, shrink or grow, and dlopened through
 * /proc/self/fd. glibc knows a loaded object by its name too: a later dlopen of the same
 * /proc/self/fd/N, once N names another memfd, would return the old object. So a name that names
 * a loaded object is not used: the memfd gets another number. Where memfds or /proc are missing,
 * the bytes go to a file in a private directory of ours (0700) instead, removed once loaded. */

typedef struct cpu_name_search {
  const char *name;
  bool found;
} cpu_name_search_t;

/* Runs with the loader's list locked (glibc holds dl_load_write_lock over the callbacks; a dlclose
 * frees names inside it), so a name read here is never freed under it; TSan cannot see that lock
 * (tests/tsan.supp). */
static int match_name(struct dl_phdr_info *info, size_t size, void *arg) {
  (void)size;
  cpu_name_search_t *s = arg;
  s->found |= info->dlpi_name && !strcmp(info->dlpi_name, s->name);
  return s->found;
}

/* Whether a loaded object goes by name (what dlopen would return for it). Walking the list is
 * cheaper than asking dlopen (RTLD_NOLOAD), which opens the file when no name matches. */
static bool name_is_loaded(const char *name) {
  cpu_name_search_t s = {name, false};
  dl_iterate_phdr(match_name, &s);
  return s.found;
}

/* Loads bytes through a sealed memfd. *out_unsupported when this system cannot (no memfd, no
 * /proc): then nothing was tried. */
static hcq_status_t load_memfd(const void *bytes, size_t size, const char *key, const char *entry,
                               hcq__program_impl_t *out, bool *out_bad, bool *out_unsupported) {
  *out_unsupported = false;
  char name[64];
  snprintf(name, sizeof(name), "hcq-%s.so", key);
  int fd = memfd_create(name, MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (fd < 0) {
    *out_unsupported = true;
    return NULL;
  }
  if (!hcq__cpu_write_bytes(fd, bytes, size) ||
      fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_WRITE | F_SEAL_SEAL) != 0) {
    close(fd);
    *out_unsupported = true;
    return NULL;
  }
  enum { MAX_TRIES = 16 };
  int fds[MAX_TRIES], nfds = 0;
  fds[nfds++] = fd;
  char path[64];
  hcq_status_t st = NULL;
  for (;;) {
    snprintf(path, sizeof(path), "/proc/self/fd/%d", fds[nfds - 1]);
    if (!name_is_loaded(path)) {
      if (access(path, R_OK) != 0)
        *out_unsupported = true; /* no /proc */
      else
        st = load_object(path, entry, out, out_bad);
      break;
    }
    /* Holding the numbers tried, the next one is new. */
    int again = nfds < MAX_TRIES ? fcntl(fd, F_DUPFD_CLOEXEC, 0) : -1;
    if (again < 0) {
      *out_unsupported = true;
      break;
    }
    fds[nfds++] = again;
  }
  for (int i = 0; i < nfds; i++) close(fds[i]);
  return st;
}

hcq_status_t hcq__cpu_load_image(const void *bytes, size_t size, const char *key, const char *entry,
                                 hcq__program_impl_t *out, bool *out_bad) {
  *out_bad = false;
  bool unsupported;
  hcq_status_t st = load_memfd(bytes, size, key, entry, out, out_bad, &unsupported);
  /* A memfd that does not load may be one this system will not map executable (a security
   * policy): the object is tried once more from a file before it is called bad. */
  if (!unsupported && !*out_bad) return st;
  hcq_status_destroy(st);
  *out_bad = false;
  char dir[PATH_MAX], path[PATH_BUF];
  if ((st = hcq__cpu_make_private_dir(entry, dir))) return st;
  /* Named by its key: a later directory may get this one's name, and then the same name holds the
   * same object. */
  snprintf(path, sizeof(path), "%s/%s.so", dir, key);
  int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0700);
  bool ok = fd >= 0 && hcq__cpu_write_bytes(fd, bytes, size);
  int err = errno;
  if (fd >= 0 && close(fd) != 0 && ok) ok = false, err = errno;
  if (ok)
    st = load_object(path, entry, out, out_bad);
  else
    st = hcq_status_make(HCQ_UNAVAILABLE, "cannot write %s to load kernel %s: %s", path, entry,
                         strerror(err));
  unlink(path);
  hcq__cpu_remove_private_dir(dir);
  return st;
}
