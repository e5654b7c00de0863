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

/* The two devices, their kernels and buffers, and the graph over them. */
typedef struct soak {
  hcq_device_t *dev0, *dev1;
  hcq_program_t *k0, *k1;
  hcq_buffer_t *src, *mid0, *mid1, *ring[RING];
  hcq_expr_t *v;
  hcq_graph_t *graph;
  uint32_t host[N];
} soak_t;

/* The process's resident memory and open files: first (after the first replay), largest. */
typedef struct samples {
  long rss0, rss_max;
  int fds0, fds_max;
} samples_t;

static void open_devices(soak_t *s, const char *name0, const char *name1, bool vulkan) {
  CHECK(hcq_device_open(name0, &s->dev0));
  CHECK(hcq_device_open(name1, &s->dev1));
  const char *source = vulkan ? kGlslKernel : kCpuKernel;
  CHECK(hcq_program_create(s->dev0, "mul3", source, &s->k0));
  CHECK(hcq_program_create(s->dev1, "mul3", source, &s->k1));
  for (uint32_t i = 0; i < N; i++) s->host[i] = i * 7919u + 13u;
  CHECK(hcq_buffer_create(s->dev0, sizeof s->host, &s->src));
  CHECK(hcq_buffer_create(s->dev0, sizeof s->host, &s->mid0));
  CHECK(hcq_buffer_create(s->dev1, sizeof s->host, &s->mid1));
  for (int r = 0; r < RING; r++) CHECK(hcq_buffer_create(s->dev1, sizeof s->host, &s->ring[r]));
  CHECK(hcq_buffer_copyin(s->src, 0, s->host, sizeof s->host));
}

static hcq_kernel_item_t mul3_item(hcq_program_t *k, hcq_buffer_t **bufs,
                                   const hcq_operand_t *vals) {
  static const uint32_t writes_second[] = {1};
  return (hcq_kernel_item_t){k,
                             bufs,
                             2,
                             writes_second,
                             1,
                             vals,
                             1,
                             {hcq_imm(N / GROUP), hcq_imm(1), hcq_imm(1)},
                             {hcq_imm(GROUP), hcq_imm(1), hcq_imm(1)}};
}

static void make_graph(soak_t *s) {
  CHECK(hcq_var_create("v", 0, 1 << 30, &s->v));
  hcq_buffer_t *bufs0[] = {s->src, s->mid0}, *bufs1[] = {s->mid1, s->ring[0]};
  hcq_operand_t vals[] = {hcq_sym(s->v)};
  hcq_exec_item_t items[3] = {
      {.kind = HCQ_ITEM_KERNEL, .kernel = mul3_item(s->k0, bufs0, vals)},
      {.kind = HCQ_ITEM_TRANSFER, .transfer = {s->mid1, s->mid0, sizeof s->host}},
      {.kind = HCQ_ITEM_KERNEL, .kernel = mul3_item(s->k1, bufs1, vals)},
  };
  hcq_var_value_t at_build[] = {{s->v, 0}};
  CHECK(hcq_graph_create(items, 3, &s->ring[0], 1, at_build, 1, NULL, &s->graph));
}

/* Replays from..to-1 that were right: 0 or 1 wrong each. */
static unsigned long long check_replays(soak_t *s, unsigned long long from, unsigned long long to) {
  unsigned long long wrong = 0;
  uint32_t got[N];
  for (unsigned long long k = from; k < to; k++) {
    CHECK(hcq_buffer_copyout(s->ring[k % RING], 0, got, sizeof got));
    uint32_t vk = (uint32_t)(k & ((1u << 30) - 1));
    int bad = 0;
    for (uint32_t i = 0; i < N; i++) bad |= got[i] != s->host[i] * 9u + 4u * vk;
    wrong += bad;
  }
  return wrong;
}

static void sample(samples_t *m, double elapsed, unsigned long long replays,
                   unsigned long long wrong) {
  long rss = rss_kib();
  int fds = open_files();
  if (m->rss0 < 0 && replays > 0) m->rss0 = rss, m->fds0 = fds;
  if (rss > m->rss_max) m->rss_max = rss;
  if (fds > m->fds_max) m->fds_max = fds;
  printf("  %8.1f %12llu %10llu %10ld %6d\n", elapsed, replays, wrong, rss, fds);
  fflush(stdout);
}

/* Replays for the given time, pipelined; the wrong ones. */
static unsigned long long soak(soak_t *s, double seconds) {
  samples_t m = {-1, 0, -1, 0};
  unsigned long long replays = 0, wrong = 0;
  double start = now_s(), next_sample = start;
  for (;;) {
    double t = now_s();
    int last = t - start >= seconds;
    /* Check the replay that last used the buffer before handing it on (RING - 1 replays back). */
    uint64_t r = replays;
    if (r >= RING - 1 || last) {
      unsigned long long from = r >= RING - 1 ? r - (RING - 1) : 0, to = last ? r : from + 1;
      wrong += check_replays(s, from, to);
    }
    if (t >= next_sample || last) {
      sample(&m, t - start, replays, wrong);
      next_sample = t + (seconds >= 60 ? 10.0 : 1.0);
    }
    if (last) break;
    hcq_var_value_t at[] = {{s->v, (int64_t)(r & ((1u << 30) - 1))}};
    CHECK(hcq_graph_run(s->graph, &s->ring[r % RING], 1, at, 1, /*wait=*/false, NULL));
    replays++;
  }
  double elapsed = now_s() - start;
  printf(
      "hcq_soak: %llu replays in %.1f s (%.1f us each, check included), %llu wrong; RSS %ld -> max "
      "%ld KiB, "
      "open files %d -> max %d\n",
      replays, elapsed, elapsed * 1e6 / (double)(replays ? replays : 1), wrong, m.rss0, m.rss_max,
      m.fds0, m.fds_max);
  return wrong;
}

static void close_devices(soak_t *s) {
  CHECK(hcq_graph_destroy(s->graph));
  hcq_expr_release(s->v);
  for (int k = 0; k < RING; k++) hcq_buffer_release(s->ring[k]);
  hcq_buffer_release(s->src);
  hcq_buffer_release(s->mid0);
  hcq_buffer_release(s->mid1);
  hcq_program_release(s->k0);
  hcq_program_release(s->k1);
  CHECK(hcq_device_close(s->dev1));
  CHECK(hcq_device_close(s->dev0));
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
  static soak_t s;
  open_devices(&s, name0, name1, vulkan);
  make_graph(&s);
  printf("hcq_soak: %s, %s + %s, %.0f s; %d-word outputs, a ring of %d, every replay checked\n",
         kind, name0, name1, seconds, N, RING);
  printf("  %8s %12s %10s %10s %6s\n", "time_s", "replays", "wrong", "rss_kib", "fds");
  unsigned long long wrong = soak(&s, seconds);
  close_devices(&s);
  return wrong ? 1 : 0;
}
