/* Private structures of the HCQ core and the contract between the core and device backends. */
#ifndef HCQ_CORE_INTERNAL_H
#define HCQ_CORE_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "core/symset.h"
#include "core/vec.h"
#include "hcq/buffer.h"
#include "hcq/device.h"
#include "hcq/program.h"
#include "hcq/queue.h"
#include "hcq/signal.h"

/* ---- options: every HCQ_* environment variable, read once ---- */

typedef struct hcq__options {
  int64_t wait_timeout_ms;  /* HCQ_WAIT_TIMEOUT_MS */
  unsigned cpu_threads;     /* HCQ_CPU_THREADS: threads per CPU device sharing a launch's groups */
  uint64_t cpu_min_parallel; /* HCQ_CPU_MIN_PARALLEL: work-items (groups x group size) before a launch is split */
  uint64_t spin_ns;         /* HCQ_SPIN_NS: how long waiters spin before sleeping */
  uint64_t staging_chunk;   /* HCQ_STAGING_CHUNK: bytes per host-transfer staging buffer */
  uint64_t kernargs_ring;   /* HCQ_KERNARGS_RING: bytes of the eager kernel-argument ring */
  unsigned jit_batch_size;  /* HCQ_JIT_BATCH_SIZE: first capture batch size */
  /* CPU kernel compiler and cache (docs/kernel-cache.md), kept whole: src/cpu/cpu_compile.c splits
   * and checks them. NULL only when memory ran out while reading them. */
  const char *cc;             /* HCQ_CC: compiler command, may carry arguments */
  const char *cflags;         /* HCQ_CFLAGS */
  const char *cache_dir;      /* HCQ_CACHE_DIR, else $XDG_CACHE_HOME/hcq, ~/.cache/hcq, $TMPDIR/hcq-cache-<euid> */
  const char *cache_dir_from; /* the variable cache_dir came from, for messages */
  const char *tmp_dir;        /* TMPDIR, else /tmp: private build directories when not caching */
} hcq__options_t;

const hcq__options_t *hcq__options(void);

/* ---- time and spinning ---- */

uint64_t hcq__now_ns(void);

/* One step of a spin-wait: a pause instruction at first, then yielding the CPU, so that on a
 * machine with more busy threads than cores a spinner does not starve the thread it waits for. */
void hcq__spin_step(unsigned iteration);

/* ---- command words ----
 * Every command starts with a header word: opcode in the low 8 bits, length in words above.
 * 64-bit operands take two words, low first. CALL and JUMP appear only in device rings. */
#define HCQ__OPS(X)      \
  X(NOP, 1)              \
  X(WAIT, 4)             \
  X(SIGNAL, 4)           \
  X(TIMESTAMP, 3)        \
  X(BARRIER, 1)          \
  X(EXEC, 12)            \
  X(COPY, 7)             \
  X(CALL, 4)             \
  X(JUMP, 1)

enum {
#define HCQ__OP_ENUM(name, len) HCQ__OP_##name,
  HCQ__OPS(HCQ__OP_ENUM)
#undef HCQ__OP_ENUM
};
enum {
#define HCQ__OP_LEN(name, len) HCQ__LEN_##name = len,
  HCQ__OPS(HCQ__OP_LEN)
#undef HCQ__OP_LEN
};

#define HCQ__HDR(op) ((uint32_t)HCQ__OP_##op | ((uint32_t)HCQ__LEN_##op << 8))
#define HCQ__HDR_OP(w) ((w) & 0xffu)
#define HCQ__HDR_LEN(w) ((w) >> 8)

/* Operand positions (word offsets from the header). */
enum {
  HCQ__WAIT_ADDR = 1, HCQ__WAIT_VALUE = 3,
  HCQ__SIGNAL_ADDR = 1, HCQ__SIGNAL_VALUE = 3,
  HCQ__TIMESTAMP_ADDR = 1,
  HCQ__EXEC_FN = 1, HCQ__EXEC_ARGS = 3, HCQ__EXEC_NBUFS = 5, HCQ__EXEC_GLOBAL = 6, HCQ__EXEC_LOCAL = 9,
  HCQ__COPY_DST = 1, HCQ__COPY_SRC = 3, HCQ__COPY_SIZE = 5,
  HCQ__CALL_PTR = 1, HCQ__CALL_LEN = 3,
};

static inline uint64_t hcq__rd64(const uint32_t *w) {
  uint64_t v;
  memcpy(&v, w, sizeof(v));
  return v;
}
static inline void hcq__wr64(uint32_t *w, uint64_t v) { memcpy(w, &v, sizeof(v)); }

/* ---- signals in device memory ---- */

typedef struct hcq__signal_words {
  _Atomic uint64_t value;
  _Atomic uint64_t timestamp;
} hcq__signal_words_t;

/* Stores value and wakes sleepers. The store is its last access to *s: a waiter that sees the value
 * may free the signal at once, so sleepers are counted in a table outside signal memory. */
void hcq__signal_words_set(hcq__signal_words_t *s, uint64_t value);
/* Waits until value >= want, spinning then sleeping; deadline_ns 0 means forever. Returns false on
 * timeout, with the last value seen in *seen. */
bool hcq__signal_words_wait(hcq__signal_words_t *s, uint64_t want, uint64_t deadline_ns, uint64_t *seen);

/* Futex helpers on a 32-bit word. */
void hcq__futex_wait(_Atomic uint32_t *word, uint32_t expected, uint64_t timeout_ns);
void hcq__futex_wake(_Atomic uint32_t *word);

/* ---- device memory ---- */

typedef struct hcq__mem {
  uint64_t addr; /* device address */
  void *host;    /* host mapping (NULL when not host visible) */
  uint64_t size;
  void *handle; /* backend's own */
} hcq__mem_t;

/* ---- backends ----
 * Every member is mandatory unless marked optional. The core validates arguments and holds the
 * device lock where stated; backends trust what they are given. */
typedef struct hcq__program_impl {
  uint64_t handle; /* what EXEC carries: on CPU the kernel function pointer */
  void *object;    /* backend's loaded module, or NULL */
} hcq__program_impl_t;

typedef struct hcq__device_vtable {
  /* Stops workers and frees backend state. Called with no work pending. */
  void (*destroy)(hcq_device_t *dev);
  /* Allocates zeroed, host-visible device memory aligned to at least 64 bytes. */
  hcq_status_t (*mem_alloc)(hcq_device_t *dev, uint64_t size, hcq__mem_t *out);
  void (*mem_free)(hcq_device_t *dev, hcq__mem_t *mem);
  /* Hands words to the queue engine of kind. bound: words live in device memory that stays valid
   * until the work finished (no copy needed). Called under the device lock; may block while the
   * engine's ring is full, up to the wait timeout. */
  hcq_status_t (*submit)(hcq_device_t *dev, hcq_queue_kind_t kind, const uint32_t *words, size_t nwords, bool bound);
  /* Waits until every queue engine has run all it was given (raw queue submissions are not on the
   * timeline). TIMEOUT after timeout_ms. */
  hcq_status_t (*wait_idle)(hcq_device_t *dev, int64_t timeout_ms);
  /* Compiles source for entry. Optional: NULL means the device cannot compile. */
  hcq_status_t (*program_compile)(hcq_device_t *dev, const char *entry, const char *source, hcq__program_impl_t *out);
  /* Releases what program_compile made. Optional. */
  void (*program_unload)(hcq_device_t *dev, hcq__program_impl_t *impl);
} hcq__device_vtable_t;

typedef struct hcq__deferred {
  uint64_t fence; /* timeline value after which the object is unused */
  int kind;       /* 0: device memory, 1: program */
  hcq__mem_t mem;
  hcq_program_t *program;
} hcq__deferred_t;

#define HCQ__KERNARGS_SEGMENTS 16
#define HCQ__STAGING_SLOTS 2

struct hcq_device {
  const hcq__device_vtable_t *vt;
  void *backend;
  char name[32];
  hcq_device_kind_t kind;
  int index;
  uint64_t order; /* creation order: devices are locked in this order */
  uint32_t caps;
  unsigned threads;
  int open_refs;     /* registry references, under the registry lock */
  atomic_long live;  /* buffers, programs, signals and graphs not yet freed */

  pthread_mutex_t lock; /* submissions, the timeline, the eager state below */
  hcq_signal_t *timeline, *shadow_timeline;
  uint64_t timeline_value;

  hcq_queue_t *eager_compute, *eager_copy; /* scratch queues, rebuilt per eager command */
  hcq__mem_t kernargs;
  uint64_t kernargs_head;
  uint64_t kernargs_fence[HCQ__KERNARGS_SEGMENTS];
  hcq__mem_t staging[HCQ__STAGING_SLOTS];
  uint64_t staging_fence[HCQ__STAGING_SLOTS];
  unsigned staging_next;
  HCQ__VEC(hcq__deferred_t) deferred;
};

struct hcq_signal {
  hcq_device_t *dev;
  hcq__mem_t mem;
  hcq__signal_words_t *words;
  char name[64];
};

struct hcq_buffer {
  atomic_uint refs;
  hcq_device_t *dev;
  hcq_buffer_t *base; /* NULL for a base buffer */
  uint64_t offset, size, addr;
  hcq__mem_t mem; /* base buffers only */
  uint64_t id;
  char label[64];
};

struct hcq_program {
  atomic_uint refs;
  hcq_device_t *dev;
  hcq__program_impl_t impl;
  char name[64];
  char *source; /* NULL for function-pointer programs */
};

typedef enum { HCQ__FIELD_U32, HCQ__FIELD_I32, HCQ__FIELD_U64 } hcq__field_t;

typedef struct hcq__patch {
  uint32_t sym;
  uint32_t next;       /* next patch of the same symbol, UINT32_MAX ends */
  uint8_t field;       /* hcq__field_t */
  uint8_t in_memory;   /* 0: queue words at offset (in words); 1: mem at offset (in bytes) */
  uint64_t offset;
  hcq_buffer_t *mem;
} hcq__patch_t;

struct hcq_queue {
  hcq_queue_kind_t kind;
  HCQ__VEC(uint32_t) words;
  hcq__symset_t syms;
  HCQ__VEC(hcq__patch_t) patches;
  HCQ__VEC(uint32_t) sym_head;   /* first patch of each symbol */
  HCQ__VEC(int64_t) sym_lo;      /* narrowest range a symbol's fields accept */
  HCQ__VEC(int64_t) sym_hi;
  HCQ__VEC(int64_t) sym_last;    /* value written by the previous submit */
  HCQ__VEC(int64_t) sym_new;
  bool submitted;
  HCQ__VEC(hcq_program_t *) programs; /* retained */
  HCQ__VEC(hcq_buffer_t *) mems;      /* retained */
  hcq_device_t *device;               /* the device its programs and memory belong to, if any */
  hcq_device_t *bound_dev;
  hcq__mem_t bound;
  bool retain_refs; /* false for the eager scratch queues, whose objects outlive their work anyway */
  size_t last_patch_writes; /* patch points the last submit rewrote (tests prove O(changed) with it) */
};

/* ---- core internals shared by modules ---- */

/* Device registry and locking. */
void hcq__device_lock_many(hcq_device_t *const *devs, size_t n);
void hcq__device_unlock_many(hcq_device_t *const *devs, size_t n);
/* Under the device lock: wraps the timeline when due (waiting for all work first). */
hcq_status_t hcq__device_prepare_submit(hcq_device_t *dev);
/* Under the device lock: waits until the device timeline reached value. */
hcq_status_t hcq__device_wait_timeline(hcq_device_t *dev, uint64_t value);
/* Under the device lock: waits for all submitted work and wraps the timeline when due. */
hcq_status_t hcq__device_synchronize_locked(hcq_device_t *dev);
/* Frees memory / unloads a program once the device timeline passes the current value. */
void hcq__device_defer_mem(hcq_device_t *dev, hcq__mem_t mem);
void hcq__device_defer_program(hcq_device_t *dev, hcq_program_t *program);
/* Unloads and frees a program whose work is done. */
void hcq__program_destroy(hcq_program_t *program);
/* Reclaims deferred objects whose fence has passed (device lock held). */
void hcq__device_reclaim(hcq_device_t *dev);
hcq_status_t hcq__signal_create_internal(hcq_device_t *dev, const char *name, uint64_t value, hcq_signal_t **out);
void hcq__signal_free_internal(hcq_signal_t *sig);

/* Queue internals for the eager path: recording without references, resetting for reuse, and
 * submitting while the caller holds the device lock. */
hcq_status_t hcq__queue_create(hcq_queue_kind_t kind, bool retain_refs, hcq_queue_t **out);
void hcq__queue_reset(hcq_queue_t *q);
hcq_status_t hcq__queue_submit_locked(hcq_queue_t *q, hcq_device_t *dev, const hcq_var_value_t *vals, size_t nvals);
/* Submit in two steps, for callers that submit several queues all-or-nothing: prepare evaluates
 * every symbol and checks every field (nothing written); commit patches what changed and submits
 * (device lock held). No other prepare of q may come between. */
hcq_status_t hcq__queue_prepare(hcq_queue_t *q, const hcq_var_value_t *vals, size_t nvals);
hcq_status_t hcq__queue_commit_locked(hcq_queue_t *q, hcq_device_t *dev);
/* Kernel-argument block written with constants only (eager path). */
void hcq__kernargs_fill(void *host, hcq_buffer_t *const *bufs, size_t nbufs, const int32_t *vals, size_t nvals);

/* Capture: while a thread records, successful eager work is reported to its recorder (installed
 * by the capture layer). hcq_exec_item_run reports the item itself with its symbols. */
struct hcq_exec_item;
typedef struct hcq__recorder {
  void (*launch)(void *ctx, const hcq_launch_desc_t *desc);
  void (*transfer)(void *ctx, hcq_buffer_t *dst, hcq_buffer_t *src, uint64_t size);
  void (*item)(void *ctx, const struct hcq_exec_item *item);
  void (*host_copy)(void *ctx);
  void *ctx;
} hcq__recorder_t;
extern _Thread_local const hcq__recorder_t *hcq__recorder;

/* Backends. */
hcq_status_t hcq__cpu_device_create(int index, hcq_device_t *dev);
hcq_status_t hcq__cuda_device_create(int index, hcq_device_t *dev);
void hcq__cuda_query(hcq_device_info_t *info);

#endif
