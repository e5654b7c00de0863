/* Memory accounting (hcq/memory.h): every class moves by exactly what was allocated and returns to
 * its starting value once graphs and buffers are gone. */
#include <inttypes.h>
#include <time.h>

#include "core/options.h"
#include "test_util.h"

TestSuite(memory, .timeout = 60);

static hcq_memory_usage_t usage(hcq_device_t *d) {
  hcq_memory_usage_t m;
  OK(hcq_device_memory_usage(d, &m));
  cr_assert_eq(m.total, m.buffers + m.graph_kernargs + m.graph_commands + m.graph_profile +
                            m.eager + m.deferred);
  return m;
}

/* Deferred frees complete with engine progress: wait (sleeping, bounded) until they have. */
static hcq_memory_usage_t usage_once_freed(hcq_device_t *d, uint64_t deferred) {
  hcq_memory_usage_t m = usage(d);
  for (int i = 0; i < 2000 && m.deferred != deferred; i++) {
    struct timespec ts = {0, 1000000};
    nanosleep(&ts, NULL);
    OK(hcq_device_synchronize(d));
    m = usage(d);
  }
  return m;
}

/* Bytes of d's bound command words in g (queue 2i and 2i+1 belong to the graph's device i). */
/* Replays in flight at once (HCQ_GRAPH_INFLIGHT, default 2): a graph keeps that many copies of its
 * command words, kernel arguments and profile slots. */
#define SLOTS ((uint64_t)hcq__options()->graph_inflight)

static uint64_t graph_command_bytes(const hcq_graph_t *g, const hcq_device_t *d) {
  uint64_t bytes = 0;
  for (uint32_t q = 0; q < 2 * hcq_graph_device_count(g); q++)
    if (hcq_graph_device(g, q / 2) == d && hcq_graph_queue(g, q))
      bytes += hcq_queue_size(hcq_graph_queue(g, q)) * 4;
  return bytes * SLOTS;
}

/* Staging buffers appear with the first host copy: make them exist before the baseline. */
static void warm_staging(hcq_device_t *d0, hcq_device_t *d1) {
  int32_t host[256] = {0};
  hcq_buffer_t *warm0 = test_buffer(d0, 1024), *warm1 = test_buffer(d1, 1024);
  OK(hcq_buffer_copyin(warm0, 0, host, sizeof(host)));
  OK(hcq_buffer_copyin(warm1, 0, host, sizeof(host)));
  hcq_buffer_release(warm0);
  hcq_buffer_release(warm1);
}

/* Two kernels on CPU:0 (2 buffers + 2 values each: 32-byte argument blocks), a copy to CPU:1, a
 * kernel there (1 buffer + 3 values: 32 bytes). One graph plain (*g), one with profiling (*gp),
 * each replayed three times. */
static void two_graphs(hcq_program_t *p0, hcq_program_t *p1, hcq_buffer_t *o, hcq_buffer_t *view,
                       hcq_buffer_t *x, hcq_graph_t **g, hcq_graph_t **gp) {
  hcq_operand_t v0[] = {hcq_imm(1), hcq_imm(250)}, v1[] = {hcq_imm(3), hcq_imm(1), hcq_imm(250)};
  hcq_buffer_t *b0[] = {o, view}, *b0b[] = {o, o}, *b1[] = {x};
  hcq_exec_item_t items[4] = {
      {.kind = HCQ_ITEM_KERNEL,
       .kernel = {p0,
                  b0,
                  2,
                  (uint32_t[]){0},
                  1,
                  v0,
                  2,
                  {hcq_imm(4), hcq_imm(1), hcq_imm(1)},
                  {hcq_imm(64), hcq_imm(1), hcq_imm(1)}}},
      {.kind = HCQ_ITEM_KERNEL,
       .kernel = {p0,
                  b0b,
                  2,
                  (uint32_t[]){0},
                  1,
                  v0,
                  2,
                  {hcq_imm(4), hcq_imm(1), hcq_imm(1)},
                  {hcq_imm(64), hcq_imm(1), hcq_imm(1)}}},
      {.kind = HCQ_ITEM_TRANSFER, .transfer = {x, o, 1000}},
      {.kind = HCQ_ITEM_KERNEL,
       .kernel = {p1,
                  b1,
                  1,
                  (uint32_t[]){0},
                  1,
                  v1,
                  3,
                  {hcq_imm(4), hcq_imm(1), hcq_imm(1)},
                  {hcq_imm(64), hcq_imm(1), hcq_imm(1)}}},
  };
  cr_assert_eq(hcq_kernargs_size(2, 2), 32);
  cr_assert_eq(hcq_kernargs_size(1, 3), 32);
  OK(hcq_graph_create(items, 4, NULL, 0, NULL, 0, NULL, g));
  hcq_graph_options_t prof = {.profile = true};
  OK(hcq_graph_create(items, 4, NULL, 0, NULL, 0, &prof, gp));
  for (int r = 0; r < 3; r++) {
    OK(hcq_graph_run(*g, NULL, 0, NULL, 0, false, NULL));
    OK(hcq_graph_run(*gp, NULL, 0, NULL, 0, true, NULL));
  }
}

/* What two_graphs' graphs hold on each device, on top of where it started. */
static void check_graph_memory(const hcq_graph_t *g, const hcq_graph_t *gp, hcq_device_t *d0,
                               hcq_device_t *d1, hcq_memory_usage_t start0,
                               hcq_memory_usage_t start1) {
  hcq_memory_usage_t m0 = usage(d0), m1 = usage(d1);
  cr_assert_eq(m0.graph_kernargs, start0.graph_kernargs + SLOTS * 2 * 64,
               "two graphs, 2 x 32 bytes of arguments each");
  cr_assert_eq(m1.graph_kernargs, start1.graph_kernargs + SLOTS * 2 * 32);
  cr_assert_eq(m0.graph_commands,
               start0.graph_commands + graph_command_bytes(g, d0) + graph_command_bytes(gp, d0));
  cr_assert_eq(m1.graph_commands,
               start1.graph_commands + graph_command_bytes(g, d1) + graph_command_bytes(gp, d1));
  cr_assert_gt(graph_command_bytes(g, d0), 0);
  /* Profiling: a start and an end slot (16 bytes each) per item, on every device of the graph. */
  cr_assert_eq(m0.graph_profile, start0.graph_profile + SLOTS * 4 * 2 * 16);
  cr_assert_eq(m1.graph_profile, start1.graph_profile + SLOTS * 4 * 2 * 16);
  cr_assert_eq(m0.buffers, start0.buffers + 8192, "graph memory is not counted as buffers");
  cr_assert_eq(m0.eager, start0.eager);
}

/* No buffer or graph memory left over start's on d. */
static void check_buffers_and_graphs_at_start(hcq_device_t *d, hcq_memory_usage_t start) {
  hcq_memory_usage_t m = usage(d);
  cr_assert_eq(m.buffers, start.buffers);
  cr_assert_eq(m.graph_kernargs, start.graph_kernargs);
  cr_assert_eq(m.graph_commands, start.graph_commands);
  cr_assert_eq(m.graph_profile, start.graph_profile);
}

/* What was released is freed once the engines have passed it: d's total is back to start's. */
static void check_total_at_start(hcq_device_t *d, hcq_memory_usage_t start) {
  hcq_memory_usage_t m = usage_once_freed(d, start.deferred);
  cr_assert_eq(m.total, start.total, "%s: %" PRIu64 " bytes now, %" PRIu64 " at the start",
               hcq_device_name(d), m.total, start.total);
}

Test(memory, every_class_returns_to_its_start_after_graphs_and_buffers_are_freed) {
  hcq_device_t *d0 = test_open("CPU:0"), *d1 = test_open("CPU:1");
  hcq_program_t *p0 = test_program(d0, "add_scalar", test_kernels_source);
  hcq_program_t *p1 = test_program(d1, "mul_add", test_kernels_source);
  warm_staging(d0, d1);
  hcq_memory_usage_t start0 = usage_once_freed(d0, 0), start1 = usage_once_freed(d1, 0);
  cr_assert_gt(start0.eager, 0, "the eager kernel-argument ring and staging buffers");
  cr_assert_eq(start0.deferred, 0);

  hcq_buffer_t *a = test_buffer(d0, 4096), *o = test_buffer(d0, 4096), *x = test_buffer(d1, 1000);
  hcq_buffer_t *view = NULL;
  OK(hcq_buffer_view_create(a, 1024, 1024, &view));
  hcq_memory_usage_t m0 = usage(d0), m1 = usage(d1);
  cr_assert_eq(m0.buffers, start0.buffers + 8192, "a view adds nothing to its base's bytes");
  cr_assert_eq(m1.buffers, start1.buffers + 1000);

  hcq_graph_t *g = NULL, *gp = NULL;
  two_graphs(p0, p1, o, view, x, &g, &gp);
  check_graph_memory(g, gp, d0, d1, start0, start1);

  OK(hcq_graph_destroy(g));
  OK(hcq_graph_destroy(gp));
  hcq_buffer_release(view);
  hcq_buffer_release(a);
  hcq_buffer_release(o);
  hcq_buffer_release(x);
  check_buffers_and_graphs_at_start(d0, start0);
  check_buffers_and_graphs_at_start(d1, start1);
  check_total_at_start(d0, start0);
  check_total_at_start(d1, start1);
  hcq_program_release(p0);
  hcq_program_release(p1);
  test_close(d0);
  test_close(d1);
}

Test(memory, released_memory_waits_in_deferred_while_a_kernel_may_use_it) {
  hcq_device_t *d = test_open("CPU:0");
  hcq_memory_usage_t start = usage(d);
  hcq_signal_t *gate = NULL;
  OK(hcq_signal_create(d, "gate", 0, &gate));
  hcq_buffer_t *b = test_buffer(d, 12345);
  /* The engine is held at a wait, so the buffer's memory cannot be freed yet. */
  hcq_queue_t *q = NULL;
  q = test_gate_queue(d, HCQ_QUEUE_COMPUTE, gate, 1);
  hcq_buffer_release(b);
  hcq_memory_usage_t held = usage(d);
  cr_assert_eq(held.buffers, start.buffers, "released: no longer a live buffer");
  cr_assert_eq(held.deferred, start.deferred + 12345, "but held until the engine passes the wait");
  hcq_signal_set(gate, 1);
  hcq_memory_usage_t done = usage_once_freed(d, start.deferred);
  cr_assert_eq(done.deferred, start.deferred);
  cr_assert_eq(done.total, start.total);
  hcq_queue_destroy(q);
  hcq_signal_destroy(gate);
  test_close(d);
}

Test(memory, the_kernel_cache_on_disk_is_counted) {
  hcq_device_t *d = test_open("CPU:0");
  hcq_program_t *p = test_program(d, "fill", test_kernels_source);
  hcq_memory_usage_t m = usage(d);
  cr_assert_geq(m.kernel_cache_files, 1, "fill was compiled into the cache");
  cr_assert_gt(m.kernel_cache_bytes, 0);
  uint64_t bytes = 0, files = 0;
  const char *dir = NULL;
  hcq_kernel_cache_usage(&bytes, &files, &dir);
  cr_assert_eq(bytes, m.kernel_cache_bytes);
  cr_assert_eq(files, m.kernel_cache_files);
  const char *env = getenv("HCQ_CACHE_DIR");
  if (env && *env) cr_assert_str_eq(dir, env);
  FAILS(hcq_device_memory_usage(NULL, &m), HCQ_INVALID_ARGUMENT, "NULL");
  FAILS(hcq_device_memory_usage(d, NULL), HCQ_INVALID_ARGUMENT, "NULL");
  hcq_program_release(p);
  test_close(d);
}

/* ---- what the system says (hcq_device_memory) ---- */

/* A "Key: N kB" line of /proc/meminfo, read here independently of the library. */
static uint64_t meminfo(const char *key) {
  FILE *f = fopen("/proc/meminfo", "r");
  cr_assert_not_null(f);
  char line[256];
  uint64_t v = 0;
  while (fgets(line, sizeof(line), f))
    if (!strncmp(line, key, strlen(key))) v = strtoull(line + strlen(key), NULL, 10) << 10;
  fclose(f);
  return v;
}

Test(memory, a_cpu_device_has_the_hosts_memory) {
  hcq_device_t *d = test_open("CPU:0");
  hcq_device_memory_t m;
  OK(hcq_device_memory(d, &m));
  uint64_t total = meminfo("MemTotal:"), avail = meminfo("MemAvailable:");
  cr_assert_not_null(m.source);
  cr_assert(strstr(m.source, "/proc/meminfo"), "%s", m.source);
  if (!strstr(m.source, "cgroup")) {
    cr_assert_eq(m.total, total, "MemTotal %" PRIu64 ", hcq %" PRIu64, total, m.total);
    /* MemAvailable moves with every other process: within 1 GiB of a read a moment apart. */
    uint64_t diff = m.available > avail ? m.available - avail : avail - m.available;
    cr_assert_lt(diff, UINT64_C(1) << 30, "MemAvailable %" PRIu64 ", hcq %" PRIu64, avail,
                 m.available);
  } else {
    cr_assert_lt(m.total, total, "a cgroup limit is used only when it is below the host's memory");
  }
  cr_assert(m.available > 0 && m.available <= m.total, "%" PRIu64 " of %" PRIu64, m.available,
            m.total);
  FAILS(hcq_device_memory(d, NULL), HCQ_INVALID_ARGUMENT, "NULL");
  FAILS(hcq_device_memory(NULL, &m), HCQ_INVALID_ARGUMENT, "NULL");
  test_close(d);
}

/* ---- wrapped memory (hcq_buffer_wrap): the application's bytes, zero-copy, handed back ---- */

typedef struct handed_back {
  int calls;
  void *host;
} handed_back_t;

static void hand_back(void *ctx, void *host) {
  handed_back_t *h = ctx;
  h->calls++;
  h->host = host;
}

/* Deferred hand-backs happen as the engines' completion counters pass (which may trail the
 * timeline a little): synchronize until h was handed back, bounded. */
static void wait_handed_back(hcq_device_t *d, const handed_back_t *h) {
  for (int i = 0; i < 2000 && !h->calls; i++) {
    OK(hcq_device_synchronize(d));
    if (!h->calls) nanosleep(&(struct timespec){0, 1000000}, NULL);
  }
}

Test(memory, wrapped_memory_is_used_in_place_and_handed_back_after_the_work) {
  enum { W = 256 };
  hcq_device_t *d = test_open("CPU:0");
  hcq_program_t *add = test_program(d, "add_scalar", test_kernels_source);
  int32_t *in = aligned_alloc(64, W * 4), *out = aligned_alloc(64, W * 4);
  for (int i = 0; i < W; i++) in[i] = 3 * i, out[i] = -1;
  handed_back_t hin = {0}, hout = {0};
  hcq_memory_usage_t start = usage(d);
  hcq_buffer_t *bin = NULL, *bout = NULL;
  OK(hcq_buffer_wrap(d, in, W * 4, hand_back, &hin, &bin));
  OK(hcq_buffer_wrap(d, out, W * 4, hand_back, &hout, &bout));
  cr_assert_eq(hcq_buffer_address(bin), (uint64_t)(uintptr_t)in,
               "the kernel gets the application's pointer");
  void *mapped = NULL;
  OK(hcq_buffer_map(bout, &mapped));
  cr_assert_eq(mapped, out);
  cr_assert_eq(usage(d).buffers, start.buffers, "the application's bytes are not hcq's");

  /* Held at a gate: the buffers are released while the kernel that uses them waits. */
  hcq_signal_t *gate = NULL;
  OK(hcq_signal_create(d, "gate", 0, &gate));
  hcq_queue_t *held = test_gate_queue(d, HCQ_QUEUE_COMPUTE, gate, 1);
  hcq_buffer_t *bufs[] = {bout, bin};
  int32_t vals[] = {5, W};
  hcq_launch_desc_t l = {add, bufs, 2, vals, 2, {W / 64, 1, 1}, {64, 1, 1}};
  OK(hcq_launch(&l));
  hcq_buffer_release(bin);
  hcq_buffer_release(bout);
  cr_assert_eq(hin.calls + hout.calls, 0, "not handed back while a kernel may use it");
  cr_assert_eq(out[0], -1, "the kernel has not run");
  hcq_signal_set(gate, 1);
  OK(hcq_device_synchronize(d));
  for (int i = 0; i < W; i++) cr_assert_eq(out[i], 3 * i + 5, "written in place: element %d", i);
  wait_handed_back(d, &hin);
  wait_handed_back(d, &hout);
  cr_assert_eq(hin.calls, 1);
  cr_assert_eq(hout.calls, 1);
  cr_assert_eq(hin.host, in);
  cr_assert_eq(hout.host, out);
  hcq_queue_destroy(held);
  hcq_signal_destroy(gate);
  hcq_program_release(add);
  free(in);
  free(out);
  test_close(d);
}

Test(memory, a_graph_keeps_wrapped_memory_until_it_is_destroyed) {
  enum { W = 128 };
  hcq_device_t *d = test_open("CPU:0");
  hcq_program_t *fill = test_program(d, "fill", test_kernels_source);
  int32_t *mine = aligned_alloc(64, W * 4);
  handed_back_t h = {0};
  hcq_buffer_t *b = NULL;
  OK(hcq_buffer_wrap(d, mine, W * 4, hand_back, &h, &b));
  hcq_operand_t vals[] = {hcq_imm(9), hcq_imm(W)};
  hcq_exec_item_t item = {.kind = HCQ_ITEM_KERNEL,
                          .kernel = {fill,
                                     &b,
                                     1,
                                     NULL,
                                     0,
                                     vals,
                                     2,
                                     {hcq_imm(W / 64), hcq_imm(1), hcq_imm(1)},
                                     {hcq_imm(64), hcq_imm(1), hcq_imm(1)}}};
  hcq_graph_t *g = NULL;
  OK(hcq_graph_create(&item, 1, NULL, 0, NULL, 0, NULL, &g));
  hcq_buffer_release(b);
  OK(hcq_graph_run(g, NULL, 0, NULL, 0, true, NULL));
  OK(hcq_device_synchronize(d));
  cr_assert_eq(h.calls, 0, "the graph holds the buffer");
  for (int i = 0; i < W; i++) cr_assert_eq(mine[i], 9);
  OK(hcq_graph_destroy(g));
  wait_handed_back(d, &h);
  cr_assert_eq(h.calls, 1, "handed back once the graph is gone");
  hcq_program_release(fill);
  free(mine);
  test_close(d);
}

Test(memory, wrapping_bad_memory_is_refused_by_name) {
  hcq_device_t *d = test_open("CPU:0");
  static char bytes[256] __attribute__((aligned(64)));
  hcq_buffer_t *b = NULL;
  FAILS(hcq_buffer_wrap(d, bytes + 4, 64, NULL, NULL, &b), HCQ_INVALID_ARGUMENT,
        "not aligned to 16 bytes", "CPU:0");
  cr_assert_null(b);
  FAILS(hcq_buffer_wrap(d, NULL, 64, NULL, NULL, &b), HCQ_INVALID_ARGUMENT, "host is NULL");
  FAILS(hcq_buffer_wrap(d, bytes, 0, NULL, NULL, &b), HCQ_INVALID_ARGUMENT,
        "size must be greater than 0");
  FAILS(hcq_buffer_wrap(d, bytes, 64, NULL, NULL, NULL), HCQ_INVALID_ARGUMENT,
        "out_buffer is NULL");
  FAILS(hcq_buffer_wrap(NULL, bytes, 64, NULL, NULL, &b), HCQ_INVALID_ARGUMENT, "device is NULL");
  FAILS(hcq_buffer_wrap(d, (void *)(UINTPTR_MAX & ~(uintptr_t)63), 4096, NULL, NULL, &b),
        HCQ_OUT_OF_RANGE, "past the address space");
  void *p = (void *)1;
  FAILS(hcq_buffer_map(NULL, &p), HCQ_INVALID_ARGUMENT, "buffer is NULL");
  cr_assert_null(p);
  /* NULL on_release: the application keeps the bytes until it has synchronized. */
  OK(hcq_buffer_wrap(d, bytes, sizeof(bytes), NULL, NULL, &b));
  hcq_buffer_release(b);
  OK(hcq_device_synchronize(d));
  test_close(d);
}
