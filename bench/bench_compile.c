/* hcq_bench_compile: what hcq_program_create costs on CPU, in a fresh kernel cache of its own.
 *
 *   hcq_bench_compile [--kernels N] [--rss-mb M] [--ignore-sigchld] [--hit-rounds R]
 *
 * miss: N distinct kernels compiled (the compiler runs); hit: the same N loaded by a new process
 * (the fastest of R such processes, default 1: on a loaded machine the best is the steadiest).
 * --rss-mb touches M MiB first, as an application with that much memory would; --ignore-sigchld
 * sets SIGCHLD to SIG_IGN, which makes each compile go through a forked helper
 * (docs/kernel-cache.md): together they show what that fork costs. */
#include <hcq/hcq.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static double now_s(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/* Creates and releases n kernels on a new device; milliseconds per create, or -1 on failure. */
static double create_kernels(int n) {
  hcq_device_t *dev = NULL;
  hcq_status_t st;
  if ((st = hcq_device_open("CPU:0", &dev))) goto fail;
  double t0 = now_s();
  for (int i = 0; i < n; i++) {
    char src[200];
    snprintf(src, sizeof(src),
             "void k(void *const *b, const int32_t *v, const hcq_launch_t *l) { (void)v; (void)l; "
             "((int32_t *)b[0])[0] = %d; }\n",
             i);
    hcq_program_t *p = NULL;
    st = hcq_program_create(dev, "k", src, &p);
    hcq_program_release(p);
    if (st) goto fail;
  }
  double ms = (now_s() - t0) * 1e3 / n;
  if ((st = hcq_device_close(dev))) goto fail;
  return ms;
fail:
  fprintf(stderr, "hcq_bench_compile: %s\n", hcq_status_message(st));
  hcq_status_destroy(st);
  return -1;
}

int main(int argc, char **argv) {
  int kernels = 20;
  long rss_mb = 0;
  bool ignore = false;
  int rounds = 1;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--kernels") && i + 1 < argc)
      kernels = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--rss-mb") && i + 1 < argc)
      rss_mb = atol(argv[++i]);
    else if (!strcmp(argv[i], "--ignore-sigchld"))
      ignore = true;
    else if (!strcmp(argv[i], "--hit-rounds") && i + 1 < argc)
      rounds = atoi(argv[++i]);
    else {
      fprintf(stderr,
              "usage: hcq_bench_compile [--kernels N] [--rss-mb M] [--ignore-sigchld] "
              "[--hit-rounds R]\n");
      return 2;
    }
  }
  if (kernels < 1) kernels = 1;
  char dir[] = "/tmp/hcq-bench-compile-XXXXXX";
  if (!mkdtemp(dir)) return 1;
  setenv("HCQ_CACHE_DIR", dir, 1);
  char *memory = rss_mb > 0 ? malloc((size_t)rss_mb << 20) : NULL;
  if (memory) memset(memory, 1, (size_t)rss_mb << 20);
  if (ignore) signal(SIGCHLD, SIG_IGN);

  double miss = create_kernels(kernels);
  /* The hits in a new process: options (the cache dir) are inherited, loaded objects are not. */
  double hit = -1;
  for (int round = 0; miss >= 0 && round < (rounds > 0 ? rounds : 1); round++) {
    int fds[2];
    double ms = -1;
    if (pipe(fds) != 0) break;
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
      ms = create_kernels(kernels);
      _exit(write(fds[1], &ms, sizeof(ms)) == sizeof(ms) ? 0 : 1);
    }
    close(fds[1]);
    if (read(fds[0], &ms, sizeof(ms)) != sizeof(ms)) ms = -1;
    close(fds[0]);
    if (pid > 0) waitpid(pid, NULL, 0);
    if (ms < 0) {
      hit = -1;
      break;
    }
    if (hit < 0 || ms < hit) hit = ms;
  }
  printf(
      "%d kernels, %ld MiB resident, SIGCHLD %s: miss %.2f ms, hit %.3f ms per "
      "hcq_program_create\n",
      kernels, rss_mb, ignore ? "ignored" : "default", miss, hit);
  free(memory);
  char cmd[100];
  snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
  return (system(cmd) == 0 && miss >= 0 && hit >= 0) ? 0 : 1;
}
