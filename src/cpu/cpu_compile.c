/* CPU kernels from C source: compiled by the system compiler into a shared object, cached on disk
 * under a hash of everything that decides its contents, so a second process only dlopens it.
 * docs/kernel-cache.md says what the key covers and what the cache trusts; in short:
 *
 * - The application owns the signal dispositions. With SIGCHLD ignored (or SA_NOCLDWAIT) the kernel
 *   reaps our children itself and waitpid cannot report their status; a SIGCHLD handler may reap
 *   every child before we do. The compiler then runs under a forked helper that waits for it and
 *   sends us its exact wait status through a pipe (cpu_compile_run.c). Either way it
 *   starts with SIGCHLD and SIGPIPE at their defaults and no signal blocked.
 * - A cached object is loaded only if no one but us or root could have written it: the cache
 *   directory must be ours and writable by no one else, the directories above it owned by us or
 *   root and writable by others only when sticky, the object a regular file of ours that no one
 *   else may write. Otherwise the kernel is compiled in a private temporary directory, uncached,
 *   with one warning per process saying why.
  * - The compiler writes into a private build directory; hcq stores the object (a kcache blob: a
 *   tag, its hash, the object) under a temporary name that is renamed into place, so nothing
 *   partial ever carries a final name, and a full or read-only cache disk only means "not cached".
 * - Objects are loaded from checked bytes in memory (a sealed memfd), never by mapping the cache
 *   file: a flipped bit is found by the hash, and no one can shrink what is mapped (SIGBUS).
 */
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "core/kcache.h"
#include "core/options.h"
#include "core/program.h"
#include "core/status.h"
#include "cpu/cpu_compile.h"
#include "cpu/cpu_compile_internal.h"
#include "cpu/cpu_internal.h"

#define MAX_COMPILER_OUTPUT (64 * 1024)
#define MAX_OBJECT_BYTES ((size_t)1 << 30)

/* The tag of a cache file holding a shared object (core/kcache.c adds the payload's hash). */
static const char k_cache_magic[] = "HCQCPU02"; /* HCQCPUSO: before blobs recorded their key */

static const char k_prelude[] =
    "#include <stdint.h>\n"
    "#include <stddef.h>\n"
    "typedef struct { uint32_t gid[3], gsz[3], lsz[3]; } hcq_launch_t;\n";

const char *hcq_cpu_prelude(void) { return k_prelude; }

/* ---- words ---- */

hcq_status_t hcq__cpu_split_words(const char *name, const char *text, char ***out_words,
                                  size_t *out_count) {
  *out_words = NULL;
  *out_count = 0;
  /* Every word but the last is followed by a blank, so there are at most len / 2 + 1 words, and
   * the characters of the words with their NULs never outnumber len + 1. */
  size_t len = strlen(text), max_words = len / 2 + 2;
  char **words = malloc(max_words * sizeof(char *) + len + 1);
  if (!words) return hcq_status_make(HCQ_OUT_OF_MEMORY, "out of memory splitting %s", name);
  char *out = (char *)(words + max_words);
  size_t n = 0;
  const char *p = text;
  for (;;) {
    while (is_blank(*p)) p++;
    if (!*p) break;
    words[n++] = out;
    while (*p && !is_blank(*p)) {
      const char *start = p;
      if (*p == '\'') {
        const char *end = strchr(p + 1, '\'');
        if (!end) goto unterminated;
        memcpy(out, p + 1, (size_t)(end - p - 1));
        out += end - p - 1;
        p = end + 1;
      } else if (*p == '"') {
        for (p++; *p != '"'; p++) {
          if (!*p) {
            p = start;
            goto unterminated;
          }
          if (*p == '\\' && p[1] && strchr("\"\\$`", p[1])) p++;
          *out++ = *p;
        }
        p++;
      } else if (*p == '\\') {
        if (!p[1]) {
          free(words);
          return hcq_status_make(HCQ_INVALID_ARGUMENT, "%s=\"%s\" ends with a lone backslash", name,
                                 text);
        }
        *out++ = p[1];
        p += 2;
      } else {
        *out++ = *p++;
      }
      continue;
    unterminated:
      free(words);
      return hcq_status_make(HCQ_INVALID_ARGUMENT,
                             "%s=\"%s\": unterminated %c quote at character %zu", name, text, *p,
                             (size_t)(p - text) + 1);
    }
    *out++ = '\0';
  }
  words[n] = NULL;
  *out_words = words;
  *out_count = n;
  return NULL;
}

/* ---- the compiler, from HCQ_CC and HCQ_CFLAGS, once per process ---- */

/* Where execvp would find word: *out is the path to run. False when there is none. */
static bool find_executable(const char *word, char *out, size_t size) {
  struct stat st;
  if (strchr(word, '/')) {
    snprintf(out, size, "%s", word);
    return stat(out, &st) == 0 && S_ISREG(st.st_mode) && access(out, X_OK) == 0;
  }
  const char *path = getenv("PATH");
  if (!path) path = "/bin:/usr/bin";
  for (const char *dir = path;; dir++) {
    size_t dlen = strcspn(dir, ":");
    /* An empty entry is the current directory. */
    if (dlen == 0)
      snprintf(out, size, "./%s", word);
    else
      snprintf(out, size, "%.*s/%s", (int)dlen, dir, word);
    if (stat(out, &st) == 0 && S_ISREG(st.st_mode) && access(out, X_OK) == 0) return true;
    dir += dlen;
    if (!*dir) return false;
  }
}

typedef struct cpu_compiler {
  char **cc, **cflags; /* NULL-terminated words */
  size_t ncc, ncflags;
  char exe[PATH_MAX];           /* what runs cc[0]; "" when it was not found */
  char *identity;               /* see hcq__cpu_key_input_t */
  bool native;                  /* some word asks for the host CPU */
  hcq_status_code_t error_code; /* HCQ_OK, or why nothing can be compiled */
  char error[768];
} cpu_compiler_t;

static cpu_compiler_t g_compiler;
static pthread_once_t g_compiler_once = PTHREAD_ONCE_INIT;

static void compiler_error(cpu_compiler_t *c, hcq_status_t st) {
  c->error_code = hcq_status_code(st);
  snprintf(c->error, sizeof(c->error), "%s", hcq_status_message(st));
  hcq_status_destroy(st);
}

/* One line of the identity: an executable's resolved path, size and modification time (a changed
 * compiler changes the key without being run on a cache hit). */
static bool append_identity(char **identity, const char *path) {
  char real[PATH_MAX], line[PATH_MAX + 96];
  struct stat st;
  if (realpath(path, real) && stat(real, &st) == 0)
    snprintf(line, sizeof(line), "%s|%lld|%lld.%09ld\n", real, (long long)st.st_size,
             (long long)st.st_mtim.tv_sec, st.st_mtim.tv_nsec);
  else
    snprintf(line, sizeof(line), "missing:%s\n", path);
  size_t old = *identity ? strlen(*identity) : 0, add = strlen(line);
  char *grown = realloc(*identity, old + add + 1);
  if (!grown) return false;
  memcpy(grown + old, line, add + 1);
  *identity = grown;
  return true;
}

static void load_compiler(void) {
  cpu_compiler_t *c = &g_compiler;
  const hcq__options_t *o = hcq__options();
  hcq_status_t st;
  if (!o->cc || !o->cflags || !o->cache_dir || !o->tmp_dir) {
    compiler_error(c,
                   hcq_status_make(HCQ_OUT_OF_MEMORY,
                                   "out of memory reading HCQ_CC, HCQ_CFLAGS and HCQ_CACHE_DIR"));
    return;
  }
  if ((st = hcq__cpu_split_words("HCQ_CC", o->cc, &c->cc, &c->ncc)) ||
      (st = hcq__cpu_split_words("HCQ_CFLAGS", o->cflags, &c->cflags, &c->ncflags))) {
    compiler_error(c, st);
    return;
  }
  if (c->ncc == 0) {
    compiler_error(c,
                   hcq_status_make(HCQ_INVALID_ARGUMENT, "HCQ_CC=\"%s\" names no compiler", o->cc));
    return;
  }
  if (strlen(o->cache_dir) > MAX_CACHE_DIR) {
    compiler_error(
        c, hcq_status_make(HCQ_INVALID_ARGUMENT,
                           "the kernel cache directory from %s is too long (%zu bytes, at most %d)",
                           o->cache_dir_from, strlen(o->cache_dir), MAX_CACHE_DIR));
    return;
  }
  /* The compiler, and every later word that names an executable (a launcher such as
   * "ccache gcc" or "env cc" runs the compiler that follows it). */
  char path[PATH_MAX];
  /* A path is run as it is, so that exec says precisely what is wrong with it. */
  if (strchr(c->cc[0], '/'))
    snprintf(c->exe, sizeof(c->exe), "%s", c->cc[0]);
  else if (find_executable(c->cc[0], path, sizeof(path)))
    snprintf(c->exe, sizeof(c->exe), "%s", path);
  bool ok = append_identity(&c->identity, c->exe[0] ? c->exe : c->cc[0]);
  for (size_t i = 1; ok && i < c->ncc; i++)
    if (c->cc[i][0] != '-' && !strchr(c->cc[i], '=') &&
        find_executable(c->cc[i], path, sizeof(path)))
      ok = append_identity(&c->identity, path);
  if (!ok) {
    compiler_error(c, hcq_status_make(HCQ_OUT_OF_MEMORY, "out of memory identifying the compiler"));
    return;
  }
  for (size_t i = 0; i < c->ncc; i++) c->native |= strstr(c->cc[i], "native") != NULL;
  for (size_t i = 0; i < c->ncflags; i++) c->native |= strstr(c->cflags[i], "native") != NULL;
}

static hcq_status_t get_compiler(const cpu_compiler_t **out) {
  pthread_once(&g_compiler_once, load_compiler);
  *out = &g_compiler;
  if (g_compiler.error_code != HCQ_OK)
    return hcq_status_make(g_compiler.error_code, "%s", g_compiler.error);
  return NULL;
}

static const char *signal_name(int sig, char *buf, size_t size) {
  const char *abbrev = sigabbrev_np(sig);
  if (abbrev)
    snprintf(buf, size, "SIG%s", abbrev);
  else
    snprintf(buf, size, "signal %d", sig);
  return buf;
}

/* ---- compiling into a directory ---- */

static bool write_all(int fd, const char *s) { return hcq__cpu_write_bytes(fd, s, strlen(s)); }

/* Compiles into new, uniquely named files of dir: c_path (the source, whose name reserves the
 * pair) and so_path (the object). On success both exist and the caller removes c_path once done
 * with so_path; on failure neither is left. *out_unwritable tells a failure to write in dir apart
 * from a failed compile. */
static hcq_status_t compile_into(const cpu_compiler_t *cc, const char *dir, const char *entry,
                                 const char *source, char c_path[PATH_BUF], char so_path[PATH_BUF],
                                 bool *out_unwritable) {
  *out_unwritable = false;
  snprintf(c_path, PATH_BUF, "%s/tmp-XXXXXX.c", dir);
  int fd = mkostemps(c_path, 2, O_CLOEXEC);
  if (fd < 0) {
    *out_unwritable = true;
    return hcq_status_make(HCQ_UNAVAILABLE, "cannot write in %s: %s", dir, strerror(errno));
  }
  char line[128];
  snprintf(line, sizeof(line), "#line 1 \"%s.c\"\n", entry);
  bool ok = write_all(fd, k_prelude) && write_all(fd, line) && write_all(fd, source);
  int err = errno;
  if (close(fd) != 0 && ok) {
    ok = false;
    err = errno;
  }
  if (!ok) {
    unlink(c_path);
    *out_unwritable = true;
    return hcq_status_make(HCQ_UNAVAILABLE, "cannot write %s: %s", c_path, strerror(err));
  }
  snprintf(so_path, PATH_BUF, "%.*s.so", (int)(strlen(c_path) - 2), c_path);

  size_t argc = 0;
  char **argv = malloc((cc->ncc + cc->ncflags + 8) * sizeof(char *));
  char *output = malloc(MAX_COMPILER_OUTPUT);
  hcq_status_t st = NULL;
  if (!argv || !output) {
    st = hcq_status_make(HCQ_OUT_OF_MEMORY, "out of memory compiling %s", entry);
  } else {
    for (size_t i = 0; i < cc->ncc; i++) argv[argc++] = cc->cc[i];
    for (size_t i = 0; i < cc->ncflags; i++) argv[argc++] = cc->cflags[i];
    argv[argc++] = "-shared";
    argv[argc++] = "-fPIC";
    argv[argc++] = "-o";
    argv[argc++] = so_path;
    argv[argc++] = c_path;
    argv[argc++] = "-lm"; /* kernels may call libm (expf, ...) */
    argv[argc] = NULL;
    int status = 0;
    if (!cc->exe[0])
      st = hcq_status_make(HCQ_COMPILE_ERROR,
                           "cannot run the C compiler \"%s\": not found in PATH (set HCQ_CC)",
                           cc->cc[0]);
    else
      st = hcq__cpu_run_compiler(cc->exe, argv, output, MAX_COMPILER_OUTPUT, &status);
    char sig[32];
    if (!st && WIFSIGNALED(status))
      st = hcq_status_make(
          HCQ_COMPILE_ERROR, "compiling %s failed (%s was killed by signal %d (%s)):\n%s", entry,
          cc->cc[0], WTERMSIG(status), signal_name(WTERMSIG(status), sig, sizeof(sig)), output);
    else if (!st && (!WIFEXITED(status) || WEXITSTATUS(status) != 0))
      st = hcq_status_make(HCQ_COMPILE_ERROR, "compiling %s failed (%s exited with status %d):\n%s",
                           entry, cc->cc[0], WIFEXITED(status) ? WEXITSTATUS(status) : -1, output);
  }
  free(argv);
  free(output);
  if (st) {
    unlink(so_path);
    unlink(c_path);
  }
  return st;
}

/* The whole file at path, malloc'd. */
static void *read_object(const char *path, size_t *out_size) {
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return NULL;
  struct stat st;
  char *data = NULL;
  if (fstat(fd, &st) == 0 && (uint64_t)st.st_size > MAX_OBJECT_BYTES)
    errno = EFBIG;
  else if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode) &&
           (data = malloc(st.st_size ? (size_t)st.st_size : 1))) {
    size_t got = 0;
    for (ssize_t n = 1; got < (size_t)st.st_size && n != 0;) {
      n = read(fd, data + got, (size_t)st.st_size - got);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) break;
      got += (size_t)n;
    }
    if (got == (size_t)st.st_size) {
      *out_size = got;
    } else {
      free(data);
      data = NULL;
    }
  }
  close(fd);
  return data;
}

/* Compiles in a private directory made for it and removed after: *out holds the object's bytes. */
static hcq_status_t compile_to_memory(const cpu_compiler_t *cc, const char *entry,
                                      const char *source, void **out, size_t *out_size) {
  char dir[PATH_MAX], c_path[PATH_BUF], so_path[PATH_BUF];
  hcq_status_t st = hcq__cpu_make_private_dir(entry, dir);
  if (st) return st;
  bool unwritable;
  st = compile_into(cc, dir, entry, source, c_path, so_path, &unwritable);
  if (!st) {
    if (!(*out = read_object(so_path, out_size)))
      st = hcq_status_make(HCQ_UNAVAILABLE, "cannot read the compiled kernel %s (%s): %s", entry,
                           so_path, strerror(errno));
    unlink(so_path);
    unlink(c_path);
  }
  hcq__cpu_remove_private_dir(dir);
  return st;
}

/* ---- entry ---- */

hcq_status_t hcq__cpu_compile(hcq_device_t *dev, const char *entry, const char *source,
                              hcq__program_impl_t *out) {
  (void)dev;
  if (!hcq__is_c_identifier(entry)) {
    char quoted[300];
    hcq__quote(entry, quoted, sizeof(quoted));
    return hcq_status_make(
        HCQ_INVALID_ARGUMENT,
        "entry %s is not a C identifier (letters, digits and _, not starting with a digit)",
        quoted);
  }
  const cpu_compiler_t *cc;
  hcq_status_t st = get_compiler(&cc);
  if (st) return st;
  const hcq__options_t *o = hcq__options();
  const char *cpu = cc->native ? hcq__cpu_host_identity() : NULL;
  hcq__cpu_key_input_t in = {
      source, entry, (const char *const *)cc->cc, cc->identity, (const char *const *)cc->cflags,
      cpu};
  char key[33];
  hcq__cpu_cache_key(&in, key);

  char dir[PATH_MAX], why[2 * PATH_MAX + 256], path[PATH_BUF];
  bool cached = hcq__kcache_open_dir(o->cache_dir, dir, why, sizeof(why));
  if (cached && cc->native && !cpu) {
    snprintf(why, sizeof(why),
             "the compiler flags ask for the host CPU (\"native\") and /proc/cpuinfo cannot be "
             "read to put it in the key");
    cached = false;
  }
  bool bad;
  void *bytes;
  size_t size = 0;
  if (cached) {
    snprintf(path, sizeof(path), "%s/%s.so", dir, key);
    /* Missing, foreign or damaged (the load says which, and warns): compile and store again. */
    if ((bytes = hcq__kcache_blob_load(path, k_cache_magic, key, MAX_OBJECT_BYTES, &size))) {
      st = hcq__cpu_load_image(bytes, size, key, entry, out, &bad);
      free(bytes);
      if (!st) return st;
      /* An object that passes every check but does not load (or lacks the entry) is damaged too:
       * compiled again and replaced, not left to fail every later run. */
      char damage[512];
      snprintf(damage, sizeof(damage), "it does not load: %.400s", hcq_status_message(st));
      hcq__kcache_warn_damaged(path, damage);
      hcq_status_destroy(st);
    }
  } else {
    hcq__kcache_warn_uncached(why);
  }
  if ((st = compile_to_memory(cc, entry, source, &bytes, &size))) return st;
  st = hcq__cpu_load_image(bytes, size, key, entry, out, &bad);
  /* Stored only once it loads: an object that lacks its entry would fail the same way next time. A
   * failed store (full disk, read-only...) warns once and leaves the kernel uncached. */
  if (!st && cached) hcq__kcache_blob_store(dir, path, k_cache_magic, key, bytes, size);
  free(bytes);
  return st;
}

void hcq__cpu_unload(hcq_device_t *dev, hcq__program_impl_t *impl) {
  (void)dev;
  if (impl->object) dlclose(impl->object);
  impl->object = NULL;
}
