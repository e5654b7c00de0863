/* The leak report (docs/errors.md, "Leak report"): a failed close tells the user's objects from
 * what a jit or graph holds on their behalf and names them all (or says how many more), and with
 * HCQ_LEAK_REPORT or HCQ_VALIDATE=1 the objects still alive at exit are listed on standard error (a
 * child process, tests/leaks_child.c, leaves them; the test reads what it printed). */
#include <errno.h>
#include <limits.h>
#include <sys/wait.h>

#include "test_util.h"

static void nothing(void *const *b, const int32_t *v, const hcq_launch_t *l) {
  (void)b, (void)v, (void)l;
}

/* The message's part between start and the next "; " (the user's part, or a holder's). */
static void part_of(const char *msg, const char *start, char *out, size_t size) {
  const char *p = strstr(msg, start);
  cr_assert(p, "no \"%s\" in: %s", start, msg);
  const char *end = strstr(p, "; ");
  size_t n = end ? (size_t)(end - p) : strlen(p);
  snprintf(out, size, "%.*s", (int)n, p);
}

Test(leaks, a_failed_close_tells_the_users_objects_from_what_a_jit_holds) {
  hcq_device_t *d = test_open("CPU:0");
  hcq_buffer_t *x = test_buffer(d, 64), *y = test_buffer(d, 64);
  hcq_buffer_set_label(x, "x");
  hcq_buffer_set_label(y, "y");
  hcq_program_t *p = NULL;
  OK(hcq_program_create_fn(d, "nothing", nothing, &p));
  hcq_operand_t one = hcq_imm(1);
  hcq_exec_item_t it = {.kind = HCQ_ITEM_KERNEL,
                        .kernel = {p, &x, 1, NULL, 0, NULL, 0, {one, one, one}, {one, one, one}}};
  hcq_exec_item_t items[2] = {it, it};
  hcq_jit_t *jit = NULL;
  OK(hcq_jit_create(items, 2, NULL, 0, NULL, 0, NULL, &jit));
  cr_assert_eq(hcq_jit_report(jit)->batches, 1, "the two items are one graph: %s",
               hcq_jit_report(jit)->text);

  hcq_status_t st = hcq_device_close(d);
  cr_assert(st && hcq_status_code(st) == HCQ_FAILED_PRECONDITION);
  const char *msg = hcq_status_message(st);
  /* x, y, the program and the jit are the user's; the jit's graph and the graph's kernargs buffers
   * (one per replay it may have in flight: HCQ_GRAPH_INFLIGHT) are the library's. */
  char mine[1024], held[1024];
  part_of(msg, "4 you created: ", mine, sizeof(mine));
  cr_assert(strstr(mine, "buffer \"x\" (hcq_buffer_create)") &&
                strstr(mine, "buffer \"y\" (hcq_buffer_create)") &&
                strstr(mine, "program \"nothing\" (hcq_program_create_fn)") &&
                strstr(mine, "jit#") && strstr(mine, "(hcq_jit_create)"),
            "%s", msg);
  cr_assert(!strstr(mine, "graph#") && !strstr(mine, "kernargs"),
            "the jit's graph is not the user's: %s", msg);
  part_of(msg, "held by jit#", held, sizeof(held));
  cr_assert(strstr(held, "on your behalf") && strstr(held, "graph#") &&
                strstr(held, "buffer \"kernargs of graph#"),
            "%s", msg);
  long total = 0, nheld = 0;
  cr_assert(sscanf(msg, "cannot close CPU:0: %ld objects of it are still alive", &total) == 1, "%s",
            msg);
  cr_assert(sscanf(strstr(msg, "; ") + 2, "%ld held by jit#", &nheld) == 1, "%s", msg);
  cr_assert(nheld >= 2 && total == 4 + nheld, "%s", msg);
  hcq_status_destroy(st);

  OK(hcq_jit_destroy(jit));
  hcq_program_release(p);
  hcq_buffer_release(x);
  hcq_buffer_release(y);
  OK(hcq_device_close(d));
}

/* Every object is counted: those past the limit (32, or 256 with a leak report) as "and N more". */
Test(leaks, a_failed_close_counts_what_it_does_not_name) {
  enum { N = 300 };
  hcq_device_t *d = test_open("CPU:0");
  hcq_buffer_t *bufs[N];
  for (int i = 0; i < N; i++) bufs[i] = test_buffer(d, 16);
  hcq_status_t st = hcq_device_close(d);
  cr_assert(st);
  const char *msg = hcq_status_message(st);
  cr_assert(strstr(msg, "300 you created: buffer#"), "%s", msg);
  long named = 0, more = 0;
  for (const char *p = msg; (p = strstr(p, "(hcq_buffer_create)")); p++) named++;
  const char *and = strstr(msg, " and ");
  cr_assert(and&&sscanf(and, " and %ld more", &more) == 1, "%s", msg);
  cr_assert(named >= 32 && named < N, "%ld named", named);
  cr_assert_eq(named + more, N, "%ld named and %ld more: %s", named, more, msg);
  hcq_status_destroy(st);
  for (int i = 0; i < N; i++) hcq_buffer_release(bufs[i]);
  OK(hcq_device_close(d));
}

/* tests/leaks_child.c next to this test's executable. */
static void child_path(char *out, size_t size) {
  char self[PATH_MAX];
  ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
  cr_assert(n > 0, "readlink /proc/self/exe: %s", strerror(errno));
  self[n] = '\0';
  char *slash = strrchr(self, '/');
  cr_assert(slash);
  *slash = '\0';
  snprintf(out, size, "%s/leaks_child", self);
}

/* Runs leaks_child mode with the variable set (or not: value NULL, and HCQ_VALIDATE unset unless it
 * is the variable); its standard error in err, its exit status returned. */
static int run_child(const char *mode, const char *var, const char *value, char *err, size_t size) {
  char path[PATH_MAX + 16];
  child_path(path, sizeof(path));
  int fds[2];
  cr_assert(pipe(fds) == 0);
  fflush(NULL);
  pid_t pid = fork();
  cr_assert(pid >= 0);
  if (pid == 0) {
    dup2(fds[1], 2);
    close(fds[0]);
    close(fds[1]);
    unsetenv("HCQ_LEAK_REPORT");
    unsetenv("HCQ_VALIDATE");
    if (value) setenv(var, value, 1);
    /* The child leaks on purpose: LeakSanitizer must not fail it (ASan builds). */
    char asan[1024];
    const char *was = getenv("ASAN_OPTIONS");
    snprintf(asan, sizeof(asan), "%s%sdetect_leaks=0", was ? was : "", was && *was ? ":" : "");
    setenv("ASAN_OPTIONS", asan, 1);
    execl(path, path, mode, (char *)NULL);
    fprintf(stderr, "exec %s: %s\n", path, strerror(errno));
    _exit(127);
  }
  close(fds[1]);
  size_t used = 0;
  for (;;) {
    char chunk[4096];
    ssize_t n = read(fds[0], chunk, sizeof(chunk));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    size_t keep = (size_t)n < size - 1 - used ? (size_t)n : size - 1 - used;
    memcpy(err + used, chunk, keep);
    used += keep;
  }
  err[used] = '\0';
  close(fds[0]);
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {}
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

static char g_err[65536];

Test(leaks, at_exit_with_HCQ_LEAK_REPORT_the_live_objects_are_listed) {
  cr_assert_eq(run_child("leak", "HCQ_LEAK_REPORT", "1", g_err, sizeof(g_err)), 0, "%s", g_err);
  cr_assert(strstr(g_err, "objects still alive at exit (HCQ_LEAK_REPORT):\n"), "%s", g_err);
  cr_assert(strstr(g_err, "  CPU:0: buffer \"x\", made by hcq_buffer_create\n"), "%s", g_err);
  cr_assert(strstr(g_err, "  CPU:0: program \"nothing\", made by hcq_program_create_fn\n"), "%s",
            g_err);
  cr_assert(strstr(g_err, ", made by hcq_jit_create\n"), "%s", g_err);
  cr_assert(strstr(g_err, ", made by hcq_graph_create, held by jit#"), "%s", g_err);
  cr_assert(strstr(g_err, "HCQ_LEAK_REPORT=backtrace shows where each was made"), "%s", g_err);
  cr_assert(!strstr(g_err, "      #0 "), "no stacks unless asked: %s", g_err);
}

Test(leaks, at_exit_with_HCQ_VALIDATE_the_live_objects_are_listed) {
  cr_assert_eq(run_child("leak", "HCQ_VALIDATE", "1", g_err, sizeof(g_err)), 0, "%s", g_err);
  cr_assert(strstr(g_err, "objects still alive at exit (HCQ_VALIDATE=1):"), "%s", g_err);
  cr_assert(strstr(g_err, "  CPU:0: buffer \"x\", made by hcq_buffer_create\n"), "%s", g_err);
}

Test(leaks, HCQ_LEAK_REPORT_backtrace_adds_the_creating_stacks) {
  cr_assert_eq(run_child("leak", "HCQ_LEAK_REPORT", "backtrace", g_err, sizeof(g_err)), 0, "%s",
               g_err);
  const char *x = strstr(g_err, "  CPU:0: buffer \"x\", made by hcq_buffer_create\n");
  cr_assert(x, "%s", g_err);
  cr_assert(
      !strncmp(x + strlen("  CPU:0: buffer \"x\", made by hcq_buffer_create\n"), "      #0 ", 9),
      "%s", g_err);
  cr_assert(strstr(g_err, "leaks_child("), "the stack reaches the program: %s", g_err);
}

Test(leaks, nothing_is_reported_without_the_variables_or_after_a_clean_shutdown) {
  cr_assert_eq(run_child("leak", "HCQ_LEAK_REPORT", NULL, g_err, sizeof(g_err)), 0, "%s", g_err);
  cr_assert(!strstr(g_err, "still alive"), "%s", g_err);
  cr_assert_eq(run_child("clean", "HCQ_LEAK_REPORT", "1", g_err, sizeof(g_err)), 0, "%s", g_err);
  cr_assert(!strstr(g_err, "still alive"), "%s", g_err);
  cr_assert_eq(run_child("leak", "HCQ_LEAK_REPORT", "0", g_err, sizeof(g_err)), 0, "%s", g_err);
  cr_assert(!strstr(g_err, "still alive"), "%s", g_err);
}

Test(leaks, a_bad_HCQ_LEAK_REPORT_value_is_named_and_ignored) {
  cr_assert_eq(run_child("leak", "HCQ_LEAK_REPORT", "yes", g_err, sizeof(g_err)), 0, "%s", g_err);
  cr_assert(strstr(g_err, "hcq: ignoring HCQ_LEAK_REPORT=\"yes\": expected 0, 1 or backtrace"),
            "%s", g_err);
  cr_assert(!strstr(g_err, "still alive"), "%s", g_err);
}

/* A lost device closes with objects alive: they are listed as it closes, and counted at exit. */
Test(leaks, a_lost_device_closing_with_live_objects_lists_them) {
  cr_assert_eq(run_child("lost", "HCQ_LEAK_REPORT", "1", g_err, sizeof(g_err)), 0, "%s", g_err);
  cr_assert(strstr(g_err, "hcq: 1 object of CPU:0 still alive as it closes"), "%s", g_err);
  cr_assert(strstr(g_err, "  CPU:0: buffer \"x\", made by hcq_buffer_create\n"), "%s", g_err);
  cr_assert(
      strstr(g_err,
             "hcq: 1 object still alive at exit (HCQ_LEAK_REPORT):\n  and 1 not listed (of devices "
             "closed while lost"),
      "%s", g_err);
}
