/* What an interrupted download or compile leaves behind, and a full disk said as one (issue 45,
 * item 8): work folders whose owner died are removed by the next run, helpers die with hcq, and a
 * full disk names the folder and the bytes. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "fetch.h"
#include "llm.h"
#include "llm_tiny.h"
#include "model_spawn.h"
#include "test_util.h"

TestSuite(leftovers, .timeout = 120);

static void temp_dir(char *dir, size_t size, const char *name) {
  const char *base = getenv("HCQ_TEST_TMP");
  base = base && *base ? base : "/tmp";
  mkdir(base, 0755);
  snprintf(dir, size, "%s/%s-XXXXXX", base, name);
  cr_assert_not_null(mkdtemp(dir), "mkdtemp %s: %s", dir, strerror(errno));
}

static bool exists(const char *path) {
  struct stat sb;
  return lstat(path, &sb) == 0;
}

/* A folder at path with a file in it, as a killed run leaves one. */
static void left_folder(const char *path) {
  cr_assert_eq(mkdir(path, 0700), 0, "mkdir %s: %s", path, strerror(errno));
  char file[700];
  snprintf(file, sizeof(file), "%s/model.gguf.part", path);
  FILE *f = fopen(file, "w");
  cr_assert_not_null(f);
  fputs("half a download", f);
  fclose(f);
}

/* Holds path's lock as a live owner does (a second open file description: flock conflicts). */
static int hold_lock(const char *path) {
  int fd = open(path, O_RDONLY | O_DIRECTORY);
  cr_assert_geq(fd, 0);
  cr_assert_eq(flock(fd, LOCK_EX | LOCK_NB), 0);
  return fd;
}

/* How many entries of folder start with prefix. */
static int count(const char *folder, const char *prefix) {
  DIR *d = opendir(folder);
  if (!d) return 0;
  int n = 0;
  for (struct dirent *e; (e = readdir(d));) n += !strncmp(e->d_name, prefix, strlen(prefix));
  closedir(d);
  return n;
}

static const llm_known_model_t k_model = {
    .name = "test-leftovers",
    .file = "leftovers.gguf",
    .title = "a test",
    .size_text = "11 bytes",
    .parts = 1,
    .packages = {"hcq-test-leftovers==1.0.0"},
    .members = {"hcq_test_leftovers/data/x"},
};

Test(leftovers, fetch_folders_of_dead_owners_are_removed) {
  char data[512], models[600], dead[700], live[700], empty[600];
  temp_dir(data, sizeof(data), "leftovers-fetch");
  snprintf(models, sizeof(models), "%s/models", data);
  snprintf(empty, sizeof(empty), "%s/no-wheels", data);
  cr_assert_eq(mkdir(models, 0755), 0);
  cr_assert_eq(mkdir(empty, 0755), 0);
  snprintf(dead, sizeof(dead), "%s/.fetch-dead01", models);
  snprintf(live, sizeof(live), "%s/.fetch-live01", models);
  left_folder(dead);
  left_folder(live);
  int lock = hold_lock(live);
  setenv("HCQ_DATA_DIR", data, 1);
  /* the download fails (with or without pip): only the reaping counts */
  setenv("HCQ_PIP_FIND_LINKS", empty, 1);
  char out[1024];
  FILE *log = fopen("/dev/null", "w");
  hcq_status_t st = llm_fetch_model(&k_model, log, out, sizeof(out));
  fclose(log);
  cr_assert_not_null(st);
  hcq_status_destroy(st);
  cr_assert(!exists(dead), "the folder of a dead fetch is still there: %s", dead);
  cr_assert(exists(live), "a folder whose owner lives was removed: %s", live);
  cr_assert_eq(count(models, ".fetch-"), 1, "the failed fetch left its own folder");
  close(lock);
}

/* A process that runs `sh -c ...` through hcq_model_spawn and is killed with SIGKILL: the shell
 * (its pid in pid_file) must die with it. */
Test(leftovers, helpers_die_with_their_parent) {
  char dir[512], pid_file[600], script[2048];
  temp_dir(dir, sizeof(dir), "leftovers-spawn");
  snprintf(pid_file, sizeof(pid_file), "%s/pid", dir);
  snprintf(script, sizeof(script), "echo $$ > '%s.tmp' && mv '%s.tmp' '%s' && exec sleep 60",
           pid_file, pid_file, pid_file);
  pid_t parent = fork();
  if (parent == 0) {
    char *argv[] = {"sh", "-c", script, NULL};
    _exit(hcq_model_spawn(argv, stderr) == 0 ? 0 : 1);
  }
  FILE *f = NULL;
  for (int i = 0; i < 500 && !(f = fopen(pid_file, "r")); i++) usleep(10000);
  cr_assert_not_null(f, "the helper never started");
  int child = 0;
  cr_assert_eq(fscanf(f, "%d", &child), 1);
  fclose(f);
  kill(parent, SIGKILL);
  waitpid(parent, NULL, 0);
  /* gone, or a zombie waiting for whoever reaps orphans here */
  bool gone = false;
  for (int i = 0; i < 500 && !gone; i++) {
    char stat_path[64], state = 0;
    snprintf(stat_path, sizeof(stat_path), "/proc/%d/stat", child);
    FILE *s = fopen(stat_path, "r");
    gone = !s || (fscanf(s, "%*d (%*[^)]) %c", &state) == 1 && state == 'Z');
    if (s) fclose(s);
    if (!gone) usleep(10000);
  }
  if (!gone) kill(child, SIGKILL);
  cr_assert(gone, "the helper %d outlived its killed parent", child);
}

/* A python3 that says what pip says on a full disk. */
static void fake_python_on_path(const char *dir, const char *says) {
  char path[700];
  snprintf(path, sizeof(path), "%s/python3", dir);
  FILE *f = fopen(path, "w");
  cr_assert_not_null(f);
  fprintf(f, "#!/bin/sh\necho '%s' >&2\nexit 1\n", says);
  fclose(f);
  chmod(path, 0755);
  char env[2048];
  snprintf(env, sizeof(env), "%s:%s", dir, getenv("PATH") ? getenv("PATH") : "/usr/bin:/bin");
  setenv("PATH", env, 1);
}

Test(leftovers, pip_on_a_full_disk_says_the_disk_is_full) {
  char data[512];
  temp_dir(data, sizeof(data), "leftovers-pip");
  fake_python_on_path(
      data,
      "ERROR: Could not install packages due to an OSError: [Errno 28] No space left on device");
  setenv("HCQ_DATA_DIR", data, 1);
  unsetenv("HCQ_PIP_FIND_LINKS");
  char out[1024];
  FILE *log = fopen("/dev/null", "w");
  hcq_status_t st = llm_fetch_model(&k_model, log, out, sizeof(out));
  fclose(log);
  cr_assert_not_null(st);
  const char *msg = hcq_status_message(st);
  cr_assert(strstr(msg, "is full") && strstr(msg, data) && !strstr(msg, "no network"), "%s", msg);
  hcq_status_destroy(st);
  char models[600];
  snprintf(models, sizeof(models), "%s/models", data);
  cr_assert_eq(count(models, ".fetch-"), 0);
}

Test(leftovers, a_download_bigger_than_the_free_space_is_refused_first) {
  char data[512];
  temp_dir(data, sizeof(data), "leftovers-space");
  setenv("HCQ_DATA_DIR", data, 1);
  fake_python_on_path(data, "pip must not run"); /* were it run, the message would say so */
  llm_known_model_t huge = k_model;
  huge.size = 1ull << 60; /* an exabyte: more than any disk here has free */
  char out[1024];
  FILE *log = fopen("/dev/null", "w");
  hcq_status_t st = llm_fetch_model(&huge, log, out, sizeof(out));
  fclose(log);
  cr_assert_not_null(st);
  const char *msg = hcq_status_message(st);
  cr_assert(strstr(msg, "is full") && strstr(msg, "/models") &&
                strstr(msg, "2305843009214742528 bytes") && strstr(msg, "MB free"),
            "%s", msg);
  hcq_status_destroy(st);
}

/* ---- kernel compiles ---- */

static const char *k_source =
    "void inc(void *const *b, const int32_t *v, const hcq_launch_t *l) {\n"
    "  (void)l; ((int32_t *)b[0])[0] += v[0] + %d;\n"
    "}\n";

/* In a new process (options are read once per process): compiles a kernel no cache holds, with
 * TMPDIR=tmp; its exit status is 0 when the kernel compiled. */
static pid_t compile_in_child(const char *tmp, const char *cc, const char *cache,
                              const char *err_file) {
  pid_t pid = fork();
  if (pid != 0) return pid;
  setenv("TMPDIR", tmp, 1);
  setenv("HCQ_CC", cc, 1);
  setenv("HCQ_CACHE_DIR", cache, 1);
  if (err_file) {
    int fd = open(err_file, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    if (fd < 0 || dup2(fd, STDERR_FILENO) < 0) _exit(2);
  }
  char source[512];
  snprintf(source, sizeof(source), k_source, (int)(time(NULL) ^ getpid()) & 0xffffff);
  hcq_device_t *d = NULL;
  hcq_program_t *p = NULL;
  bool ok = !hcq_device_open("CPU:0", &d) && !hcq_program_create(d, "inc", source, &p);
  _exit(ok ? 0 : 1);
}

static int wait_status(pid_t pid) {
  int status = 0;
  waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 99;
}

Test(leftovers, build_folders_of_killed_compiles_are_removed) {
  char dir[512], tmp[600], cache[600], slow_cc[600], pid_file[600], live[700];
  temp_dir(dir, sizeof(dir), "leftovers-build");
  snprintf(tmp, sizeof(tmp), "%s/tmp", dir);
  snprintf(cache, sizeof(cache), "%s/cache", dir);
  snprintf(pid_file, sizeof(pid_file), "%s/cc.pid", dir);
  snprintf(slow_cc, sizeof(slow_cc), "%s/slow-cc.sh", dir);
  cr_assert_eq(mkdir(tmp, 0700), 0);
  /* a compiler that hangs when it compiles (and answers any question about itself at once) */
  FILE *f = fopen(slow_cc, "w");
  cr_assert_not_null(f);
  fprintf(f,
          "#!/bin/sh\nfor a in \"$@\"; do [ \"$a\" = -o ] && { echo $$ > '%s.tmp'; mv '%s.tmp' "
          "'%s'; exec sleep 60; }; done\n"
          "exec cc \"$@\"\n",
          pid_file, pid_file, pid_file);
  fclose(f);
  chmod(slow_cc, 0755);
  snprintf(live, sizeof(live), "%s/hcq-build-live01", tmp);
  left_folder(live);
  int lock = hold_lock(live);

  pid_t killed = compile_in_child(tmp, slow_cc, cache, NULL);
  FILE *p = NULL;
  for (int i = 0; i < 1000 && !(p = fopen(pid_file, "r")); i++) usleep(10000);
  cr_assert_not_null(p, "the compiler never started");
  int cc_pid = 0;
  cr_assert_eq(fscanf(p, "%d", &cc_pid), 1);
  fclose(p);
  cr_assert_eq(count(tmp, "hcq-build-"), 2, "the compile's folder and the live one");
  kill(killed, SIGKILL);
  wait_status(killed);
  /* the compiler is not ours to wait for: its parent was the killed process */
  kill(cc_pid, SIGKILL);
  cr_assert_eq(count(tmp, "hcq-build-"), 2, "kill -9 left the folder (what this test is about)");

  cr_assert_eq(wait_status(compile_in_child(tmp, "cc", cache, NULL)), 0, "the next compile failed");
  cr_assert_eq(count(tmp, "hcq-build-"), 1, "the killed compile's folder is still there");
  cr_assert(exists(live), "a folder whose owner lives was removed");
  close(lock);
}

/* A kernel cache on a 4 KiB file system: the object (some 15 KB) does not fit, and the warning
 * says so. Needs a private mount namespace and tmpfs: root only (skipped otherwise). */
Test(leftovers, a_kernel_cache_on_a_full_disk_says_so) {
  if (geteuid() != 0) cr_skip_test("mounting a small tmpfs needs root");
  char dir[512], tmp[600], cache[600], err_file[600];
  temp_dir(dir, sizeof(dir), "leftovers-kcache");
  snprintf(tmp, sizeof(tmp), "%s/tmp", dir);
  snprintf(cache, sizeof(cache), "%s/cache", dir);
  snprintf(err_file, sizeof(err_file), "%s/stderr", dir);
  cr_assert_eq(mkdir(tmp, 0700), 0);
  cr_assert_eq(mkdir(cache, 0700), 0);
  pid_t pid = fork();
  if (pid == 0) {
    if (unshare(CLONE_NEWNS) || mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) ||
        mount("tmpfs", cache, "tmpfs", 0, "size=4k,mode=0700"))
      _exit(77);
    _exit(wait_status(compile_in_child(tmp, "cc", cache, err_file)));
  }
  int status = wait_status(pid);
  if (status == 77) cr_skip_test("no private mount namespace or tmpfs here");
  cr_assert_eq(status, 0, "the kernel must compile and run uncached");
  char text[4096] = "";
  FILE *f = fopen(err_file, "r");
  cr_assert_not_null(f);
  size_t n = fread(text, 1, sizeof(text) - 1, f);
  text[n] = 0;
  fclose(f);
  cr_assert(strstr(text, "is full") && strstr(text, cache) && strstr(text, "bytes needed"), "%s",
            text);
}

/* ---- the context against memory and the model ---- */

/* A tiny llama (2 layers, 2 KV heads of 16: 32 floats a position a layer) trained on context_length
 * positions (0: 256), opened. */
static llm_model_t *tiny_model(int context_length) {
  char dir[512], path[600];
  temp_dir(dir, sizeof(dir), "leftovers-llm");
  snprintf(path, sizeof(path), "%s/tiny.gguf", dir);
  tiny_spec_t s = tiny_uniform_spec(64, 96, 2, 4, 2, 97, GGML_TYPE_F32, true, 7);
  s.context_length = context_length;
  OK(tiny_write(&s, path));
  llm_model_t *m = NULL;
  OK(llm_model_open(path, &m));
  return m;
}

Test(leftovers, a_context_memory_cannot_hold_is_refused_before_reserving) {
  llm_model_t *m = tiny_model(0);
  /* 4096 positions: 2 layers x 2 x 4096 x 32 floats = 2 MiB of caches, with 1 MB available */
  setenv("HCQ_LLM_MEMORY_BYTES", "1000000", 1);
  llm_decoder_t *dec = NULL;
  FAILS(llm_decoder_create(m, &(llm_decoder_options_t){.kind = HCQ_DEVICE_CPU, .ctx = 4096}, &dec),
        HCQ_OUT_OF_RANGE, "4096 positions", "0.00 GB of memory is available", "--ctx");
  cr_assert_null(dec);
  /* 256 positions: 131 kB */
  OK(llm_decoder_create(m, &(llm_decoder_options_t){.kind = HCQ_DEVICE_CPU, .ctx = 256}, &dec));
  cr_assert_eq(llm_decoder_ctx(dec), 256);
  OK(llm_decoder_destroy(dec));
  llm_model_close(m);
}

/* A model trained on 7 positions: the decoder holds 7 (not a whole chunk of 32) and generating
 * stops there, whatever the steps asked for. */
Test(leftovers, decoding_stops_at_a_tiny_trained_context) {
  llm_model_t *m = tiny_model(7);
  cr_assert_eq(m->config.ctx_train, 7);
  llm_decoder_t *dec = NULL;
  OK(llm_decoder_create(m, &(llm_decoder_options_t){.kind = HCQ_DEVICE_CPU}, &dec));
  cr_assert_eq(llm_decoder_ctx(dec), 7);
  int32_t prompt[] = {10, 11, 12};
  llm_generate_result_t res;
  OK(llm_generate(dec, prompt, 3, &(llm_generate_options_t){.steps = 20, .ignore_eos = true},
                  &res));
  cr_assert_eq(res.n, 4, "positions 3..6 only: %d tokens", res.n);
  free(res.ids);
  OK(llm_decoder_destroy(dec));
  llm_model_close(m);
}
