/* CPU kernels from C source: compiled by the system compiler into a shared object, cached on disk
 * under a hash of everything that decides its contents, so a second process only dlopens it. */
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <xxhash.h>

#include "cpu/cpu_internal.h"

extern char **environ;

#define MAX_COMPILER_OUTPUT (64 * 1024)
#define MAX_CFLAGS 64

static const char k_prelude[] =
    "#include <stdint.h>\n"
    "#include <stddef.h>\n"
    "typedef struct { uint32_t gid[3], gsz[3], lsz[3]; } hcq_launch_t;\n";

const char *hcq_cpu_prelude(void) { return k_prelude; }

/* The compiler's identity without running it: its resolved path, size and modification time. */
static void compiler_identity(const char *cc, char *out, size_t size) {
  char path[PATH_MAX] = "";
  if (strchr(cc, '/')) {
    snprintf(path, sizeof(path), "%s", cc);
  } else {
    const char *env = getenv("PATH");
    char dirs[4096];
    snprintf(dirs, sizeof(dirs), "%s", env ? env : "/usr/bin:/bin");
    for (char *save = NULL, *d = strtok_r(dirs, ":", &save); d; d = strtok_r(NULL, ":", &save)) {
      char cand[PATH_MAX];
      snprintf(cand, sizeof(cand), "%s/%s", *d ? d : ".", cc);
      if (access(cand, X_OK) == 0) {
        snprintf(path, sizeof(path), "%s", cand);
        break;
      }
    }
  }
  char real[PATH_MAX];
  struct stat st;
  if (!*path || !realpath(path, real) || stat(real, &st) != 0) {
    snprintf(out, size, "missing:%s", cc);
    return;
  }
  snprintf(out, size, "%s|%lld|%lld.%09ld", real, (long long)st.st_size, (long long)st.st_mtim.tv_sec,
           st.st_mtim.tv_nsec);
}

static hcq_status_t make_dirs(const char *dir) {
  char tmp[1024];
  snprintf(tmp, sizeof(tmp), "%s", dir);
  for (char *p = tmp + 1; *p; p++) {
    if (*p != '/') continue;
    *p = '\0';
    if (mkdir(tmp, 0755) != 0 && errno != EEXIST)
      return hcq_status_make(HCQ_UNAVAILABLE, "cannot create the kernel cache directory %s: %s", tmp, strerror(errno));
    *p = '/';
  }
  if (mkdir(tmp, 0755) != 0 && errno != EEXIST)
    return hcq_status_make(HCQ_UNAVAILABLE, "cannot create the kernel cache directory %s: %s", tmp, strerror(errno));
  return NULL;
}

static hcq_status_t write_file(const char *path, const char *a, const char *b, const char *c) {
  FILE *f = fopen(path, "w");
  if (!f) return hcq_status_make(HCQ_UNAVAILABLE, "cannot write %s: %s", path, strerror(errno));
  bool ok = fputs(a, f) >= 0 && fputs(b, f) >= 0 && fputs(c, f) >= 0;
  ok = (fclose(f) == 0) && ok;
  return ok ? NULL : hcq_status_make(HCQ_UNAVAILABLE, "cannot write %s", path);
}

/* Runs argv, collecting stdout and stderr; *out_status is the exit status (or -1). */
static hcq_status_t run_compiler(char *const argv[], char *output, size_t output_size, int *out_status) {
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) return hcq_status_make(HCQ_UNAVAILABLE, "pipe: %s", strerror(errno));
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, fds[1], 1);
  posix_spawn_file_actions_adddup2(&fa, fds[1], 2);
  pid_t pid;
  int rc = posix_spawnp(&pid, argv[0], &fa, NULL, argv, environ);
  posix_spawn_file_actions_destroy(&fa);
  close(fds[1]);
  if (rc != 0) {
    close(fds[0]);
    return hcq_status_make(HCQ_COMPILE_ERROR, "cannot run the C compiler \"%s\": %s (set HCQ_CC)", argv[0], strerror(rc));
  }
  size_t len = 0;
  for (;;) {
    char chunk[4096];
    ssize_t n = read(fds[0], chunk, sizeof(chunk));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    size_t take = (size_t)n < output_size - 1 - len ? (size_t)n : output_size - 1 - len;
    memcpy(output + len, chunk, take);
    len += take;
  }
  output[len] = '\0';
  close(fds[0]);
  int status;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  *out_status = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return NULL;
}

static hcq_status_t compile_to(const hcq__options_t *o, const char *entry, const char *source, const char *so_path) {
  static atomic_uint counter;
  char base[1200], c_path[1300], tmp_so[1300];
  snprintf(base, sizeof(base), "%s/tmp-%ld-%u", o->cache_dir, (long)getpid(), atomic_fetch_add(&counter, 1));
  snprintf(c_path, sizeof(c_path), "%s-%s.c", base, entry);
  snprintf(tmp_so, sizeof(tmp_so), "%s.so", base);
  char line[128];
  snprintf(line, sizeof(line), "#line 1 \"%s.c\"\n", entry);
  hcq_status_t st = write_file(c_path, k_prelude, line, source);
  if (st) return st;

  char flags[sizeof(o->cflags)];
  snprintf(flags, sizeof(flags), "%s", o->cflags);
  char *argv[MAX_CFLAGS + 8];
  int argc = 0;
  argv[argc++] = (char *)o->cc;
  for (char *save = NULL, *t = strtok_r(flags, " \t", &save); t && argc < MAX_CFLAGS; t = strtok_r(NULL, " \t", &save))
    argv[argc++] = t;
  argv[argc++] = "-shared";
  argv[argc++] = "-fPIC";
  argv[argc++] = "-o";
  argv[argc++] = tmp_so;
  argv[argc++] = c_path;
  argv[argc++] = "-lm"; /* kernels may call libm (expf, ...) */
  argv[argc] = NULL;

  char *output = malloc(MAX_COMPILER_OUTPUT);
  if (!output) {
    unlink(c_path);
    return hcq_status_make(HCQ_OUT_OF_MEMORY, "out of memory compiling %s", entry);
  }
  int status = -1;
  st = run_compiler(argv, output, MAX_COMPILER_OUTPUT, &status);
  unlink(c_path);
  if (!st && status != 0)
    st = hcq_status_make(HCQ_COMPILE_ERROR, "compiling %s failed (%s exited with status %d):\n%s", entry, o->cc, status,
                         output);
  free(output);
  if (!st && rename(tmp_so, so_path) != 0)
    st = hcq_status_make(HCQ_UNAVAILABLE, "cannot store %s in the kernel cache: %s", so_path, strerror(errno));
  if (st) unlink(tmp_so);
  return st;
}

hcq_status_t hcq__cpu_compile(hcq_device_t *dev, const char *entry, const char *source, hcq__program_impl_t *out) {
  (void)dev;
  const hcq__options_t *o = hcq__options();
  char identity[PATH_MAX + 64];
  compiler_identity(o->cc, identity, sizeof(identity));

  XXH3_state_t *hs = XXH3_createState();
  if (!hs) return hcq_status_make(HCQ_OUT_OF_MEMORY, "out of memory hashing %s", entry);
  XXH3_128bits_reset(hs);
  const char *parts[] = {"hcq-cpu-kernel/2", k_prelude, source, identity, o->cflags, "-shared -fPIC -lm", entry};
  for (size_t i = 0; i < sizeof(parts) / sizeof(parts[0]); i++) XXH3_128bits_update(hs, parts[i], strlen(parts[i]) + 1);
  XXH128_hash_t h = XXH3_128bits_digest(hs);
  XXH3_freeState(hs);

  char so_path[1200];
  snprintf(so_path, sizeof(so_path), "%s/%016" PRIx64 "%016" PRIx64 ".so", o->cache_dir, (uint64_t)h.high64,
           (uint64_t)h.low64);
  hcq_status_t st = NULL;
  if (access(so_path, R_OK) != 0) {
    if ((st = make_dirs(o->cache_dir)) || (st = compile_to(o, entry, source, so_path))) return st;
  }
  void *handle = dlopen(so_path, RTLD_NOW | RTLD_LOCAL);
  if (!handle) {
    const char *err = dlerror();
    return hcq_status_make(HCQ_COMPILE_ERROR, "cannot load compiled kernel %s: %s", so_path, err ? err : "?");
  }
  dlerror();
  void *sym = dlsym(handle, entry);
  if (!sym) {
    dlclose(handle);
    return hcq_status_make(HCQ_COMPILE_ERROR, "entry point \"%s\" is not defined by the source", entry);
  }
  out->object = handle;
  out->handle = (uint64_t)(uintptr_t)sym;
  return NULL;
}

void hcq__cpu_unload(hcq_device_t *dev, hcq__program_impl_t *impl) {
  (void)dev;
  if (impl->object) dlclose(impl->object);
  impl->object = NULL;
}
