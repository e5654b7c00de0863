/* CPU kernels from C source: compiled by the system compiler into a shared object, cached on disk
 * under a hash of everything that decides its contents, so a second process only dlopens it.
 * docs/kernel-cache.md says what the key covers and what the cache trusts; in short:
 *
 * - The application owns the signal dispositions. With SIGCHLD ignored (or SA_NOCLDWAIT) the kernel
 *   reaps our children itself and waitpid cannot report their status; a SIGCHLD handler may reap
 *   every child before we do. The compiler then runs under a forked helper that waits for it and
 *   sends us its exact wait status through a pipe (see "running the compiler"). Either way it
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
#include <grp.h>
#include <inttypes.h>
#include <limits.h>
#include <link.h>
#include <poll.h>
#include <pwd.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/pidfd.h>
#include <sys/stat.h>
#include <sys/utsname.h>
#include <sys/wait.h>
#include <unistd.h>

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif
#define XXH_STATIC_LINKING_ONLY /* a hash state on the stack */
#include <xxhash.h>
#include <pthread.h>
#include <string.h>

#include "cpu/cpu_compile.h"
#include "core/kcache.h"
#include "cpu/cpu_internal.h"
#include "core/options.h"
#include "core/program.h"
#include "core/status.h"

extern char **environ;

#define MAX_COMPILER_OUTPUT (64 * 1024)
#define PATH_BUF (PATH_MAX + 64)
#define MAX_OBJECT_BYTES ((size_t)1 << 30)

/* The tag of a cache file holding a shared object (core/kcache.c adds the payload's hash). */
static const char k_cache_magic[] = "HCQCPU02"; /* HCQCPUSO: before blobs recorded their key */

static const char k_prelude[] =
    "#include <stdint.h>\n"
    "#include <stddef.h>\n"
    "typedef struct { uint32_t gid[3], gsz[3], lsz[3]; } hcq_launch_t;\n";

/* What follows the flags on every command line (OUT and SRC stand for the two paths). */
static const char k_fixed_args[] = "-shared -fPIC -o OUT SRC -lm";

const char *hcq_cpu_prelude(void) { return k_prelude; }

/* ---- words ---- */

static bool is_blank(char c) { return c == ' ' || c == '\t' || c == '\n'; }

hcq_status_t hcq__cpu_split_words(const char *name, const char *text, char ***out_words, size_t *out_count) {
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
          return hcq_status_make(HCQ_INVALID_ARGUMENT, "%s=\"%s\" ends with a lone backslash", name, text);
        }
        *out++ = p[1];
        p += 2;
      } else {
        *out++ = *p++;
      }
      continue;
    unterminated:
      free(words);
      return hcq_status_make(HCQ_INVALID_ARGUMENT, "%s=\"%s\": unterminated %c quote at character %zu", name, text, *p,
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
    if (dlen == 0) snprintf(out, size, "./%s", word);
    else snprintf(out, size, "%.*s/%s", (int)dlen, dir, word);
    if (stat(out, &st) == 0 && S_ISREG(st.st_mode) && access(out, X_OK) == 0) return true;
    dir += dlen;
    if (!*dir) return false;
  }
}

typedef struct compiler {
  char **cc, **cflags; /* NULL-terminated words */
  size_t ncc, ncflags;
  char exe[PATH_MAX];  /* what runs cc[0]; "" when it was not found */
  char *identity;      /* see hcq__cpu_key_input_t */
  bool native;         /* some word asks for the host CPU */
  hcq_status_code_t error_code; /* HCQ_OK, or why nothing can be compiled */
  char error[768];
} compiler_t;

static compiler_t g_compiler;
static pthread_once_t g_compiler_once = PTHREAD_ONCE_INIT;

static void compiler_error(compiler_t *c, hcq_status_t st) {
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
    snprintf(line, sizeof(line), "%s|%lld|%lld.%09ld\n", real, (long long)st.st_size, (long long)st.st_mtim.tv_sec,
             st.st_mtim.tv_nsec);
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
  compiler_t *c = &g_compiler;
  const hcq__options_t *o = hcq__options();
  hcq_status_t st;
  if (!o->cc || !o->cflags || !o->cache_dir || !o->tmp_dir) {
    compiler_error(c, hcq_status_make(HCQ_OUT_OF_MEMORY, "out of memory reading HCQ_CC, HCQ_CFLAGS and HCQ_CACHE_DIR"));
    return;
  }
  if ((st = hcq__cpu_split_words("HCQ_CC", o->cc, &c->cc, &c->ncc)) ||
      (st = hcq__cpu_split_words("HCQ_CFLAGS", o->cflags, &c->cflags, &c->ncflags))) {
    compiler_error(c, st);
    return;
  }
  if (c->ncc == 0) {
    compiler_error(c, hcq_status_make(HCQ_INVALID_ARGUMENT, "HCQ_CC=\"%s\" names no compiler", o->cc));
    return;
  }
  if (strlen(o->cache_dir) > MAX_CACHE_DIR) {
    compiler_error(c, hcq_status_make(HCQ_INVALID_ARGUMENT,
                                      "the kernel cache directory from %s is too long (%zu bytes, at most %d)",
                                      o->cache_dir_from, strlen(o->cache_dir), MAX_CACHE_DIR));
    return;
  }
  /* The compiler, and every later word that names an executable (a launcher such as
   * "ccache gcc" or "env cc" runs the compiler that follows it). */
  char path[PATH_MAX];
  /* A path is run as it is, so that exec says precisely what is wrong with it. */
  if (strchr(c->cc[0], '/')) snprintf(c->exe, sizeof(c->exe), "%s", c->cc[0]);
  else if (find_executable(c->cc[0], path, sizeof(path))) snprintf(c->exe, sizeof(c->exe), "%s", path);
  bool ok = append_identity(&c->identity, c->exe[0] ? c->exe : c->cc[0]);
  for (size_t i = 1; ok && i < c->ncc; i++)
    if (c->cc[i][0] != '-' && !strchr(c->cc[i], '=') && find_executable(c->cc[i], path, sizeof(path)))
      ok = append_identity(&c->identity, path);
  if (!ok) {
    compiler_error(c, hcq_status_make(HCQ_OUT_OF_MEMORY, "out of memory identifying the compiler"));
    return;
  }
  for (size_t i = 0; i < c->ncc; i++) c->native |= strstr(c->cc[i], "native") != NULL;
  for (size_t i = 0; i < c->ncflags; i++) c->native |= strstr(c->cflags[i], "native") != NULL;
}

static hcq_status_t get_compiler(const compiler_t **out) {
  pthread_once(&g_compiler_once, load_compiler);
  *out = &g_compiler;
  if (g_compiler.error_code != HCQ_OK) return hcq_status_make(g_compiler.error_code, "%s", g_compiler.error);
  return NULL;
}

/* ---- the host CPU, for -march=native and friends ---- */

static char g_cpu_identity[33];
static pthread_once_t g_cpu_once = PTHREAD_ONCE_INIT;

static int compare_lines(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

/* The fields of /proc/cpuinfo that say which instructions and which core: x86, Arm, RISC-V and
 * POWER spell them differently. Clock speeds, core numbers and the like are left out. */
static bool is_cpu_field(const char *line) {
  static const char *const fields[] = {"vendor_id",       "cpu family",  "model",        "model name", "stepping",
                                       "flags",           "CPU implementer", "CPU architecture", "CPU variant",
                                       "CPU part",        "CPU revision", "Features",   "isa",        "uarch",
                                       "cpu",             NULL};
  const char *colon = strchr(line, ':');
  if (!colon) return false;
  size_t klen = (size_t)(colon - line);
  while (klen && is_blank(line[klen - 1])) klen--;
  for (const char *const *f = fields; *f; f++)
    if (strlen(*f) == klen && !strncmp(line, *f, klen)) return true;
  return false;
}

/* Without /proc (a chroot, a container that does not mount it) on x86: what -march=native itself
 * reads, the CPUID leaves of the vendor, family, model and stepping and the feature bits, so that
 * the default (native) flags still get a key. Elsewhere no identity, and no caching. */
static void cpuid_identity(void) {
#if defined(__x86_64__) || defined(__i386__)
  static const unsigned leaves[][2] = {{0, 0}, {1, 0}, {7, 0}, {7, 1}, {0xd, 1}, {0x14, 0}, {0x19, 0},
                                       {0x80000001, 0}, {0x80000008, 0}};
  unsigned regs[sizeof(leaves) / sizeof(leaves[0])][4];
  memset(regs, 0, sizeof(regs));
  unsigned max = __get_cpuid_max(0, NULL), max_ext = __get_cpuid_max(0x80000000, NULL);
  if (max == 0) return;
  for (size_t i = 0; i < sizeof(leaves) / sizeof(leaves[0]); i++) {
    unsigned leaf = leaves[i][0];
    if (leaf < 0x80000000 ? leaf > max : leaf > max_ext) continue;
    __cpuid_count(leaf, leaves[i][1], regs[i][0], regs[i][1], regs[i][2], regs[i][3]);
  }
  /* Leaf 1's EBX holds the APIC id and logical count of the core that ran it: not the ISA. */
  regs[1][1] = 0;
  XXH128_hash_t h = XXH3_128bits_withSeed(regs, sizeof(regs), 0x637075);
  snprintf(g_cpu_identity, sizeof(g_cpu_identity), "%016" PRIx64 "%016" PRIx64, (uint64_t)h.high64, (uint64_t)h.low64);
#endif
}

/* The distinct CPU lines over all processors (a machine of identical cores gives the same identity
 * whatever their number), sorted, with the machine name from uname. */
static void load_cpu_identity(void) {
  FILE *f = fopen("/proc/cpuinfo", "re");
  if (!f) {
    cpuid_identity();
    return;
  }
  char **lines = NULL, *line = NULL;
  size_t n = 0, cap = 0, size = 0;
  bool ok = true;
  while (ok && getline(&line, &size, f) > 0) {
    if (!is_cpu_field(line)) continue;
    if (n == cap) {
      char **grown = realloc(lines, (cap ? cap * 2 : 64) * sizeof(char *));
      if (!grown) {
        ok = false;
        break;
      }
      lines = grown;
      cap = cap ? cap * 2 : 64;
    }
    if (!(lines[n] = strdup(line))) ok = false;
    else n++;
  }
  free(line);
  fclose(f);
  if (ok && n > 0) {
    qsort(lines, n, sizeof(char *), compare_lines);
    XXH3_state_t state;
    XXH3_INITSTATE(&state);
    XXH3_128bits_reset(&state);
    struct utsname u;
    if (uname(&u) == 0) XXH3_128bits_update(&state, u.machine, strlen(u.machine) + 1);
    for (size_t i = 0; i < n; i++)
      if (i == 0 || strcmp(lines[i], lines[i - 1])) XXH3_128bits_update(&state, lines[i], strlen(lines[i]) + 1);
    XXH128_hash_t h = XXH3_128bits_digest(&state);
    snprintf(g_cpu_identity, sizeof(g_cpu_identity), "%016" PRIx64 "%016" PRIx64, (uint64_t)h.high64, (uint64_t)h.low64);
  }
  for (size_t i = 0; i < n; i++) free(lines[i]);
  free(lines);
}

const char *hcq__cpu_host_identity(void) {
  pthread_once(&g_cpu_once, load_cpu_identity);
  return g_cpu_identity[0] ? g_cpu_identity : NULL;
}

/* ---- the key ---- */

/* Each part goes in with its length first, so that no two different inputs feed the same bytes. */
static void feed(XXH3_state_t *state, const char *s) {
  uint64_t len = strlen(s);
  XXH3_128bits_update(state, &len, sizeof(len));
  XXH3_128bits_update(state, s, len);
}

static void feed_words(XXH3_state_t *state, const char *const *words, bool *native) {
  uint64_t n = 0;
  while (words[n]) n++;
  XXH3_128bits_update(state, &n, sizeof(n));
  for (uint64_t i = 0; i < n; i++) {
    feed(state, words[i]);
    *native |= strstr(words[i], "native") != NULL;
  }
}

void hcq__cpu_cache_key(const hcq__cpu_key_input_t *in, char out_hex[33]) {
  XXH3_state_t state;
  XXH3_INITSTATE(&state);
  XXH3_128bits_reset(&state);
  bool native = false;
  feed(&state, "hcq-cpu-kernel/4");
  feed(&state, k_prelude);
  feed(&state, in->entry);
  feed(&state, in->source);
  feed_words(&state, in->cc_words, &native);
  feed(&state, in->cc_identity);
  feed_words(&state, in->cflags, &native);
  feed(&state, k_fixed_args);
  feed(&state, native && in->cpu_identity ? in->cpu_identity : "");
  XXH128_hash_t h = XXH3_128bits_digest(&state);
  snprintf(out_hex, 33, "%016" PRIx64 "%016" PRIx64, (uint64_t)h.high64, (uint64_t)h.low64);
}

/* ---- running the compiler ----
 *
 * Normally the compiler is our child: posix_spawn, then waitpid. Its status is lost when the
 * kernel reaps it for us (SIGCHLD ignored, or SA_NOCLDWAIT) or an application's SIGCHLD handler
 * reaps every child first (waitpid says ECHILD). In the first case, and after the second, the
 * compiler runs under a forked helper whose SIGCHLD is at its default, which waits for it and
 * sends the exact wait status through a pipe. The helper is not the first choice because a fork
 * copies the page tables of the whole process: its cost grows with the application's memory.
 * (As for any waitpid on a pid, a handler that reaps our compiler lets the pid be reused before we
 * wait; pids are allocated in order, so that needs the pid space to wrap in between.) */

/* Output of the compiler: as much as fits, with a note when not all did. */
typedef struct output {
  char *text;
  size_t cap, len;
  bool truncated;
} output_t;

static const char k_truncated[] = "\n[more compiler output not shown]\n";

static void output_add(output_t *o, const char *chunk, size_t n) {
  if (o->truncated) return;
  size_t room = o->cap - sizeof(k_truncated) - o->len, take = n < room ? n : room;
  memcpy(o->text + o->len, chunk, take);
  o->len += take;
  o->text[o->len] = '\0';
  if (take < n) {
    o->truncated = true;
    memcpy(o->text + o->len, k_truncated, sizeof(k_truncated));
  }
}

/* Reads the output pipe until done_fd is readable (the compiler or its helper has finished; -1:
 * until end of file), then what is already in the pipe. A process the compiler left behind that
 * still holds the pipe cannot make us wait past done_fd. */
static void collect_output(output_t *o, int fd, int done_fd) {
  struct pollfd pfd[2] = {{fd, POLLIN, 0}, {done_fd, POLLIN, 0}};
  char chunk[4096];
  while (pfd[0].fd >= 0 || pfd[1].fd >= 0) {
    if (poll(pfd, 2, -1) < 0) {
      if (errno == EINTR) continue;
      break;
    }
    if (pfd[0].revents) {
      ssize_t n = read(fd, chunk, sizeof(chunk));
      if (n > 0) output_add(o, chunk, (size_t)n);
      else if (n == 0 || errno != EINTR) pfd[0].fd = -1;
    }
    if (pfd[1].revents) break;
  }
  if (pfd[0].fd >= 0 && fcntl(fd, F_SETFL, O_NONBLOCK) == 0) {
    for (ssize_t n; (n = read(fd, chunk, sizeof(chunk))) != 0;) {
      if (n > 0) output_add(o, chunk, (size_t)n);
      else if (errno != EINTR) break;
    }
  }
}

/* A pipe whose ends are above 2 (so that dup2 onto 0, 1 and 2 never meets itself), close-on-exec. */
static bool make_pipe(int fds[2]) {
  fds[0] = fds[1] = -1;
  if (pipe2(fds, O_CLOEXEC) != 0) return false;
  for (int i = 0; i < 2; i++) {
    if (fds[i] > 2) continue;
    int moved = fcntl(fds[i], F_DUPFD_CLOEXEC, 3);
    close(fds[i]);
    fds[i] = moved;
  }
  if (fds[0] >= 0 && fds[1] >= 0) return true;
  for (int i = 0; i < 2; i++)
    if (fds[i] >= 0) close(fds[i]);
  return false;
}

/* How the compiler starts: stdin from /dev/null, stdout and stderr into output_fd, none of the
 * application's other descriptors, SIGCHLD and SIGPIPE at their defaults (the driver waits for its
 * own children; a broken pipe between them ends them as usual), no signal blocked. */
typedef struct spawn_setup {
  posix_spawn_file_actions_t actions;
  posix_spawnattr_t attr;
} spawn_setup_t;

static bool spawn_setup_init(spawn_setup_t *s, int output_fd) {
  if (posix_spawn_file_actions_init(&s->actions) != 0) return false;
  if (posix_spawnattr_init(&s->attr) != 0) {
    posix_spawn_file_actions_destroy(&s->actions);
    return false;
  }
  sigset_t defaults, none;
  sigemptyset(&defaults);
  sigaddset(&defaults, SIGCHLD);
  sigaddset(&defaults, SIGPIPE);
  sigemptyset(&none);
  bool ok = posix_spawn_file_actions_addopen(&s->actions, 0, "/dev/null", O_RDONLY, 0) == 0 &&
            posix_spawn_file_actions_adddup2(&s->actions, output_fd, 1) == 0 &&
            posix_spawn_file_actions_adddup2(&s->actions, output_fd, 2) == 0 &&
#if defined(__GLIBC__) && (__GLIBC__ > 2 || __GLIBC_MINOR__ >= 34)
            posix_spawn_file_actions_addclosefrom_np(&s->actions, 3) == 0 &&
#endif
            posix_spawnattr_setsigdefault(&s->attr, &defaults) == 0 && posix_spawnattr_setsigmask(&s->attr, &none) == 0 &&
            posix_spawnattr_setflags(&s->attr, POSIX_SPAWN_SETSIGDEF | POSIX_SPAWN_SETSIGMASK) == 0;
  if (!ok) {
    posix_spawnattr_destroy(&s->attr);
    posix_spawn_file_actions_destroy(&s->actions);
  }
  return ok;
}

static void spawn_setup_deinit(spawn_setup_t *s) {
  posix_spawnattr_destroy(&s->attr);
  posix_spawn_file_actions_destroy(&s->actions);
}

static hcq_status_t cannot_run(const char *cc, int err) {
  return hcq_status_make(HCQ_COMPILE_ERROR, "cannot run the C compiler \"%s\": %s (set HCQ_CC)", cc, strerror(err));
}

static bool sigchld_autoreaps(void) {
  struct sigaction sa;
  return sigaction(SIGCHLD, NULL, &sa) == 0 && (sa.sa_handler == SIG_IGN || (sa.sa_flags & SA_NOCLDWAIT));
}

/* The compiler as our child. *out_lost when its status was reaped by someone else. */
static hcq_status_t run_direct(const char *exe, char *const argv[], output_t *out, int *out_status, bool *out_lost) {
  *out_lost = false;
  int pipe_fds[2];
  spawn_setup_t setup;
  if (!make_pipe(pipe_fds)) return hcq_status_make(HCQ_UNAVAILABLE, "cannot create a pipe for the compiler: %s", strerror(errno));
  if (!spawn_setup_init(&setup, pipe_fds[1])) {
    close(pipe_fds[0]);
    close(pipe_fds[1]);
    return hcq_status_make(HCQ_UNAVAILABLE, "cannot set up the compiler's process");
  }
  pid_t pid;
  int rc = posix_spawn(&pid, exe, &setup.actions, &setup.attr, argv, environ);
  spawn_setup_deinit(&setup);
  close(pipe_fds[1]);
  if (rc != 0) {
    close(pipe_fds[0]);
    return cannot_run(argv[0], rc);
  }
  /* Readable once the compiler has exited. Without pidfds (Linux < 5.3), read to end of file. */
  int pidfd = pidfd_open(pid, 0);
  collect_output(out, pipe_fds[0], pidfd);
  if (pidfd >= 0) close(pidfd);
  close(pipe_fds[0]);
  while (waitpid(pid, out_status, 0) < 0) {
    if (errno == ECHILD) {
      *out_lost = true;
      return NULL;
    }
    if (errno != EINTR) return hcq_status_make(HCQ_UNAVAILABLE, "cannot wait for the C compiler: %s", strerror(errno));
  }
  return NULL;
}

typedef struct helper_report {
  int kind; /* HELPER_* */
  int value;
} helper_report_t;

enum { HELPER_WAIT_STATUS = 1, HELPER_SPAWN_FAILED, HELPER_WAIT_FAILED };

/* The forked helper: only async-signal-safe calls (the parent may have had other threads), every
 * signal blocked. */
static void helper_main(int report_fd, const char *exe, char *const argv[], const spawn_setup_t *setup) {
  struct sigaction dfl;
  memset(&dfl, 0, sizeof(dfl));
  dfl.sa_handler = SIG_DFL;
  sigemptyset(&dfl.sa_mask);
  sigaction(SIGCHLD, &dfl, NULL); /* so that the compiler stays ours to wait for */
  helper_report_t report = {HELPER_WAIT_STATUS, 0};
  pid_t pid;
  int rc = posix_spawn(&pid, exe, &setup->actions, &setup->attr, argv, environ);
  if (rc != 0) {
    report = (helper_report_t){HELPER_SPAWN_FAILED, rc};
  } else {
    int status = 0;
    while (waitpid(pid, &status, 0) < 0) {
      if (errno != EINTR) {
        report = (helper_report_t){HELPER_WAIT_FAILED, errno};
        break;
      }
    }
    if (report.kind == HELPER_WAIT_STATUS) report.value = status;
  }
  while (write(report_fd, &report, sizeof(report)) < 0 && errno == EINTR) {
  }
  _exit(0);
}

/* The compiler under a forked helper that reports its wait status. */
static hcq_status_t run_via_helper(const char *exe, char *const argv[], output_t *out, int *out_status) {
  int output_fds[2], report_fds[2] = {-1, -1};
  spawn_setup_t setup;
  if (!make_pipe(output_fds) || !make_pipe(report_fds)) {
    hcq_status_t st = hcq_status_make(HCQ_UNAVAILABLE, "cannot create a pipe for the compiler: %s", strerror(errno));
    for (int i = 0; i < 2; i++) {
      if (output_fds[i] >= 0) close(output_fds[i]);
      if (report_fds[i] >= 0) close(report_fds[i]);
    }
    return st;
  }
  bool ready = spawn_setup_init(&setup, output_fds[1]);
  /* The helper runs with every signal blocked, inherited from this thread at fork: no handler of
   * the application may run in that copy of the process. The compiler gets an empty mask. */
  sigset_t all, old_mask;
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &old_mask);
  pid_t helper = ready ? fork() : -1;
  int fork_errno = errno;
  if (helper == 0) {
    close(output_fds[0]);
    close(report_fds[0]);
    helper_main(report_fds[1], exe, argv, &setup);
  }
  pthread_sigmask(SIG_SETMASK, &old_mask, NULL);
  if (ready) spawn_setup_deinit(&setup);
  close(output_fds[1]);
  close(report_fds[1]);
  hcq_status_t st = NULL;
  if (helper < 0) {
    st = hcq_status_make(HCQ_UNAVAILABLE, "cannot start the compiler: %s",
                         ready ? strerror(fork_errno) : "cannot set up its process");
  } else {
    collect_output(out, output_fds[0], report_fds[0]);
    helper_report_t report;
    size_t got = 0;
    while (got < sizeof(report)) {
      ssize_t n = read(report_fds[0], (char *)&report + got, sizeof(report) - got);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) break;
      got += (size_t)n;
    }
    /* ECHILD here is fine: with SIGCHLD ignored the kernel reaped the helper, or a handler did. */
    while (waitpid(helper, NULL, 0) < 0 && errno == EINTR) {
    }
    if (got < sizeof(report))
      st = hcq_status_make(HCQ_UNAVAILABLE, "the process that runs the compiler ended without reporting");
    else if (report.kind == HELPER_SPAWN_FAILED)
      st = cannot_run(argv[0], report.value);
    else if (report.kind == HELPER_WAIT_FAILED)
      st = hcq_status_make(HCQ_UNAVAILABLE, "cannot wait for the C compiler: %s", strerror(report.value));
    else
      *out_status = report.value;
  }
  close(output_fds[0]);
  close(report_fds[0]);
  return st;
}

/* Runs the compiler (exe, argv) and gives its exact wait status, whatever the application did
 * with SIGCHLD, and its output in output (cap bytes). */
static hcq_status_t run_compiler(const char *exe, char *const argv[], char *output, size_t cap, int *out_status) {
  output_t out = {output, cap, 0, false};
  output[0] = '\0';
  if (!sigchld_autoreaps()) {
    bool lost;
    hcq_status_t st = run_direct(exe, argv, &out, out_status, &lost);
    if (st || !lost) return st;
    out = (output_t){output, cap, 0, false}; /* once more, where the status cannot be taken */
    output[0] = '\0';
  }
  return run_via_helper(exe, argv, &out, out_status);
}

static const char *signal_name(int sig, char *buf, size_t size) {
  const char *abbrev = sigabbrev_np(sig);
  if (abbrev) snprintf(buf, size, "SIG%s", abbrev);
  else snprintf(buf, size, "signal %d", sig);
  return buf;
}

/* ---- compiling into a directory ---- */

static bool write_all(int fd, const char *s) {
  for (size_t len = strlen(s); len;) {
    ssize_t n = write(fd, s, len);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    s += n;
    len -= (size_t)n;
  }
  return true;
}

/* Compiles into new, uniquely named files of dir: c_path (the source, whose name reserves the
 * pair) and so_path (the object). On success both exist and the caller removes c_path once done
 * with so_path; on failure neither is left. *out_unwritable tells a failure to write in dir apart
 * from a failed compile. */
static hcq_status_t compile_into(const compiler_t *cc, const char *dir, const char *entry, const char *source,
                                 char c_path[PATH_BUF], char so_path[PATH_BUF], bool *out_unwritable) {
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
      st = hcq_status_make(HCQ_COMPILE_ERROR, "cannot run the C compiler \"%s\": not found in PATH (set HCQ_CC)", cc->cc[0]);
    else
      st = run_compiler(cc->exe, argv, output, MAX_COMPILER_OUTPUT, &status);
    char sig[32];
    if (!st && WIFSIGNALED(status))
      st = hcq_status_make(HCQ_COMPILE_ERROR, "compiling %s failed (%s was killed by signal %d (%s)):\n%s", entry,
                           cc->cc[0], WTERMSIG(status), signal_name(WTERMSIG(status), sig, sizeof(sig)), output);
    else if (!st && (!WIFEXITED(status) || WEXITSTATUS(status) != 0))
      st = hcq_status_make(HCQ_COMPILE_ERROR, "compiling %s failed (%s exited with status %d):\n%s", entry, cc->cc[0],
                           WIFEXITED(status) ? WEXITSTATUS(status) : -1, output);
  }
  free(argv);
  free(output);
  if (st) {
    unlink(so_path);
    unlink(c_path);
  }
  return st;
}

/* ---- loading ---- */

/* dlopens path and resolves entry in that object itself (not in libm or libc behind it). *out_bad
 * is set when the object does not load at all. */
static hcq_status_t load_object(const char *path, const char *entry, hcq__program_impl_t *out, bool *out_bad) {
  *out_bad = false;
  void *handle = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (!handle) {
    const char *err = dlerror();
    *out_bad = true;
    return hcq_status_make(HCQ_COMPILE_ERROR, "cannot load compiled kernel %s: %s", path, err ? err : "?");
  }
  dlerror();
  void *sym = dlsym(handle, entry);
  Dl_info info;
  struct link_map *map = NULL;
  if (sym && (!dladdr(sym, &info) || dlinfo(handle, RTLD_DI_LINKMAP, &map) != 0 || !map || !info.dli_fname ||
              strcmp(info.dli_fname, map->l_name) != 0))
    sym = NULL;
  if (!sym) {
    dlclose(handle);
    return hcq_status_make(HCQ_COMPILE_ERROR, "entry point \"%s\" is not defined by the source", entry);
  }
  out->object = handle;
  out->handle = (uint64_t)(uintptr_t)sym;
  return NULL;
}

/* ---- a private directory, for compiling and as a last resort for loading ---- */

/* A new directory of ours alone (0700) in TMPDIR, else /tmp; the caller removes it. */
static hcq_status_t make_private_dir(const char *entry, char dir[PATH_MAX]) {
  const hcq__options_t *o = hcq__options();
  const char *bases[] = {o->tmp_dir, "/tmp"};
  char made[PATH_BUF], why[2 * PATH_MAX] = "";
  for (size_t i = 0; i < 2; i++) {
    if (strlen(bases[i]) > MAX_CACHE_DIR) continue;
    snprintf(made, sizeof(made), "%s/hcq-build-XXXXXX", bases[i]);
    if (!mkdtemp(made)) {
      snprintf(why, sizeof(why), "cannot create %s: %s", made, strerror(errno));
      continue;
    }
    if (realpath(made, dir) && strlen(dir) <= MAX_CACHE_DIR && hcq__kcache_dir_trusted(dir, why, sizeof(why)))
      return NULL;
    rmdir(made);
  }
  return hcq_status_make(HCQ_UNAVAILABLE, "no private directory to compile %s in: %s", entry, why);
}

static bool write_bytes(int fd, const void *data, size_t n) {
  for (const char *p = data; n;) {
    ssize_t w = write(fd, p, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return false;
    p += w;
    n -= (size_t)w;
  }
  return true;
}

/* The whole file at path, malloc'd. */
static void *read_object(const char *path, size_t *out_size) {
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return NULL;
  struct stat st;
  char *data = NULL;
    if (fstat(fd, &st) == 0 && (uint64_t)st.st_size > MAX_OBJECT_BYTES) errno = EFBIG;
  else if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && (data = malloc(st.st_size ? (size_t)st.st_size : 1))) {
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

typedef struct name_search {
  const char *name;
  bool found;
} name_search_t;

/* Runs with the loader's list locked (glibc holds dl_load_write_lock over the callbacks; a dlclose
 * frees names inside it), so a name read here is never freed under it; TSan cannot see that lock
 * (tests/tsan.supp). */
static int match_name(struct dl_phdr_info *info, size_t size, void *arg) {
  (void)size;
  name_search_t *s = arg;
  s->found |= info->dlpi_name && !strcmp(info->dlpi_name, s->name);
  return s->found;
}

/* Whether a loaded object goes by name (what dlopen would return for it). Walking the list is
 * cheaper than asking dlopen (RTLD_NOLOAD), which opens the file when no name matches. */
static bool name_is_loaded(const char *name) {
  name_search_t s = {name, false};
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
  if (!write_bytes(fd, bytes, size) ||
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
      if (access(path, R_OK) != 0) *out_unsupported = true; /* no /proc */
      else st = load_object(path, entry, out, out_bad);
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

/* Loads the object held in bytes, resolving entry in it. *out_bad: it does not load at all. */
static hcq_status_t load_image(const void *bytes, size_t size, const char *key, const char *entry,
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
  if ((st = make_private_dir(entry, dir))) return st;
  /* Named by its key: a later directory may get this one's name, and then the same name holds the
   * same object. */
  snprintf(path, sizeof(path), "%s/%s.so", dir, key);
  int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0700);
  bool ok = fd >= 0 && write_bytes(fd, bytes, size);
  int err = errno;
  if (fd >= 0 && close(fd) != 0 && ok) ok = false, err = errno;
  if (ok) st = load_object(path, entry, out, out_bad);
  else st = hcq_status_make(HCQ_UNAVAILABLE, "cannot write %s to load kernel %s: %s", path, entry, strerror(err));
  unlink(path);
  rmdir(dir);
  return st;
}

/* Compiles in a private directory made for it and removed after: *out holds the object's bytes. */
static hcq_status_t compile_to_memory(const compiler_t *cc, const char *entry, const char *source, void **out,
                                      size_t *out_size) {
  char dir[PATH_MAX], c_path[PATH_BUF], so_path[PATH_BUF];
  hcq_status_t st = make_private_dir(entry, dir);
  if (st) return st;
  bool unwritable;
  st = compile_into(cc, dir, entry, source, c_path, so_path, &unwritable);
  if (!st) {
    if (!(*out = read_object(so_path, out_size)))
      st = hcq_status_make(HCQ_UNAVAILABLE, "cannot read the compiled kernel %s (%s): %s", entry, so_path,
                           strerror(errno));
    unlink(so_path);
    unlink(c_path);
  }
  rmdir(dir);
  return st;
}

/* ---- entry ---- */

hcq_status_t hcq__cpu_compile(hcq_device_t *dev, const char *entry, const char *source, hcq__program_impl_t *out) {
  (void)dev;
  if (!hcq__is_c_identifier(entry)) {
    char quoted[300];
    hcq__quote(entry, quoted, sizeof(quoted));
    return hcq_status_make(HCQ_INVALID_ARGUMENT,
                           "entry %s is not a C identifier (letters, digits and _, not starting with a digit)", quoted);
  }
  const compiler_t *cc;
  hcq_status_t st = get_compiler(&cc);
  if (st) return st;
  const hcq__options_t *o = hcq__options();
  const char *cpu = cc->native ? hcq__cpu_host_identity() : NULL;
  hcq__cpu_key_input_t in = {source, entry, (const char *const *)cc->cc, cc->identity, (const char *const *)cc->cflags, cpu};
  char key[33];
  hcq__cpu_cache_key(&in, key);

  char dir[PATH_MAX], why[2 * PATH_MAX + 256], path[PATH_BUF];
  bool cached = hcq__kcache_open_dir(o->cache_dir, dir, why, sizeof(why));
  if (cached && cc->native && !cpu) {
    snprintf(why, sizeof(why), "the compiler flags ask for the host CPU (\"native\") and /proc/cpuinfo cannot be read to put it in the key");
    cached = false;
  }
  bool bad;
  void *bytes;
  size_t size = 0;
  if (cached) {
    snprintf(path, sizeof(path), "%s/%s.so", dir, key);
    /* Missing, foreign or damaged (the load says which, and warns): compile and store again. */
    if ((bytes = hcq__kcache_blob_load(path, k_cache_magic, key, MAX_OBJECT_BYTES, &size))) {
      st = load_image(bytes, size, key, entry, out, &bad);
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
  st = load_image(bytes, size, key, entry, out, &bad);
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
