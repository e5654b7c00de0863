/* hcq_soak: pipelined two-device replays for a fixed time, every replay's result checked, with the
 * process's resident memory and open files sampled as it goes (both must stay flat).
 *
 *   hcq_soak [CPU|VULKAN] [SECONDS]
 *
 * The graph: a kernel on device 0 (mid0 = src * 3 + v), a transfer to device 1, a kernel there
 * (out = mid1 * 3 + v), so out = src * 9 + 4v. Replays pass v = the replay number and one of RING
 * output buffers as the graph's input, without waiting; the output of a replay is read back (and
 * checked against the formula) before its buffer is handed to a later replay. VULKAN uses
 * VULKAN:0 and VULKAN:1 (set HCQ_VULKAN_VIRTUAL=1 on a machine with one Vulkan device).
 * Exit status 0 only when every replay was right (1 for a wrong replay or a failed call). */
#include <dirent.h>
#include <string.h>
#include <unistd.h>

#include "bench.h"

enum { N = 256, RING = 4, GROUP = 64 };

/* dst[i] = src[i] * 3 + v; bufs {src, dst}, vals {v}. */
static const char *const kCpuKernel =
    "void mul3(void *const *bufs, const int32_t *vals, const hcq_launch_t *l) {\n"
    "  const uint32_t *src = bufs[0]; uint32_t *dst = bufs[1];\n"
    "  for (uint32_t t = 0; t < l->lsz[0]; t++) {\n"
    "    size_t i = (size_t)l->gid[0] * l->lsz[0] + t;\n"
    "    dst[i] = src[i] * 3u + (uint32_t)vals[0];\n"
    "  }\n"
    "}\n";
static const char *const kGlslKernel =
    "layout(buffer_reference, std430, buffer_reference_align = 4) buffer u32s { uint v[]; };\n"
    "void main() {\n"
    "  uint i = gl_GlobalInvocationID.x;\n"
    "  u32s src = u32s(hcq_buf(0)), dst = u32s(hcq_buf(1));\n"
    "  dst.v[i] = src.v[i] * 3u + uint(hcq_val(0));\n"
    "}\n";

static double now_s(void) { return now_ns() / 1e9; }

static long rss_kib(void) {
  long pages = 0, resident = 0;
  FILE *f = fopen("/proc/self/statm", "r");
  if (!f) return -1;
  if (fscanf(f, "%ld %ld", &pages, &resident) != 2) resident = -1;
  fclose(f);
  return resident < 0 ? -1 : resident * (sysconf(_SC_PAGESIZE) / 1024);
}

static int open_files(void) {
  DIR *d = opendir("/proc/self/fd");
  if (!d) return -1;
  int n = 0;
  for (struct dirent *e; (e = readdir(d));) n += e->d_name[0] != '.';
  closedir(d);
  return n - 1; /* the directory stream itself */
}

int main(int argc, char **argv) {
  const char *kind = argc > 1 ? argv[1] : "CPU";
  double seconds = argc > 2 ? atof(argv[2]) : 10.0;
  int vulkan = strcmp(kind, "VULKAN") == 0;
  if (!vulkan && strcmp(kind, "CPU") != 0) {
    fprintf(stderr, "hcq_soak: unknown device kind '%s' (CPU or VULKAN)\n", kind);
    return 2;
  }
  char name0[32], name1[32];
  snprintf(name0, sizeof name0, "%s:0", kind);
  snprintf(name1, sizeof name1, "%s:1", kind);
  hcq_device_t *dev0, *dev1;
  CHECK(hcq_device_open(name0, &dev0));
  CHECK(hcq_device_open(name1, &dev1));
  const char *source = vulkan ? kGlslKernel : kCpuKernel;
  hcq_program_t *k0, *k1;
  CHECK(hcq_program_create(dev0, "mul3", source, &k0));
  CHECK(hcq_program_create(dev1, "mul3", source, &k1));

  uint32_t host[N], got[N];
  for (uint32_t i = 0; i < N; i++) host[i] = i * 7919u + 13u;
  hcq_buffer_t *src, *mid0, *mid1, *ring[RING];
  CHECK(hcq_buffer_create(dev0, sizeof host, &src));
  CHECK(hcq_buffer_create(dev0, sizeof host, &mid0));
  CHECK(hcq_buffer_create(dev1, sizeof host, &mid1));
  for (int r = 0; r < RING; r++) CHECK(hcq_buffer_create(dev1, sizeof host, &ring[r]));
  CHECK(hcq_buffer_copyin(src, 0, host, sizeof host));

  hcq_expr_t *v;
  CHECK(hcq_var_create("v", 0, 1 << 30, &v));
  static const uint32_t writes_second[] = {1};
  hcq_buffer_t *bufs0[] = {src, mid0}, *bufs1[] = {mid1, ring[0]};
  hcq_operand_t vals[] = {hcq_sym(v)};
  hcq_exec_item_t items[3] = {
      {.kind = HCQ_ITEM_KERNEL,
       .kernel = {k0,
                  bufs0,
                  2,
                  writes_second,
                  1,
                  vals,
                  1,
                  {hcq_imm(N / GROUP), hcq_imm(1), hcq_imm(1)},
                  {hcq_imm(GROUP), hcq_imm(1), hcq_imm(1)}}},
      {.kind = HCQ_ITEM_TRANSFER, .transfer = {mid1, mid0, sizeof host}},
      {.kind = HCQ_ITEM_KERNEL,
       .kernel = {k1,
                  bufs1,
                  2,
                  writes_second,
                  1,
                  vals,
                  1,
                  {hcq_imm(N / GROUP), hcq_imm(1), hcq_imm(1)},
                  {hcq_imm(GROUP), hcq_imm(1), hcq_imm(1)}}},
  };
  hcq_var_value_t at_build[] = {{v, 0}};
  hcq_graph_t *graph;
  CHECK(hcq_graph_create(items, 3, &ring[0], 1, at_build, 1, NULL, &graph));

  printf("hcq_soak: %s, %s + %s, %.0f s; %d-word outputs, a ring of %d, every replay checked\n",
         kind, name0, name1, seconds, N, RING);
  printf("  %8s %12s %10s %10s %6s\n", "time_s", "replays", "wrong", "rss_kib", "fds");
  long rss0 = -1, rss_max = 0;
  int fds0 = -1, fds_max = 0;
  unsigned long long replays = 0, wrong = 0;
  double start = now_s(), next_sample = start;
  for (;;) {
    double t = now_s();
    int last = t - start >= seconds;
    /* Check the replay that last used the buffer before handing it on (RING - 1 replays back). */
    uint64_t r = replays;
    if (r >= RING - 1 || last) {
      unsigned long long from = r >= RING - 1 ? r - (RING - 1) : 0, to = last ? r : from + 1;
      for (unsigned long long k = from; k < to; k++) {
        CHECK(hcq_buffer_copyout(ring[k % RING], 0, got, sizeof got));
        uint32_t vk = (uint32_t)(k & ((1u << 30) - 1));
        int bad = 0;
        for (uint32_t i = 0; i < N; i++) bad |= got[i] != host[i] * 9u + 4u * vk;
        wrong += bad;
      }
    }
    if (t >= next_sample || last) {
      long rss = rss_kib();
      int fds = open_files();
      if (rss0 < 0 && replays > 0) rss0 = rss, fds0 = fds;
      if (rss > rss_max) rss_max = rss;
      if (fds > fds_max) fds_max = fds;
      printf("  %8.1f %12llu %10llu %10ld %6d\n", t - start, replays, wrong, rss, fds);
      fflush(stdout);
      next_sample = t + (seconds >= 60 ? 10.0 : 1.0);
    }
    if (last) break;
    hcq_var_value_t at[] = {{v, (int64_t)(r & ((1u << 30) - 1))}};
    CHECK(hcq_graph_run(graph, &ring[r % RING], 1, at, 1, /*wait=*/false, NULL));
    replays++;
  }
  double elapsed = now_s() - start;
  printf(
      "hcq_soak: %llu replays in %.1f s (%.1f us each, check included), %llu wrong; RSS %ld -> max "
      "%ld KiB, "
      "open files %d -> max %d\n",
      replays, elapsed, elapsed * 1e6 / (double)(replays ? replays : 1), wrong, rss0, rss_max, fds0,
      fds_max);

  CHECK(hcq_graph_destroy(graph));
  hcq_expr_release(v);
  for (int k = 0; k < RING; k++) hcq_buffer_release(ring[k]);
  hcq_buffer_release(src);
  hcq_buffer_release(mid0);
  hcq_buffer_release(mid1);
  hcq_program_release(k0);
  hcq_program_release(k1);
  CHECK(hcq_device_close(dev1));
  CHECK(hcq_device_close(dev0));
  return wrong ? 1 : 0;
}
