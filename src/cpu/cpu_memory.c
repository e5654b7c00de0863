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
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "core/buffer.h"
#include "core/command.h"
#include "core/device.h"
#include "core/memory.h"
#include "core/object.h"
#include "cpu/cpu_internal.h"

#define HEAP_BELOW (UINT64_C(256) << 10)
#define HUGE_PAGE (UINT64_C(2) << 20)
#define ARENA_BYTES (4 * HUGE_PAGE)
#define ARENA_ALIGN UINT64_C(4096) /* buffers of an arena start on their own page */

typedef struct cpu_arena {
  char *base;
  uint64_t used; /* bytes handed out, from base */
  unsigned live; /* buffers not yet freed */
} cpu_arena_t;

static pthread_mutex_t g_arena_lock = PTHREAD_MUTEX_INITIALIZER;
static cpu_arena_t *g_arena; /* where the next middle-sized buffer goes (NULL: none yet, or full) */

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

/* handle: NULL for the heap, the mapping's length for a mapping, the arena | 1 for an arena, a
 * guarded buffer's record | 2 (HCQ_VALIDATE, below). */
static void *arena_alloc(uint64_t bytes, void **handle) {
  uint64_t need = (bytes + ARENA_ALIGN - 1) & ~(ARENA_ALIGN - 1);
  pthread_mutex_lock(&g_arena_lock);
  cpu_arena_t *a = g_arena;
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

static void arena_free(cpu_arena_t *a) {
  pthread_mutex_lock(&g_arena_lock);
  /* The current arena stays while it has room: its used part is no longer zero, the rest is. */
  bool drop = --a->live == 0 && a != g_arena;
  pthread_mutex_unlock(&g_arena_lock);
  if (drop) {
    munmap(a->base, (size_t)ARENA_BYTES);
    free(a);
  }
}

/* ---- HCQ_VALIDATE=1: guarded buffers (docs/errors.md, "Out-of-bounds accesses") ----
 *
 * Each buffer gets a mapping of its own: an inaccessible page, the buffer's pages, an inaccessible
 * page. The buffer ends on the 64-byte boundary nearest its page's end (its start stays 64-byte
 * aligned, as kernels expect), so an access past the end meets the guard page within 63 bytes; the
 * bytes between the page's start and the buffer's, and between its end and its 64-byte boundary,
 * hold a canary pattern that is checked after every kernel that was given the buffer. A guard page
 * fault stops the kernel where it was (cpu_fault.c names the buffer); a changed canary is a write
 * just outside the buffer. Guard pages are address space only; each buffer costs its round-up to
 * whole pages and three kernel mappings (vm.max_map_count is 65530 by default), so after
 * GUARD_MAX buffers the rest are allocated as usual. */
#define GUARD_MAX 16384u

typedef struct cpu_guarded {
  char *map; /* the mapping: front guard page, data pages, back guard page */
  size_t map_len;
  char *front; /* first canary byte before the buffer (the first data page's start) */
  char *data;  /* the buffer */
  uint64_t size;
  char *back_end; /* one past the last canary byte after the buffer */
} cpu_guarded_t;

static pthread_mutex_t g_guard_lock = PTHREAD_MUTEX_INITIALIZER;
static cpu_guarded_t **g_guards; /* sorted by map */
static size_t g_nguards, g_guard_cap;
static bool g_guard_full_said;
static atomic_bool g_any_guard; /* a guarded buffer was made: kernels' canaries are checked */

/* The canary byte at an address: a pattern of period 8, so whole words compare at once. */
static const uint64_t CANARY = UINT64_C(0x5ac3e11fcb0da6b7);
static unsigned char canary_at(const char *p) {
  return (unsigned char)(CANARY >> (8 * ((uintptr_t)p & 7)));
}

static void canary_fill(char *from, char *to) {
  for (char *p = from; p < to; p++) *p = (char)canary_at(p);
}

/* The canary of a page, from an address that is a multiple of 8 (canary_fill'ed once, before the
 * first guarded buffer exists): slack compares against it with memcmp, the after-kernel fast path.
 */
static _Alignas(64) char g_canary_page[4096 + 8];
static pthread_once_t g_canary_once = PTHREAD_ONCE_INIT;
static size_t g_page;
static void canary_page_fill(void) {
  g_page = (size_t)sysconf(_SC_PAGESIZE);
  canary_fill(g_canary_page, g_canary_page + sizeof(g_canary_page));
}

/* The first and last changed canary bytes of [from, to); false when none changed. */
static bool canary_changed(const char *from, const char *to, const char **first,
                           const char **last) {
  *first = *last = NULL;
  size_t len = (size_t)(to - from);
  if (len <= 4096 && !memcmp(from, g_canary_page + ((uintptr_t)from & 7), len)) return false;
  const char *p = from;
  for (; p < to && ((uintptr_t)p & 7); p++)
    if ((unsigned char)*p != canary_at(p)) *last = p, *first = *first ? *first : p;
  for (; p + 8 <= to; p += 8) {
    uint64_t w;
    memcpy(&w, p, 8);
    if (w == CANARY) continue;
    for (int i = 0; i < 8; i++)
      if ((unsigned char)p[i] != canary_at(p + i)) *last = p + i, *first = *first ? *first : p + i;
  }
  for (; p < to; p++)
    if ((unsigned char)*p != canary_at(p)) *last = p, *first = *first ? *first : p;
  return *first != NULL;
}

/* The index of the first guard whose mapping starts after addr (lock held). */
static size_t guard_upper(uintptr_t addr) {
  size_t lo = 0, hi = g_nguards;
  while (lo < hi) {
    size_t mid = lo + (hi - lo) / 2;
    if ((uintptr_t)g_guards[mid]->map <= addr)
      lo = mid + 1;
    else
      hi = mid;
  }
  return lo;
}

/* The guarded buffer whose mapping holds addr (lock held); NULL when none. */
static cpu_guarded_t *guard_find(uintptr_t addr) {
  size_t i = guard_upper(addr);
  if (!i) return NULL;
  cpu_guarded_t *g = g_guards[i - 1];
  return addr < (uintptr_t)g->map + g->map_len ? g : NULL;
}

/* A guarded mapping for size bytes; NULL with errno set when refused, or (errno 0) past GUARD_MAX.
 */
static cpu_guarded_t *guard_alloc(uint64_t size) {
  pthread_once(&g_canary_once, canary_page_fill);
  size_t page = g_page;
  uint64_t rounded = (size + 63) & ~UINT64_C(63);
  size_t data_len = (size_t)((rounded + page - 1) / page * page);
  if (!data_len) data_len = page;
  cpu_guarded_t *g = calloc(1, sizeof(*g));
  if (!g) return NULL;
  g->map_len = data_len + 2 * page;
  g->map = mmap(NULL, g->map_len, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (g->map == MAP_FAILED || mprotect(g->map + page, data_len, PROT_READ | PROT_WRITE)) {
    int err = errno;
    if (g->map != MAP_FAILED) munmap(g->map, g->map_len);
    free(g);
    errno = err;
    return NULL;
  }
  g->front = g->map + page;
  g->data = g->front + data_len - rounded;
  g->size = size;
  g->back_end = g->data + rounded;
  canary_fill(g->front, g->data);
  canary_fill(g->data + size, g->back_end);
  pthread_mutex_lock(&g_guard_lock);
  bool room = g_nguards < GUARD_MAX;
  if (room && g_nguards == g_guard_cap) {
    size_t cap = g_guard_cap ? 2 * g_guard_cap : 64;
    cpu_guarded_t **grown = realloc(g_guards, cap * sizeof(*grown));
    if (grown) g_guards = grown, g_guard_cap = cap;
    room = grown != NULL;
  }
  if (room) {
    size_t at = guard_upper((uintptr_t)g->map);
    memmove(g_guards + at + 1, g_guards + at, (g_nguards - at) * sizeof(*g_guards));
    g_guards[at] = g;
    g_nguards++;
  }
  if (room) atomic_store_explicit(&g_any_guard, true, memory_order_relaxed);
  bool say = !room && !g_guard_full_said;
  g_guard_full_said |= say;
  pthread_mutex_unlock(&g_guard_lock);
  if (!room) {
    if (say)
      fprintf(stderr,
              "hcq: HCQ_VALIDATE: %u buffers have guard pages; later CPU buffers get none "
              "(out-of-bounds "
              "accesses to them go unseen)\n",
              GUARD_MAX);
    munmap(g->map, g->map_len);
    free(g);
    errno = 0;
    return NULL;
  }
  return g;
}

static void guard_free(cpu_guarded_t *g) {
  pthread_mutex_lock(&g_guard_lock);
  size_t at = guard_upper((uintptr_t)g->map) - 1;
  memmove(g_guards + at, g_guards + at + 1, (g_nguards - at - 1) * sizeof(*g_guards));
  g_nguards--;
  pthread_mutex_unlock(&g_guard_lock);
  munmap(g->map, g->map_len);
  free(g);
}

/* "kernel mix (graph item 3) on CPU:0": the launch w ran, as fault reports name it. */
static void name_kernel(hcq_device_t *dev, const uint32_t *w, char *out, size_t size) {
  const hcq_program_t *p = (const hcq_program_t *)(uintptr_t)hcq__rd64(w + HCQ__EXEC_PROGRAM);
  char item[32] = "";
  if (w[HCQ__EXEC_TAG]) snprintf(item, sizeof(item), " (graph item %u)", w[HCQ__EXEC_TAG] - 1);
  snprintf(out, size, "kernel %s%s on %s", p ? p->name : "?", item, dev->name);
}

/* "buffer \"out\" (argument 1, 16 bytes)": g as the launch w was given it, and as the application
 * named it. */
static void name_buffer(hcq_device_t *dev, const uint32_t *w, const cpu_guarded_t *g, char *out,
                        size_t size) {
  char name[96] = "a released buffer";
  pthread_mutex_lock(&dev->obj_lock); /* labels change under it */
  for (const hcq__obj_t *o = dev->objects.next; o != &dev->objects; o = o->next) {
    const hcq_buffer_t *b = (const hcq_buffer_t *)o; /* the object is a buffer's first member */
    if (o->kind == HCQ__OBJ_BUFFER && !b->base && b->mem.host == g->data) {
      hcq__buffer_name(b, name);
      break;
    }
  }
  pthread_mutex_unlock(&dev->obj_lock);
  void *const *bufs = (void *const *)(uintptr_t)hcq__rd64(w + HCQ__EXEC_ARGS);
  uint32_t nbufs = w[HCQ__EXEC_NBUFS];
  for (uint32_t i = 0; i < nbufs; i++) {
    uintptr_t p = (uintptr_t)bufs[i];
    if (p < (uintptr_t)g->front || p >= (uintptr_t)g->back_end) continue;
    char view[64] = "";
    if (p != (uintptr_t)g->data)
      snprintf(view, sizeof(view), ", a view at its byte %" PRIu64,
               (uint64_t)(p - (uintptr_t)g->data));
    snprintf(out, size, "%s (argument %u%s, %" PRIu64 " bytes)", name, i, view, g->size);
    return;
  }
  snprintf(out, size, "%s (%" PRIu64 " bytes, not an argument of the launch)", name, g->size);
}

bool hcq__cpu_guard_hit(uint64_t addr) {
  if (!hcq__validating || !atomic_load_explicit(&g_any_guard, memory_order_relaxed)) return false;
  /* In the fault handler: the lock is never held by a kernel, so another holder soon lets go. */
  pthread_mutex_lock(&g_guard_lock);
  const cpu_guarded_t *g = guard_find((uintptr_t)addr);
  bool hit =
      g && ((uintptr_t)addr < (uintptr_t)g->front || (uintptr_t)addr >= (uintptr_t)g->back_end);
  pthread_mutex_unlock(&g_guard_lock);
  return hit;
}

bool hcq__cpu_guard_describe(hcq_device_t *dev, const uint32_t *w, uint64_t addr, char *out,
                             size_t size) {
  if (!hcq__validating || !w) return false;
  pthread_mutex_lock(&g_guard_lock);
  const cpu_guarded_t *g = guard_find((uintptr_t)addr);
  cpu_guarded_t copy = g ? *g : (cpu_guarded_t){0};
  pthread_mutex_unlock(&g_guard_lock);
  /* Only the guard pages fault: an address in the data pages is someone else's fault. */
  if (!g ||
      ((uintptr_t)addr >= (uintptr_t)copy.front && (uintptr_t)addr < (uintptr_t)copy.back_end))
    return false;
  char buffer[200];
  name_buffer(dev, w, &copy, buffer, sizeof(buffer));
  uintptr_t end = (uintptr_t)copy.data + copy.size;
  if ((uintptr_t)addr >= end)
    snprintf(out, size,
             "read or wrote byte %" PRIu64 " of %s, %" PRIu64
             " bytes past its end (an HCQ_VALIDATE guard "
             "page; the kernel was cut short there)",
             (uint64_t)(addr - (uintptr_t)copy.data), buffer, (uint64_t)(addr - end));
  else
    snprintf(out, size,
             "read or wrote %" PRIu64
             " bytes before the start of %s (an HCQ_VALIDATE guard page; the "
             "kernel was cut short there)",
             (uint64_t)((uintptr_t)copy.data - addr), buffer);
  return true;
}

/* A changed canary beside one of the buffers a launch was given (lock held): false when none. */
typedef struct cpu_canary_hit {
  cpu_guarded_t copy;
  const char *first, *last;
} cpu_canary_hit_t;

static bool find_canary_hit(const uint32_t *w, cpu_canary_hit_t *hit) {
  void *const *bufs = (void *const *)(uintptr_t)hcq__rd64(w + HCQ__EXEC_ARGS);
  uint32_t nbufs = w[HCQ__EXEC_NBUFS];
  for (uint32_t i = 0; i < nbufs; i++) {
    cpu_guarded_t *g = guard_find((uintptr_t)bufs[i]);
    if (!g) continue;
    if (canary_changed(g->front, g->data, &hit->first, &hit->last) ||
        canary_changed(g->data + g->size, g->back_end, &hit->first, &hit->last)) {
      hit->copy = *g;
      /* Repaired: the report is made once, and a buffer read back afterwards is still checked. */
      canary_fill(g->front, g->data);
      canary_fill(g->data + g->size, g->back_end);
      return true;
    }
  }
  return false;
}

bool hcq__cpu_bounds_check(hcq_device_t *dev, const uint32_t *w) {
  if (!atomic_load_explicit(&g_any_guard, memory_order_relaxed)) return true;
  cpu_canary_hit_t hit;
  pthread_mutex_lock(&g_guard_lock);
  bool found = find_canary_hit(w, &hit);
  pthread_mutex_unlock(&g_guard_lock);
  if (!found) return true;
  char kernel[128], buffer[200];
  name_kernel(dev, w, kernel, sizeof(kernel));
  name_buffer(dev, w, &hit.copy, buffer, sizeof(buffer));
  const char *data = hit.copy.data, *end = data + hit.copy.size;
  if (hit.first >= end)
    hcq__device_mark_lost(
        dev,
        "%s wrote past the end of %s: bytes %td to %td of it, %td to %td bytes past its end "
        "(an HCQ_VALIDATE canary changed)",
        kernel, buffer, hit.first - data, hit.last - data, hit.first - end, hit.last - end);
  else
    hcq__device_mark_lost(dev,
                          "%s wrote before the start of %s: %td to %td bytes before its start (an "
                          "HCQ_VALIDATE canary changed)",
                          kernel, buffer, data - hit.first, data - hit.last);
  return false;
}

hcq_status_t hcq__cpu_mem_alloc(hcq_device_t *dev, uint64_t size, uint32_t flags, hcq__mem_t *out) {
  /* All CPU memory is host memory; the core's own (host-visible) memory is never guarded. */
  if (hcq__validating && !(flags & HCQ__MEM_HOST_VISIBLE)) {
    errno = 0;
    cpu_guarded_t *g = size < (UINT64_C(1) << 46) ? guard_alloc(size) : NULL;
    if (g) {
      *out = (hcq__mem_t){(uint64_t)(uintptr_t)g->data, g->data, size, (void *)((uintptr_t)g | 2)};
      return NULL;
    }
    if (errno)
      return hcq_status_make(HCQ_OUT_OF_MEMORY,
                             "%s: out of memory allocating %" PRIu64
                             " bytes with guard pages "
                             "(HCQ_VALIDATE) (%s)",
                             dev->name, size, strerror(errno));
  }
  uint64_t rounded = (size + 63) & ~UINT64_C(63);
  if (rounded < size || rounded > (UINT64_C(1) << 46))
    return hcq_status_make(HCQ_OUT_OF_MEMORY, "%s: cannot allocate %" PRIu64 " bytes", dev->name,
                           size);
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
    return hcq_status_make(HCQ_OUT_OF_MEMORY, "%s: out of memory allocating %" PRIu64 " bytes (%s)",
                           dev->name, size, strerror(errno ? errno : ENOMEM));
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
  else if (h & 2)
    guard_free((cpu_guarded_t *)(h & ~(uintptr_t)2));
  else if (h & 1)
    arena_free((cpu_arena_t *)(h & ~(uintptr_t)1));
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

/* The process's cgroup v2 memory limit and use (a container's share of the host), when it has one.
 */
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
  if (!out->total)
    return hcq_status_make(HCQ_UNAVAILABLE, "hcq_device_memory: %s: cannot read /proc/meminfo",
                           dev->name);
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
