/* Running the C compiler as a process of its own, and getting its exact wait status and its
 * output whatever the application did with SIGCHLD (docs/kernel-cache.md). */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <spawn.h>
#include <string.h>
#include <sys/pidfd.h>
#include <sys/wait.h>
#include <unistd.h>

#include "core/status.h"
#include "cpu/cpu_compile_internal.h"

extern char **environ;

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
typedef struct cpu_output {
  char *text;
  size_t cap, len;
  bool truncated;
} cpu_output_t;

static const char k_truncated[] = "\n[more compiler output not shown]\n";

static void output_add(cpu_output_t *o, const char *chunk, size_t n) {
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
static void collect_output(cpu_output_t *o, int fd, int done_fd) {
  struct pollfd pfd[2] = {{fd, POLLIN, 0}, {done_fd, POLLIN, 0}};
  char chunk[4096];
  while (pfd[0].fd >= 0 || pfd[1].fd >= 0) {
    if (poll(pfd, 2, -1) < 0) {
      if (errno == EINTR) continue;
      break;
    }
    if (pfd[0].revents) {
      ssize_t n = read(fd, chunk, sizeof(chunk));
      if (n > 0)
        output_add(o, chunk, (size_t)n);
      else if (n == 0 || errno != EINTR)
        pfd[0].fd = -1;
    }
    if (pfd[1].revents) break;
  }
  if (pfd[0].fd >= 0 && fcntl(fd, F_SETFL, O_NONBLOCK) == 0) {
    for (ssize_t n; (n = read(fd, chunk, sizeof(chunk))) != 0;) {
      if (n > 0)
        output_add(o, chunk, (size_t)n);
      else if (errno != EINTR)
        break;
    }
  }
}

/* A pipe whose ends are above 2 (so that dup2 onto 0, 1 and 2 never meets itself), close-on-exec.
 */
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
typedef struct cpu_spawn_setup {
  posix_spawn_file_actions_t actions;
  posix_spawnattr_t attr;
} cpu_spawn_setup_t;

static bool spawn_setup_init(cpu_spawn_setup_t *s, int output_fd) {
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
            posix_spawnattr_setsigdefault(&s->attr, &defaults) == 0 &&
            posix_spawnattr_setsigmask(&s->attr, &none) == 0 &&
            posix_spawnattr_setflags(&s->attr, POSIX_SPAWN_SETSIGDEF | POSIX_SPAWN_SETSIGMASK) == 0;
  if (!ok) {
    posix_spawnattr_destroy(&s->attr);
    posix_spawn_file_actions_destroy(&s->actions);
  }
  return ok;
}

static void spawn_setup_deinit(cpu_spawn_setup_t *s) {
  posix_spawnattr_destroy(&s->attr);
  posix_spawn_file_actions_destroy(&s->actions);
}

static hcq_status_t cannot_run(const char *cc, int err) {
  return hcq_status_make(HCQ_COMPILE_ERROR, "cannot run the C compiler \"%s\": %s (set HCQ_CC)", cc,
                         strerror(err));
}

static bool sigchld_autoreaps(void) {
  struct sigaction sa;
  return sigaction(SIGCHLD, NULL, &sa) == 0 &&
         (sa.sa_handler == SIG_IGN || (sa.sa_flags & SA_NOCLDWAIT));
}

/* The compiler as our child. *out_lost when its status was reaped by someone else. */
static hcq_status_t run_direct(const char *exe, char *const argv[], cpu_output_t *out,
                               int *out_status, bool *out_lost) {
  *out_lost = false;
  int pipe_fds[2];
  cpu_spawn_setup_t setup;
  if (!make_pipe(pipe_fds))
    return hcq_status_make(HCQ_UNAVAILABLE, "cannot create a pipe for the compiler: %s",
                           strerror(errno));
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
    if (errno != EINTR)
      return hcq_status_make(HCQ_UNAVAILABLE, "cannot wait for the C compiler: %s",
                             strerror(errno));
  }
  return NULL;
}

/* What the forked helper reports through its pipe: the compiler's wait status, or the errno of a
 * spawn or a wait that failed. */
typedef enum cpu_helper_report_kind {
  HELPER_WAIT_STATUS = 1,
  HELPER_SPAWN_FAILED,
  HELPER_WAIT_FAILED
} cpu_helper_report_kind_t;

typedef struct cpu_helper_report {
  cpu_helper_report_kind_t kind;
  int value;
} cpu_helper_report_t;

/* The forked helper: only async-signal-safe calls (the parent may have had other threads), every
 * signal blocked. */
static void helper_main(int report_fd, const char *exe, char *const argv[],
                        const cpu_spawn_setup_t *setup) {
  struct sigaction dfl;
  memset(&dfl, 0, sizeof(dfl));
  dfl.sa_handler = SIG_DFL;
  sigemptyset(&dfl.sa_mask);
  sigaction(SIGCHLD, &dfl, NULL); /* so that the compiler stays ours to wait for */
  cpu_helper_report_t report = {HELPER_WAIT_STATUS, 0};
  pid_t pid;
  int rc = posix_spawn(&pid, exe, &setup->actions, &setup->attr, argv, environ);
  if (rc != 0) {
    report = (cpu_helper_report_t){HELPER_SPAWN_FAILED, rc};
  } else {
    int status = 0;
    while (waitpid(pid, &status, 0) < 0) {
      if (errno != EINTR) {
        report = (cpu_helper_report_t){HELPER_WAIT_FAILED, errno};
        break;
      }
    }
    if (report.kind == HELPER_WAIT_STATUS) report.value = status;
  }
  while (write(report_fd, &report, sizeof(report)) < 0 && errno == EINTR) {}
  _exit(0);
}

/* The compiler under a forked helper that reports its wait status. */
static hcq_status_t run_via_helper(const char *exe, char *const argv[], cpu_output_t *out,
                                   int *out_status) {
  int output_fds[2], report_fds[2] = {-1, -1};
  cpu_spawn_setup_t setup;
  if (!make_pipe(output_fds) || !make_pipe(report_fds)) {
    hcq_status_t st = hcq_status_make(HCQ_UNAVAILABLE, "cannot create a pipe for the compiler: %s",
                                      strerror(errno));
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
    cpu_helper_report_t report;
    size_t got = 0;
    while (got < sizeof(report)) {
      ssize_t n = read(report_fds[0], (char *)&report + got, sizeof(report) - got);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) break;
      got += (size_t)n;
    }
    /* ECHILD here is fine: with SIGCHLD ignored the kernel reaped the helper, or a handler did. */
    while (waitpid(helper, NULL, 0) < 0 && errno == EINTR) {}
    if (got < sizeof(report))
      st = hcq_status_make(HCQ_UNAVAILABLE,
                           "the process that runs the compiler ended without reporting");
    else if (report.kind == HELPER_SPAWN_FAILED)
      st = cannot_run(argv[0], report.value);
    else if (report.kind == HELPER_WAIT_FAILED)
      st = hcq_status_make(HCQ_UNAVAILABLE, "cannot wait for the C compiler: %s",
                           strerror(report.value));
    else
      *out_status = report.value;
  }
  close(output_fds[0]);
  close(report_fds[0]);
  return st;
}

hcq_status_t hcq__cpu_run_compiler(const char *exe, char *const argv[], char *output, size_t cap,
                                   int *out_status) {
  cpu_output_t out = {output, cap, 0, false};
  output[0] = '\0';
  if (!sigchld_autoreaps()) {
    bool lost;
    hcq_status_t st = run_direct(exe, argv, &out, out_status, &lost);
    if (st || !lost) return st;
    out = (cpu_output_t){output, cap, 0, false}; /* once more, where the status cannot be taken */
    output[0] = '\0';
  }
  return run_via_helper(exe, argv, &out, out_status);
}
