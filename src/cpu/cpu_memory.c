/* Memory of CPU devices: host memory, zeroed, 64-byte aligned, in three sizes.
 *
 * - Small buffers (under 256 KiB) come from the C heap.
 * - Middle-sized ones (256 KiB to 2 MiB: a small model's weight matrices, key/value caches) are
 *   carved one after another out of shared 8 MiB arenas of transparent huge pages, each
 *   arena returned to the system when its last buffer is freed (freed space is not reused before
 *   that: what is handed out is always untouched, hence zero).
 * - Large ones are mappings of their own, 2 MiB-aligned and asking for huge pages too.
 *
 * Why huge pages: a kernel streaming a buffer at memory speed otherwise misses the TLB every 4 KiB;
 * on this project's machine one thread's dot products over 37 MB went from 29 to 43 GB/s (two
 * threads' from 41 to 60 GB/s). Debian's THP mode is "madvise", so the pages must be asked for;
 * the advice is only advice: where the kernel has none, the pages are small and nothing fails. */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "core/device.h"
#include "core/memory.h"
#include "cpu/cpu_internal.h"

#define HEAP_BELOW (UINT64_C(256) << 10)
#define HUGE_PAGE (UINT64_C(2) << 20)
#define ARENA_BYTES (4 * HUGE_PAGE)
#define ARENA_ALIGN UINT64_C(4096) /* buffers of an arena start on their own page */

typedef struct arena {
  char *base;
  uint64_t used;  /* bytes handed out, from base */
  unsigned live;  /* buffers not yet freed */
} arena_t;

static pthread_mutex_t g_arena_lock = PTHREAD_MUTEX_INITIALIZER;
static arena_t *g_arena; /* where the next middle-sized buffer goes (NULL: none yet, or full) */

/* A mapping of bytes starting on a 2 MiB boundary, asking for huge pages; NULL when refused. */
static void *map_huge(uint64_t bytes) {
  size_t span = (size_t)(bytes + HUGE_PAGE);
  char *p = mmap(NULL, span, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) return NULL;
  uintptr_t base = (uintptr_t)p, start = (base + HUGE_PAGE - 1) & ~(uintptr_t)(HUGE_PAGE - 1);
  uintptr_t end = start + (((uintptr_t)bytes + 4095) & ~(uintptr_t)4095);
  if (start > base) munmap(p, start - base);
  if (base + span > end) munmap((void *)end, base + span - end);
#ifdef MADV_HUGEPAGE
  madvise((void *)start, (size_t)bytes, MADV_HUGEPAGE);
#endif
  return (void *)start;
}

/* handle: NULL for the heap, the mapping's length for a mapping, the arena | 1 for an arena. */
static void *arena_alloc(uint64_t bytes, void **handle) {
  uint64_t need = (bytes + ARENA_ALIGN - 1) & ~(ARENA_ALIGN - 1);
  pthread_mutex_lock(&g_arena_lock);
  arena_t *a = g_arena;
  if (!a || a->used + need > ARENA_BYTES) {
    a = calloc(1, sizeof(*a));
    if (a && !(a->base = map_huge(ARENA_BYTES))) {
      free(a);
      a = NULL;
    }
    if (a) {
      /* The one before lives on until its last buffer goes; it takes no more. */
      if (g_arena && !g_arena->live) {
        munmap(g_arena->base, (size_t)ARENA_BYTES);
        free(g_arena);
      }
      g_arena = a;
    }
  }
  void *p = NULL;
  if (a) {
    p = a->base + a->used;
    a->used += need;
    a->live++;
    *handle = (void *)((uintptr_t)a | 1);
  }
  pthread_mutex_unlock(&g_arena_lock);
  return p;
}

static void arena_free(arena_t *a) {
  pthread_mutex_lock(&g_arena_lock);
  /* The current arena stays while it has room: its used part is no longer zero, the rest is. */
  bool drop = --a->live == 0 && a != g_arena;
  pthread_mutex_unlock(&g_arena_lock);
  if (drop) {
    munmap(a->base, (size_t)ARENA_BYTES);
    free(a);
  }
}

hcq_status_t hcq__cpu_mem_alloc(hcq_device_t *dev, uint64_t size, uint32_t flags, hcq__mem_t *out) {
  (void)flags; /* all CPU memory is host memory */
  uint64_t rounded = (size + 63) & ~UINT64_C(63);
  if (rounded < size || rounded > (UINT64_C(1) << 46))
    return hcq_status_make(HCQ_OUT_OF_MEMORY, "%s: cannot allocate %" PRIu64 " bytes", dev->name, size);
  void *p;
  if (rounded < HEAP_BELOW) {
    p = aligned_alloc(64, (size_t)rounded);
    if (p) memset(p, 0, (size_t)rounded);
    out->handle = NULL;
  } else if (rounded < HUGE_PAGE) {
    p = arena_alloc(rounded, &out->handle);
  } else {
    /* Anonymous pages are zero and unbacked until touched; the kernel refuses what cannot fit. */
    p = map_huge(rounded);
    out->handle = (void *)(uintptr_t)rounded;
  }
  if (!p)
    return hcq_status_make(HCQ_OUT_OF_MEMORY, "%s: out of memory allocating %" PRIu64 " bytes (%s)", dev->name, size,
                           strerror(errno ? errno : ENOMEM));
  out->host = p;
  out->addr = (uint64_t)(uintptr_t)p;
  out->size = size;
  return NULL;
}

void hcq__cpu_mem_free(hcq_device_t *dev, hcq__mem_t *mem) {
  (void)dev;
  uintptr_t h = (uintptr_t)mem->handle;
  if (!h)
    free(mem->host);
  else if (h & 1)
    arena_free((arena_t *)(h & ~(uintptr_t)1));
  else
    munmap(mem->host, (size_t)h);
  mem->host = NULL;
}

/* ---- what the host has (hcq_device_memory) ---- */

/* A "Key:   123 kB" line of /proc/meminfo, in bytes (0: absent). */
static uint64_t meminfo_bytes(const char *text, const char *key) {
  const char *at = strstr(text, key);
  if (!at) return 0;
  unsigned long long kb = 0;
  return sscanf(at + strlen(key), " %llu kB", &kb) == 1 ? (uint64_t)kb << 10 : 0;
}

/* The first line of path as a number of bytes; false when absent or not a number ("max"). */
static bool read_bytes(const char *path, uint64_t *out) {
  FILE *f = fopen(path, "r");
  if (!f) return false;
  unsigned long long v = 0;
  bool ok = fscanf(f, "%llu", &v) == 1;
  fclose(f);
  *out = v;
  return ok;
}

/* The process's cgroup v2 memory limit and use (a container's share of the host), when it has one. */
static bool cgroup_memory(uint64_t *limit, uint64_t *used) {
  FILE *f = fopen("/proc/self/cgroup", "r");
  if (!f) return false;
  char line[512], dir[600] = "";
  while (fgets(line, sizeof(line), f))
    if (!strncmp(line, "0::", 3)) { /* the unified hierarchy's line */
      line[strcspn(line, "\n")] = '\0';
      snprintf(dir, sizeof(dir), "/sys/fs/cgroup%s", strcmp(line + 3, "/") ? line + 3 : "");
    }
  fclose(f);
  if (!*dir) return false;
  char path[700];
  snprintf(path, sizeof(path), "%s/memory.max", dir);
  if (!read_bytes(path, limit)) return false;
  snprintf(path, sizeof(path), "%s/memory.current", dir);
  return read_bytes(path, used);
}

hcq_status_t hcq__cpu_memory_info(hcq_device_t *dev, hcq_device_memory_t *out) {
  FILE *f = fopen("/proc/meminfo", "r");
  char text[8192];
  size_t n = f ? fread(text, 1, sizeof(text) - 1, f) : 0;
  if (f) fclose(f);
  text[n] = '\0';
  out->total = meminfo_bytes(text, "MemTotal:");
  out->available = meminfo_bytes(text, "MemAvailable:");
  if (!out->total) return hcq_status_make(HCQ_UNAVAILABLE, "hcq_device_memory: %s: cannot read /proc/meminfo", dev->name);
  out->source = "/proc/meminfo";
  uint64_t limit = 0, used = 0;
  if (cgroup_memory(&limit, &used) && limit < out->total) {
    out->total = limit;
    uint64_t left = used < limit ? limit - used : 0;
    if (left < out->available) out->available = left;
    out->source = "/proc/meminfo and the cgroup's memory.max";
  }
  return NULL;
}
