/* The CPU kernel compiler and its on-disk cache in hostile environments: signal dispositions the
 * application chose, cache directories and cached objects that others could have written, cached
 * objects damaged on disk or truncated while loaded, full and read-only cache disks, compiler
 * commands with arguments, long flag lists, entry names that are not C identifiers.
 *
 * Options are read once per process, so every configuration runs in a child process of its own
 * (run_child); the test process itself never opens a device. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <limits.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "core/status.h"
#include "cpu/cpu_compile.h"
#include "test_util.h"

TestSuite(kernel_cache, .timeout = 120);

#define NOBODY 65534

static char g_dir[512];   /* this test's private directory */
static char g_cache[600]; /* HCQ_CACHE_DIR of the children */
static char g_tmp[600];   /* TMPDIR of the children */
static char g_cc[600];    /* a compiler wrapper that logs every start */

static void path_in(char *out, size_t size, const char *name) {
  snprintf(out, size, "%s/%s", g_dir, name);
}

static void write_script(const char *path, const char *body) {
  FILE *f = fopen(path, "w");
  cr_assert_not_null(f, "cannot write %s", path);
  fprintf(f, "#!/bin/sh\n%s", body);
  cr_assert_eq(fclose(f), 0);
  cr_assert_eq(chmod(path, 0755), 0);
}

/* A fresh directory with a cache dir path (not created: the library creates it), a private TMPDIR
 * and a logging compiler wrapper; the children inherit this environment. */
static void setup_in(const char *base) {
  mkdir(base, 0755);
  snprintf(g_dir, sizeof(g_dir), "%s/kcache-XXXXXX", base);
  cr_assert_not_null(mkdtemp(g_dir));
  chmod(g_dir, 0755);
  path_in(g_cache, sizeof(g_cache), "cache");
  path_in(g_tmp, sizeof(g_tmp), "tmp");
  cr_assert_eq(mkdir(g_tmp, 0700), 0);
  path_in(g_cc, sizeof(g_cc), "cc-log.sh");
  char body[1200];
  snprintf(body, sizeof(body), "echo started >> '%s/compiler.log'\nexec cc \"$@\"\n", g_dir);
  write_script(g_cc, body);
  setenv("HCQ_CACHE_DIR", g_cache, 1);
  setenv("TMPDIR", g_tmp, 1);
  setenv("HCQ_CC", g_cc, 1);
  unsetenv("HCQ_CFLAGS");
}

static void setup(void) {
  const char *base = getenv("HCQ_TEST_TMP");
  setup_in(base && *base ? base : "/tmp");
}

/* Whether a user with no rights of owner or group can reach path (search every directory on it). */
static bool others_can_reach(const char *path) {
  char dir[PATH_MAX];
  if (!realpath(path, dir)) return false;
  for (char *slash = dir + strlen(dir); slash && slash > dir; slash = strrchr(dir, '/')) {
    *slash = '\0';
    struct stat st;
    if (*dir && (stat(dir, &st) != 0 || !(st.st_mode & S_IXOTH))) return false;
  }
  return true;
}

static int remove_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw) {
  (void)st, (void)flag, (void)ftw;
  return remove(path);
}

static int compiler_starts(void) {
  char path[700], line[64];
  path_in(path, sizeof(path), "compiler.log");
  FILE *f = fopen(path, "r");
  if (!f) return 0;
  int n = 0;
  while (fgets(line, sizeof(line), f)) n++;
  fclose(f);
  return n;
}

/* Names in dir (not . and ..), in *names (one per line); returns how many, -1 when dir is missing.
 */
static int list_dir(const char *dir, char *names, size_t size) {
  if (names) names[0] = '\0';
  DIR *d = opendir(dir);
  if (!d) return -1;
  int n = 0;
  for (struct dirent *e; (e = readdir(d));) {
    if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
    n++;
    if (names) {
      strncat(names, e->d_name, size - strlen(names) - 1);
      strncat(names, "\n", size - strlen(names) - 1);
    }
  }
  closedir(d);
  return n;
}

/* True when every entry of dir is a finished cache object: 32 hex digits then ".so". */
static bool only_cache_objects(const char *dir, int *out_count) {
  DIR *d = opendir(dir);
  *out_count = 0;
  if (!d) return true;
  bool ok = true;
  for (struct dirent *e; (e = readdir(d));) {
    if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
    (*out_count)++;
    size_t len = strlen(e->d_name);
    bool good = len == 35 && !strcmp(e->d_name + 32, ".so");
    for (size_t i = 0; good && i < 32; i++) good = strchr("0123456789abcdef", e->d_name[i]) != NULL;
    if (!good) {
      cr_log_error("unexpected entry in %s: %s", dir, e->d_name);
      ok = false;
    }
  }
  closedir(d);
  return ok;
}

/* The one cache object in g_cache (its full path). */
static void the_cache_object(char *out, size_t size) {
  DIR *d = opendir(g_cache);
  cr_assert_not_null(d, "no cache directory %s", g_cache);
  int n = 0;
  for (struct dirent *e; (e = readdir(d));) {
    if (strstr(e->d_name, ".so")) {
      snprintf(out, size, "%s/%s", g_cache, e->d_name);
      n++;
    }
  }
  closedir(d);
  cr_assert_eq(n, 1, "expected one cache object in %s, found %d", g_cache, n);
}

/* ---- children ---- */

typedef struct {
  int ran;             /* 1: compiled and ran */
  int code;            /* status code of the failure */
  int32_t value;       /* what the kernel wrote */
  int after;           /* what spec.after returned */
  char message[80000]; /* failure message (compiler output included) */
} child_result_t;

typedef struct {
  const char *const *env; /* NAME=VALUE to set (NAME alone: unset), NULL-terminated; may be NULL */
  const char *entry;      /* default "k" */
  const char *source;
  int compiles; /* how many times to create the program in the child (default 1) */
  const char *stderr_path;
  void (*before)(void);  /* runs in the child before hcq is used */
  void (*created)(void); /* runs in the child after each program is created, before its launch */
  int (*after)(void);    /* runs in the child after the work; its value comes back in .after */
} child_spec_t;

static void apply_env(const char *const *env) {
  for (; env && *env; env++) {
    const char *eq = strchr(*env, '=');
    if (!eq) {
      unsetenv(*env);
      continue;
    }
    char name[128];
    snprintf(name, sizeof(name), "%.*s", (int)(eq - *env), *env);
    setenv(name, eq + 1, 1);
  }
}

/* LeakSanitizer's check, present in ASan builds only: children end with _exit, which skips the
 * check LSan makes at exit, so they run it themselves. The work runs in a thread of its own so that
 * no allocation stack passes through Criterion, whose frames tests/lsan.supp suppresses. */
extern int __lsan_do_recoverable_leak_check(void) __attribute__((weak));

typedef struct {
  const child_spec_t *spec;
  child_result_t result;
} child_work_t;

/* Runs p (one thread) on b and reads the int32 it wrote into *value. */
static hcq_status_t run_once(hcq_program_t *p, hcq_buffer_t *b, int32_t *value) {
  hcq_launch_desc_t l = {p, &b, 1, NULL, 0, {1, 1, 1}, {1, 1, 1}};
  HCQ__TRY(hcq_launch(&l));
  return hcq_buffer_copyout(b, 0, value, 4);
}

/* One compile of spec's kernel on d (spec->created after it), run once into *value. */
static hcq_status_t child_compile_and_run(hcq_device_t *d, const child_spec_t *spec,
                                          int32_t *value) {
  hcq_program_t *p = NULL;
  hcq_buffer_t *b = NULL;
  hcq_status_t st;
  if ((st = hcq_program_create(d, spec->entry ? spec->entry : "k", spec->source, &p))) goto done;
  if (spec->created) spec->created();
  if ((st = hcq_buffer_create(d, 4, &b))) goto done;
  st = run_once(p, b, value);
done:
  hcq_buffer_release(b);
  hcq_program_release(p);
  return st;
}

/* spec's compiles on CPU:0, each run into *value (left open after a failure, as the child exits).
 */
static hcq_status_t child_compiles(const child_spec_t *spec, int32_t *value) {
  hcq_device_t *d = NULL;
  HCQ__TRY(hcq_device_open("CPU:0", &d));
  int compiles = spec->compiles ? spec->compiles : 1;
  for (int i = 0; i < compiles; i++) HCQ__TRY(child_compile_and_run(d, spec, value));
  return hcq_device_close(d);
}

static void *child_work(void *arg) {
  child_work_t *w = arg;
  child_result_t *r = &w->result;
  hcq_status_t st = child_compiles(w->spec, &r->value);
  r->ran = st == NULL;
  r->code = hcq_status_code(st);
  snprintf(r->message, sizeof(r->message), "%s", hcq_status_message(st));
  hcq_status_destroy(st);
  return NULL;
}

static void child_main(const child_spec_t *spec, int fd) {
  if (spec->stderr_path) {
    int e = open(spec->stderr_path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (e >= 0) dup2(e, 2);
  }
  apply_env(spec->env);
  if (spec->before) spec->before();
  child_work_t w;
  memset(&w, 0, sizeof(w));
  w.spec = spec;
  pthread_t t;
  if (pthread_create(&t, NULL, child_work, &w) != 0) _exit(5);
  pthread_join(t, NULL);
  if (spec->after) w.result.after = spec->after();
  if (__lsan_do_recoverable_leak_check && __lsan_do_recoverable_leak_check()) {
    w.result.ran = 0;
    snprintf(w.result.message, sizeof(w.result.message),
             "LeakSanitizer found leaks (see its report)");
  }
  ssize_t n = write(fd, &w.result, sizeof(w.result));
  _exit(n == (ssize_t)sizeof(w.result) ? 0 : 3);
}

typedef struct {
  pid_t pid;
  int fd;
} child_t;

static child_t start_child(const child_spec_t *spec) {
  int fds[2];
  cr_assert_eq(pipe(fds), 0);
  fflush(NULL);
  pid_t pid = fork();
  cr_assert_neq(pid, -1);
  if (pid == 0) {
    close(fds[0]);
    child_main(spec, fds[1]);
  }
  close(fds[1]);
  return (child_t){pid, fds[0]};
}

static child_result_t finish_child(child_t c) {
  child_result_t r;
  memset(&r, 0, sizeof(r));
  size_t got = 0;
  while (got < sizeof(r)) {
    ssize_t n = read(c.fd, (char *)&r + got, sizeof(r) - got);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    got += (size_t)n;
  }
  close(c.fd);
  int status = 0;
  while (waitpid(c.pid, &status, 0) < 0 && errno == EINTR) {}
  cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0 && got == sizeof(r),
            "the child process died (status 0x%x) before reporting", status);
  return r;
}

static child_result_t run_child(const child_spec_t *spec) {
  return finish_child(start_child(spec));
}

#define K_SOURCE(value)                                                                            \
  "void k(void *const *b, const int32_t *v, const hcq_launch_t *l) { (void)v; (void)l; ((int32_t " \
  "*)b[0])[0] = " value "; }\n"

static const char *const k_five = K_SOURCE("5");
static const char *const k_broken =
    "void k(void *const *b, const int32_t *v, const hcq_launch_t *l) {\n  int x = ;\n}\n";

static child_result_t run_source(const char *source, const char *const *env) {
  child_spec_t spec = {.env = env, .source = source};
  return run_child(&spec);
}

#define EXPECT_RAN(r, want)                                                           \
  do {                                                                                \
    child_result_t r_ = (r);                                                          \
    cr_assert(r_.ran, "the child failed: %s", r_.message);                            \
    cr_assert_eq(r_.value, (want), "the kernel wrote %d, expected %d", (int)r_.value, \
                 (int)(want));                                                        \
  } while (0)

static void expect_failure(child_result_t r, hcq_status_code_t code, const char **fragments) {
  cr_assert(!r.ran, "the child succeeded; expected %s", hcq_status_code_name(code));
  cr_assert_eq(r.code, (int)code, "failed with %s, expected %s: %s",
               hcq_status_code_name((hcq_status_code_t)r.code), hcq_status_code_name(code),
               r.message);
  for (; *fragments; fragments++)
    cr_assert(strstr(r.message, *fragments), "message lacks \"%s\": %s", *fragments, r.message);
}
#define EXPECT_FAILS(r, code, ...) expect_failure((r), (code), (const char *[]){__VA_ARGS__, NULL})

static void read_file(const char *path, char *out, size_t size) {
  out[0] = '\0';
  FILE *f = fopen(path, "r");
  if (!f) return;
  size_t n = fread(out, 1, size - 1, f);
  out[n] = '\0';
  fclose(f);
}

static int count_occurrences(const char *text, const char *what) {
  int n = 0;
  for (const char *p = text; (p = strstr(p, what)); p += strlen(what)) n++;
  return n;
}

static void require_root(void) {
  if (geteuid() != 0) cr_skip_test("needs root to give files to another user");
}

/* ---- signal dispositions the application chose ---- */

static void ignore_sigchld(void) { signal(SIGCHLD, SIG_IGN); }

Test(kernel_cache, sigchld_ignored_compiles_and_reports_exit_status) {
  setup();
  /* The wrapper records the dispositions the compiler starts with (SigIgn in /proc). */
  char wrapper[700], body[1500], log[700];
  path_in(wrapper, sizeof(wrapper), "cc-sigign.sh");
  path_in(log, sizeof(log), "sigign.log");
  snprintf(body, sizeof(body), "grep SigIgn /proc/$$/status >> '%s'\nexec cc \"$@\"\n", log);
  write_script(wrapper, body);
  const char *env[] = {"HCQ_CC", NULL, NULL};
  char cc_env[800];
  snprintf(cc_env, sizeof(cc_env), "HCQ_CC=%s", wrapper);
  env[0] = cc_env;

  child_spec_t good = {.env = env, .source = k_five, .before = ignore_sigchld};
  EXPECT_RAN(run_child(&good), 5);
  child_spec_t bad = {.env = env, .source = k_broken, .before = ignore_sigchld};
  EXPECT_FAILS(run_child(&bad), HCQ_COMPILE_ERROR, "compiling k failed", "exited with status 1",
               "k.c:2");

  /* The compiler ran with SIGCHLD (17) and SIGPIPE (13) at their defaults. */
  char text[1000];
  read_file(log, text, sizeof(text));
  cr_assert_eq(count_occurrences(text, "SigIgn:"), 2, "%s", text);
  for (const char *p = text; (p = strstr(p, "SigIgn:")); p++) {
    unsigned long long mask = strtoull(p + 7, NULL, 16);
    cr_assert_eq(mask & (1ull << (SIGCHLD - 1)), 0, "the compiler started with SIGCHLD ignored: %s",
                 text);
    cr_assert_eq(mask & (1ull << (SIGPIPE - 1)), 0, "the compiler started with SIGPIPE ignored: %s",
                 text);
  }
}

static void no_child_wait(void) {
  struct sigaction sa;
  memset(&sa, 0, sizeof(sa));
  sa.sa_handler = SIG_DFL;
  sa.sa_flags = SA_NOCLDWAIT;
  sigaction(SIGCHLD, &sa, NULL);
}

static void reap_everything(int sig) {
  (void)sig;
  int saved = errno;
  while (waitpid(-1, NULL, WNOHANG) > 0) {}
  errno = saved;
}

/* An application that reaps every child in its SIGCHLD handler, with SA_RESTART off so that its
 * signals interrupt blocking calls (EINTR). */
static void reaping_handler(void) {
  struct sigaction sa;
  memset(&sa, 0, sizeof(sa));
  sa.sa_handler = reap_everything;
  sigaction(SIGCHLD, &sa, NULL);
}

Test(kernel_cache, sa_nocldwait_and_a_reaping_handler_do_not_break_compiles) {
  setup();
  void (*setups[])(void) = {no_child_wait, reaping_handler};
  const char *sources[] = {k_five, K_SOURCE("6")};
  int values[] = {5, 6};
  for (size_t i = 0; i < 2; i++) {
    /* When the handler reaps the compiler before hcq can, the compile runs again under the helper:
     * either way the result and the status are right. */
    child_spec_t good = {.source = sources[i], .before = setups[i], .compiles = 2};
    EXPECT_RAN(run_child(&good), values[i]);
    child_spec_t bad = {.source = k_broken, .before = setups[i]};
    EXPECT_FAILS(run_child(&bad), HCQ_COMPILE_ERROR, "exited with status 1", "k.c:2");
  }
}

Test(kernel_cache, compiler_exit_status_and_output_are_exact) {
  setup();
  char wrapper[700];
  path_in(wrapper, sizeof(wrapper), "cc-exit3.sh");
  write_script(wrapper, "echo 'custom diagnostic on stdout'\necho 'and on stderr' >&2\nexit 3\n");
  char cc_env[800];
  snprintf(cc_env, sizeof(cc_env), "HCQ_CC=%s", wrapper);
  const char *env[] = {cc_env, NULL};
  EXPECT_FAILS(run_source(k_five, env), HCQ_COMPILE_ERROR, "compiling k failed",
               "exited with status 3", "custom diagnostic on stdout", "and on stderr");
  int n;
  cr_assert(only_cache_objects(g_cache, &n));
  cr_assert_eq(n, 0);
  /* Far more output than a pipe holds or the message keeps: no deadlock, the start is kept. */
  write_script(wrapper, "echo 'first line'\nhead -c 1000000 /dev/zero | tr '\\0' x\nexit 1\n");
  for (int helper = 0; helper < 2; helper++) {
    child_spec_t spec = {.env = env, .source = k_five, .before = helper ? ignore_sigchld : NULL};
    child_result_t r = run_child(&spec);
    EXPECT_FAILS(r, HCQ_COMPILE_ERROR, "exited with status 1", "first line\nxxxx",
                 "[more compiler output not shown]");
    cr_assert_lt(strlen(r.message), sizeof(r.message) - 1,
                 "the message was cut by the test, not by hcq");
  }
}

/* A compiler that leaves a process behind holding its output pipe (a cache daemon, say): the
 * compile ends when the compiler does. If it waited for the pipe to close, the timeout would fail
 * it. */
Test(kernel_cache, process_left_holding_the_output_does_not_block, .timeout = 40) {
  setup();
  char wrapper[700], body[1500], pids[700];
  path_in(wrapper, sizeof(wrapper), "cc-daemon.sh");
  path_in(pids, sizeof(pids), "sleepers.pid");
  snprintf(body, sizeof(body), "sleep 90 &\necho $! >> '%s'\nexec cc \"$@\"\n", pids);
  write_script(wrapper, body);
  char cc_env[800];
  snprintf(cc_env, sizeof(cc_env), "HCQ_CC=%s", wrapper);
  const char *env[] = {cc_env, NULL};
  child_spec_t direct = {.env = env, .source = k_five};
  child_result_t r1 = run_child(&direct);
  child_spec_t helper = {.env = env, .source = K_SOURCE("6"), .before = ignore_sigchld};
  child_result_t r2 = run_child(&helper);
  FILE *f = fopen(pids, "r");
  cr_assert_not_null(f);
  int n = 0;
  for (long pid; fscanf(f, "%ld", &pid) == 1; n++) kill((pid_t)pid, SIGKILL);
  fclose(f);
  cr_assert_eq(n, 2);
  EXPECT_RAN(r1, 5);
  EXPECT_RAN(r2, 6);
}

Test(kernel_cache, compiler_killed_by_a_signal_is_reported_as_such) {
  setup();
  char wrapper[700];
  path_in(wrapper, sizeof(wrapper), "cc-killed.sh");
  write_script(wrapper, "echo 'about to die'\nkill -KILL $$\n");
  char cc_env[800];
  snprintf(cc_env, sizeof(cc_env), "HCQ_CC=%s", wrapper);
  const char *env[] = {cc_env, NULL};
  EXPECT_FAILS(run_source(k_five, env), HCQ_COMPILE_ERROR, "compiling k failed",
               "killed by signal 9", "SIGKILL", "about to die");
  /* Also with SIGCHLD ignored by the application. */
  child_spec_t spec = {.env = env, .source = k_five, .before = ignore_sigchld};
  EXPECT_FAILS(run_child(&spec), HCQ_COMPILE_ERROR, "killed by signal 9");
  int n;
  cr_assert(only_cache_objects(g_cache, &n), "temporary files were left behind");
  cr_assert_eq(n, 0);
}

/* ---- cached objects the cache must not trust ---- */

/* Compiles k_five (the cache object the next child would load), then puts an object that returns
 * 666 in its place; returns the path. */
static void plant_impostor(char *good_path, size_t size) {
  EXPECT_RAN(run_source(k_five, NULL), 5);
  the_cache_object(good_path, size);
  /* The impostor: a real shared object whose k writes 666, compiled by the library elsewhere. */
  char other[700], env_dir[800];
  path_in(other, sizeof(other), "impostor-cache");
  snprintf(env_dir, sizeof(env_dir), "HCQ_CACHE_DIR=%s", other);
  const char *env[] = {env_dir, NULL};
  EXPECT_RAN(run_source(K_SOURCE("666"), env), 666);
  char names[200], impostor[900];
  cr_assert_eq(list_dir(other, names, sizeof(names)), 1);
  *strchr(names, '\n') = '\0';
  snprintf(impostor, sizeof(impostor), "%s/%s", other, names);
  cr_assert_eq(rename(impostor, good_path), 0, "rename: %s", strerror(errno));
}

static void expect_replaced_by_own_object(const char *path, int starts_before) {
  /* The next process does not load the impostor: it compiles again and stores its own object. */
  EXPECT_RAN(run_source(k_five, NULL), 5);
  cr_assert_eq(compiler_starts(), starts_before + 1, "the compiler did not run again");
  struct stat st;
  cr_assert_eq(lstat(path, &st), 0);
  cr_assert(S_ISREG(st.st_mode));
  cr_assert_eq(st.st_uid, geteuid());
  cr_assert_eq(st.st_mode & 022, 0, "mode %o", (unsigned)st.st_mode);
  /* And that object is trusted: a third process loads it without compiling. */
  EXPECT_RAN(run_source(k_five, NULL), 5);
  cr_assert_eq(compiler_starts(), starts_before + 1, "the replacement was not reused");
  int n;
  cr_assert(only_cache_objects(g_cache, &n));
  cr_assert_eq(n, 1);
}

Test(kernel_cache, planted_object_owned_by_another_user_is_not_loaded) {
  require_root();
  setup();
  char path[900];
  plant_impostor(path, sizeof(path));
  cr_assert_eq(chown(path, NOBODY, NOBODY), 0);
  cr_assert_eq(chmod(path, 0755), 0);
  expect_replaced_by_own_object(path, compiler_starts());
}

Test(kernel_cache, planted_object_writable_by_others_is_not_loaded) {
  setup();
  char path[900];
  plant_impostor(path, sizeof(path));
  cr_assert_eq(chmod(path, 0666), 0);
  expect_replaced_by_own_object(path, compiler_starts());
  if (geteuid() != 0) return; /* the group part needs a group of others: root can give it one */
  plant_impostor(path, sizeof(path));
  cr_assert_eq(chown(path, 0, NOBODY), 0);
  cr_assert_eq(chmod(path, 0775), 0); /* writable by the group nogroup */
  expect_replaced_by_own_object(path, compiler_starts());
}

Test(kernel_cache, planted_symlink_is_not_followed) {
  setup();
  char path[900], target[900];
  plant_impostor(path, sizeof(path));
  path_in(target, sizeof(target), "impostor.so");
  cr_assert_eq(rename(path, target), 0);
  cr_assert_eq(symlink(target, path), 0);
  expect_replaced_by_own_object(path, compiler_starts());
}

Test(kernel_cache, corrupt_cached_object_is_compiled_again) {
  setup();
  EXPECT_RAN(run_source(k_five, NULL), 5);
  char path[900];
  the_cache_object(path, sizeof(path));
  FILE *f = fopen(path, "w");
  cr_assert_not_null(f);
  fputs("not an ELF file", f);
  fclose(f);
  expect_replaced_by_own_object(path, compiler_starts());
}

/* ---- cached objects damaged on disk ---- */

/* A kernel whose result is one distinctive constant in its code: a bit flipped in that constant
 * gives a wrong result, not a crash, unless the damage is detected. */
#define K_MARK "0x12345678"
static const int32_t k_mark = 0x12345678;

static uint8_t *slurp(const char *path, size_t *len) {
  struct stat st;
  cr_assert_eq(stat(path, &st), 0, "%s", path);
  uint8_t *data = malloc((size_t)st.st_size + 1);
  FILE *f = fopen(path, "rb");
  cr_assert(data && f);
  *len = fread(data, 1, (size_t)st.st_size, f);
  fclose(f);
  cr_assert_eq(*len, (size_t)st.st_size);
  return data;
}

/* Rebuilt: the next process compiles the kernel again with exactly one warning, naming path and
 * saying why; the one after it loads the replacement silently. */
static void expect_rebuilt_with_warning(const char *source, int32_t want, const char *path,
                                        const char *why) {
  char err_path[700], err[8000];
  path_in(err_path, sizeof(err_path), "stderr.txt");
  int starts = compiler_starts();
  child_spec_t spec = {.source = source, .stderr_path = err_path};
  EXPECT_RAN(run_child(&spec), want);
  cr_assert_eq(compiler_starts(), starts + 1, "the damaged object was not compiled again");
  read_file(err_path, err, sizeof(err));
  cr_assert_eq(count_occurrences(err, "hcq: warning"), 1, "expected one warning, got: %s", err);
  cr_assert(strstr(err, path) && strstr(err, why),
            "the warning does not name %s and say \"%s\": %s", path, why, err);
  EXPECT_RAN(run_child(&spec), want);
  cr_assert_eq(compiler_starts(), starts + 1, "the replacement was not reused");
  read_file(err_path, err, sizeof(err));
  cr_assert_eq(count_occurrences(err, "hcq: warning"), 0, "loading the replacement warned: %s",
               err);
  int n;
  cr_assert(only_cache_objects(g_cache, &n));
  cr_assert_eq(n, 1);
}

Test(kernel_cache, a_bit_flipped_in_a_cached_object_is_detected) {
  setup();
  EXPECT_RAN(run_source(K_SOURCE(K_MARK), NULL), k_mark);
  char path[900];
  the_cache_object(path, sizeof(path));
  size_t len;
  uint8_t *data = slurp(path, &len);
  const uint8_t mark[4] = {0x78, 0x56, 0x34, 0x12}; /* the constant, little-endian, in the code */
  size_t at = 0;
  while (at + 4 <= len && memcmp(data + at, mark, 4)) at++;
  cr_assert_leq(at + 4, len, "the kernel's constant is not in %s", path);
  /* One bit, in place (the same file, as a disk error would leave it). */
  FILE *f = fopen(path, "r+b");
  cr_assert_not_null(f);
  cr_assert_eq(fseek(f, (long)at, SEEK_SET), 0);
  cr_assert_eq(fputc(data[at] ^ 1, f), data[at] ^ 1);
  cr_assert_eq(fclose(f), 0);
  free(data);
  expect_rebuilt_with_warning(K_SOURCE(K_MARK), k_mark, path, "damaged");
}

Test(kernel_cache, a_truncated_cached_object_is_detected_before_loading) {
  setup();
  EXPECT_RAN(run_source(k_five, NULL), 5);
  char path[900];
  the_cache_object(path, sizeof(path));
  struct stat st;
  cr_assert_eq(stat(path, &st), 0);
  /* Half: the ELF headers are there, the segments they map are not (dlopen would fault on them). */
  cr_assert_eq(truncate(path, st.st_size / 2), 0);
  expect_rebuilt_with_warning(k_five, 5, path, "damaged");
  /* Shorter than any header, or empty (a crash right after the rename, before the data was on
   * disk): the same. */
  off_t sizes[] = {10, 0};
  for (size_t i = 0; i < 2; i++) {
    cr_assert_eq(truncate(path, sizes[i]), 0);
    expect_rebuilt_with_warning(k_five, 5, path, "damaged");
  }
}

/* Another kernel's valid object copied (restored from a backup, renamed) over this one's name, ours
 * and private like any: loading it would run the other kernel's code and give its result, now and
 * in every later run. Each cache file records the key it was stored under, so it is damaged. */
Test(kernel_cache, another_kernels_object_copied_over_this_ones_name_is_not_run) {
  setup();
  char path[900];
  plant_impostor(path, sizeof(path));
  cr_assert_eq(chmod(path, 0600), 0);
  expect_rebuilt_with_warning(k_five, 5, path, "copied or restored over it");
}

/* A file that passes every check (this kernel's key, a whole object) but whose object lacks the
 * entry: compiled again and replaced, not failing every later run with "entry point k is not
 * defined". */
Test(kernel_cache, a_cached_object_without_the_entry_is_replaced) {
  setup();
  EXPECT_RAN(run_source(k_five, NULL), 5);
  char path[900];
  the_cache_object(path, sizeof(path));
  char other[700], env_dir[800];
  path_in(other, sizeof(other), "other-entry-cache");
  snprintf(env_dir, sizeof(env_dir), "HCQ_CACHE_DIR=%s", other);
  const char *env[] = {env_dir, NULL};
  child_spec_t spec = {
      .env = env,
      .entry = "k2",
      .source =
          "void k2(void *const *b, const int32_t *v, const hcq_launch_t *l) { (void)v; (void)l; "
          "((int32_t *)b[0])[0] = 2; }\n"};
  EXPECT_RAN(run_child(&spec), 2);
  char names[200], k2_path[900];
  cr_assert_eq(list_dir(other, names, sizeof(names)), 1);
  *strchr(names, '\n') = '\0';
  snprintf(k2_path, sizeof(k2_path), "%s/%s", other, names);
  size_t len;
  uint8_t *blob = slurp(k2_path, &len);
  /* the header: tag (8 bytes), the key (the 32 hex digits of the name), the object's hash */
  const char *name = strrchr(path, '/') + 1;
  cr_assert_gt(len, 8 + 32 + 16);
  memcpy(blob + 8, name, 32);
  FILE *f = fopen(path, "wb");
  cr_assert(f && fwrite(blob, 1, len, f) == len && fclose(f) == 0);
  free(blob);
  expect_rebuilt_with_warning(k_five, 5, path, "does not load");
}

/* In the child, between creating the program and launching it: every object in the cache dir cut
 * to nothing, as another process could do. */
static void truncate_cache_objects(void) {
  DIR *d = opendir(g_cache);
  if (!d) return;
  for (struct dirent *e; (e = readdir(d));) {
    char path[1000];
    snprintf(path, sizeof(path), "%s/%s", g_cache, e->d_name);
    if (strstr(e->d_name, ".so") && truncate(path, 0) != 0) _exit(7);
  }
  closedir(d);
}

/* A mapped file that shrinks takes the pages beyond its end from every mapping: running the
 * kernel would then fault (SIGBUS). The cache file must never be what is mapped. */
Test(kernel_cache, a_cached_object_truncated_after_loading_does_not_crash) {
  setup();
  EXPECT_RAN(run_source(k_five, NULL), 5);
  child_spec_t hit = {.source = k_five, .created = truncate_cache_objects};
  EXPECT_RAN(run_child(&hit), 5);
  cr_assert_eq(compiler_starts(), 1, "the second process did not load the cached object");
  /* The same for an object compiled by this process and stored. */
  child_spec_t miss = {.source = K_SOURCE("6"), .created = truncate_cache_objects};
  EXPECT_RAN(run_child(&miss), 6);
  cr_assert_eq(compiler_starts(), 2);
}

/* Objects are loaded from memory under names of the form /proc/self/fd/N, and N is reused once
 * closed: a kernel loaded while another is alive must still be itself, not the other one. Returns
 * what each kernel wrote, as digits (123 for 1, 2 and 3), or -1. */
static int several_programs_alive(void) {
  hcq_device_t *d = NULL;
  hcq_program_t *p[3] = {NULL, NULL, NULL};
  hcq_buffer_t *b = NULL;
  const char *sources[3] = {K_SOURCE("1"), K_SOURCE("2"), K_SOURCE("3")};
  int digits = 0;
  hcq_status_t st;
  if ((st = hcq_device_open("CPU:0", &d))) goto fail;
  if ((st = hcq_buffer_create(d, 4, &b))) goto fail;
  for (int i = 0; i < 3; i++)
    if ((st = hcq_program_create(d, "k", sources[i], &p[i]))) goto fail;
  for (int i = 0; i < 3; i++) {
    int32_t v = -1;
    st = run_once(p[i], b, &v);
    digits = digits * 10 + v;
    if (st) goto fail;
  }
fail:
  if (st) fprintf(stderr, "%s\n", hcq_status_message(st));
  hcq_status_destroy(st);
  for (int i = 0; i < 3; i++) hcq_program_release(p[i]);
  hcq_buffer_release(b);
  st = d ? hcq_device_close(d) : NULL;
  int ok = !st;
  hcq_status_destroy(st);
  return ok ? digits : -1;
}

Test(kernel_cache, kernels_loaded_from_memory_at_once_stay_distinct) {
  setup();
  /* Compiled (first child), then all three from the cache (second child). */
  for (int round = 0; round < 2; round++) {
    child_spec_t spec = {.source = k_five, .after = several_programs_alive};
    child_result_t r = run_child(&spec);
    EXPECT_RAN(r, 5);
    cr_assert_eq(r.after, 123, "round %d: the kernels wrote %d, expected 1, 2, 3", round, r.after);
  }
  cr_assert_eq(compiler_starts(), 4, "the second round did not load from the cache");
}

/* Threads compiling and loading programs at once (dlopen of fresh objects in one, the loaded-object
 * walk of name_is_loaded in another): each program runs its own code. Under ThreadSanitizer this is
 * the case tests/tsan.supp's note on match_name is about. */
typedef struct {
  hcq_device_t *dev;
  int id;
  int wrong;
} compile_thread_t;

static void *compile_and_run(void *arg) {
  compile_thread_t *t = arg;
  hcq_buffer_t *b = test_buffer(t->dev, 4);
  for (int k = 0; k < 4; k++) {
    char src[256];
    int32_t want = t->id * 100 + k, got = -1;
    snprintf(src, sizeof(src),
             "void k(void *const *b, const int32_t *v, const hcq_launch_t *l) { (void)v; (void)l; "
             "*(int32_t *)b[0] = %d; }\n",
             (int)want);
    hcq_program_t *p = NULL;
    hcq_status_t st = hcq_program_create(t->dev, "k", src, &p);
    if (st) {
      hcq_status_destroy(st);
      t->wrong++;
      continue;
    }
    st = run_once(p, b, &got);
    t->wrong += st != NULL || got != want;
    hcq_status_destroy(st);
    hcq_program_release(p);
  }
  hcq_buffer_release(b);
  return NULL;
}

Test(kernel_cache, programs_compiled_on_several_threads_at_once_run_their_own_code) {
  setup();
  hcq_device_t *d = test_open("CPU:0");
  for (int round = 0; round < 2; round++) { /* compiled, then loaded from the cache */
    compile_thread_t t[4];
    pthread_t th[4];
    for (int i = 0; i < 4; i++) {
      t[i] = (compile_thread_t){d, i + 1, 0};
      cr_assert_eq(pthread_create(&th[i], NULL, compile_and_run, &t[i]), 0);
    }
    for (int i = 0; i < 4; i++) {
      pthread_join(th[i], NULL);
      cr_assert_eq(t[i].wrong, 0,
                   "round %d, thread %d: %d of its programs failed or ran other code", round, i,
                   t[i].wrong);
    }
  }
  cr_assert_eq(compiler_starts(), 16, "16 distinct kernels compiled once each");
  test_close(d);
}

/* ---- cache disks that are full or read-only ---- */

static char g_small[700]; /* a small file system of the child's own, holding the cache dir */

/* In a child: a mount namespace of its own with a 512 KiB tmpfs at g_small holding an empty cache
 * dir, left with 8 KiB free (enough for a source file, not for an object) or read-only. 0 or an
 * errno. */
static int small_cache_disk(bool read_only) {
  char cache[800];
  snprintf(cache, sizeof(cache), "%s/cache", g_small);
  if (unshare(CLONE_NEWNS) != 0 || mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) != 0 ||
      mount("hcq-test", g_small, "tmpfs", 0, "size=512k,mode=0700") != 0 || mkdir(cache, 0700) != 0)
    return errno;
  if (read_only) return mount(NULL, g_small, NULL, MS_REMOUNT | MS_RDONLY, NULL) != 0 ? errno : 0;
  char filler[800];
  snprintf(filler, sizeof(filler), "%s/filler", g_small);
  int fd = open(filler, O_WRONLY | O_CREAT | O_TRUNC, 0600);
  if (fd < 0) return errno;
  static char chunk[4096];
  off_t size = 0;
  for (ssize_t n; (n = write(fd, chunk, sizeof(chunk))) > 0;) size += n;
  int err = errno == ENOSPC && size > 8192 && ftruncate(fd, size - 8192) == 0 ? 0
            : errno                                                           ? errno
                                                                              : EIO;
  close(fd);
  return err;
}

static void full_cache_disk(void) {
  if (small_cache_disk(false)) _exit(6);
}
static void read_only_cache_disk(void) {
  if (small_cache_disk(true)) _exit(6);
}

/* What the cache dir holds after the child's compiles (temporary files included). */
static int small_cache_entries(void) {
  char cache[800];
  snprintf(cache, sizeof(cache), "%s/cache", g_small);
  return list_dir(cache, NULL, 0);
}

static void skip_without_mount_namespaces(void) {
  pid_t pid = fork();
  cr_assert_neq(pid, -1);
  if (pid == 0) _exit(small_cache_disk(false) & 0xff);
  int status = 0;
  cr_assert_eq(waitpid(pid, &status, 0), pid);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
    cr_skip_test("a small file system cannot be mounted here (needs root and mount namespaces): %s",
                 strerror(WIFEXITED(status) ? WEXITSTATUS(status) : 0));
}

Test(kernel_cache, a_full_or_read_only_cache_disk_compiles_without_caching) {
  setup();
  path_in(g_small, sizeof(g_small), "small");
  cr_assert_eq(mkdir(g_small, 0700), 0);
  skip_without_mount_namespaces();
  char env_dir[900], cache[800], err_path[700], err[8000];
  snprintf(cache, sizeof(cache), "%s/cache", g_small);
  snprintf(env_dir, sizeof(env_dir), "HCQ_CACHE_DIR=%s", cache);
  path_in(err_path, sizeof(err_path), "stderr.txt");
  const char *env[] = {env_dir, NULL};
  void (*disks[])(void) = {full_cache_disk, read_only_cache_disk};
  const char *whys[] = {"No space left on device", "Read-only file system"};
  for (size_t i = 0; i < 2; i++) {
    int starts = compiler_starts();
    child_spec_t spec = {.env = env,
                         .source = k_five,
                         .compiles = 2,
                         .stderr_path = err_path,
                         .before = disks[i],
                         .after = small_cache_entries};
    child_result_t r = run_child(&spec);
    EXPECT_RAN(r, 5);
    cr_assert_eq(compiler_starts(), starts + 2, "an uncached kernel compiles each time");
    cr_assert_eq(r.after, 0, "the cache dir on the %s disk holds %d files afterwards",
                 i ? "read-only" : "full", r.after);
    read_file(err_path, err, sizeof(err));
    cr_assert_eq(count_occurrences(err, "hcq: warning"), 1, "expected one warning, got: %s", err);
    cr_assert(strstr(err, "not cached") && strstr(err, cache) && strstr(err, whys[i]),
              "the warning does not say \"not cached\", name %s and say \"%s\": %s", cache, whys[i],
              err);
    cr_assert_eq(list_dir(g_tmp, NULL, 0), 0, "private build directories were left in TMPDIR");
  }
}

/* Without /proc (a chroot, a container that does not mount it) an object cannot be dlopened from
 * a memfd: it is loaded from a file of a private directory instead, removed right after. */
static void hide_proc(void) {
  if (unshare(CLONE_NEWNS) != 0 || mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) != 0 ||
      mount("hcq-test", "/proc", "tmpfs", 0, "size=16k") != 0)
    _exit(6);
}

/* Then /proc comes back, for LeakSanitizer's check that follows in ASan builds. */
static int several_programs_alive_without_proc(void) {
  int digits = several_programs_alive();
  return umount2("/proc", MNT_DETACH) == 0 ? digits : -2;
}

Test(kernel_cache, kernels_load_without_proc) {
  setup();
  path_in(g_small, sizeof(g_small), "small");
  cr_assert_eq(mkdir(g_small, 0700), 0);
  skip_without_mount_namespaces();
  for (int round = 0; round < 2; round++) {
    child_spec_t spec = {
        .source = k_five, .before = hide_proc, .after = several_programs_alive_without_proc};
    child_result_t r = run_child(&spec);
    EXPECT_RAN(r, 5);
    cr_assert_eq(r.after, 123, "round %d: the kernels wrote %d, expected 1, 2, 3", round, r.after);
    cr_assert_eq(list_dir(g_tmp, NULL, 0), 0, "private directories were left in TMPDIR");
  }
  cr_assert_eq(compiler_starts(), 4, "the second round did not load from the cache");
}

/* A "compiler" that succeeds without writing an object dlopen takes: an error naming the kernel,
 * and nothing stored for the next process to trust. */
Test(kernel_cache, an_object_that_does_not_load_is_an_error_and_not_stored) {
  setup();
  char wrapper[700];
  path_in(wrapper, sizeof(wrapper), "cc-garbage.sh");
  write_script(wrapper,
               "prev=\nfor a in \"$@\"; do [ \"$prev\" = -o ] && echo 'not an object' > \"$a\"; "
               "prev=$a; done\nexit 0\n");
  char cc_env[800];
  snprintf(cc_env, sizeof(cc_env), "HCQ_CC=%s", wrapper);
  const char *env[] = {cc_env, NULL};
  EXPECT_FAILS(run_source(k_five, env), HCQ_COMPILE_ERROR, "cannot load compiled kernel");
  int n;
  cr_assert(only_cache_objects(g_cache, &n));
  cr_assert_eq(n, 0, "an object that does not load was stored");
  cr_assert_eq(list_dir(g_tmp, NULL, 0), 0, "private directories were left in TMPDIR");
}

/* ---- cache directories the cache must not trust ---- */

/* Runs k_five twice in one child with stderr captured; the cache dir must stay without objects
 * and the private build directories must be gone. Returns the child's stderr. */
static void expect_bypassed(const char *const *env, const char *dir, const char *why, char *err,
                            size_t size) {
  char err_path[700];
  path_in(err_path, sizeof(err_path), "stderr.txt");
  int starts = compiler_starts();
  child_spec_t spec = {.env = env, .source = k_five, .compiles = 2, .stderr_path = err_path};
  EXPECT_RAN(run_child(&spec), 5);
  cr_assert_eq(compiler_starts(), starts + 2, "an uncached kernel compiles each time");
  char names[2000];
  int n = list_dir(dir, names, sizeof(names));
  cr_assert_leq(n, 0, "the untrusted cache directory %s received files:\n%s", dir, names);
  n = list_dir(g_tmp, names, sizeof(names));
  cr_assert_eq(n, 0, "private build directories were left in TMPDIR:\n%s", names);
  read_file(err_path, err, size);
  cr_assert_eq(count_occurrences(err, "hcq: warning"), 1, "expected one warning, got: %s", err);
  cr_assert(strstr(err, "not cached"), "%s", err);
  cr_assert(strstr(err, dir), "the warning does not name %s: %s", dir, err);
  cr_assert(strstr(err, why), "the warning does not say \"%s\": %s", why, err);
}

/* A kernel writing value, new to the cache, compiles in one process and loads in the next. */
static void expect_cached(const char *const *env, int value) {
  char source[300];
  snprintf(source, sizeof(source), K_SOURCE("%d"), value);
  int starts = compiler_starts();
  EXPECT_RAN(run_source(source, env), value);
  EXPECT_RAN(run_source(source, env), value);
  cr_assert_eq(compiler_starts(), starts + 1, "expected one compile for two processes");
}

Test(kernel_cache, group_or_world_writable_cache_dir_is_bypassed) {
  setup();
  char err[4000];
  cr_assert_eq(mkdir(g_cache, 0700), 0);
  cr_assert_eq(chmod(g_cache, 0777), 0);
  expect_bypassed(NULL, g_cache, "writable by others", err, sizeof(err));
  if (geteuid() == 0) {
    /* Writable by a group of others (root can give it one). */
    cr_assert_eq(chown(g_cache, 0, NOBODY), 0);
    cr_assert_eq(chmod(g_cache, 0770), 0);
    expect_bypassed(NULL, g_cache, "writable by its group", err, sizeof(err));
    /* Writable by a group that is only this user (root's group, like a user private group under
     * umask 002): fine. */
    cr_assert_eq(chown(g_cache, 0, 0), 0);
    expect_cached(NULL, 41);
  }
  /* Once only its owner can write it, it caches. */
  cr_assert_eq(chmod(g_cache, 0755), 0);
  expect_cached(NULL, 42);
}

Test(kernel_cache, cache_dir_owned_by_another_user_is_bypassed) {
  require_root();
  setup();
  char err[4000];
  cr_assert_eq(mkdir(g_cache, 0700), 0);
  cr_assert_eq(chown(g_cache, NOBODY, NOBODY), 0);
  expect_bypassed(NULL, g_cache, "owned by uid 65534", err, sizeof(err));
}

Test(kernel_cache, cache_dir_under_a_directory_others_can_write_is_bypassed) {
  setup();
  char open_dir[700], cache[800], env_dir[900], err[4000];
  path_in(open_dir, sizeof(open_dir), "open");
  cr_assert_eq(mkdir(open_dir, 0700), 0);
  cr_assert_eq(chmod(open_dir, 0777), 0);
  snprintf(cache, sizeof(cache), "%s/cache", open_dir);
  snprintf(env_dir, sizeof(env_dir), "HCQ_CACHE_DIR=%s", cache);
  const char *env[] = {env_dir, NULL};
  expect_bypassed(env, cache, open_dir, err, sizeof(err));
  /* With the sticky bit (like /tmp) others cannot rename what is ours: that is fine. */
  cr_assert_eq(chmod(open_dir, 01777), 0);
  expect_cached(env, 43);
}

Test(kernel_cache, unwritable_cache_dir_compiles_without_caching) {
  setup();
  /* The cache path goes through a regular file: it can never be created. */
  char file[700], cache[800], env_dir[900], err[4000];
  path_in(file, sizeof(file), "a-file");
  FILE *f = fopen(file, "w");
  cr_assert_not_null(f);
  fclose(f);
  snprintf(cache, sizeof(cache), "%s/cache", file);
  snprintf(env_dir, sizeof(env_dir), "HCQ_CACHE_DIR=%s", cache);
  const char *env[] = {env_dir, NULL};
  expect_bypassed(env, cache, "cannot create", err, sizeof(err));
}

static void become_nobody(void) {
  if (geteuid() == 0 && (setgid(NOBODY) != 0 || setuid(NOBODY) != 0)) _exit(4);
}

Test(kernel_cache, read_only_cache_dir_compiles_without_caching) {
  setup();
  char err[4000];
  cr_assert_eq(mkdir(g_cache, 0700), 0);
  cr_assert_eq(chmod(g_cache, 0500), 0);
  child_spec_t spec = {.source = k_five, .compiles = 2, .before = NULL};
  bool moved = false;
  if (geteuid() == 0) {
    /* Root writes anywhere: run the child as nobody, who owns the (read-only) cache dir. Nobody
     * must reach the directory: a build tree under a private directory (mktemp -d) is out of its
     * reach, so the test then runs in a directory of its own under /tmp, removed at the end. */
    if (!others_can_reach(g_dir)) {
      setup_in("/tmp");
      cr_assert_eq(mkdir(g_cache, 0700), 0);
      cr_assert_eq(chmod(g_cache, 0500), 0);
      moved = true;
    }
    cr_assert_eq(chown(g_cache, NOBODY, NOBODY), 0);
    cr_assert_eq(chown(g_tmp, NOBODY, NOBODY), 0);
    spec.before = become_nobody;
  }
  char err_path[700];
  path_in(err_path, sizeof(err_path), "stderr.txt");
  spec.stderr_path = err_path;
  int fd = open(err_path, O_WRONLY | O_CREAT | O_TRUNC, 0666);
  cr_assert(fd >= 0);
  fchmod(fd, 0666);
  close(fd);
  /* The logging wrapper writes compiler.log in g_dir: let nobody do that too. */
  char log[700];
  path_in(log, sizeof(log), "compiler.log");
  fd = open(log, O_WRONLY | O_CREAT | O_APPEND, 0666);
  cr_assert(fd >= 0);
  fchmod(fd, 0666);
  close(fd);
  EXPECT_RAN(run_child(&spec), 5);
  cr_assert_eq(compiler_starts(), 2);
  cr_assert_eq(list_dir(g_cache, NULL, 0), 0, "the read-only cache dir received files");
  cr_assert_eq(list_dir(g_tmp, NULL, 0), 0, "private build directories were left in TMPDIR");
  read_file(err_path, err, sizeof(err));
  cr_assert_eq(count_occurrences(err, "hcq: warning"), 1, "%s", err);
  cr_assert(strstr(err, g_cache) && strstr(err, "not cached"), "%s", err);
  if (moved) nftw(g_dir, remove_entry, 16, FTW_DEPTH | FTW_PHYS);
}

/* ---- where the cache lives by default ---- */

Test(kernel_cache, fallback_cache_dir_is_per_user_and_private) {
  setup();
  const char *env[] = {"HCQ_CACHE_DIR", "XDG_CACHE_HOME", "HOME", NULL};
  EXPECT_RAN(run_source(k_five, env), 5);
  char dir[900];
  snprintf(dir, sizeof(dir), "%s/hcq-cache-%ld", g_tmp, (long)geteuid());
  struct stat st;
  cr_assert_eq(stat(dir, &st), 0, "no cache directory %s", dir);
  cr_assert_eq(st.st_mode & 07777, 0700, "%s has mode %o", dir, (unsigned)(st.st_mode & 07777));
  cr_assert_eq(st.st_uid, geteuid());
  int n;
  cr_assert(only_cache_objects(dir, &n));
  cr_assert_eq(n, 1);
  /* A second process finds it there. */
  int starts = compiler_starts();
  EXPECT_RAN(run_source(k_five, env), 5);
  cr_assert_eq(compiler_starts(), starts);
}

Test(kernel_cache, home_cache_dirs_are_created_private) {
  setup();
  char home[700], env_home[800];
  path_in(home, sizeof(home), "home");
  cr_assert_eq(mkdir(home, 0755), 0);
  snprintf(env_home, sizeof(env_home), "HOME=%s", home);
  const char *env[] = {"HCQ_CACHE_DIR", "XDG_CACHE_HOME", env_home, NULL};
  EXPECT_RAN(run_source(k_five, env), 5);
  const char *subdirs[] = {".cache", ".cache/hcq"};
  for (size_t i = 0; i < 2; i++) {
    char dir[900];
    struct stat st;
    snprintf(dir, sizeof(dir), "%s/%s", home, subdirs[i]);
    cr_assert_eq(stat(dir, &st), 0, "no directory %s", dir);
    cr_assert_eq(st.st_mode & 07777, 0700, "%s has mode %o", dir, (unsigned)(st.st_mode & 07777));
  }
}

Test(kernel_cache, fallback_dir_precreated_by_another_user_is_not_used) {
  require_root();
  setup();
  char dir[900], err[4000];
  snprintf(dir, sizeof(dir), "%s/hcq-cache-%ld", g_tmp, (long)geteuid());
  cr_assert_eq(mkdir(dir, 0755), 0);
  cr_assert_eq(chown(dir, NOBODY, NOBODY), 0);
  /* TMPDIR holds the private build directories too: it must be empty afterwards except for dir. */
  char names[2000];
  const char *env[] = {"HCQ_CACHE_DIR", "XDG_CACHE_HOME", "HOME", NULL};
  char err_path[700];
  path_in(err_path, sizeof(err_path), "stderr.txt");
  child_spec_t spec = {.env = env, .source = k_five, .stderr_path = err_path};
  EXPECT_RAN(run_child(&spec), 5);
  cr_assert_eq(list_dir(dir, names, sizeof(names)), 0,
               "files were written into another user's directory:\n%s", names);
  cr_assert_eq(list_dir(g_tmp, names, sizeof(names)), 1, "%s", names);
  read_file(err_path, err, sizeof(err));
  cr_assert(strstr(err, dir) && strstr(err, "owned by uid 65534"), "%s", err);
}

/* ---- storing atomically ---- */

Test(kernel_cache, objects_are_stored_atomically_without_leftovers) {
  setup();
  /* The wrapper logs the object path it is asked to write, and sleeps so that two processes
   * compile the same kernel at the same time. */
  char wrapper[700], body[1500], log[700];
  path_in(wrapper, sizeof(wrapper), "cc-out.sh");
  path_in(log, sizeof(log), "outputs.log");
  snprintf(body, sizeof(body),
           "prev=\nfor a in \"$@\"; do [ \"$prev\" = -o ] && echo \"$a\" >> '%s'; prev=$a; "
           "done\nsleep 0.3\nexec cc \"$@\"\n",
           log);
  write_script(wrapper, body);
  char cc_env[800];
  snprintf(cc_env, sizeof(cc_env), "HCQ_CC=%s", wrapper);
  const char *env[] = {cc_env, NULL};

  child_spec_t spec = {.env = env, .source = k_five};
  child_t children[2] = {start_child(&spec), start_child(&spec)};
  for (int i = 0; i < 2; i++) EXPECT_RAN(finish_child(children[i]), 5);
  int n;
  cr_assert(only_cache_objects(g_cache, &n), "temporary files were left behind");
  cr_assert_eq(n, 1);
  char final[900], outputs[2000];
  the_cache_object(final, sizeof(final));
  read_file(log, outputs, sizeof(outputs));
  cr_assert_eq(count_occurrences(outputs, "\n"), 2, "%s", outputs);
  /* Each compiler wrote its object in a private build directory of its own (the cache only ever
   * receives whole files from hcq), never the final one. */
  char first[900] = "", second[900] = "", build[700];
  sscanf(outputs, "%899s %899s", first, second);
  snprintf(build, sizeof(build), "%s/hcq-build-", g_tmp);
  cr_assert_eq(strncmp(first, build, strlen(build)), 0, "%s is not in a private directory %s*",
               first, build);
  cr_assert_eq(strncmp(second, build, strlen(build)), 0, "%s is not in a private directory %s*",
               second, build);
  cr_assert_eq(strstr(outputs, final), NULL, "a compiler wrote the final object %s directly",
               final);
  cr_assert_neq(strcmp(first, second), 0);
  cr_assert_eq(list_dir(g_tmp, NULL, 0), 0, "private build directories were left in TMPDIR");

  /* Failed compiles leave nothing either. */
  EXPECT_FAILS(run_source(k_broken, env), HCQ_COMPILE_ERROR, "k.c:2");
  cr_assert(only_cache_objects(g_cache, &n));
  cr_assert_eq(n, 1);
}

/* ---- environment ---- */

Test(kernel_cache, cc_may_carry_arguments) {
  setup();
  const char *env1[] = {"HCQ_CC=cc -DKC_VALUE=7", NULL};
  EXPECT_RAN(run_source(K_SOURCE("KC_VALUE"), env1), 7);
  /* The words are part of the key: other arguments compile again. */
  const char *env2[] = {"HCQ_CC=cc -DKC_VALUE=8", NULL};
  EXPECT_RAN(run_source(K_SOURCE("KC_VALUE"), env2), 8);
  /* Quotes keep blanks inside one word; a launcher before the compiler works. */
  const char *env3[] = {"HCQ_CC=env  cc '-DKC_VALUE=(3 + 6)'", NULL};
  EXPECT_RAN(run_source(K_SOURCE("KC_VALUE"), env3), 9);
  const char *env4[] = {"HCQ_CC=cc \"-DKC_VALUE=(2 * 5)\" -DKC_OTHER=a\\ b", NULL};
  EXPECT_RAN(run_source(K_SOURCE("KC_VALUE"), env4), 10);
  /* The logging wrapper with an argument of its own. */
  char cc[900];
  snprintf(cc, sizeof(cc), "HCQ_CC=%s -DKC_VALUE=11", g_cc);
  const char *env5[] = {cc, NULL};
  EXPECT_RAN(run_source(K_SOURCE("KC_VALUE"), env5), 11);
  cr_assert_eq(compiler_starts(), 1);
}

Test(kernel_cache, bad_cc_and_cflags_values_are_errors) {
  setup();
  const char *env1[] = {"HCQ_CC=cc '-DX=1", NULL};
  EXPECT_FAILS(run_source(k_five, env1), HCQ_INVALID_ARGUMENT, "HCQ_CC", "unterminated");
  const char *env2[] = {"HCQ_CFLAGS=-O2 \"-DX=1", NULL};
  EXPECT_FAILS(run_source(k_five, env2), HCQ_INVALID_ARGUMENT, "HCQ_CFLAGS", "unterminated");
  const char *env3[] = {"HCQ_CC= \t ", NULL};
  EXPECT_FAILS(run_source(k_five, env3), HCQ_INVALID_ARGUMENT, "HCQ_CC", "no compiler");
  const char *env4[] = {"HCQ_CC=/nonexistent/hcq-cc -v", NULL};
  EXPECT_FAILS(run_source(k_five, env4), HCQ_COMPILE_ERROR, "/nonexistent/hcq-cc");
  cr_assert_eq(list_dir(g_tmp, NULL, 0), 0);
}

Test(kernel_cache, cflags_beyond_63_tokens_all_reach_the_compiler) {
  setup();
  /* 300 defines, about 4 KiB: every one must arrive, the last one gives the value. */
  static char flags[16384];
  size_t len = (size_t)snprintf(flags, sizeof(flags), "HCQ_CFLAGS=-O1");
  for (int i = 0; i < 300; i++)
    len += (size_t)snprintf(flags + len, sizeof(flags) - len, " -DKC_F%d=%d", i, i);
  const char *env[] = {flags, NULL};
  EXPECT_RAN(run_source(K_SOURCE("KC_F0 + KC_F63 + KC_F64 + KC_F299"), env), 0 + 63 + 64 + 299);
  /* The same long flags hit the cache in the next process. */
  EXPECT_RAN(run_source(K_SOURCE("KC_F0 + KC_F63 + KC_F64 + KC_F299"), env), 426);
  cr_assert_eq(compiler_starts(), 1);
}

Test(kernel_cache, overlong_cache_dir_is_an_error) {
  setup();
  static char env_dir[6000];
  size_t len = (size_t)snprintf(env_dir, sizeof(env_dir), "HCQ_CACHE_DIR=%s", g_dir);
  while (len < 5000) len += (size_t)snprintf(env_dir + len, sizeof(env_dir) - len, "/deeper");
  const char *env[] = {env_dir, NULL};
  EXPECT_FAILS(run_source(k_five, env), HCQ_INVALID_ARGUMENT, "HCQ_CACHE_DIR", "too long");
}

/* ---- entry names ---- */

Test(kernel_cache, entry_names_must_be_c_identifiers) {
  setup();
  const char *bad[] = {"a/b", "../k", "1k", "k-1", "k 1", "k.c", "k\n"};
  for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
    child_spec_t spec = {.entry = bad[i], .source = k_five};
    child_result_t r = run_child(&spec);
    char quoted[64];
    snprintf(quoted, sizeof(quoted), "\"%s\"", bad[i]);
    if (strchr(bad[i], '\n')) snprintf(quoted, sizeof(quoted), "\"k\\n\"");
    EXPECT_FAILS(r, HCQ_INVALID_ARGUMENT, "not a C identifier", quoted);
  }
  cr_assert_eq(list_dir(g_cache, NULL, 0), -1,
               "the cache directory was created for a rejected entry");
  cr_assert_eq(compiler_starts(), 0);
  child_spec_t good = {.entry = "_k9",
                       .source =
                           "void _k9(void *const *b, const int32_t *v, const hcq_launch_t *l) { "
                           "(void)v; (void)l; ((int32_t *)b[0])[0] = 9; }\n"};
  EXPECT_RAN(run_child(&good), 9);
  /* An entry the source does not define is not looked up in the libraries behind the object:
   * cosf from libm (which this source links, for expf) would be called as a kernel. */
  child_spec_t libm = {
      .entry = "cosf",
      .source = "float expf(float);\nfloat uses_libm(float x) { return expf(x); }\n" K_SOURCE("5")};
  EXPECT_FAILS(run_child(&libm), HCQ_COMPILE_ERROR, "\"cosf\"", "not defined by the source");
}

/* ---- the key ---- */

Test(kernel_cache, native_flags_put_the_host_cpu_in_the_key) {
  hcq__cpu_key_input_t in = {.source = "src",
                             .entry = "k",
                             .cc_words = (const char *[]){"cc", NULL},
                             .cc_identity = "/usr/bin/gcc|1|2",
                             .cflags = (const char *[]){"-O2", NULL},
                             .cpu_identity = "cpu A"};
  char a[33], b[33], c[33], d[33];
  hcq__cpu_cache_key(&in, a);
  in.cpu_identity = "cpu B";
  hcq__cpu_cache_key(&in, b);
  cr_assert_str_eq(a, b, "without native flags the CPU is not part of the key");
  in.cflags = (const char *[]){"-O2", "-march=native", NULL};
  hcq__cpu_cache_key(&in, c);
  in.cpu_identity = "cpu A";
  hcq__cpu_cache_key(&in, d);
  cr_assert_str_neq(c, d, "with -march=native the CPU is part of the key");
  cr_assert_str_neq(a, d);
  /* native in HCQ_CC counts too. */
  in.cflags = (const char *[]){"-O2", NULL};
  in.cc_words = (const char *[]){"cc", "-mtune=native", NULL};
  hcq__cpu_cache_key(&in, c);
  in.cpu_identity = "cpu B";
  hcq__cpu_cache_key(&in, d);
  cr_assert_str_neq(c, d);
  /* Word boundaries matter: "-O2 -g" as one word is another key than two words. */
  in.cc_words = (const char *[]){"cc", NULL};
  in.cflags = (const char *[]){"-O2 -g", NULL};
  hcq__cpu_cache_key(&in, c);
  in.cflags = (const char *[]){"-O2", "-g", NULL};
  hcq__cpu_cache_key(&in, d);
  cr_assert_str_neq(c, d);
  cr_assert_not_null(hcq__cpu_host_identity(), "this machine's CPU cannot be identified");
}

Test(kernel_cache, native_flags_compile_and_cache) {
  setup();
  const char *env[] = {"HCQ_CFLAGS=-O2 -march=native", NULL};
  EXPECT_RAN(run_source(k_five, env), 5);
  EXPECT_RAN(run_source(k_five, env), 5);
  cr_assert_eq(compiler_starts(), 1);
}

/* Instruction-set macros a compiler predefines, one bit each. */
#define ISA_MACROS(X) \
  X(__SSE4_2__) X(__AVX__) X(__AVX2__) X(__FMA__) X(__AVX512F__) X(__ARM_NEON) X(__ARM_FEATURE_SVE)

static const char k_isa[] =
    "void k(void *const *b, const int32_t *v, const hcq_launch_t *l) {\n"
    "  (void)v; (void)l; int32_t m = 0, bit = 1;\n"
#define ISA_PROBE(name) "#ifdef " #name "\n  m |= bit;\n#endif\n  bit <<= 1;\n"
    ISA_MACROS(ISA_PROBE)
#undef ISA_PROBE
        "  ((int32_t *)b[0])[0] = m;\n}\n";

/* The same bits from `cc -march=native -dM -E`: what the host's instruction set gives. */
static int32_t host_isa_mask(void) {
  FILE *f = popen("cc -march=native -dM -E -x c /dev/null 2>/dev/null", "r");
  cr_assert_not_null(f);
  char line[512];
  int32_t m = 0;
  while (fgets(line, sizeof(line), f)) {
    int32_t bit = 1;
#define ISA_MATCH(name)                                                             \
  if (!strncmp(line, "#define " #name " ", strlen("#define " #name " "))) m |= bit; \
  bit <<= 1;
    ISA_MACROS(ISA_MATCH)
#undef ISA_MATCH
  }
  cr_assert_eq(pclose(f), 0, "cc -march=native -dM -E failed");
  return m;
}

Test(kernel_cache, default_flags_compile_for_the_host_cpu) {
  setup();
  int32_t want = host_isa_mask();
  EXPECT_RAN(run_source(k_isa, NULL), want);
  /* HCQ_CFLAGS replaces the default: exactly those flags, here the baseline instruction set. */
  const char *env[] = {"HCQ_CFLAGS=-O2 -march=x86-64", NULL};
#if defined(__x86_64__)
  child_result_t r = run_source(k_isa, env);
  cr_assert(r.ran, "%s", r.message);
  cr_assert_eq(r.value & ~1, 0, "-march=x86-64 still saw host instructions (mask %d)",
               (int)r.value);
#else
  (void)env;
#endif
}

/* a * a - c with a = 1 + 2^-12 and c = fl(a * a) = 1 + 2^-11 is 0 when the product is rounded and
 * 2^-24 when it is fused: the default flags keep every product rounded (no FMA contraction), so the
 * bits do not depend on whether the host has FMA. */
Test(kernel_cache, default_flags_do_not_fuse_multiply_adds) {
  setup();
  /* Volatile loads keep the compiler from folding the expression; it may still fuse it. */
  static const char src[] =
      "void k(void *const *b, const int32_t *v, const hcq_launch_t *l) {\n"
      "  (void)v; (void)l;\n"
      "  volatile float va = 1.0f + 1.0f / 4096.0f, vc = 1.0f + 1.0f / 2048.0f;\n"
      "  float a = va, c = vc, r = a * a - c;\n"
      "  ((int32_t *)b[0])[0] = r == 0.0f ? 0 : r == 1.0f / 16777216.0f ? 1 : 2;\n}\n";
  EXPECT_RAN(run_source(src, NULL), 0);
  /* The probe can see a fused one: with contraction asked for on an FMA host, it is fused. */
  if (host_isa_mask() & (1 << 3)) {
    const char *env[] = {"HCQ_CFLAGS=-O2 -march=native -ffp-contract=fast", NULL};
    EXPECT_RAN(run_source(src, env), 1);
  }
}

Test(kernel_cache, words_split_like_a_simple_shell) {
  struct {
    const char *text;
    const char *words[6];
  } cases[] = {
      {"cc", {"cc"}},
      {"  ccache \t gcc  -m64 ", {"ccache", "gcc", "-m64"}},
      {"cc '-DA=(1 + 2)' \"-DB=\\\"x y\\\"\"", {"cc", "-DA=(1 + 2)", "-DB=\"x y\""}},
      {"a\\ b c\\\\d", {"a b", "c\\d"}},
      {"x'y'\"z\" ''", {"xyz", ""}},
      {"\"a\\nb\" $HOME", {"a\\nb", "$HOME"}},
      {"", {NULL}},
  };
  for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
    char **words = NULL;
    size_t n = 0;
    hcq_status_t st = hcq__cpu_split_words("HCQ_TEST", cases[i].text, &words, &n);
    cr_assert_null(st, "%s: %s", cases[i].text, hcq_status_message(st));
    size_t want = 0;
    while (want < 6 && cases[i].words[want]) want++;
    cr_assert_eq(n, want, "\"%s\" gave %zu words", cases[i].text, n);
    for (size_t w = 0; w < n; w++)
      cr_assert_str_eq(words[w], cases[i].words[w], "\"%s\" word %zu", cases[i].text, w);
    cr_assert_null(words[n]);
    free(words);
  }
  const char *bad[] = {"cc 'x", "cc \"x", "cc x\\"};
  for (size_t i = 0; i < 3; i++) {
    char **words = NULL;
    size_t n = 0;
    FAILS(hcq__cpu_split_words("HCQ_TEST", bad[i], &words, &n), HCQ_INVALID_ARGUMENT, "HCQ_TEST");
    cr_assert_null(words);
  }
}

/* ---- the size cap (HCQ_CACHE_MAX_MB) ---- */

/* A file of size bytes named like a cached kernel at rel in the cache, last used ago_s seconds ago.
 */
static void plant_cached(const char *rel, size_t size, int ago_s) {
  char path[PATH_MAX];
  path_in(path, sizeof(path), "cache");
  snprintf(path + strlen(path), sizeof(path) - strlen(path), "/%s", rel);
  int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
  cr_assert_geq(fd, 0, "%s: %s", path, strerror(errno));
  cr_assert_eq(ftruncate(fd, (off_t)size), 0);
  struct timespec t[2];
  clock_gettime(CLOCK_REALTIME, &t[0]);
  t[0].tv_sec -= ago_s;
  t[1] = t[0];
  cr_assert_eq(futimens(fd, t), 0);
  close(fd);
}

static bool in_cache(const char *rel) {
  char path[PATH_MAX];
  path_in(path, sizeof(path), "cache");
  snprintf(path + strlen(path), sizeof(path) - strlen(path), "/%s", rel);
  return access(path, F_OK) == 0;
}

static time_t last_use(const char *path) {
  struct stat st;
  cr_assert_eq(stat(path, &st), 0, "%s", path);
  return st.st_mtime;
}

static void run_k(hcq_device_t *d, const char *source, int32_t want) {
  hcq_program_t *p = NULL;
  OK(hcq_program_create(d, "k", source, &p));
  hcq_buffer_t *b = test_buffer(d, 4);
  hcq_launch_desc_t l = {p, &b, 1, NULL, 0, {1, 1, 1}, {1, 1, 1}, NULL, 0};
  OK(hcq_launch(&l));
  int32_t got = 0;
  OK(hcq_buffer_copyout(b, 0, &got, 4));
  cr_assert_eq(got, want);
  hcq_buffer_release(b);
  hcq_program_release(p);
}

#define HEX32(c) c c c c c c c c c c c c c c c c c c c c c c c c c c c c c c c c

/* Whether name is a planted one: one digit 32 times. */
static bool planted(const char *name) { return strspn(name, (char[]){name[0], 0}) >= 32; }

/* The one object hcq stored (a real key's 32 digits are not all one). */
static void stored_object(char *out, size_t size) {
  DIR *d = opendir(g_cache);
  cr_assert_not_null(d);
  int n = 0;
  for (struct dirent *e; (e = readdir(d));)
    if (strstr(e->d_name, ".so") && !planted(e->d_name))
      snprintf(out, size, "%s/%s", g_cache, e->d_name), n++;
  closedir(d);
  cr_assert_eq(n, 1, "expected one stored object in %s, found %d", g_cache, n);
}

/* Past the cap, a store removes the least recently used kernels, of every backend, until the cache
 * fits; never the one just stored, nor a store in progress; a load counts as a use. */
Test(kernel_cache, a_size_cap_removes_the_least_recently_used_kernels_first) {
  setup();
  setenv("HCQ_CACHE_MAX_MB", "1", 1);
  cr_assert_eq(mkdir(g_cache, 0700), 0);
  char sub[PATH_MAX];
  path_in(sub, sizeof(sub), "cache/spirv");
  cr_assert_eq(mkdir(sub, 0700), 0);
  plant_cached("spirv/" HEX32("a") ".spv", 400 << 10, 4 * 3600);
  plant_cached(HEX32("b") ".so", 400 << 10, 3 * 3600);
  plant_cached(HEX32("c") ".so", 300 << 10, 2 * 3600);
  plant_cached(HEX32("d") ".so", 100 << 10, 3600);
  plant_cached("tmp-store1", 600 << 10, 5 * 3600); /* another process's store in progress */
  hcq_device_t *d = test_open("CPU:0");
  run_k(d, K_SOURCE("7"), 7); /* 1.2 MiB + this object: over 1 MiB */
  cr_assert_not(in_cache("spirv/" HEX32("a") ".spv"),
                "the least recently used kernel (any backend's) goes first");
  cr_assert(in_cache(HEX32("b") ".so") && in_cache(HEX32("c") ".so") && in_cache(HEX32("d") ".so"),
            "only as many as needed go");
  cr_assert(in_cache("tmp-store1"), "a store in progress is not a cached kernel");
  char seven[PATH_MAX];
  stored_object(seven, sizeof(seven));
  /* A load makes a kernel recently used again. */
  struct timespec old[2] = {{time(NULL) - 6 * 3600, 0}, {time(NULL) - 6 * 3600, 0}};
  cr_assert_eq(utimensat(AT_FDCWD, seven, old, 0), 0);
  int starts = compiler_starts();
  run_k(d, K_SOURCE("7"), 7);
  cr_assert_eq(compiler_starts(), starts, "loaded from the cache, not compiled");
  cr_assert_geq(last_use(seven), time(NULL) - 60, "the load marks it used");
  /* Next store: the reloaded object was stored 6 h ago, the oldest but for that load; b (3 h) goes,
   * which is enough. */
  plant_cached(HEX32("e") ".so", 500 << 10, 60);
  run_k(d, K_SOURCE("8"), 8);
  cr_assert_not(in_cache(HEX32("b") ".so"));
  cr_assert(in_cache(HEX32("c") ".so") && in_cache(HEX32("d") ".so") && in_cache(HEX32("e") ".so"));
  cr_assert_eq(access(seven, F_OK), 0, "used a moment ago: kept over older ones");
  test_close(d);
}

/* Without HCQ_CACHE_MAX_MB nothing is ever removed. */
Test(kernel_cache, no_cap_removes_nothing) {
  setup();
  unsetenv("HCQ_CACHE_MAX_MB");
  cr_assert_eq(mkdir(g_cache, 0700), 0);
  plant_cached(HEX32("b") ".so", 2 << 20, 3 * 3600);
  hcq_device_t *d = test_open("CPU:0");
  run_k(d, K_SOURCE("9"), 9);
  cr_assert(in_cache(HEX32("b") ".so"));
  test_close(d);
}
