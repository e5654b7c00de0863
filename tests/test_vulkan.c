/* What is particular to Vulkan devices (the rest is in test_conformance.c): GLSL and SPIR-V
 * programs and their disk cache, launch limits, command buffers recorded once for bound queues,
 * semaphore waits between the engines, lost devices and hang reports. Skipped without Vulkan. */
#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>

#include "core/device.h"
#include "core/host_wait.h"
#include "core/options.h"
#include "vulkan/vk_testing.h"
#include "world.h"

TestSuite(vulkan, .timeout = 120);

static const test_backend_t *vulkan(void) { return test_backend_named("VULKAN"); }

/* A fresh kernel cache for this test (set before the first hcq call reads the options). */
static void fresh_cache(char *dir, size_t size) {
  const char *tmp = getenv("HCQ_TEST_TMP");
  char base[512];
  snprintf(base, sizeof(base), "%s", tmp && *tmp ? tmp : "/tmp");
  mkdir(base, 0700);
  snprintf(dir, size, "%s/vkcache-XXXXXX", base);
  cr_assert_not_null(mkdtemp(dir));
  setenv("HCQ_CACHE_DIR", dir, 1);
}

static void need_vulkan(int ndev) {
  const char *why = test_backend_absent(vulkan(), ndev);
  if (why) cr_skip_test("Vulkan absent: %s", why);
}

static int count_spv(const char *dir, char *last, size_t size) {
  char path[1100];
  snprintf(path, sizeof(path), "%s/spirv", dir);
  DIR *d = opendir(path);
  int n = 0;
  if (!d) return 0;
  for (struct dirent *e; (e = readdir(d));) {
    size_t len = strlen(e->d_name);
    if (len > 4 && !strcmp(e->d_name + len - 4, ".spv")) {
      n++;
      if (last) snprintf(last, size, "%s/%s", path, e->d_name);
    }
  }
  closedir(d);
  return n;
}

static uint8_t *read_all(const char *path, size_t *len) {
  FILE *f = fopen(path, "rb");
  cr_assert_not_null(f, "cannot open %s", path);
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  uint8_t *buf = malloc((size_t)n);
  cr_assert_eq(fread(buf, 1, (size_t)n, f), (size_t)n);
  fclose(f);
  *len = (size_t)n;
  return buf;
}

static void fill_and_check(hcq_device_t *d, hcq_program_t *p, int32_t value) {
  hcq_buffer_t *out = test_buffer(d, 100 * 4);
  int32_t vals[] = {value, 100};
  hcq_launch_desc_t l = {p, &out, 1, vals, 2, {2, 1, 1}, {64, 1, 1}};
  OK(hcq_launch(&l));
  int32_t got[100];
  test_read(out, got, sizeof(got));
  for (int i = 0; i < 100; i++) cr_assert_eq(got[i], value, "element %d", i);
  hcq_buffer_release(out);
}

Test(vulkan, devices_are_listed_and_named) {
  setenv("HCQ_VULKAN_VIRTUAL", "0", 1);
  need_vulkan(1);
  hcq_device_info_t infos[8];
  size_t n = hcq_device_query(infos, 8);
  bool found = false;
  for (size_t i = 0; i < n && i < 8; i++)
    if (infos[i].kind == HCQ_DEVICE_VULKAN) {
      found = true;
      cr_assert(infos[i].available, "%s", infos[i].description);
      cr_assert_geq(infos[i].count, 1);
      cr_assert(strstr(infos[i].description, "VULKAN:0 is"), "%s", infos[i].description);
    }
  cr_assert(found, "hcq_device_query lists VULKAN");
  hcq_device_t *d = test_open("vulkan:0");
  cr_assert_str_eq(hcq_device_name(d), "VULKAN:0");
  cr_assert(hcq_device_caps(d) & HCQ_CAP_COMPILE_GLSL);
  cr_assert(hcq_device_caps(d) & HCQ_CAP_IN_ORDER_QUEUES);
  cr_assert_not(hcq_device_caps(d) & HCQ_CAP_HOST_CALLABLE);
  hcq_program_t *p = NULL;
  FAILS(hcq_program_create_fn(d, "f", (hcq_cpu_kernel_fn)(uintptr_t)1, &p), HCQ_UNIMPLEMENTED,
        "VULKAN:0", "function pointers");
  hcq_device_t *far = NULL;
  FAILS(hcq_device_open("VULKAN:99", &far), HCQ_NOT_FOUND, "VULKAN:99", "HCQ_VULKAN_VIRTUAL=1");
  test_close(d);
}

/* The heap device buffers are made in, as the driver reports it; what is still available only where
 * the driver has VK_EXT_memory_budget (lavapipe in Debian 12 does not). */
Test(vulkan, device_memory_is_the_drivers_heap) {
  setenv("HCQ_VULKAN_VIRTUAL", "0", 1);
  need_vulkan(1);
  hcq_device_t *d = test_open("VULKAN:0");
  hcq_device_memory_t m;
  OK(hcq_device_memory(d, &m));
  cr_assert_gt(m.total, UINT64_C(1) << 26, "a heap of %" PRIu64 " bytes", m.total);
  if (strcmp(m.source, "VK_EXT_memory_budget")) {
    cr_assert(strstr(m.source, "no VK_EXT_memory_budget"), "%s", m.source);
    cr_assert_eq(m.available, 0, "unknown without the extension");
  } else {
    cr_assert(m.available > 0 && m.available <= m.total, "%" PRIu64 " of %" PRIu64, m.available,
              m.total);
  }
  test_close(d);
}

Test(vulkan, glsl_errors_carry_the_compiler_output) {
  need_vulkan(1);
  hcq_device_t *d = test_open("VULKAN:0");
  hcq_program_t *p = NULL;
  FAILS(hcq_program_create(d, "broken", "void main() {\n  int x = ;\n}\n", &p), HCQ_COMPILE_ERROR,
        "compiling GLSL kernel broken failed", "broken.comp:2:", "program broken on VULKAN:0");
  cr_assert_null(p);
  FAILS(hcq_program_create(d, "no_main", "void other() {}\n", &p), HCQ_COMPILE_ERROR, "no_main");
  test_close(d);
}

/* Another kernel's valid SPIR-V copied over this kernel's cache file (restored from a backup,
 * renamed): the file records the key it was stored under, so it is damaged, not run; the kernel is
 * compiled again and gives its own result. */
Test(vulkan, another_kernels_spirv_copied_over_this_ones_name_is_not_run) {
  char dir[600], path[1200], other_path[1200];
  fresh_cache(dir, sizeof(dir));
  need_vulkan(1);
  hcq_device_t *d = test_open("VULKAN:0");
  static const char plus_one[] =
      "layout(buffer_reference, std430, buffer_reference_align = 4) buffer i32s { int v[]; };\n"
      "void main() { uint i = gl_GlobalInvocationID.x;\n"
      "  if (gl_LocalInvocationID.y == 0u && i < uint(hcq_val(1))) i32s(hcq_buf(0)).v[i] = "
      "hcq_val(0) + 1; }\n";
  hcq_program_t *fill = test_program(d, "fill", test_kernels_glsl);
  fill_and_check(d, fill, 41);
  cr_assert_eq(count_spv(dir, path, sizeof(path)), 1);
  hcq_program_t *other = test_program(d, "fill", plus_one);
  cr_assert_eq(count_spv(dir, NULL, 0), 2);
  /* the other file: the one that is not path */
  char spirv[700];
  snprintf(spirv, sizeof(spirv), "%s/spirv", dir);
  DIR *dd = opendir(spirv);
  cr_assert_not_null(dd);
  for (struct dirent *e; (e = readdir(dd));) {
    snprintf(other_path, sizeof(other_path), "%s/%s", spirv, e->d_name);
    if (strstr(e->d_name, ".spv") && strcmp(other_path, path)) break;
  }
  closedir(dd);
  cr_assert_eq(rename(other_path, path), 0, "rename: %s", strerror(errno));
  int saved = test_stderr_begin();
  hcq_program_t *again = test_program(d, "fill", test_kernels_glsl);
  char err[4096];
  test_stderr_end(saved, err, sizeof(err));
  fill_and_check(d, again, 41); /* 41, not the other kernel's 42 */
  cr_assert(strstr(err, path) && strstr(err, "copied or restored over it"),
            "the warning names the file: %s", err);
  hcq_program_release(fill), hcq_program_release(other), hcq_program_release(again);
  test_close(d);
}

/* docs/vulkan.md says llvmpipe stops an invocation's loops after 65,535 iterations without an
 * error, and that hcq info says so where it applies: both hold here, and a GPU runs the loop in
 * full. */
Test(vulkan, lavapipe_ends_long_loops_silently) {
  need_vulkan(1);
  hcq_device_info_t infos[8];
  size_t n = hcq_device_query(infos, 8);
  const char *description = NULL;
  for (size_t i = 0; i < n && i < 8; i++)
    if (infos[i].kind == HCQ_DEVICE_VULKAN) description = infos[i].description;
  cr_assert_not_null(description);
  bool lavapipe = strstr(description, "VULKAN:0 is llvmpipe") != NULL;
  cr_assert_eq(strstr(description, "shader loops end at 65,535 iterations") != NULL, lavapipe,
               "hcq info warns of the loop limit exactly when VULKAN:0 is lavapipe: %s",
               description);
  static const char counting[] =
      "layout(buffer_reference, std430, buffer_reference_align = 4) buffer i32s { int v[]; };\n"
      "void main() { int c = 0;\n"
      "  for (int i = 0; i < hcq_val(0); i++) c += 1 + (i & hcq_val(1));\n"
      "  if (gl_GlobalInvocationID.x == 0u) i32s(hcq_buf(0)).v[0] = c; }\n";
  hcq_device_t *d = test_open("VULKAN:0");
  hcq_program_t *p = test_program(d, "count", counting);
  hcq_buffer_t *out = test_buffer(d, 4);
  const int32_t trips[] = {1000, 65535, 100000, 2000000000};
  for (size_t i = 0; i < sizeof(trips) / sizeof(trips[0]); i++) {
    if (!lavapipe && trips[i] > 100000)
      continue; /* seconds on one GPU thread, and a watchdog's business */
    int32_t vals[] = {trips[i], 0}, got = -1;
    hcq_launch_desc_t l = {p, &out, 1, vals, 2, {1, 1, 1}, {1, 1, 1}};
    OK(hcq_launch(&l));
    test_read(out, &got, sizeof(got));
    int32_t expected = lavapipe && trips[i] > 65535 ? 65535 : trips[i];
    cr_assert_eq(got, expected, "a loop of %d iterations ran %d", trips[i], got);
  }
  hcq_buffer_release(out);
  hcq_program_release(p);
  test_close(d);
}

/* SPIR-V given directly: the module compiled from GLSL, taken from the disk cache, loads and runs;
 * a module that is not SPIR-V, or whose entry point has another name, is refused by name. */
Test(vulkan, spirv_given_directly) {
  char dir[600], spv[1200];
  fresh_cache(dir, sizeof(dir));
  need_vulkan(1);
  hcq_device_t *d = test_open("VULKAN:0");
  hcq_program_t *glsl = test_program(d, "fill", test_kernels_glsl);
  fill_and_check(d, glsl, 41);
  cr_assert_eq(count_spv(dir, spv, sizeof(spv)), 1, "the GLSL program is cached as SPIR-V");
  size_t len;
  uint8_t *file = read_all(spv, &len);
  enum { HEADER = 8 + 32 + 16 }; /* the cache header: tag, key, hash (core/kcache.c) */
  cr_assert_gt(len, HEADER + 20);
  const uint8_t *module = file + HEADER;
  hcq_program_t *p = NULL;
  OK(hcq_program_create_spirv(d, "fill", module, len - HEADER, &p));
  fill_and_check(d, p, -7);
  cr_assert(!strncmp(hcq_program_source(p), "#spirv\n", 7),
            "the program keeps its module as source text");
  hcq_program_t *again = NULL;
  OK(hcq_program_create(d, "fill", hcq_program_source(p), &again));
  fill_and_check(d, again, 5);
  hcq_program_t *bad = NULL;
  FAILS(hcq_program_create_spirv(d, "other", module, len - HEADER, &bad), HCQ_COMPILE_ERROR,
        "entry point is \"fill\"");
  FAILS(hcq_program_create_spirv(d, "fill", "not spir-v at all", 16, &bad), HCQ_COMPILE_ERROR,
        "not a SPIR-V module");
  FAILS(hcq_program_create(d, "fill", "#spirv\n%%%%", &bad), HCQ_COMPILE_ERROR, "not base64");
  free(file);
  hcq_program_release(again);
  hcq_program_release(p);
  hcq_program_release(glsl);
  test_close(d);
}

/* The cache: a directory of the user's alone, files of the user's with a hash; a corrupted file is
 * compiled again, a directory others may write is not used. */
Test(vulkan, spirv_cache_is_private_and_checked) {
  char dir[600], spv[1200], sub[700];
  fresh_cache(dir, sizeof(dir));
  need_vulkan(1);
  hcq_device_t *d = test_open("VULKAN:0");
  hcq_program_t *p = test_program(d, "fill", test_kernels_glsl);
  hcq_program_release(p);
  cr_assert_eq(count_spv(dir, spv, sizeof(spv)), 1);
  struct stat st;
  snprintf(sub, sizeof(sub), "%s/spirv", dir);
  cr_assert_eq(stat(sub, &st), 0);
  cr_assert_eq(st.st_mode & 0777, 0700, "the cache directory is 0700 (%o)", st.st_mode & 0777);
  cr_assert_eq(stat(spv, &st), 0);
  cr_assert_eq(st.st_mode & 0777, 0600, "cached modules are 0600 (%o)", st.st_mode & 0777);
  size_t len;
  uint8_t *good = read_all(spv, &len);
  /* Corrupt one byte of the module: the hash no longer matches, so it is compiled again. */
  FILE *f = fopen(spv, "r+b");
  fseek(f, 40, SEEK_SET);
  fputc(good[40] ^ 0x5a, f);
  fclose(f);
  char err[4000];
  int saved = test_stderr_begin();
  p = test_program(d, "fill", test_kernels_glsl);
  test_stderr_end(saved, err, sizeof(err));
  cr_assert(strstr(err, "hcq: warning") && strstr(err, spv) && strstr(err, "damaged"),
            "no warning: %s", err);
  fill_and_check(d, p, 3);
  hcq_program_release(p);
  size_t len2;
  uint8_t *now = read_all(spv, &len2);
  cr_assert_eq(len2, len);
  cr_assert_arr_eq(now, good, len, "the corrupted file was replaced by a good one");
  free(now);
  free(good);
  /* A cache directory others may write to is not trusted: nothing is read or written there. */
  cr_assert_eq(chmod(sub, 0770), 0);
  p = test_program(d, "add2", test_kernels_glsl);
  hcq_program_release(p);
  cr_assert_eq(count_spv(dir, NULL, 0), 1, "nothing was written to a group-writable cache");
  chmod(sub, 0700);
  p = test_program(d, "add2", test_kernels_glsl);
  hcq_program_release(p);
  cr_assert_eq(count_spv(dir, NULL, 0), 2);
  test_close(d);
}

Test(vulkan, launches_beyond_the_device_limits_are_refused) {
  need_vulkan(1);
  hcq_device_t *d = test_open("VULKAN:0");
  hcq_program_t *p = test_program(d, "fill", test_kernels_glsl);
  hcq_buffer_t *out = test_buffer(d, 4096);
  int32_t vals[] = {1, 0};
  hcq_launch_desc_t big_group = {p, &out, 1, vals, 2, {1, 1, 1}, {4096, 1, 1}};
  FAILS(hcq_launch(&big_group), HCQ_OUT_OF_RANGE, "launch of fill", "local size 4096x1x1",
        "VULKAN:0", "limit of");
  hcq_launch_desc_t big_grid = {p, &out, 1, vals, 2, {UINT32_MAX, 1, 1}, {1, 1, 1}};
  FAILS(hcq_launch(&big_grid), HCQ_OUT_OF_RANGE, "launch of fill", "global[0] 4294967295",
        "limit of 65535");
  /* The device is fine afterwards. */
  fill_and_check(d, p, 9);
  hcq_buffer_release(out);
  hcq_program_release(p);
  test_close(d);
}

/* Bound graph queues are recorded once: replays that only patch memory (new values, new inputs,
 * new grid sizes) record nothing; a replay that changes a group size records that run again and
 * still computes the right thing. */
Test(vulkan, bound_queues_are_recorded_once) {
  need_vulkan(1);
  world_t w;
  world_open_on(&w, vulkan(), 1);
  enum { N = 256 };
  int a = world_buffer(&w, 0, N, 1), x = world_buffer(&w, 0, N, 2), x2 = world_buffer(&w, 0, N, 3);
  hcq_expr_t *n = NULL, *l = NULL, *groups = NULL;
  OK(hcq_var_create("n", 1, N, &n));
  OK(hcq_var_create("l", 1, 64, &l));
  const hcq_expr_t *vars[] = {n, l};
  OK(hcq_expr_parse("(n+l-1)//l", vars, 2, &groups));
  world_item_t items[3];
  world_mix(&w, &items[0], a, x, a, hcq_imm(3), hcq_imm(1), hcq_imm(N), NULL);
  world_mix(&w, &items[1], a, a, a, hcq_imm(1), hcq_imm(2), hcq_sym(n), groups);
  items[1].item.kernel.local[0] = hcq_sym(l);
  world_mix(&w, &items[2], x, a, x, hcq_imm(2), hcq_imm(5), hcq_imm(N), NULL);
  hcq_exec_item_t its[] = {items[0].item, items[1].item, items[2].item};
  hcq_buffer_t *ins[] = {w.buf[x]};
  hcq_var_value_t init[] = {{n, N}, {l, 64}};
  hcq_graph_t *g = NULL;
  OK(hcq_graph_create(its, 3, ins, 1, init, 2, NULL, &g));
  hcq__vk_counters_t c0, c1, c2;
  int inputs[] = {x}, swaps[] = {x2};
  /* Every replay instance (replays in flight at once) records its queues on its first replay. */
  for (unsigned i = 0; i < hcq__options()->graph_inflight; i++) {
    OK(hcq_graph_run(g, ins, 1, init, 2, true, NULL));
    world_run_eager(&w, items, 3, inputs, NULL, 1, init, 2);
  }
  world_compare(&w, "first replay");
  cr_assert(hcq__vk_counters(w.devs[0], &c0));
  cr_assert_gt(c0.records, 0, "the first replay recorded the queues");
  for (int r = 0; r < 4; r++) {
    hcq_var_value_t vals[] = {{n, 17 + 50 * r}, {l, 64}};
    hcq_buffer_t *in[] = {w.buf[r % 2 ? x2 : x]};
    OK(hcq_graph_run(g, in, 1, vals, 2, r % 2, NULL));
    world_run_eager(&w, items, 3, inputs, r % 2 ? swaps : NULL, 1, vals, 2);
    world_compare(&w, "replay with new values, inputs and grid");
  }
  cr_assert(hcq__vk_counters(w.devs[0], &c1));
  cr_assert_eq(c1.records, c0.records, "replays recorded nothing new");
  cr_assert_eq(c1.rerecords, 0, "replays re-recorded nothing");
  cr_assert_geq(c1.submits - c0.submits, 4, "but submitted every time");
  hcq_var_value_t other_group[] = {{n, 200}, {l, 32}};
  OK(hcq_graph_run(g, ins, 1, other_group, 2, true, NULL));
  world_run_eager(&w, items, 3, inputs, NULL, 1, other_group, 2);
  world_compare(&w, "replay with another group size");
  cr_assert(hcq__vk_counters(w.devs[0], &c2));
  cr_assert_eq(c2.rerecords, 1, "the run with the changed group size was recorded again");
  OK(hcq_graph_destroy(g));
  hcq_expr_release(n);
  hcq_expr_release(l);
  hcq_expr_release(groups);
  world_close(&w);
}

/* Each invocation runs val(0) steps of a linear congruential generator from its index: a kernel
 * that keeps the device busy for as long as asked (lavapipe ends an invocation's loops after 65535
 * iterations, so the time comes from many invocations). */
static const char *const lcg_glsl =
    "layout(buffer_reference, std430, buffer_reference_align = 4) buffer u32s { uint v[]; };\n"
    "void main() { uint i = gl_GlobalInvocationID.x, a = i;\n"
    "  for (int k = 0; k < hcq_val(0); k++) a = a * 1664525u + 1013904223u;\n"
    "  u32s(hcq_buf(0)).v[i] = a; }\n";

/* While its work runs, an engine with nothing else to do waits without taking turns with the
 * kernels: on a CPU-emulated device (lavapipe) it neither spins nor polls but sleeps until the next
 * submit (the driver's threads run the kernels on the host's cores); on a GPU it polls, sleeping
 * between looks rather than calling sched_yield. Asleep, it is woken by the next submit. */
Test(vulkan, engine_waiting_for_its_work_leaves_the_cores_to_it) {
  need_vulkan(1);
  hcq_device_t *d = test_open("VULKAN:0");
  hcq_program_t *p = test_program(d, "lcg", lcg_glsl);
  enum { N = 8192 };
  hcq_buffer_t *x = NULL;
  OK(hcq_buffer_create(d, N * 4, &x));
  int32_t warm = 1, steps = 2048;
  hcq_launch_desc_t l = {p, &x, 1, &warm, 1, {N / 64, 1, 1}, {64, 1, 1}};
  OK(hcq_launch(&l)); /* the pipeline is made on the first launch */
  OK(hcq_device_synchronize(d));
  usleep(20000); /* past the engine's spin after that work (HCQ_SPIN_NS): it sleeps */
  hcq__vk_counters_t before, after;
  cr_assert(hcq__vk_counters(d, &before));
  l.vals = &steps;
  uint64_t t0 = hcq__now_ns();
  OK(hcq_launch(&l));
  OK(hcq_device_synchronize(d));
  uint64_t took = hcq__now_ns() - t0;
  cr_assert(hcq__vk_counters(d, &after));
  uint32_t *got = malloc(N * 4);
  OK(hcq_buffer_copyout(x, 0, got, N * 4));
  for (uint32_t i = 0; i < N; i += 1021) {
    uint32_t want = i;
    for (int32_t k = 0; k < steps; k++) want = want * 1664525u + 1013904223u;
    cr_assert_eq(got[i], want, "the kernel ran: %u at %u, expected %u (%.1f ms)", got[i], i, want,
                 took / 1e6);
  }
  free(got);
  uint64_t polls = after.inflight_polls - before.inflight_polls,
           yields = after.inflight_yields - before.inflight_yields;
  /* It slept, so the launch's submit had to wake it (and says so). */
  cr_assert_geq(after.wake_calls - before.wake_calls, 1,
                "the launch did not wake the sleeping engine");
  cr_assert_leq(after.wake_calls - before.wake_calls, after.submits - before.submits + 1);
  if (d->vt->waiter_sleeps_at_once && d->vt->waiter_sleeps_at_once(d)) { /* lavapipe */
    cr_assert_eq(polls, 0, "lavapipe: the engine polled %" PRIu64 " times during a %.1f ms kernel",
                 polls, took / 1e6);
    cr_assert_eq(yields, 0,
                 "lavapipe: the engine yielded %" PRIu64 " times during a %.1f ms kernel", yields,
                 took / 1e6);
  } else {
    cr_assert_leq(yields, 64 * 1024,
                  "the engine yielded %" PRIu64 " times during a %.1f ms kernel (%" PRIu64
                  " polls)",
                  yields, took / 1e6, polls);
  }
  hcq_buffer_release(x);
  hcq_program_release(p);
  test_close(d);
}

/* The copy engine and the compute engine order each other with timeline semaphores, not host
 * round trips, when the signal they wait for is already submitted: a copy-out right behind a long
 * kernel waits for it on the device. */
Test(vulkan, engines_wait_on_each_other_with_semaphores) {
  need_vulkan(1);
  hcq_device_t *d = test_open("VULKAN:0");
  hcq_program_t *p = test_program(d, "mul_add", test_kernels_glsl);
  enum { N = 1 << 21, M = 4096 };
  hcq_buffer_t *x = test_buffer_iota(d, N, 1, 0);
  uint32_t *got = malloc(M * 4), model[M];
  for (int i = 0; i < M; i++) model[i] = (uint32_t)i;
  hcq__vk_counters_t before, after;
  cr_assert(hcq__vk_counters(d, &before));
  for (int r = 0; r < 4; r++) {
    int32_t v[] = {3, r, N};
    hcq_launch_desc_t l = {p, &x, 1, v, 3, {N / 64, 1, 1}, {64, 1, 1}};
    hcq__vk_counters_t c;
    cr_assert(hcq__vk_counters(d, &c));
    OK(hcq_launch(&l)); /* compute engine */
    /* Let the compute engine submit the kernel first (the long kernel then still runs). */
    for (hcq__vk_counters_t now = c; now.submits == c.submits; hcq__vk_counters(d, &now))
      usleep(100);
    OK(hcq_buffer_copyout(x, 0, got, M * 4)); /* copy engine, after the kernel */
    for (int i = 0; i < M; i++) model[i] = model[i] * 3 + (uint32_t)r;
    cr_assert_arr_eq(got, model, M * 4, "round %d", r);
  }
  cr_assert(hcq__vk_counters(d, &after));
  cr_assert_gt(after.semaphore_waits - before.semaphore_waits, 0,
               "no wait became a semaphore wait");
  free(got);
  hcq_buffer_release(x);
  hcq_program_release(p);
  test_close(d);
}

/* Two engines of one device set one signal in turn: the compute engine waits for the copy engine's
 * value 1 (a semaphore wait, the copy still in flight) and sets 2. The copy engine's SIGNAL of 1
 * follows another SIGNAL with no work between, so both share a semaphore value; with the copy
 * engine's completion thread slowed, the 2 must still be written after the 1, never overwritten by
 * it (the signal would stay at 1 and anything waiting for 2 would hang). */
Test(vulkan, signal_writes_of_two_engines_keep_their_order) {
  need_vulkan(1);
  hcq_device_t *d = test_open("VULKAN:0");
  hcq_buffer_t *a = test_buffer_iota(d, 1024, 1, 0), *b = test_buffer(d, 4096);
  hcq_signal_t *first = NULL, *gate = NULL, *shared = NULL, *done[2] = {NULL, NULL};
  OK(hcq_signal_create(d, "first", 0, &first));
  OK(hcq_signal_create(d, "gate", 0, &gate));
  OK(hcq_signal_create(d, "shared", 0, &shared));
  OK(hcq_signal_create(d, "copy done", 0, &done[0]));
  OK(hcq_signal_create(d, "compute done", 0, &done[1]));
  hcq_operand_t shared_at = hcq_imm((int64_t)hcq_signal_address(shared));
  hcq_queue_t *qk = NULL, *qc = NULL;
  OK(hcq_queue_create(HCQ_QUEUE_COPY, &qk));
  OK(hcq_queue_copy(qk, hcq_imm((int64_t)hcq_buffer_address(b)),
                    hcq_imm((int64_t)hcq_buffer_address(a)), hcq_imm(4096)));
  OK(hcq_queue_signal(qk, hcq_imm((int64_t)hcq_signal_address(first)), hcq_imm(1)));
  OK(hcq_queue_signal(qk, shared_at, hcq_imm(1)));
  OK(hcq_queue_signal(qk, hcq_imm((int64_t)hcq_signal_address(done[0])), hcq_imm(1)));
  OK(hcq_queue_create(HCQ_QUEUE_COMPUTE, &qc));
  OK(hcq_queue_wait(qc, hcq_imm((int64_t)hcq_signal_address(gate)), hcq_imm(1)));
  OK(hcq_queue_wait(qc, shared_at, hcq_imm(1)));
  OK(hcq_queue_signal(qc, shared_at, hcq_imm(2)));
  OK(hcq_queue_signal(qc, hcq_imm((int64_t)hcq_signal_address(done[1])), hcq_imm(1)));
  hcq__vk_counters_t before, after;
  cr_assert(hcq__vk_counters(d, &before));
  cr_assert(hcq__vk_slow_completion(d, HCQ_QUEUE_COPY, 100 * 1000 * 1000));
  OK(hcq_queue_submit(qk, d, NULL, 0));
  OK(hcq_queue_submit(qc, d, NULL, 0));
  /* Once the copy engine handed both signals on (its completions lag), let the compute engine go.
   */
  for (hcq__vk_counters_t now = before; now.signals < before.signals + 2; hcq__vk_counters(d, &now))
    usleep(200);
  hcq_signal_set(gate, 1);
  for (int k = 0; k < 2; k++) OK(hcq_signal_wait(done[k], 1, 5000));
  cr_assert(hcq__vk_slow_completion(d, HCQ_QUEUE_COPY, 0));
  cr_assert(hcq__vk_counters(d, &after));
  cr_assert_gt(after.semaphore_waits - before.semaphore_waits, 0,
               "the compute engine did not wait on the semaphore");
  cr_assert_eq(hcq_signal_value(shared), 2,
               "the copy engine's 1 was written after the compute engine's 2");
  hcq_queue_destroy(qc);
  hcq_queue_destroy(qk);
  hcq_signal_destroy(first);
  hcq_signal_destroy(gate);
  hcq_signal_destroy(shared);
  for (int k = 0; k < 2; k++) hcq_signal_destroy(done[k]);
  hcq_buffer_release(a);
  hcq_buffer_release(b);
  test_close(d);
}

/* A queue blocked on a signal nobody sets: the timed-out wait carries the hang report, naming the
 * wait; once the signal is set, the queue goes on. */
Test(vulkan, hang_report_names_the_blocked_wait) {
  setenv("HCQ_WAIT_TIMEOUT_MS", "300", 1);
  need_vulkan(1);
  hcq_device_t *d = test_open("VULKAN:0");
  hcq_signal_t *gate = NULL, *done = NULL;
  OK(hcq_signal_create(d, "gate", 0, &gate));
  OK(hcq_signal_create(d, "done", 0, &done));
  hcq_queue_t *q = NULL;
  OK(hcq_queue_create(HCQ_QUEUE_COMPUTE, &q));
  OK(hcq_queue_wait(q, hcq_imm((int64_t)hcq_signal_address(gate)), hcq_imm(1)));
  OK(hcq_queue_signal(q, hcq_imm((int64_t)hcq_signal_address(done)), hcq_imm(1)));
  OK(hcq_queue_submit(q, d, NULL, 0));
  FAILS(hcq_signal_wait(done, 1, 300), HCQ_TIMEOUT, "signal \"done\"", "hang report", "VULKAN:0",
        "compute queue: blocked at wait \"gate\" >= 1");
  hcq_signal_set(gate, 1);
  OK(hcq_signal_wait(done, 1, 5000));
  hcq_queue_destroy(q);
  hcq_signal_destroy(gate);
  hcq_signal_destroy(done);
  test_close(d);
}

/* A lost device fails fast, closes with objects alive, and leaves other devices working. */
Test(vulkan, lost_device_fails_fast_and_closes) {
  need_vulkan(2);
  hcq_device_t *d = test_open("VULKAN:0"), *other = test_open("VULKAN:1");
  hcq_program_t *p = test_program(d, "fill", test_kernels_glsl),
                *q = test_program(other, "fill", test_kernels_glsl);
  hcq_buffer_t *out = test_buffer(d, 256);
  OK(hcq_device_declare_lost(d, "test says so"));
  int32_t vals[] = {1, 64};
  hcq_launch_desc_t l = {p, &out, 1, vals, 2, {1, 1, 1}, {64, 1, 1}};
  FAILS(hcq_launch(&l), HCQ_DEVICE_LOST, "VULKAN:0", "test says so");
  uint8_t host[256];
  FAILS(hcq_buffer_copyout(out, 0, host, 256), HCQ_DEVICE_LOST, "VULKAN:0");
  OK(hcq_device_close(d));
  hcq_buffer_release(out);
  hcq_program_release(p);
  fill_and_check(other, q, 12);
  hcq_program_release(q);
  test_close(other);
}

/* Eager transfers between a CPU device and a Vulkan device run on the Vulkan copy engine, both
 * ways; one graph over both kinds is refused by name. */
Test(vulkan, transfers_with_cpu_devices) {
  need_vulkan(1);
  hcq_device_t *v = test_open("VULKAN:0"), *c = test_open("CPU:0");
  hcq_program_t *pv = test_program(v, "mul_add", test_kernels_glsl),
                *pc = test_program(c, "mul_add", test_kernels_source);
  enum { N = 4096 };
  hcq_buffer_t *xc = test_buffer_iota(c, N, 1, 0), *xv = test_buffer(v, N * 4);
  uint32_t model[N], got[N];
  for (int i = 0; i < N; i++) model[i] = (uint32_t)i;
  for (int r = 0; r < 4; r++) {
    int32_t a[] = {3, r, N}, b[] = {5, 1, N};
    hcq_launch_desc_t lc = {pc, &xc, 1, a, 3, {N / 64, 1, 1}, {64, 1, 1}},
                      lv = {pv, &xv, 1, b, 3, {N / 64, 1, 1}, {64, 1, 1}};
    OK(hcq_launch(&lc));
    OK(hcq_transfer(xv, xc, N * 4)); /* CPU -> Vulkan */
    OK(hcq_launch(&lv));
    OK(hcq_transfer(xc, xv, N * 4)); /* Vulkan -> CPU */
    for (int i = 0; i < N; i++) model[i] = (model[i] * 3 + (uint32_t)r) * 5 + 1;
  }
  test_read(xc, got, sizeof(got));
  cr_assert_arr_eq(got, model, sizeof(got));
  hcq_operand_t vals[] = {hcq_imm(2), hcq_imm(1), hcq_imm(N)};
  hcq_kernel_item_t kc = {pc,
                          &xc,
                          1,
                          (uint32_t[]){0},
                          1,
                          vals,
                          3,
                          {hcq_imm(N / 64), hcq_imm(1), hcq_imm(1)},
                          {hcq_imm(64), hcq_imm(1), hcq_imm(1)}};
  hcq_kernel_item_t kv = {pv,
                          &xv,
                          1,
                          (uint32_t[]){0},
                          1,
                          vals,
                          3,
                          {hcq_imm(N / 64), hcq_imm(1), hcq_imm(1)},
                          {hcq_imm(64), hcq_imm(1), hcq_imm(1)}};
  hcq_exec_item_t its[] = {{.kind = HCQ_ITEM_KERNEL, .kernel = kc},
                           {.kind = HCQ_ITEM_KERNEL, .kernel = kv}};
  hcq_graph_t *g = NULL;
  FAILS(hcq_graph_create(its, 2, NULL, 0, NULL, 0, NULL, &g), HCQ_INVALID_ARGUMENT,
        "cannot mix CPU:0 with VULKAN:0");
  hcq_buffer_release(xc);
  hcq_buffer_release(xv);
  hcq_program_release(pc);
  hcq_program_release(pv);
  test_close(c);
  test_close(v);
}

/* A kernel given fewer buffers than it reads dereferences a value as an address and faults inside
 * the driver, on a thread hcq did not start: the process still dies, but first says which kernel
 * (and graph item) the driver was running, as a faulting CPU kernel does. */
static void launch_with_a_missing_buffer(void) {
  hcq_device_t *d = test_open("VULKAN:0");
  hcq_program_t *p = test_program(d, "fill", test_kernels_glsl);
  hcq_buffer_t *out = test_buffer(d, 64 * 4);
  hcq_operand_t vals[2] = {hcq_imm(1), hcq_imm(64)};
  hcq_exec_item_t items[2];
  for (int i = 0; i < 2; i++)
    items[i] = (hcq_exec_item_t){.kind = HCQ_ITEM_KERNEL,
                                 .kernel = {.program = p,
                                            .bufs = &out,
                                            .nbufs = 1,
                                            .vals = vals,
                                            .nvals = 2,
                                            .global = {hcq_imm(1), hcq_imm(1), hcq_imm(1)},
                                            .local = {hcq_imm(64), hcq_imm(1), hcq_imm(1)}}};
  items[1].kernel.nbufs = 0; /* buffer 0 is read from where the values are: address 0x4000000001 */
  hcq_graph_t *g = NULL;
  OK(hcq_graph_create(items, 2, NULL, 0, NULL, 0, NULL, &g));
  hcq_status_destroy(hcq_graph_run(g, NULL, 0, NULL, 0, true, NULL));
  struct timespec ts = {5, 0};
  nanosleep(&ts, NULL);
}

Test(vulkan, a_kernel_faulting_inside_the_driver_is_named_before_the_process_dies) {
  /* Vulkan is first touched in the child: a driver's threads do not survive a fork. */
  int fds[2];
  cr_assert_eq(pipe(fds), 0);
  fflush(NULL);
  pid_t pid = fork();
  if (pid == 0) {
    dup2(fds[1], 2);
    close(fds[0]);
    const char *why = test_backend_absent(vulkan(), 1);
    if (why) {
      fprintf(stderr, "%s", why);
      _exit(77);
    }
    launch_with_a_missing_buffer();
    _exit(0);
  }
  close(fds[1]);
  char err[8192];
  size_t len = 0;
  for (ssize_t n; (n = read(fds[0], err + len, sizeof(err) - 1 - len)) > 0;) len += (size_t)n;
  err[len] = '\0';
  close(fds[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  if (WIFEXITED(status) && WEXITSTATUS(status) == 77) cr_skip_test("Vulkan absent: %s", err);
  cr_assert(!(WIFEXITED(status) && WEXITSTATUS(status) == 0),
            "the child went on as if nothing happened: %s", err);
  cr_assert(strstr(err, "hcq: SIGSEGV at address 0x4000000001") &&
                strstr(err, "VULKAN:0 compute queue: ") &&
                strstr(err, "kernel fill (graph item 1)") && strstr(err, "the process ends"),
            "stderr: %s", err);
}
