/* CPU kernels from C source: compile errors, the on-disk cache across processes. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "test_util.h"

TestSuite(compile, .timeout = 120);

static char g_dir[512];

/* A fresh cache directory and a compiler wrapper that logs each time it is started. */
static void use_fresh_cache(void) {
  const char *base = getenv("HCQ_TEST_TMP");
  if (!base || !*base) base = "/tmp";
  mkdir(base, 0755);
  snprintf(g_dir, sizeof(g_dir), "%s/compile-XXXXXX", base);
  cr_assert_not_null(mkdtemp(g_dir));
  char path[600], cache[600];
  snprintf(path, sizeof(path), "%s/cc-wrapper.sh", g_dir);
  FILE *f = fopen(path, "w");
  cr_assert_not_null(f);
  fprintf(f, "#!/bin/sh\necho started >> '%s/compiler.log'\nexec cc \"$@\"\n", g_dir);
  fclose(f);
  chmod(path, 0755);
  snprintf(cache, sizeof(cache), "%s/cache", g_dir);
  setenv("HCQ_CC", path, 1);
  setenv("HCQ_CACHE_DIR", cache, 1);
}

static int compiler_starts(void) {
  char path[600], line[64];
  snprintf(path, sizeof(path), "%s/compiler.log", g_dir);
  FILE *f = fopen(path, "r");
  if (!f) return 0;
  int n = 0;
  while (fgets(line, sizeof(line), f)) n++;
  fclose(f);
  return n;
}

static const char *k_source =
    "void inc(void *const *b, const int32_t *v, const hcq_launch_t *l) {\n"
    "  (void)l; ((int32_t *)b[0])[0] += v[0];\n"
    "}\n";

/* Compiles and runs k_source in a new process; exits 0 when the kernel ran right. The caller must
 * not have used hcq yet when it passes cflags: options are read once per process. */
static int compile_in_child(const char *cflags) {
  pid_t pid = fork();
  if (pid == 0) {
    if (cflags) setenv("HCQ_CFLAGS", cflags, 1);
    hcq_device_t *d = NULL;
    hcq_program_t *p = NULL;
    hcq_buffer_t *b = NULL;
    int ok = !hcq_device_open("CPU:0", &d) && !hcq_program_create(d, "inc", k_source, &p) &&
             !hcq_buffer_create(d, 4, &b);
    int32_t v = 5, got = 0;
    hcq_launch_desc_t l = {p, &b, 1, &v, 1, {1, 1, 1}, {1, 1, 1}};
    ok = ok && !hcq_launch(&l) && !hcq_buffer_copyout(b, 0, &got, 4) && got == 5;
    _exit(ok ? 0 : 1);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 99;
}

Test(compile, second_process_loads_from_cache_without_compiling) {
  use_fresh_cache();
  cr_assert_eq(compile_in_child(NULL), 0);
  cr_assert_eq(compiler_starts(), 1, "the first process compiles once");
  cr_assert_eq(compile_in_child(NULL), 0);
  cr_assert_eq(compiler_starts(), 1, "a second process started the compiler again");
  /* And in this process, twice. */
  hcq_device_t *d = test_open("CPU:0");
  hcq_program_t *p1 = test_program(d, "inc", k_source), *p2 = test_program(d, "inc", k_source);
  cr_assert_eq(compiler_starts(), 1);
  hcq_program_release(p1);
  hcq_program_release(p2);
  test_close(d);
}

Test(compile, source_or_flags_change_recompiles) {
  use_fresh_cache();
  cr_assert_eq(compile_in_child("-O2"), 0);
  cr_assert_eq(compiler_starts(), 1);
  /* Flags are part of the key: a new process with other flags compiles again. */
  cr_assert_eq(compile_in_child("-O1"), 0);
  cr_assert_eq(compiler_starts(), 2);
  cr_assert_eq(compile_in_child("-O1"), 0);
  cr_assert_eq(compiler_starts(), 2);
  hcq_device_t *d = test_open("CPU:0");
  hcq_program_release(test_program(d, "dec",
                                   "void dec(void *const *b, const int32_t *v, const hcq_launch_t "
                                   "*l) { (void)l; ((int32_t *)b[0])[0] -= v[0]; }"));
  cr_assert_eq(compiler_starts(), 3, "another source compiles");
  test_close(d);
}

Test(compile, compile_error_returns_compiler_output) {
  use_fresh_cache();
  hcq_device_t *d = test_open("CPU:0");
  hcq_program_t *p = NULL;
  FAILS(hcq_program_create(d, "broken",
                           "void broken(void *const *b, const int32_t *v, const hcq_launch_t *l) "
                           "{\n  int x = ;\n}\n",
                           &p),
        HCQ_COMPILE_ERROR, "program broken on CPU:0", "compiling broken failed", "broken.c:2",
        "error");
  cr_assert_null(p);
  /* The device stays usable. */
  p = test_program(d, "inc", k_source);
  hcq_program_release(p);
  test_close(d);
}

Test(compile, missing_entry_point) {
  use_fresh_cache();
  hcq_device_t *d = test_open("CPU:0");
  hcq_program_t *p = NULL;
  FAILS(hcq_program_create(d, "nothere", k_source, &p), HCQ_COMPILE_ERROR, "\"nothere\"",
        "not defined");
  test_close(d);
}

Test(compile, missing_compiler) {
  use_fresh_cache();
  setenv("HCQ_CC", "/nonexistent/cc-hcq", 1);
  hcq_device_t *d = test_open("CPU:0");
  hcq_program_t *p = NULL;
  FAILS(hcq_program_create(d, "inc", k_source, &p), HCQ_COMPILE_ERROR, "/nonexistent/cc-hcq");
  test_close(d);
}

Test(compile, prelude_defines_the_abi) {
  const char *prelude = hcq_cpu_prelude();
  cr_assert(strstr(prelude, "#include <stdint.h>"));
  cr_assert(strstr(prelude, "#include <stddef.h>"));
  cr_assert(strstr(prelude, "uint32_t gid[3], gsz[3], lsz[3]; } hcq_launch_t"));
}

Test(compile, kernels_may_use_libm) {
  use_fresh_cache();
  hcq_device_t *d = test_open("CPU:0");
  hcq_program_t *p =
      test_program(d, "expk",
                   "float expf(float);\n"
                   "void expk(void *const *b, const int32_t *v, const hcq_launch_t *l) {\n"
                   "  (void)l; volatile float x = (float)v[0]; ((float *)b[0])[0] = expf(x);\n"
                   "}\n");
  hcq_buffer_t *out = test_buffer(d, 4);
  int32_t one = 1;
  hcq_launch_desc_t l = {p, &out, 1, &one, 1, {1, 1, 1}, {1, 1, 1}};
  OK(hcq_launch(&l));
  float got = 0;
  test_read(out, &got, 4);
  cr_assert(got > 2.718f && got < 2.719f, "expf(1) = %f", (double)got);
  hcq_buffer_release(out);
  hcq_program_release(p);
  test_close(d);
}
