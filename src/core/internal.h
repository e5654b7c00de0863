/* Private structures of the HCQ core and the contract between the core and device backends. */
#ifndef HCQ_CORE_INTERNAL_H
#define HCQ_CORE_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "core/capture.h"
#include "core/symset.h"
#include "core/vec.h"
#include "hcq/buffer.h"
#include "hcq/device.h"
#include "hcq/fence.h"
#include "hcq/memory.h"
#include "hcq/program.h"
#include "hcq/queue.h"
#include "hcq/signal.h"

#include "core/export.h"

/* ---- options: every HCQ_* environment variable, read once ---- */

/* The CPU kernels' flags when HCQ_CFLAGS is unset (docs/kernel-cache.md). */
#define HCQ__DEFAULT_CFLAGS "-O2 -march=native -ffp-contract=off"

typedef struct hcq__options {
  int64_t wait_timeout_ms;  /* HCQ_WAIT_TIMEOUT_MS */
  unsigned cpu_threads;     /* HCQ_CPU_THREADS: threads per CPU device (0: the core budget decides) */
  unsigned graph_inflight;  /* HCQ_GRAPH_INFLIGHT: replays of one graph in flight at once (default 2) */
  uint64_t cpu_min_parallel; /* HCQ_CPU_MIN_PARALLEL: work-items (groups x group size) before a launch is split */
  uint64_t spin_ns;         /* HCQ_SPIN_NS: how long waiters spin before sleeping */
  uint64_t staging_chunk;   /* HCQ_STAGING_CHUNK: bytes per host-transfer staging buffer */
  uint64_t kernargs_ring;   /* HCQ_KERNARGS_RING: bytes of the eager kernel-argument ring */
  unsigned jit_batch_size;  /* HCQ_JIT_BATCH_SIZE: first capture batch size */
  bool validate;            /* HCQ_VALIDATE: check handles (released, double release, closed device) */
  bool cpu_isolate;         /* HCQ_CPU_ISOLATE: a faulting CPU kernel marks its device lost instead of killing */
  bool vulkan_virtual;      /* HCQ_VULKAN_VIRTUAL: VULKAN:N past the last GPU opens more logical devices */
  char profile[1024];       /* HCQ_PROFILE: "" off; "1" on; otherwise on, and a path for the trace */
  /* CPU kernel compiler and cache (docs/kernel-cache.md), kept whole: src/cpu/cpu_compile.c splits
   * and checks them. NULL only when memory ran out while reading them. */
  const char *cc;             /* HCQ_CC: compiler command, may carry arguments */
  const char *cflags;         /* HCQ_CFLAGS (default HCQ__DEFAULT_CFLAGS) */
  const char *cache_dir;      /* HCQ_CACHE_DIR, else $XDG_CACHE_HOME/hcq, ~/.cache/hcq, $TMPDIR/hcq-cache-<euid> */
  const char *cache_dir_from; /* the variable cache_dir came from, for messages */
  uint64_t cache_max_bytes;   /* HCQ_CACHE_MAX_MB in bytes; 0: no cap */
  const char *tmp_dir;        /* TMPDIR, else /tmp: private build directories when not caching */
  char cuda_library[256];   /* HCQ_CUDA_LIBRARY: the driver library (libcuda.so.1; tests name a stand-in) */
  char nvrtc_library[256];  /* HCQ_NVRTC_LIBRARY: "" finds NVRTC by the names toolkits install */
  char cuda_arch[32];       /* HCQ_CUDA_ARCH: "" compiles for the device; "sm_90" compiles for that */
} hcq__options_t;

HCQ__PRIVATE_EXPORT const hcq__options_t *hcq__options(void);

/* ---- text ---- */

/* [A-Za-z_][A-Za-z0-9_]* */
bool hcq__is_c_identifier(const char *s);
/* s in double quotes, with \n, \t, \", \\ and \xNN for what would not print (cut to fit size). */
void hcq__quote(const char *s, char *out, size_t size);

/* ---- time and spinning ---- */

HCQ__PRIVATE_EXPORT uint64_t hcq__now_ns(void);

/* A cheaper hcq__now_ns for device timestamps (the CPU engine takes one per profiled item): the
 * time-stamp counter scaled to CLOCK_MONOTONIC, re-anchored on the real clock every ~1 ms, where the
 * kernel keeps time with an invariant TSC; hcq__now_ns elsewhere. One per thread; zero-initialised. */
typedef struct hcq__fast_clock {
  uint64_t tsc0, ns0;    /* first anchor: the scale is measured from it */
  uint64_t tsc, ns;      /* last anchor */
  uint64_t span, last;   /* ticks between anchors; the last value returned (never goes back) */
  double ns_per_tick;    /* 0 until measured over >= 10 ms */
  int state;             /* 0 unknown, 1 usable, -1 not usable here */
} hcq__fast_clock_t;
uint64_t hcq__fast_clock_now(hcq__fast_clock_t *c);

/* One step of a spin-wait: a pause instruction at first, then yielding the CPU, so that on a
 * machine with more busy threads than cores a spinner does not starve the thread it waits for. */
HCQ__PRIVATE_EXPORT void hcq__spin_step(unsigned iteration);
/* The same with the number of pause iterations before yielding. */
void hcq__spin_step_after(unsigned iteration, unsigned pauses);

/* ---- command words ----
 * Every command starts with a header word: opcode in the low 8 bits, length in words above.
 * 64-bit operands take two words, low first. CALL and JUMP appear only in device rings.
 * WAIT, EXEC and COPY carry a tag (the graph item index + 1, or 0) and EXEC the hcq_program_t it
 * runs, so a hang report or a crash message can name the item and the kernel from the words alone. */
#define HCQ__OPS(X)      \
  X(NOP, 1)              \
  X(WAIT, 5)             \
  X(SIGNAL, 4)           \
  X(TIMESTAMP, 3)        \
  X(BARRIER, 1)          \
  X(EXEC, 15)            \
  X(COPY, 8)             \
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

/* The longest command (EXEC). */
#define HCQ__MAX_CMD_WORDS 15

#define HCQ__HDR(op) ((uint32_t)HCQ__OP_##op | ((uint32_t)HCQ__LEN_##op << 8))
#define HCQ__HDR_OP(w) ((w) & 0xffu)
#define HCQ__HDR_LEN(w) ((w) >> 8)

/* Operand positions (word offsets from the header). */
enum {
  HCQ__WAIT_ADDR = 1, HCQ__WAIT_VALUE = 3, HCQ__WAIT_TAG = 4,
  HCQ__SIGNAL_ADDR = 1, HCQ__SIGNAL_VALUE = 3,
  HCQ__TIMESTAMP_ADDR = 1,
  HCQ__EXEC_FN = 1, HCQ__EXEC_ARGS = 3, HCQ__EXEC_NBUFS = 5, HCQ__EXEC_GLOBAL = 6, HCQ__EXEC_LOCAL = 9,
  HCQ__EXEC_TAG = 12, HCQ__EXEC_PROGRAM = 13,
  HCQ__COPY_DST = 1, HCQ__COPY_SRC = 3, HCQ__COPY_SIZE = 5, HCQ__COPY_TAG = 7,
  HCQ__CALL_PTR = 1, HCQ__CALL_LEN = 3,
};

/* Command words are read and written as host integers; the encoding assumes little-endian 64-bit
 * operands split low word first, which is what every supported host is. */
_Static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "hcq command words assume a little-endian host");

static inline uint64_t hcq__rd64(const uint32_t *w) {
  uint64_t v;
  memcpy(&v, w, sizeof(v));
  return v;
}
static inline void hcq__wr64(uint32_t *w, uint64_t v) { memcpy(w, &v, sizeof(v)); }

/* A CALL of a bound command list, as rings carry it (call has HCQ__LEN_CALL words). */
static inline void hcq__encode_call(uint32_t *call, const uint32_t *words, size_t nwords) {
  call[0] = HCQ__HDR(CALL);
  hcq__wr64(call + HCQ__CALL_PTR, (uint64_t)(uintptr_t)words);
  call[HCQ__CALL_LEN] = (uint32_t)nwords;
}

/* Joins t once *exited is set, or detaches it at deadline_ns and returns false (a thread stuck in a
 * kernel is abandoned, never waited for). */
bool hcq__join_by(pthread_t t, _Atomic bool *exited, uint64_t deadline_ns);

/* ---- signals in device memory ---- */

typedef struct hcq__signal_words {
  _Atomic uint64_t value;
  _Atomic uint64_t timestamp;
} hcq__signal_words_t;

/* Stores value and wakes sleepers. The store is its last access to *s: a waiter that sees the value
 * may free the signal at once, so sleepers are counted in a table outside signal memory. */
HCQ__PRIVATE_EXPORT void hcq__signal_words_set(hcq__signal_words_t *s, uint64_t value);
/* Waits until value >= want, spinning then sleeping; deadline_ns 0 means forever. Returns
 * HCQ__WAIT_REACHED, HCQ__WAIT_TIMEOUT, or HCQ__WAIT_LOST when one of the watched devices (may be
 * NULL/0) is declared lost meanwhile; *seen is the last value read. */
enum { HCQ__WAIT_REACHED, HCQ__WAIT_TIMEOUT, HCQ__WAIT_LOST };
int hcq__signal_words_wait(hcq__signal_words_t *s, uint64_t want, uint64_t deadline_ns, hcq_device_t *const *watch,
                           size_t nwatch, uint64_t *seen);
/* Sleeping on a signal's bucket while also waiting for something else (an engine serving two
 * queues): begin registers as a sleeper and reads the bucket's sequence; sleep with
 * hcq__futex_wait(p.word, p.seq, ...) after re-checking every condition; end unregisters. Anyone
 * may bump *p.word and wake it to end the sleep early. */
typedef struct hcq__park {
  _Atomic uint32_t *word, *sleepers;
  uint32_t seq;
} hcq__park_t;
HCQ__PRIVATE_EXPORT void hcq__park_begin(const hcq__signal_words_t *s, hcq__park_t *p);
HCQ__PRIVATE_EXPORT void hcq__park_end(hcq__park_t *p);
/* Wakes every sleeping waiter in the process, so each re-checks its condition (device lost). */
void hcq__signal_wake_all(void);
/* Devices whose hardware writes signals without waking host sleepers (a GPU writing host memory)
 * count themselves here while open (+1 on create, -1 on destroy). While any is open, sleeping
 * waiters wake at least every millisecond (sooner at first) to look again, and call the vtable's
 * poll for the devices they watch. */
void hcq__signal_device_writers_add(int delta);
/* now + timeout_ms, saturating; 0 never (forever) results from a finite timeout. */
HCQ__PRIVATE_EXPORT uint64_t hcq__deadline_after_ms(int64_t timeout_ms);

/* Futex helpers on a 32-bit word. */
HCQ__PRIVATE_EXPORT void hcq__futex_wait(_Atomic uint32_t *word, uint32_t expected, uint64_t timeout_ns);
HCQ__PRIVATE_EXPORT void hcq__futex_wake(_Atomic uint32_t *word);

/* ---- device memory ---- */

typedef struct hcq__mem {
  uint64_t addr; /* device address */
  void *host;    /* host mapping (NULL when not host visible) */
  uint64_t size;
  void *handle; /* backend's own */
} hcq__mem_t;

/* mem_alloc flags. */
enum {
  HCQ__MEM_HOST_VISIBLE = 1u << 0, /* host must read and write it through mem.host (signals, kernargs,
                                      staging, bound command words) */
  HCQ__MEM_MAPPED = 1u << 1,       /* kernels use it and the host maps it (hcq_buffer_create_mapped):
                                      backends whose device memory is not host-visible allocate such
                                      memory if they can; the core checks mem.host */
};

/* ---- live objects ----
 * Every buffer, program, public signal and graph of a device is on the device's object list, so a
 * failed close names them. With HCQ_VALIDATE=1 a released object keeps its struct (marked dead) so
 * passing it again is reported by name. */
typedef enum { HCQ__OBJ_BUFFER, HCQ__OBJ_PROGRAM, HCQ__OBJ_SIGNAL, HCQ__OBJ_GRAPH } hcq__obj_kind_t;
enum { HCQ__OBJ_LIVE = 0x4c495645u, HCQ__OBJ_DEAD = 0x44454144u };

typedef struct hcq__obj {
  struct hcq__obj *prev, *next;
  hcq_device_t *dev;
  const char *label; /* the object's name, valid as long as the object */
  _Atomic uint32_t state;
  uint8_t kind;      /* hcq__obj_kind_t */
} hcq__obj_t;

/* Puts obj on dev's list (and holds the device's struct); remove takes it off. */
void hcq__obj_add(hcq_device_t *dev, hcq__obj_t *obj, hcq__obj_kind_t kind, const char *label);
void hcq__obj_remove(hcq__obj_t *obj);
/* Validation (HCQ_VALIDATE=1): NULL when obj is a live object of kind on an open device, else an
 * error naming it and what is wrong. Cheap NULL when validation is off. what names the argument. */
hcq_status_t hcq__obj_check(const hcq__obj_t *obj, hcq__obj_kind_t kind, const char *what);
/* Validation: true when obj was released already (prints the complaint to stderr). */
bool hcq__obj_released_again(const hcq__obj_t *obj, const char *call);
extern bool hcq__validating;
/* Keeps p allocated and reachable for the rest of the process (validation quarantine, abandoned
 * memory). */
void hcq__keep(void *p);
extern atomic_ulong hcq__validation_errors;

/* ---- engine state for hang reports ---- */
typedef struct hcq__engine_snapshot {
  bool present;           /* the queue kind exists on the device */
  uint64_t submitted;     /* progress counters (backend units) */
  uint64_t completed;
  const uint32_t *cur;    /* the command running or blocked now; NULL when idle */
  const uint32_t *prev;   /* the last command completed in the same command list; may be NULL */
  const uint32_t *call_base; /* the bound command list cur belongs to (NULL: the device ring) */
  /* When the engine began cur (hcq__now_ns's clock), where it says; 0 when it does not, and the
   * report falls back to when it first saw cur there. */
  uint64_t cur_since_ns;
  /* A backend that frees command words once they ran copies cur's and prev's here, under the lock
   * its engine frees them under, and sets words_copied: the report reads these, and uses cur and
   * prev only as identities. */
  bool words_copied;
  uint32_t cur_words[HCQ__MAX_CMD_WORDS], prev_words[HCQ__MAX_CMD_WORDS];
} hcq__engine_snapshot_t;

/* Copies the command at w (its header says its length, at most HCQ__MAX_CMD_WORDS) to out. */
static inline void hcq__copy_command(const uint32_t *w, uint32_t out[HCQ__MAX_CMD_WORDS]) {
  uint32_t len = HCQ__HDR_LEN(w[0]);
  memcpy(out, w, (len < HCQ__MAX_CMD_WORDS ? len : HCQ__MAX_CMD_WORDS) * sizeof(uint32_t));
}

/* ---- backends ----
 * Every member is mandatory unless marked optional. The core validates arguments and holds the
 * device lock where stated; backends trust what they are given. */
typedef struct hcq__program_impl {
  uint64_t handle; /* what EXEC carries: on CPU the kernel function pointer */
  void *object;    /* backend's loaded module, or NULL */
  /* What the kernel reads, where the backend knows it from the compiled code (CUDA: the PTX
   * parameter list): hcq__args_pack(nbufs, nvals, HCQ__ARGS_FROM_BACKEND); 0 when unknown. */
  uint32_t args;
} hcq__program_impl_t;

/* A program's argument counts in one word (launches on any thread read it with one relaxed load):
 * bits 0-15 values, 16-29 buffers, 30-31 where they come from; 0 means not known. */
enum { HCQ__ARGS_DECLARED = 1u << 30, HCQ__ARGS_FROM_BACKEND = 2u << 30 };
static inline uint32_t hcq__args_pack(size_t nbufs, size_t nvals, uint32_t from) {
  return from | (uint32_t)nbufs << 16 | (uint32_t)nvals;
}

typedef struct hcq__device_vtable {
  /* Frees backend state after stop (engines gone); memory the core allocated is freed before. */
  void (*destroy)(hcq_device_t *dev);
  /* Stops the engines before destroy: joins them once their work is done, or, on a lost device,
   * once they dropped it. Returns true when a thread is stuck (in a kernel that never returns) and
   * was abandoned: then the core keeps, never frees, the device and its memory, and destroy is not
   * called. */
  bool (*stop)(hcq_device_t *dev);
  /* Allocates zeroed device memory aligned to at least 64 bytes; flags HCQ__MEM_*. Memory a
   * backend cannot give a host mapping for is allowed only without HCQ__MEM_HOST_VISIBLE. Pages may
   * stay untouched (and unbacked) until used. */
  hcq_status_t (*mem_alloc)(hcq_device_t *dev, uint64_t size, uint32_t flags, hcq__mem_t *out);
  void (*mem_free)(hcq_device_t *dev, hcq__mem_t *mem);
  /* Makes sure a following submit of nwords (bound or not) to kind cannot block or fail: waits for
   * ring space up to the wait timeout (TIMEOUT naming the queue), or DEVICE_LOST. Called under the
   * device lock, which the caller keeps until the submit. */
  hcq_status_t (*reserve)(hcq_device_t *dev, hcq_queue_kind_t kind, size_t nwords, bool bound);
  /* Hands words to the queue engine of kind. bound: words live in device memory that stays valid
   * until the work finished (no copy needed). Called under the device lock; may block while the
   * engine's ring is full, up to the wait timeout (no blocking after a successful reserve). */
  hcq_status_t (*submit)(hcq_device_t *dev, hcq_queue_kind_t kind, const uint32_t *words, size_t nwords, bool bound);
  /* Progress of the queue engine of kind, in any monotonic unit: how much was handed to it and how
   * much of that finished. Deferred frees wait until completed passes what was submitted when the
   * object was released, which covers raw queue submissions, eager work and graphs alike. */
  uint64_t (*submitted)(hcq_device_t *dev, hcq_queue_kind_t kind);
  uint64_t (*completed)(hcq_device_t *dev, hcq_queue_kind_t kind);
  /* Waits until every queue engine has run all it was given (raw queue submissions are not on the
   * timeline). TIMEOUT after timeout_ms; DEVICE_LOST when the device is lost meanwhile. Optional:
   * NULL is hcq__device_wait_engines, which watches submitted/completed; a backend sets its own
   * only for a wait its driver offers or for work after the wait (it may call that one first). */
  hcq_status_t (*wait_idle)(hcq_device_t *dev, int64_t timeout_ms);
  /* What the engine of kind is doing now, for hang reports. Optional (NULL: reports say only the
   * progress counters... nothing). Any thread; must not block. */
  void (*snapshot)(hcq_device_t *dev, hcq_queue_kind_t kind, hcq__engine_snapshot_t *out);
  /* The device was declared lost: engines drop pending work and stop blocking (waits return).
   * Optional. Any thread. */
  void (*lost)(hcq_device_t *dev);
  /* Host waits on behalf of the device call it while they sleep between looks at a signal, for
   * devices that counted themselves with hcq__signal_device_writers_add: it checks for asynchronous
   * failures (a kernel that faulted) and marks the device lost when it finds one, so the wait ends
   * at once instead of at its timeout. Optional. Any thread; must not block. */
  void (*poll)(hcq_device_t *dev);
  /* A host thread waiting for a signal this device's queues will set runs them itself (up to a
   * kernel) instead of taking turns with the engine (docs/mpi.md, "Who runs a rank's queues"):
   * HCQ__HOST_BEGIN counts
   * it in, HCQ__HOST_RUN runs the queues when no other thread runs them and says 1 (they moved), 2
   * (they wait for a cross-rank transfer in flight, which the host polls), 0 (they wait, or another
   * thread runs them) or -1 (nothing for this host: the queues are empty, the signal comes from
   * elsewhere, or a kernel is next), HCQ__HOST_END counts it out and hands what is left back to the
   * engine. Optional. */
  int (*host_run)(hcq_device_t *dev, int step);
  /* Compiles source for entry. Optional: NULL means the device cannot compile. */
  hcq_status_t (*program_compile)(hcq_device_t *dev, const char *entry, const char *source, hcq__program_impl_t *out);
  /* Releases what program_compile made. Optional. */
  void (*program_unload)(hcq_device_t *dev, hcq__program_impl_t *impl);
  /* The memory the device has and what this process could still allocate on it now, as its driver
   * or the host reports them (hcq_device_memory); a field it cannot tell stays 0, and source names
   * where the numbers come from. Optional: NULL means the backend cannot tell (UNAVAILABLE). */
  hcq_status_t (*memory_info)(hcq_device_t *dev, hcq_device_memory_t *out);
  /* Whether the calling thread runs on the core the device's engine is pinned to while some core
   * runs no engine, so that a host waiting for it should sleep at once (the scheduler then moves
   * the thread) rather than spin. Optional (NULL: no engine is pinned). Any thread; must not block. */
  bool (*waiter_on_engine_core)(hcq_device_t *dev);
} hcq__device_vtable_t;

enum { HCQ__HOST_BEGIN, HCQ__HOST_RUN, HCQ__HOST_END };

typedef void (*hcq__wrap_release_fn)(void *ctx, void *host);

typedef struct hcq__deferred {
  uint64_t fence[2]; /* submitted() of each queue kind when released: unused once completed() passes */
  int kind;          /* 0: device memory, 1: program, 2: wrapped memory handed back to its owner */
  hcq__mem_t mem;
  hcq_program_t *program;
  hcq__wrap_release_fn on_release; /* kind 2 */
  void *release_ctx;
} hcq__deferred_t;

/* Memory accounting: live bytes per device in these classes (see hcq_device_memory_usage). */
typedef enum {
  HCQ__MEMC_BUFFERS,  /* base buffers (hcq_buffer_create) */
  HCQ__MEMC_KERNARGS, /* kernel-argument blocks of graphs */
  HCQ__MEMC_COMMANDS, /* bound command words (graph queues, bound queues) */
  HCQ__MEMC_PROFILE,  /* timestamp slots of profiled graphs */
  HCQ__MEMC_EAGER,    /* the device's eager kernel-argument ring and staging buffers */
  HCQ__MEMC_DEFERRED, /* released memory waiting for the engines (deferred frees) */
  HCQ__MEMC_COUNT
} hcq__mem_class_t;

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
  uint64_t max_work_items; /* per launch (groups x group size); 0: no limit */
  bool on_host_cores;      /* a GPU API whose kernels run on this machine's cores (lavapipe): a host
                              waiting for it sleeps at once rather than take a core from them */
  int open_refs;     /* registry references, under the registry lock */
  bool closing;      /* a close is waiting for the work (registry lock) */
  _Atomic bool closed; /* closed while lost, with objects still alive: freed when the last goes */
  _Atomic uint32_t state; /* HCQ__OBJ_LIVE while open; HCQ__OBJ_DEAD once closed (validation) */
  atomic_uint struct_refs; /* the registry's + one per live object: the struct outlives close */

  pthread_mutex_t obj_lock; /* the object list */
  hcq__obj_t objects;       /* list head (circular) */
  long nobjects;

  _Atomic bool lost;
  char lost_reason[512];    /* written once, before lost is set */

  /* Hang-report watch: when each engine's current command was first seen unchanged. */
  pthread_mutex_t watch_lock;
  const uint32_t *watch_cmd[2];
  uint64_t watch_completed[2], watch_since[2];

  bool isolate;          /* a faulting kernel marks the device lost (HCQ_CPU_ISOLATE / options) */
  pthread_mutex_t lock; /* submissions, the timeline, the eager state below */
  pthread_mutex_t defer_lock; /* deferred */
  atomic_size_t ndeferred;
  hcq_signal_t *timeline, *shadow_timeline;
  uint64_t timeline_value;
  /* Wraps so far (written under the lock, read without it): a fence armed in an older epoch has
   * been reached, since a wrap waits for all work first (fence.c). */
  _Atomic uint64_t timeline_epoch;

  hcq_queue_t *eager_compute, *eager_copy; /* scratch queues, rebuilt per eager command */
  hcq__mem_t kernargs;
  uint64_t kernargs_head;
  uint64_t kernargs_fence[HCQ__KERNARGS_SEGMENTS];
  hcq__mem_t staging[HCQ__STAGING_SLOTS];
  uint64_t staging_fence[HCQ__STAGING_SLOTS];
  unsigned staging_next;
  HCQ__VEC(hcq__deferred_t) deferred;

  _Atomic int64_t mem_bytes[HCQ__MEMC_COUNT]; /* memory accounting, bytes per class (hcq/memory.h) */
  struct hcq__trace_device *trace;            /* profiler state (trace.c); NULL until profiled */
};

static inline void hcq__mem_count(hcq_device_t *dev, int mem_class, int64_t delta) {
  atomic_fetch_add_explicit(&dev->mem_bytes[mem_class], delta, memory_order_relaxed);
}

struct hcq_signal {
  hcq__obj_t obj; /* public signals only (internal ones are not on the device's list) */
  struct hcq_signal *reg_prev, *reg_next; /* process-wide registry, for naming signals by address */
  bool is_public;
  hcq_device_t *dev;
  hcq__mem_t mem;
  hcq__signal_words_t *words;
  char name[64];
};

struct hcq_buffer {
  hcq__obj_t obj;
  atomic_uint refs;
  hcq_device_t *dev;
  hcq_buffer_t *base; /* NULL for a base buffer */
  uint64_t offset, size, addr;
  hcq__mem_t mem; /* base buffers only */
  uint64_t id;
  uint8_t mem_class; /* hcq__mem_class_t its bytes count in (base buffers) */
  bool wrapped;      /* memory the application owns (hcq_buffer_wrap): handed back, never freed */
  hcq__wrap_release_fn on_release;
  void *release_ctx;
  char label[64];
};

struct hcq_program {
  hcq__obj_t obj;
  atomic_uint refs;
  hcq_device_t *dev;
  hcq__program_impl_t impl;
  char name[64];
  char *source; /* NULL for function-pointer programs */
  _Atomic uint32_t args; /* hcq__args_pack(): declared, or known to the backend; 0 unknown */
};

/* Whether a launch with nbufs buffers and nvals values fits what p is known to take (cheap). */
static inline bool hcq__program_args_ok(const hcq_program_t *p, size_t nbufs, size_t nvals) {
  uint32_t a = atomic_load_explicit(&((hcq_program_t *)p)->args, memory_order_relaxed);
  return !a || (a & ~(3u << 30)) == hcq__args_pack(nbufs, nvals, 0);
}
/* INVALID_ARGUMENT "<who>: kernel K takes 2 buffers and 1 value (declared), ... passes 1 and 1" when
 * the counts do not fit; NULL when they do. */
hcq_status_t hcq__program_check_args(const hcq_program_t *p, size_t nbufs, size_t nvals, const char *who);

typedef enum { HCQ__FIELD_U32, HCQ__FIELD_I32, HCQ__FIELD_U64 } hcq__field_t;

typedef struct hcq__patch {
  uint32_t sym;
  uint32_t next;       /* next patch of the same symbol, UINT32_MAX ends */
  uint8_t field;       /* hcq__field_t */
  uint8_t in_memory;   /* 0: queue words at offset (in words); 1: mem at offset (in bytes) */
  uint16_t what;       /* which operand, for messages: hcq__operand_name() */
  uint32_t tag;        /* the queue's tag when recorded (graph item + 1) */
  uint64_t offset;
  hcq_buffer_t *mem;
} hcq__patch_t;

/* Operand names for messages: kind in the high byte, index in the low one. */
enum {
  HCQ__WHAT_SIGNAL_ADDR = 1 << 8, HCQ__WHAT_VALUE = 2 << 8, HCQ__WHAT_KERNARGS = 3 << 8,
  HCQ__WHAT_GLOBAL = 4 << 8, HCQ__WHAT_LOCAL = 5 << 8, HCQ__WHAT_COPY_DST = 6 << 8, HCQ__WHAT_COPY_SRC = 7 << 8,
  HCQ__WHAT_COPY_SIZE = 8 << 8, HCQ__WHAT_ARG_BUFFER = 9 << 8, HCQ__WHAT_ARG_VALUE = 10 << 8,
};
void hcq__operand_name(uint16_t what, char *out, size_t size);

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
  uint32_t tag;             /* stamped on WAIT/EXEC/COPY recorded from now on (graph item + 1) */
  hcq__symset_mark_t cmd_mark; /* symbols before the command being recorded (rollback) */
  const hcq__patch_t *failed_patch; /* after a failed prepare: the first patch of the failing symbol */
  struct hcq_queue *reg_prev, *reg_next; /* registry of bound queues, for hang reports */
  const char *label; /* set by owners (graphs): names the queue in reports; may be NULL */
};

/* Bound queues are registered so a report can tell which queue (and graph) a command belongs to. */
const hcq_queue_t *hcq__queue_find_bound(const uint32_t *word, char *label, size_t label_size);

/* ---- core internals shared by modules ---- */

/* Device state. NULL when dev is usable; DEVICE_LOST naming it (and why) when it was declared lost;
 * FAILED_PRECONDITION when closed. */
hcq_status_t hcq__device_check(hcq_device_t *dev);
static inline bool hcq__device_is_lost(const hcq_device_t *dev) {
  return atomic_load_explicit(&dev->lost, memory_order_acquire);
}
/* Declares dev lost (first reason wins); engines drop their work, waiters wake. */
HCQ__PRIVATE_EXPORT void hcq__device_mark_lost(hcq_device_t *dev, const char *fmt, ...) HCQ_PRINTF(2, 3);
/* Appends dev's hang report (one line per queue, see hcq_device_report) to st's message. */
hcq_status_t hcq__device_annotate_report(hcq_status_t st, hcq_device_t *const *devs, size_t ndevs);
/* Host wait for a signal on behalf of devs: a timeout carries their hang report, a lost device
 * ends it with DEVICE_LOST. timeout_ms < 0: the default. */
hcq_status_t hcq__wait_signal(const hcq_signal_t *sig, uint64_t value, int64_t timeout_ms, hcq_device_t *const *devs,
                              size_t ndevs);
/* Notes, for the hang report's "for at least N ms", what each engine of devs is doing now. */
void hcq__device_touch_watch(hcq_device_t *const *devs, size_t ndevs);
/* For calls given a device handle by the application: NULL when it is an open device; else, without
 * reading *dev, FAILED_PRECONDITION naming the device it was when it was closed (the last 256 closes
 * are remembered), or INVALID_ARGUMENT. call names the caller in the message. */
hcq_status_t hcq__device_handle_check(const hcq_device_t *dev, const char *call);
/* Drops a struct reference; the last one frees the device (closed devices only). */
void hcq__device_struct_release(hcq_device_t *dev);

/* Fences (fence.c): room for ndevices points, then arming (which cannot fail after the reserve). */
hcq_status_t hcq__fence_reserve(hcq_fence_t *fence, size_t ndevices);
void hcq__fence_arm(hcq_fence_t *fence, hcq_device_t *const *devices, size_t ndevices);

/* Device registry and locking. */
void hcq__device_lock_many(hcq_device_t *const *devs, size_t n);
void hcq__device_unlock_many(hcq_device_t *const *devs, size_t n);
/* Under the device lock: wraps the timeline when due (waiting for all work first). */
hcq_status_t hcq__device_prepare_submit(hcq_device_t *dev);
/* Under the device lock: waits until the device timeline reached value. */
hcq_status_t hcq__device_wait_timeline(hcq_device_t *dev, uint64_t value);
/* The default wait_idle (see the vtable): polls completed() up to what submitted() said, calling
 * poll() between naps; TIMEOUT names the queue (closing adds the hang report). */
hcq_status_t hcq__device_wait_engines(hcq_device_t *dev, int64_t timeout_ms);
/* Under the device lock, after submitting work that signals the timeline's current value: the
 * next work signals the next one. The only writer of timeline_value besides open and wrap. */
void hcq__timeline_advance(hcq_device_t *dev);
/* Under the device lock: waits for all submitted work and wraps the timeline when due. */
hcq_status_t hcq__device_synchronize_locked(hcq_device_t *dev);
/* Frees memory / unloads a program once every engine of the device finished what it was given. */
void hcq__device_defer_mem(hcq_device_t *dev, hcq__mem_t mem);
/* Calls on_release(ctx, host) once the device's work submitted so far has finished. */
void hcq__device_defer_wrapped(hcq_device_t *dev, void *host, hcq__wrap_release_fn on_release, void *ctx);
void hcq__device_defer_program(hcq_device_t *dev, hcq_program_t *program);
/* Unloads and frees a program whose work is done. */
void hcq__program_destroy(hcq_program_t *program);
/* Reclaims deferred objects whose fence has passed (device lock held). */
void hcq__device_reclaim(hcq_device_t *dev);
hcq_status_t hcq__signal_create_internal(hcq_device_t *dev, const char *name, uint64_t value, hcq_signal_t **out);
/* Keeps a signal (and its memory) for the rest of the process: queues of other devices may still
 * wait on it and nothing tells when they stop (a graph destroyed while one of its devices is lost). */
void hcq__signal_abandon(hcq_signal_t *sig);
/* Frees a signal now (device destroy: nothing runs any more). */
void hcq__signal_destroy_now(hcq_signal_t *sig);
/* Frees a signal once the device's engines finished their work (a queue may still wait on it). */
void hcq__signal_free_internal(hcq_signal_t *sig);
/* Swaps two signals' names (the timeline and its shadow on a wrap: the live one keeps its name). */
void hcq__signal_swap_names(hcq_signal_t *a, hcq_signal_t *b);
/* The registered signal whose value word is at addr: copies its name and value; false if none. */
bool hcq__signal_lookup(uint64_t addr, char *name, size_t name_size, uint64_t *value, hcq_device_t **dev);
/* A buffer with a host mapping (kernargs, profile slots), for graphs. */
hcq_status_t hcq__buffer_create_host_visible(hcq_device_t *dev, uint64_t size, hcq_buffer_t **out);
/* Moves a base buffer's bytes to another accounting class (graph kernargs, profile slots). */
void hcq__buffer_set_mem_class(hcq_buffer_t *buf, hcq__mem_class_t mem_class);
/* A buffer as messages name it: its default label as it is ("buffer#5"), a label the user set
 * quoted after "buffer" ("buffer \"weights\""): never "buffer buffer#5". out holds 96 bytes. */
const char *hcq__buffer_name(const hcq_buffer_t *buf, char out[96]);
/* Launch geometry check: the grid in groups and the group size; OUT_OF_RANGE naming who when the
 * work-item count overflows or passes the device's limit. */
hcq_status_t hcq__check_dims(const hcq_device_t *dev, const uint64_t global[3], const uint64_t local[3], const char *who);
/* A transfer of size bytes whose source and destination share memory without being the same
 * range: INVALID_ARGUMENT naming both (who says which transfer). One rule for every backend, eager
 * and in graphs: CUDA and Vulkan leave such copies undefined. An identical range is allowed (every
 * byte keeps its value, whatever order the copy runs in). */
hcq_status_t hcq__transfer_overlap_check(const hcq_buffer_t *dst, const hcq_buffer_t *src, uint64_t size, const char *who);
/* The same check without a message: true when the launch is fine (cheap, for hot paths). */
bool hcq__dims_ok(const hcq_device_t *dev, const uint64_t global[3], const uint64_t local[3]);
/* INVALID_ARGUMENT "<who>: global[1] is 0 (launch dims must be >= 1; ...)": a constant 0 in a launch
 * dim is refused everywhere (eager launches, items, graph files); only a symbolic dim that evaluates to
 * 0 at replay makes an empty launch. */
hcq_status_t hcq__zero_dim_error(const char *dim, int index, const char *who_fmt, ...) HCQ_PRINTF(3, 4);

/* Queue internals for the eager path: recording without references, resetting for reuse, and
 * submitting while the caller holds the device lock. */
hcq_status_t hcq__queue_create(hcq_queue_kind_t kind, bool retain_refs, hcq_queue_t **out);
void hcq__queue_reset(hcq_queue_t *q);
/* Values handed to a public call (what names it): each names a variable (not NULL, not another
 * expression), and no variable twice. INVALID_ARGUMENT naming the value otherwise. */
hcq_status_t hcq__var_values_check(const hcq_var_value_t *vals, size_t nvals, const char *what);
hcq_status_t hcq__queue_submit_locked(hcq_queue_t *q, hcq_device_t *dev, const hcq_var_value_t *vals, size_t nvals);
/* Submit in two steps, for callers that submit several queues all-or-nothing: prepare evaluates
 * every symbol and checks every field (nothing written); commit patches what changed and submits
 * (device lock held). No other prepare of q may come between. */
hcq_status_t hcq__queue_prepare(hcq_queue_t *q, const hcq_var_value_t *vals, size_t nvals);
hcq_status_t hcq__queue_commit_locked(hcq_queue_t *q, hcq_device_t *dev);
/* Makes sure a following commit of q cannot block or fail (device lock held until the commit). */
hcq_status_t hcq__queue_reserve_locked(hcq_queue_t *q, hcq_device_t *dev);
/* Kernel-argument block written with constants only (eager path). */
void hcq__kernargs_fill(void *host, hcq_buffer_t *const *bufs, size_t nbufs, const int32_t *vals, size_t nvals);



/* Device creation and queries are the backend table's (core/backend.h). */

/* HCQ_VALIDATE=1: the check that a launch writes only the buffers its outs declare (validate.c).
 * begin copies out the buffers not declared written (nothing when every buffer is: *out NULL);
 * end, after the kernel, compares them again, frees wc, and fails naming the first changed buffer. */
typedef struct hcq__write_check hcq__write_check_t;
hcq_status_t hcq__write_check_begin(const hcq_launch_desc_t *d, hcq__write_check_t **out);
hcq_status_t hcq__write_check_end(hcq__write_check_t *wc, const hcq_launch_desc_t *d);
void hcq__write_check_free(hcq__write_check_t *wc);



/* ---- remote devices (the optional MPI layer, src/mpi; docs/mpi.md) ----
 * The core never links MPI: the layer installs these hooks when it starts (hcq_mpi_init) and
 * removes them when it stops. A remote device ("R/KIND:N" of another rank) is an ordinary device
 * struct whose backend (the layer) gives its buffers addresses with no storage and runs its queues
 * on the layer's communication thread: kernels are skipped, copies to or from the rank become MPI
 * sends and receives. Such devices carry HCQ__CAP_REMOTE. */
#define HCQ__CAP_REMOTE (1u << 30)
/* Set on a CPU-kind device whose engine runs copies with one end on another rank itself (the layer's
 * copy_* hooks), so a hop between ranks crosses no thread on either side. */
#define HCQ__CAP_ENGINE_REMOTE_COPY (1u << 29)
/* COPY tag words with this bit carry an eager cross-rank transfer's sequence number, not a graph item. */
#define HCQ__TAG_EAGER_REMOTE (1u << 31)
/* A graph's cross-rank transfer run by a local engine: bit 30 | (graph id mod 1024) << 20 | (item mod
 * 2^20), so the engine can tag its message from the words alone. Other graph tags are item + 1. */
#define HCQ__TAG_GRAPH_REMOTE (1u << 30)
/* The graph item a tag word names; false for none (0) and for eager transfers. */
static inline bool hcq__tag_item(uint32_t tag, uint32_t *item) {
  if (!tag || (tag & HCQ__TAG_EAGER_REMOTE)) return false;
  *item = tag & HCQ__TAG_GRAPH_REMOTE ? tag & 0xfffffu : tag - 1;
  return true;
}
/* Remote buffers' addresses have this top byte (operands are signed 64-bit, and no user-space
 * pointer looks like it), so a COPY tells a remote end from its address alone. */
#define HCQ__REMOTE_ADDR_TOP UINT64_C(0x7e)
static inline bool hcq__addr_is_remote(uint64_t a) { return (a >> 56) == HCQ__REMOTE_ADDR_TOP; }
struct hcq_exec_item;
typedef struct hcq__remote_hooks {
  /* Opens a name with a rank ("1/CPU:0"): the local device on its own rank, a remote device elsewhere. */
  hcq_status_t (*open)(const char *name, const hcq_device_options_t *options, hcq_device_t **out);
  /* Graph build (every rank, same items): the cross-rank agreement check; a graph id for tags. */
  hcq_status_t (*graph_check)(const struct hcq_exec_item *items, size_t nitems);
  /* Called after graph_check's build finished (ok or not): ends the build's tagging window. */
  void (*graph_built)(void);
  /* Eager transfer with a remote end, before it is submitted: the tag (HCQ__TAG_EAGER_REMOTE | seq). */
  uint32_t (*eager_tag)(hcq_device_t *src, hcq_device_t *dst);
  /* More words for a hang report about cmd on a remote device's queue, or about a COPY with a remote
   * end on a local engine's ("recv of 4 bytes from rank 1..."). */
  void (*describe)(hcq_device_t *dev, const uint32_t *cmd, char *out, size_t size);
  /* Graph build: the tag word of item's cross-rank transfer run by a local engine (HCQ__TAG_GRAPH_REMOTE). */
  uint32_t (*graph_copy_tag)(uint32_t item);
  /* Engine-run cross-rank copies (devices with HCQ__CAP_ENGINE_REMOTE_COPY), on the engine's thread:
   * copy_start posts cmd's send or receive (NULL: failed, dev is marked lost); copy_poll makes MPI
   * progress and says 0 (in flight), 1 (done) or -1 (failed, dev marked lost), and frees a finished
   * op; copy_drop cancels and frees one still in flight (a lost device). */
  void *(*copy_start)(hcq_device_t *dev, const uint32_t *cmd);
  int (*copy_poll)(hcq_device_t *dev, void *op);
  void (*copy_drop)(void *op);
  /* How long an engine waiting for its copy polls MPI back to back (HCQ_MPI_SPIN_NS) before napping. */
  uint64_t copy_spin_ns;
  /* Graphs put cross-rank transfers on the local end's engine (MPI_THREAD_MULTIPLE) rather than on
   * the remote device's queue, which the communication thread runs. */
  bool engine_copies;
  /* With engine_copies: a host thread waiting briefly for a local CPU device's work runs it itself
   * (host_run in the device vtable; HCQ_MPI_HOST_RUNS, default on). */
  bool host_runs;
} hcq__remote_hooks_t;
extern const hcq__remote_hooks_t *_Atomic hcq__remote;
/* Installs the layer's hooks (NULL removes them). The layer's one write to hcq__remote, through a
 * function so that libhcq.so exports no data object (ASan would add an ODR indicator beside it, and
 * a variable's size would become part of what libhcq_mpi.so assumes). */
HCQ__PRIVATE_EXPORT void hcq__remote_set(const hcq__remote_hooks_t *hooks);
/* Opens (or references again) a device made by create (the layer's backend constructor), registered
 * under name like any other device; kind and index are what it reports. */
HCQ__PRIVATE_EXPORT hcq_status_t hcq__device_open_with(const char *name, hcq_device_kind_t kind, int index,
                                                       hcq_status_t (*create)(hcq_device_t *dev, void *ctx),
                                                       void *ctx, hcq_device_t **out);
static inline bool hcq__device_is_remote(const hcq_device_t *dev) { return dev->caps & HCQ__CAP_REMOTE; }
/* Remote devices marked lost so far: engines look for orphaned waits only once there is one. */
extern _Atomic unsigned hcq__remote_lost;
/* True when the WAIT at cmd is for a signal of a lost remote device: only that device's queues (run
 * by the MPI layer) set it, so the wait can never end; why names the signal and the device. */
bool hcq__wait_is_orphaned(const uint32_t *cmd, char *why, size_t why_size);
/* Marks dev lost when one of its queues is at such a wait (called by engines before they sleep, and
 * by graph destroys that free a lost device's signals while dev may still wait for them). */
void hcq__device_lose_if_orphaned(hcq_device_t *dev);

#endif
