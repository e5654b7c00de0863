/* The remote device backend: a device of another rank, whose queues the communication thread runs
 * (mpi_comm_thread.c) and whose device memory is an address range with no storage here; opened by
 * a rank-qualified name, RANK/KIND:N. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "core/backend.h"
#include "mpi/mpi_internal.h"

#define REMOTE_TOP HCQ__REMOTE_ADDR_TOP

_Atomic int32_t hcq__mpi_id_rank[MAX_REMOTE + 1];

static void remote_destroy(hcq_device_t *dev) {
  mpi_rdev_t *rd = hcq__mpi_rdev_of(dev);
  for (int k = 0; k < 2; k++) {
    free(rd->q[k].ents);
    pthread_mutex_destroy(&rd->q[k].lock);
  }
  hcq__vec_free(&rd->tagged);
  pthread_mutex_destroy(&rd->mem_lock);
  free(rd);
  dev->backend = NULL;
}

static bool remote_stop(hcq_device_t *dev) {
  mpi_rdev_t *rd = hcq__mpi_rdev_of(dev);
  pthread_mutex_lock(&hcq__mpi_state.lock);
  for (mpi_rdev_t **p = &hcq__mpi_state.devices; *p; p = &(*p)->next)
    if (*p == rd) {
      *p = rd->next;
      break;
    }
  for (int k = 0; k < 2; k++)
    if (rd->q[k].pending || rd->q[k].running || rd->q[k].tail < rd->q[k].head)
      hcq__mpi_drop_queue(&rd->q[k]);
  pthread_mutex_unlock(&hcq__mpi_state.lock);
  return false;
}

static hcq_status_t remote_mem_alloc(hcq_device_t *dev, uint64_t size, uint32_t flags,
                                     hcq__mem_t *out) {
  mpi_rdev_t *rd = hcq__mpi_rdev_of(dev);
  memset(out, 0, sizeof(*out));
  out->size = size;
  if (flags & HCQ__MEM_HOST_VISIBLE) {
    /* Signals, kernel arguments and command words are this process's: real memory. */
    void *p = NULL;
    if (posix_memalign(&p, 64, size ? size : 64))
      return hcq_status_make(HCQ_OUT_OF_MEMORY, "%s: out of host memory", dev->name);
    memset(p, 0, size);
    out->host = p;
    out->addr = (uint64_t)(uintptr_t)p;
    if (hcq__mpi_build_gid) {
      pthread_mutex_lock(&rd->mem_lock);
      bool ok = hcq__vec_push(&rd->tagged, ((mpi_tagged_mem_t){p, size, hcq__mpi_build_gid}));
      pthread_mutex_unlock(&rd->mem_lock);
      if (!ok) {
        free(p);
        return hcq_status_make(HCQ_OUT_OF_MEMORY, "%s: out of host memory", dev->name);
      }
    }
    return NULL;
  }
  uint64_t rounded = (size + 63) & ~UINT64_C(63);
  pthread_mutex_lock(&rd->mem_lock);
  uint64_t off = rd->next_off;
  bool fits = rounded < (UINT64_C(1) << REMOTE_OFF_BITS) &&
              off + rounded < (UINT64_C(1) << REMOTE_OFF_BITS);
  if (fits) rd->next_off = off + rounded;
  pthread_mutex_unlock(&rd->mem_lock);
  if (!fits)
    return hcq_status_make(HCQ_OUT_OF_MEMORY,
                           "%s: remote address space (1 TiB per remote device) used up", dev->name);
  out->addr = (REMOTE_TOP << 56) | ((uint64_t)rd->id << REMOTE_OFF_BITS) | off;
  return NULL;
}

static void remote_mem_free(hcq_device_t *dev, hcq__mem_t *mem) {
  mpi_rdev_t *rd = hcq__mpi_rdev_of(dev);
  if (!mem->host) return;
  pthread_mutex_lock(&rd->mem_lock);
  for (size_t i = 0; i < rd->tagged.len; i++)
    if (rd->tagged.data[i].host == mem->host) {
      rd->tagged.data[i] = rd->tagged.data[rd->tagged.len - 1];
      rd->tagged.len--;
      break;
    }
  pthread_mutex_unlock(&rd->mem_lock);
  free(mem->host);
  mem->host = NULL;
}

static hcq_status_t remote_reserve(hcq_device_t *dev, hcq_queue_kind_t kind, size_t nwords,
                                   bool bound) {
  (void)dev, (void)kind, (void)nwords, (void)bound;
  return NULL; /* the entry list grows */
}

static hcq_status_t remote_submit(hcq_device_t *dev, hcq_queue_kind_t kind, const uint32_t *words,
                                  size_t nwords, bool bound) {
  mpi_rqueue_t *q = &hcq__mpi_rdev_of(dev)->q[kind];
  mpi_rentry_t e = {words, nwords, NULL};
  if (!bound) {
    e.owned = malloc(nwords * sizeof(uint32_t) + 1);
    if (!e.owned)
      return hcq_status_make(HCQ_OUT_OF_MEMORY, "%s: out of memory submitting", dev->name);
    memcpy(e.owned, words, nwords * sizeof(uint32_t));
    e.w = e.owned;
  }
  pthread_mutex_lock(&q->lock);
  if (q->head - q->tail == q->cap) {
    size_t cap = q->cap ? 2 * q->cap : 64;
    mpi_rentry_t *ents = malloc(cap * sizeof(*ents));
    if (!ents) {
      pthread_mutex_unlock(&q->lock);
      free(e.owned);
      return hcq_status_make(HCQ_OUT_OF_MEMORY, "%s: out of memory submitting", dev->name);
    }
    for (uint64_t i = q->tail; i < q->head; i++) ents[i % cap] = q->ents[i % q->cap];
    free(q->ents);
    q->ents = ents;
    q->cap = cap;
  }
  q->ents[q->head % q->cap] = e;
  q->head++;
  atomic_fetch_add_explicit(&q->submitted, 1, memory_order_release);
  pthread_mutex_unlock(&q->lock);
  hcq__mpi_wake_thread();
  return NULL;
}

static uint64_t remote_submitted(hcq_device_t *dev, hcq_queue_kind_t kind) {
  return atomic_load_explicit(&hcq__mpi_rdev_of(dev)->q[kind].submitted, memory_order_acquire);
}
static uint64_t remote_completed(hcq_device_t *dev, hcq_queue_kind_t kind) {
  return atomic_load_explicit(&hcq__mpi_rdev_of(dev)->q[kind].completed, memory_order_acquire);
}

static void remote_snapshot(hcq_device_t *dev, hcq_queue_kind_t kind, hcq__engine_snapshot_t *out) {
  mpi_rqueue_t *q = &hcq__mpi_rdev_of(dev)->q[kind];
  out->submitted = atomic_load(&q->submitted);
  out->completed = atomic_load(&q->completed);
  hcq__cursor_snapshot(&q->c, out);
}

static void remote_lost(hcq_device_t *dev) {
  (void)dev;
  hcq__mpi_wake_thread();
}

static hcq_status_t remote_compile(hcq_device_t *dev, const char *entry, const char *source,
                                   hcq__program_impl_t *out) {
  /* Compiled on its own rank only; the core keeps the source and the name. */
  (void)dev, (void)entry, (void)source;
  memset(out, 0, sizeof(*out));
  return NULL;
}

static const hcq__device_vtable_t remote_vtable = {
    .destroy = remote_destroy,
    .stop = remote_stop,
    .mem_alloc = remote_mem_alloc,
    .mem_free = remote_mem_free,
    .reserve = remote_reserve,
    .submit = remote_submit,
    .submitted = remote_submitted,
    .completed = remote_completed,
    .snapshot = remote_snapshot,
    .lost = remote_lost,
    .program_compile = remote_compile,
};

typedef struct mpi_create_ctx {
  const char *name;
  int rank;
  hcq_device_kind_t kind;
  int index;
} mpi_create_ctx_t;

static hcq_status_t remote_create(hcq_device_t *dev, void *ctx) {
  mpi_create_ctx_t *c = ctx;
  mpi_rdev_t *rd = calloc(1, sizeof(*rd));
  if (!rd) return hcq_status_make(HCQ_OUT_OF_MEMORY, "out of memory opening %s", c->name);
  pthread_mutex_lock(&hcq__mpi_state.lock);
  if (hcq__mpi_state.next_id >= MAX_REMOTE) {
    pthread_mutex_unlock(&hcq__mpi_state.lock);
    free(rd);
    return hcq_status_make(HCQ_UNAVAILABLE, "cannot open %s: %d remote devices were opened already",
                           c->name, MAX_REMOTE);
  }
  rd->id = hcq__mpi_state.next_id++;
  pthread_mutex_unlock(&hcq__mpi_state.lock);
  rd->dev = dev;
  rd->rank = c->rank;
  atomic_store_explicit(&hcq__mpi_id_rank[rd->id], c->rank + 1, memory_order_release);
  snprintf(rd->local_name, sizeof(rd->local_name), "%s:%d", hcq_device_kind_name(c->kind),
           c->index);
  for (int k = 0; k < 2; k++) pthread_mutex_init(&rd->q[k].lock, NULL);
  pthread_mutex_init(&rd->mem_lock, NULL);
  snprintf(dev->name, sizeof(dev->name), "%s", c->name);
  dev->vt = &remote_vtable;
  dev->backend = rd;
  const hcq__backend_t *row = hcq__backend(c->kind);
  uint32_t kind_caps = row ? row->kernel_caps : 0;
  dev->caps = HCQ_CAP_IN_ORDER_QUEUES | HCQ_CAP_COPY_QUEUE | HCQ_CAP_HOST_MEMORY | HCQ__CAP_REMOTE |
              kind_caps;
  dev->threads = 0;
  pthread_mutex_lock(&hcq__mpi_state.lock);
  rd->next = hcq__mpi_state.devices;
  hcq__mpi_state.devices = rd;
  pthread_mutex_unlock(&hcq__mpi_state.lock);
  return NULL;
}

/* "1/CPU:0" -> rank 1, "CPU:0". */
hcq_status_t hcq__mpi_remote_open(const char *name, const hcq_device_options_t *options,
                                  hcq_device_t **out) {
  const char *slash = strchr(name, '/');
  char *end;
  errno = 0;
  long rank = strtol(name, &end, 10);
  if (end != slash || slash == name || errno || rank < 0)
    return hcq_status_make(HCQ_NOT_FOUND,
                           "unknown device \"%.64s\": a rank-qualified name is RANK/KIND:N", name);
  if (rank >= hcq__mpi_state.size)
    return hcq_status_make(HCQ_NOT_FOUND,
                           "unknown device \"%.64s\": rank %ld does not exist (%d ranks)", name,
                           rank, hcq__mpi_state.size);
  if (strchr(slash + 1, '/'))
    return hcq_status_make(HCQ_NOT_FOUND, "unknown device \"%.64s\": one rank per name", name);
  if (rank == hcq__mpi_state.rank) return hcq_device_open_ex(slash + 1, options, out);
  /* Parse the rest with the core's own rules, through a throw-away probe of the name's syntax. */
  const char *rest = slash + 1;
  const char *colon = strchr(rest, ':');
  size_t klen = colon ? (size_t)(colon - rest) : strlen(rest);
  int kind = -1;
  for (int k = 0; k < HCQ_DEVICE_KIND_COUNT; k++) {
    const char *kn = hcq_device_kind_name((hcq_device_kind_t)k);
    if (strlen(kn) == klen && !strncasecmp(kn, rest, klen)) kind = k;
  }
  long index = 0;
  if (colon) {
    errno = 0;
    index = strtol(colon + 1, &end, 10);
    if (!colon[1] || *end || errno || index < 0 || index >= 1024) kind = -1;
  }
  if (kind < 0)
    return hcq_status_make(HCQ_NOT_FOUND, "unknown device \"%.64s\" on rank %ld", name, rank);
  if (options && (options->timeline_start || options->isolate || options->threads))
    return hcq_status_make(HCQ_INVALID_ARGUMENT,
                           "device %s: options apply on its own rank, not to a remote device",
                           name);
  char canon[32];
  snprintf(canon, sizeof(canon), "%ld/%s:%ld", rank, hcq_device_kind_name((hcq_device_kind_t)kind),
           index);
  mpi_create_ctx_t c = {canon, (int)rank, (hcq_device_kind_t)kind, (int)index};
  return hcq__device_open_with(canon, (hcq_device_kind_t)kind, (int)index, remote_create, &c, out);
}
