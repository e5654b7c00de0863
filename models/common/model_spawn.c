#include "model_spawn.h"

#include <errno.h>
#include <limits.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

extern char **environ;

int hcq_model_spawn(char *const *argv, FILE *log) {
  fflush(log);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, fileno(log), STDOUT_FILENO);
  posix_spawn_file_actions_adddup2(&fa, fileno(log), STDERR_FILENO);
  pid_t pid;
  int r = posix_spawnp(&pid, argv[0], &fa, NULL, argv, environ);
  posix_spawn_file_actions_destroy(&fa);
  if (r) return -1;
  int status;
  while (waitpid(pid, &status, 0) < 0)
    if (errno != EINTR) return -1;
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

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
  if (env && *env) snprintf(out, size, "%s", env);
  else if (xdg && *xdg) snprintf(out, size, "%s/hcq", xdg);
  else if (home && *home) snprintf(out, size, "%s/.local/share/hcq", home);
  else snprintf(out, size, "/tmp/hcq-data-%u", (unsigned)getuid());
}
