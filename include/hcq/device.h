/* hcq devices: opening by name, the timeline, synchronisation.
 *
 * A device is opened by name: "CPU:0", "CPU:1", ... are independent CPU devices, each with its own
 * memory, one engine thread that runs both its queues (compute and copy) and helper threads that
 * share the work-groups of big launches. The CPU devices open together split the process's cores
 * between them, one busy thread per core (see hcq_device_cores; HCQ_CPU_THREADS or the threads
 * option sets a device's threads instead). "CPU" means "CPU:0". "CUDA:N" names an NVIDIA GPU when
 * libcuda loads. "VULKAN:N" names the N-th Vulkan physical device when the Vulkan loader finds a
 * driver (see hcq/vulkan.h; Mesa's lavapipe runs it on any CPU).
 *
 * Devices are process-wide and reference counted by name: opening "CPU:0" twice returns the same
 * device, and each open needs one hcq_device_close(). The last close of a device fails (and the
 * device stays open) when buffers, programs, signals, graphs or jits of it are still alive (the
 * message names the ones the application made, with the call that made each, apart from those a
 * jit or graph holds on its behalf, and counts what it does not name), or when its work does not
 * finish within the wait timeout (the message carries the hang report): closing with work pending
 * is an error, not a hang. Leak report (docs/errors.md): with HCQ_VALIDATE=1 or HCQ_LEAK_REPORT=1
 * (=backtrace: with the stack that made each), the objects still alive when the process exits are
 * listed on standard error, and so are those of a lost device as it closes. A close waits without
 * holding any lock other threads need to open or close other devices.
 *
 * Lost devices (docs/errors.md): a device whose work is stuck (a kernel that never returns, a queue
 * waiting on a signal nobody sets) can be declared lost with hcq_device_declare_lost(); a CPU
 * kernel that faults marks its device lost when isolation is on. A lost device drops its pending
 * work, every later call that would use it fails at once with DEVICE_LOST naming it and the reason,
 * host waits on it end with DEVICE_LOST, and hcq_device_close() succeeds even with objects still
 * alive (they stay valid handles whose calls fail with DEVICE_LOST, and are freed by their usual
 * release). Threads stuck inside a kernel cannot be stopped: they are abandoned, and the device's
 * memory they may touch is kept, never freed. Other devices stay usable. Opening the same name
 * again gives a new, healthy device.
 *
 * Threads: every call on a device may come from any thread; submissions to one device are
 * serialised inside the library.
 */
#ifndef HCQ_DEVICE_H
#define HCQ_DEVICE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "hcq/status.h"

#ifdef __cplusplus
extern "C" {
#endif
#pragma GCC visibility push(default) /* exported from libhcq.so (see hcq.h) */

typedef struct hcq_device hcq_device_t;
typedef struct hcq_signal hcq_signal_t;

/* The device kinds, one backend each: X(NAME, "NAME") per kind, in enum order. HCQ_DEVICE_KINDS_ARG
 * passes arg through to each, X(NAME, "NAME", arg), for code generated per kind and per something
 * else (the conformance suite: per kind and scenario). */
#define HCQ_DEVICE_KINDS_ARG(X, arg) \
  X(CPU, "CPU", arg)                 \
  X(CUDA, "CUDA", arg)               \
  X(METAL, "METAL", arg)             \
  X(VULKAN, "VULKAN", arg)           \
  HCQ__BUILD_DEVICE_KINDS(X, arg)
/* Kinds a build adds after the public ones, for backends built only for its tests (a host-simulated
 * device: docs/new-backend.md); defined on the compiler's command line there, empty elsewhere. */
#ifndef HCQ__BUILD_DEVICE_KINDS
#define HCQ__BUILD_DEVICE_KINDS(X, arg)
#endif
#define HCQ_DEVICE_KINDS(X) HCQ_DEVICE_KINDS_ARG(HCQ__DEVICE_KIND_NO_ARG, X)
#define HCQ__DEVICE_KIND_NO_ARG(name, text, X) X(name, text)

typedef enum hcq_device_kind {
#define HCQ__DEVICE_KIND_ENUM(name, text) HCQ_DEVICE_##name,
  HCQ_DEVICE_KINDS(HCQ__DEVICE_KIND_ENUM)
#undef HCQ__DEVICE_KIND_ENUM
      HCQ_DEVICE_KIND_COUNT
} hcq_device_kind_t;

/* Capabilities: differences between backends are flags, never name tests. */
enum {
  HCQ_CAP_IN_ORDER_QUEUES = 1u << 0, /* a queue's commands finish in order: no self-waits needed */
  HCQ_CAP_COPY_QUEUE = 1u << 1,      /* has a copy queue separate from the compute queue */
  HCQ_CAP_HOST_CALLABLE = 1u << 2,   /* programs may be C function pointers */
  HCQ_CAP_COMPILE_C = 1u << 3,       /* compiles C kernels (CPU ABI in hcq/program.h) */
  HCQ_CAP_COMPILE_CUDA = 1u << 4,    /* compiles CUDA C / loads PTX */
  /* buffers and signals are ordinary host memory, engines run on the host */
  HCQ_CAP_HOST_MEMORY = 1u << 5,
  HCQ_CAP_COPIES_HOST_MEMORY =
      1u << 6, /* its copy queue reads and writes ordinary host memory (HOST_MEMORY
                  devices' buffers) and sets their signals, but cannot wait on them */
  HCQ_CAP_COMPILE_GLSL = 1u << 8,  /* compiles GLSL compute / loads SPIR-V (Vulkan, hcq/vulkan.h) */
  HCQ_CAP_COMPILE_METAL = 1u << 9, /* compiles Metal Shading Language (Metal, docs/metal.md) */
};

/* Signal values above this make the timeline wrap onto its shadow signal (32-bit payloads). */
#define HCQ_TIMELINE_WRAP (UINT64_C(1) << 31)

typedef struct hcq_device_options {
  /* First timeline value (0 means 1). Lets tests start near HCQ_TIMELINE_WRAP. */
  uint64_t timeline_start;
  /* CPU: a kernel that faults (SIGSEGV, SIGBUS, SIGFPE, SIGILL) marks the device lost instead of
   * ending the process (HCQ_CPU_ISOLATE=1 turns it on for every device). Costs a sigsetjmp per
   * kernel call. */
  bool isolate;
  /* CPU: threads for this device (its engine plus helpers that share big launches); 0 lets the
   * core budget decide (see hcq_device_cores). HCQ_CPU_THREADS sets it for every device. */
  unsigned threads;
  /* Portable mode (HCQ_PORTABLE=1 turns it on for every device): the device refuses what some
   * backend would refuse, by the HCQ_PORTABLE_* limits below (hcq_device_limits). */
  bool portable;
} hcq_device_options_t;

/* Opens (or references again) the device called name. Unknown names are NOT_FOUND, devices whose
 * driver is missing UNAVAILABLE; both messages name the device. */
HCQ_MUST_USE hcq_status_t hcq_device_open(const char *name, hcq_device_t **out_device);
/* As hcq_device_open; options apply when this call creates the device and are an error
 * (FAILED_PRECONDITION) when the device is already open. options may be NULL. */
HCQ_MUST_USE hcq_status_t hcq_device_open_ex(const char *name, const hcq_device_options_t *options,
                                             hcq_device_t **out_device);
/* Drops one reference; see above for when the last one fails. NULL is accepted. A handle whose last
 * reference was dropped is no longer valid: closing it again (or passing it to hcq_buffer_create,
 * hcq_program_create*, hcq_signal_create, hcq_device_synchronize, hcq_device_health,
 * hcq_device_declare_lost or hcq_device_memory_usage) is FAILED_PRECONDITION naming the device it
 * was ("device CPU:0 was closed; its handle is no longer valid"), and reads nothing through it. The
 * last 256 closes are remembered by name; an older handle, or something that never was a device, is
 * INVALID_ARGUMENT. Other calls with a closed handle (hcq_device_name, ...) remain undefined. */
HCQ_MUST_USE hcq_status_t hcq_device_close(hcq_device_t *device);

/* "CPU:0". */
const char *hcq_device_name(const hcq_device_t *device);
/* The device's kind; HCQ_DEVICE_KIND_COUNT (no kind: hcq_device_kind_name says "UNKNOWN") for NULL.
 */
hcq_device_kind_t hcq_device_kind(const hcq_device_t *device);
const char *hcq_device_kind_name(hcq_device_kind_t kind);
uint32_t hcq_device_caps(const hcq_device_t *device);
/* The caps every device of kind has for running and compiling kernels, without opening one or
 * loading its driver: HCQ_CAP_HOST_CALLABLE and the HCQ_CAP_COMPILE_* flag of the kernel language
 * its devices compile from source (C, CUDA C, GLSL, Metal Shading Language), which is how a program
 * picks its kernel sources for a kind (models/common/model_kernels.h does). It says nothing about
 * whether such a device is present (hcq_device_query does). 0 for a kind no backend serves
 * (HCQ_DEVICE_KIND_COUNT, out of range). Any thread. */
uint32_t hcq_device_kind_kernel_caps(hcq_device_kind_t kind);

/* Every limit a kernel launch or a buffer can hit on a device (hcq_device_limits). Work-group
 * sizes count threads; the grid counts work-groups. */
typedef struct hcq_device_limits {
  uint32_t max_group_threads;     /* local[0] * local[1] * local[2] */
  uint32_t max_group_size[3];     /* local[i] */
  uint32_t max_grid[3];           /* global[i] */
  uint64_t max_work_items;        /* per launch: groups x group size */
  uint32_t max_kernel_buffers;    /* buffer arguments of one launch */
  uint32_t max_kernel_values;     /* 32-bit value arguments of one launch */
  uint64_t max_buffer_size;       /* bytes of one buffer (hcq_buffer_create) */
  uint32_t buffer_alignment;      /* every buffer's device address is a multiple of this */
  uint32_t view_offset_alignment; /* a view's offset that lets kernels read any type through it */
  uint32_t shared_memory; /* bytes of work-group shared memory a kernel may declare; 0: its kernel
                        language has none (CPU kernels use ordinary locals). Not checked by hcq */
  bool portable;          /* these are the HCQ_PORTABLE_* ones, enforced (portable mode) */
} hcq_device_limits_t;

/* The portable limits, enforced in portable mode: what every backend accepts. 1024 threads per
 * work-group is what NVIDIA, AMD, Intel and Apple GPUs and lavapipe all run (Vulkan itself requires
 * only 128); 64 deep is CUDA's block depth; the grid, the shared memory and the offset alignment
 * are what Vulkan requires of every device, the buffer size what Vulkan 1.1 requires of one
 * allocation; 30 buffers fill Metal's 31-entry argument table with the values in the last entry. */
#define HCQ_PORTABLE_MAX_GROUP_THREADS 1024u
#define HCQ_PORTABLE_MAX_GROUP_SIZE_X 1024u
#define HCQ_PORTABLE_MAX_GROUP_SIZE_Y 1024u
#define HCQ_PORTABLE_MAX_GROUP_SIZE_Z 64u
#define HCQ_PORTABLE_MAX_GRID 65535u
#define HCQ_PORTABLE_MAX_KERNEL_BUFFERS 30u
#define HCQ_PORTABLE_MAX_KERNEL_VALUES 256u
#define HCQ_PORTABLE_MAX_BUFFER_SIZE (UINT64_C(1) << 30)
#define HCQ_PORTABLE_VIEW_OFFSET_ALIGNMENT 16u
#define HCQ_PORTABLE_SHARED_MEMORY 16384u

/* The limits launches and buffers on device are checked against: the device's own, or, in
 * portable mode, the smaller of its own and the portable ones (portable set). hcq_launch and graph
 * items refuse a launch past a group, grid or argument limit, and hcq_buffer_create a size past
 * max_buffer_size, with OUT_OF_RANGE naming the limit, the value asked and the maximum, and
 * "(HCQ_PORTABLE)" when only portable mode refuses it; in portable mode hcq_buffer_view_create
 * also refuses an offset that is not a multiple of view_offset_alignment. INVALID_ARGUMENT for a
 * NULL device or out. Any thread. */
HCQ_MUST_USE hcq_status_t hcq_device_limits(const hcq_device_t *device, hcq_device_limits_t *out);
/* The HCQ_PORTABLE_* limits as a struct (portable set). */
void hcq_device_limits_portable(hcq_device_limits_t *out);
/* CPU: the cores the device's threads are pinned to, its engine's first. The CPU devices open
 * together split the process's cores (its affinity mask) into disjoint shares, one per device in
 * opening order, so no core runs two busy hcq threads; with more devices than cores, devices share
 * cores round-robin. Writes up to cap core numbers; returns how many there are (0 for other kinds).
 */
size_t hcq_device_cores(const hcq_device_t *device, int *out_cores, size_t cap);
/* Threads that run the device's work: on CPU its engine (both queues) plus the helpers that share
 * the work-groups of big launches. */
unsigned hcq_device_thread_count(const hcq_device_t *device);

/* Waits until all work submitted to the device so far has finished (timeline_value - 1), within
 * the wait timeout. Wraps the timeline when it has passed HCQ_TIMELINE_WRAP. */
HCQ_MUST_USE hcq_status_t hcq_device_synchronize(hcq_device_t *device);

/* The device's current timeline signal and the value the next piece of work will signal. The
 * signal changes when the timeline wraps. The signal belongs to the device: do not free it. */
void hcq_device_timeline(hcq_device_t *device, hcq_signal_t **out_signal, uint64_t *out_next_value);

/* Declares the device lost (see above); reason (may be NULL) appears in every later error.
 * Idempotent: the first reason stays. */
HCQ_MUST_USE hcq_status_t hcq_device_declare_lost(hcq_device_t *device, const char *reason);
/* NULL while the device is usable; DEVICE_LOST (naming it and why) once lost. The caller frees it.
 */
HCQ_MUST_USE hcq_status_t hcq_device_health(const hcq_device_t *device);

/* The hang report (docs/errors.md): one line per queue of the device: idle, or the command it runs
 * or is blocked at (`wait "graph copy queue signal of CPU:1" >= 17 (value 16), graph item 5 in
 * graph#2 compute queue of CPU:0`; a running kernel by name with its grid), for how long it has
 * been there (from when the engine began it on CPU devices and MPI ranks; on GPUs at least: from
 * when hcq first saw it there), and the last command it completed. Writes at most size bytes
 * (NUL-terminated) into out and returns the report's length (snprintf style). Timed-out waits
 * append the same report to their message. Any thread. */
size_t hcq_device_report(hcq_device_t *device, char *out, size_t size);

/* Validation mode (HCQ_VALIDATE=1, read once): handles are checked on use. A released buffer,
 * program, signal or graph passed again, a double release, or an object of a closed device is
 * reported by name (an error status, or a line on stderr for calls that return nothing) instead of
 * being undefined behaviour. Released objects keep a few bytes each until the process ends. Off by
 * default; off, the checks cost one predictable branch. Counts the complaints printed on stderr.
 * It also checks that kernels write only the buffers their outs declare (hcq_launch in program.h,
 * graph replays in graph.h), and that CPU kernels stay inside their buffers: each CPU buffer gets
 * guard pages and canaries, and a kernel writing or reading out of bounds loses its device with a
 * message naming the kernel, the argument, the buffer and the offset, before anything else runs
 * there (returned by the synchronize, replay or copy that waits for it). That costs each buffer its
 * round-up to whole pages and each kernel a check (docs/errors.md, "Out-of-bounds accesses"). */
unsigned long hcq_validation_error_count(void);

/* Lists the device kinds this machine has: for each kind, how many devices and a one-line
 * description (driver version, names). Writes up to cap entries; returns how many exist. */
typedef struct hcq_device_info {
  hcq_device_kind_t kind;
  int count; /* devices of this kind; CPU reports how many are useful (any index opens) */
  char description[256]; /* what the kind supports, or why it is absent */
  bool available;
} hcq_device_info_t;
size_t hcq_device_query(hcq_device_info_t *out_infos, size_t cap);

#pragma GCC visibility pop
#ifdef __cplusplus
}
#endif
#endif
