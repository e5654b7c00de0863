#include "model_spawn.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/wait.h>
#include <unistd.h>

/* What helpers print when the disk is full: pip, Python's OSError, coreutils. */
static const char *const k_disk_full[] = {"No space left on device", "[Errno 28]",
                                          "Disk quota exceeded", "[Errno 122]"};

static void child_exec(char *const *argv, int out_fd, int err_fd, pid_t parent) {
  /* Killed with us: a pip or an extractor left running would go on filling a folder no one removes.
   * Checked against the parent's pid in case it died before the request was made. */
  if (prctl(PR_SET_PDEATHSIG, SIGKILL) != 0 || getppid() != parent) _exit(127);
  if (dup2(out_fd, STDOUT_FILENO) < 0 || dup2(err_fd, STDERR_FILENO) < 0) _exit(127);
  execvp(argv[0], argv);
  _exit(127);
}

/* Copies the child's error output to log as it comes, looking for a full disk in it. */
static void relay(int from, FILE *log, bool *disk_full) {
  char buf[4096 + 32];
  size_t kept = 0; /* the end of the previous read, for a message cut in two */
  for (;;) {
    ssize_t n = read(from, buf + kept, sizeof(buf) - 1 - kept);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    fwrite(buf + kept, 1, (size_t)n, log);
    fflush(log);
    size_t len = kept + (size_t)n;
    buf[len] = 0;
    for (size_t i = 0; disk_full && i < sizeof(k_disk_full) / sizeof(k_disk_full[0]); i++)
      if (strstr(buf, k_disk_full[i])) *disk_full = true;
    kept = len < 31 ? len : 31;
    memmove(buf, buf + len - kept, kept);
  }
}

int hcq_model_spawn_watch(char *const *argv, FILE *log, bool *disk_full) {
  if (disk_full) *disk_full = false;
  fflush(log);
  int fds[2];
  if (pipe2(fds, O_CLOEXEC)) return -1;
  pid_t parent = getpid(), pid = fork();
  /* Standard output goes to log itself: pip draws its progress bar there only when it is a
   * terminal. */
  if (pid == 0) child_exec(argv, fileno(log), fds[1], parent);
  close(fds[1]);
  if (pid < 0) {
    close(fds[0]);
    return -1;
  }
  relay(fds[0], log, disk_full);
  close(fds[0]);
  int status;
  while (waitpid(pid, &status, 0) < 0)
    if (errno != EINTR) return -1;
  return WIFEXITED(status) ? (WEXITSTATUS(status) == 127 ? -1 : WEXITSTATUS(status)) : -1;
}

int hcq_model_spawn(char *const *argv, FILE *log) { return hcq_model_spawn_watch(argv, log, NULL); }

int hcq_model_mkdirs(const char *path) {
  char p[PATH_MAX];
  if (strlen(path) >= sizeof(p)) {
    errno = ENAMETOOLONG;
    return -1;
  }
  strcpy(p, path);
  for (char *s = p + 1; *s; s++)
    if (*s == '/') {
      *s = 0;
      if (mkdir(p, 0755) && errno != EEXIST) return -1;
      *s = '/';
    }
  return mkdir(p, 0755) && errno != EEXIST ? -1 : 0;
}

void hcq_model_data_dir(char *out, size_t size) {
  const char *env = getenv("HCQ_DATA_DIR"), *xdg = getenv("XDG_DATA_HOME"), *home = getenv("HOME");
  if (env && *env)
    snprintf(out, size, "%s", env);
  else if (xdg && *xdg)
    snprintf(out, size, "%s/hcq", xdg);
  else if (home && *home)
    snprintf(out, size, "%s/.local/share/hcq", home);
  else
    snprintf(out, size, "/tmp/hcq-data-%u", (unsigned)getuid());
}

/* ---- folders that die with their owner ---- */

static int remove_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw) {
  (void)sb, (void)ftw;
  if (flag == FTW_DP)
    rmdir(path);
  else
    unlink(path);
  return 0;
}

void hcq_model_remove_tree(const char *dir) { nftw(dir, remove_entry, 16, FTW_DEPTH | FTW_PHYS); }

void hcq_model_reap_stale(const char *folder, const char *prefix) {
  DIR *d = opendir(folder);
  if (!d) return;
  char path[PATH_MAX];
  for (struct dirent *e; (e = readdir(d));) {
    if (strncmp(e->d_name, prefix, strlen(prefix))) continue;
    int n = snprintf(path, sizeof(path), "%s/%s", folder, e->d_name);
    if (n < 0 || (size_t)n >= sizeof(path)) continue;
    struct stat sb;
    if (lstat(path, &sb) || !S_ISDIR(sb.st_mode) || sb.st_uid != geteuid()) continue;
    int fd = open(path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) continue;
    if (flock(fd, LOCK_EX | LOCK_NB) == 0) hcq_model_remove_tree(path); /* removed while locked */
    close(fd);
  }
  closedir(d);
}

int hcq_model_make_locked_dir(char *template_path, int *lock_fd) {
  *lock_fd = -1;
  size_t len = strlen(template_path);
  char pattern[PATH_MAX];
  if (len >= sizeof(pattern)) {
    errno = ENAMETOOLONG;
    return -1;
  }
  memcpy(pattern, template_path, len + 1);
  for (int tries = 0; tries < 4; tries++) {
    memcpy(template_path, pattern, len + 1);
    if (!mkdtemp(template_path)) return -1;
    int fd = open(template_path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    struct stat sb;
    /* a reaper that saw it before the lock was taken removes it, holding the lock meanwhile */
    if (fd >= 0 && flock(fd, LOCK_EX) == 0 && fstat(fd, &sb) == 0 && sb.st_nlink > 0) {
      *lock_fd = fd;
      return 0;
    }
    if (fd >= 0) close(fd);
    rmdir(template_path);
  }
  errno = EAGAIN;
  return -1;
}

/* ---- a full disk ---- */

bool hcq_model_errno_is_disk_full(int err) { return err == ENOSPC || err == EDQUOT; }

uint64_t hcq_model_free_bytes(const char *folder) {
  struct statvfs sv;
  if (statvfs(folder, &sv)) return UINT64_MAX;
  return (uint64_t)sv.f_bavail * (uint64_t)sv.f_frsize;
}

hcq_status_t hcq_model_disk_full(const char *folder, uint64_t need, const char *doing) {
  uint64_t free_bytes = hcq_model_free_bytes(folder);
  char free_text[64] = "";
  if (free_bytes != UINT64_MAX)
    snprintf(free_text, sizeof(free_text), ", %.1f MB free", free_bytes / 1e6);
  if (need)
    return hcq_status_make(HCQ_UNAVAILABLE,
                           "the disk holding %s is full: %s needs about %.1f MB (%llu bytes)%s "
                           "(HCQ_DATA_DIR picks another folder)",
                           folder, doing, need / 1e6, (unsigned long long)need, free_text);
  return hcq_status_make(
      HCQ_UNAVAILABLE, "the disk holding %s is full while %s%s (HCQ_DATA_DIR picks another folder)",
      folder, doing, free_text);
}

hcq_status_t hcq_model_check_space(const char *folder, uint64_t need, const char *doing) {
  uint64_t free_bytes = hcq_model_free_bytes(folder);
  if (free_bytes == UINT64_MAX || free_bytes >= need) return NULL;
  return hcq_model_disk_full(folder, need, doing);
}
