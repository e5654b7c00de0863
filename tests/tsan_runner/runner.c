/* Runner for the TSan stand-in of Criterion: forks one process per test, enforces the timeout, and
 * prints a Criterion-like synthesis. Exit status 0 only when every test passed. */
#include <fnmatch.h>
#include <signal.h>
#include <stdarg.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include "criterion/criterion.h"

static struct shim_test *g_tests;
static struct shim_suite *g_suites;

void shim_register_test(struct shim_test *t) {
  t->next = g_tests;
  g_tests = t;
}

void shim_register_suite(struct shim_suite *s) {
  s->next = g_suites;
  g_suites = s;
}

void shim_check(bool ok, const char *file, int line, const char *expr, const char *fmt, ...) {
  if (ok) return;
  fprintf(stderr, "[----] %s:%d: Assertion Failed\n[----]   ", file, line);
  if (fmt && *fmt) {
    va_list ap;
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
  } else {
    fprintf(stderr, "The expression %s is false.", expr);
  }
  fprintf(stderr, "\n");
  fflush(stderr);
  _exit(1);
}

void shim_log(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, "[ERR ] ");
  vfprintf(stderr, fmt, ap);
  fprintf(stderr, "\n");
  va_end(ap);
}

void shim_skip(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, "[SKIP] ");
  vfprintf(stderr, fmt, ap);
  fprintf(stderr, "\n");
  va_end(ap);
  fflush(stderr);
  _exit(77);
}

static const struct shim_suite *suite_of(const struct shim_test *t) {
  for (const struct shim_suite *s = g_suites; s; s = s->next)
    if (!strcmp(s->name, t->suite)) return s;
  return NULL;
}

int main(int argc, char **argv) {
  /* Criterion's forms: --filter=GLOB and --filter GLOB, matched against "suite/test" as a glob
   * (the CTest entries select a suite with "suite/" and a star). */
  const char *filter = NULL;
  for (int i = 1; i < argc; i++) {
    if (!strncmp(argv[i], "--filter=", 9))
      filter = argv[i] + 9;
    else if (!strcmp(argv[i], "--filter") && i + 1 < argc)
      filter = argv[++i];
  }
  int passed = 0, failed = 0, crashed = 0, skipped = 0;
  for (struct shim_test *t = g_tests; t; t = t->next) {
    char full[256];
    snprintf(full, sizeof(full), "%s/%s", t->suite, t->name);
    if (filter && fnmatch(filter, full, 0) != 0) continue;
    const struct shim_suite *s = suite_of(t);
    double timeout = t->opts.timeout > 0        ? t->opts.timeout
                     : s && s->opts.timeout > 0 ? s->opts.timeout
                                                : 300;
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
      alarm((unsigned)timeout + 1);
      if (s && s->opts.init) s->opts.init();
      if (t->opts.init) t->opts.init();
      t->fn();
      if (t->opts.fini) t->opts.fini();
      if (s && s->opts.fini) s->opts.fini();
      fflush(NULL);
      _exit(0);
    }
    int status = 0;
    waitpid(pid, &status, 0);
    if (WIFEXITED(status) && WEXITSTATUS(status) == 0) {
      passed++;
    } else if (WIFEXITED(status) && WEXITSTATUS(status) == 77) {
      skipped++;
    } else if (WIFEXITED(status)) {
      failed++;
      fprintf(stderr, "[FAIL] %s::%s\n", t->suite, t->name);
    } else {
      crashed++;
      fprintf(stderr, "[FAIL] %s::%s: CRASH (signal %d%s)\n", t->suite, t->name, WTERMSIG(status),
              WTERMSIG(status) == SIGALRM ? ", timed out" : "");
    }
  }
  fprintf(stderr,
          "[====] Synthesis: Tested: %d | Passing: %d | Failing: %d | Crashing: %d | Skipped: %d\n",
          passed + failed + crashed + skipped, passed, failed, crashed, skipped);
  return failed || crashed ? 1 : 0;
}
