/* The contract between the core and the device backends. The backend table: what the core, the
 * graph layer, the JIT and the graph-file loader know about a device kind, in one row per backend
 * (src/backends.c lists the rows); nothing outside a backend's own folder and that list names a
 * backend, and differences are fields of the row or device caps. The vtable: what an open device's
 * backend does for the core. */
#ifndef HCQ_CORE_BACKEND_H
#define HCQ_CORE_BACKEND_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/export.h"
#include "core/hang_report.h"
#include "core/memory.h"
#include "core/program.h"
#include "hcq/device.h"
#include "hcq/graph.h"
#include "hcq/memory.h"
#include "hcq/program.h"
#include "hcq/queue.h"

struct hcq__signal_words; /* core/signal.h */
struct hcq__runner;       /* graph/runner.h */

typedef struct hcq__backend {
  hcq_device_kind_t kind;
  /* The graph-file program key of the kernel language its devices compile ("c", "cuda", ...). */
  const char *source_key;
  /* Fills info (kind is set already): available, count, description (or why it is absent). */
  void (*query)(hcq_device_info_t *info);
  /* Makes dev (name, kind, index, locks set) the index-th device of the kind: vt, backend, caps,
   * threads; opts (may be NULL) as the caller gave them, for what is the backend's own (threads).
   * On failure nothing of the backend is left and the status names dev->name. */
  hcq_status_t (*open)(int index, const hcq_device_options_t *opts, hcq_device_t *dev);
  /* The precompiled formats its devices load (bit 1 << hcq_binary_format_t; hcq/program.h): the
   * core refuses others, naming the kind and these. 0: none. */
  unsigned binary_formats;
  /* Compiles source into a binary of format (HCQ_BINARY_NONE: the kind's default) without a device
   * (hcq_binary_compile validated the arguments; format is one the kind loads); arch as given by
   * the caller, may be NULL. On success *out is malloc'd. Optional: NULL means hcq cannot make
   * binaries for the kind, and no_compile_why says why. */
  hcq_status_t (*binary_compile)(const char *entry, const char *source, hcq_binary_format_t format,
                                 const char *arch, void **out, size_t *out_size);
  const char *no_compile_why;
  /* Its binaries are made for an architecture (hcq_binary_compile's arch; CUDA's sm_XY). */
  bool binary_arch;
  /* The caps its devices have for running and compiling kernels (HCQ_CAP_HOST_CALLABLE,
   * HCQ_CAP_COMPILE_*), which another rank's device of the kind shows too (the MPI layer). */
  uint32_t kernel_caps;
  /* A graph runner of its own (docs/design.md, "Graph runners"; the CUDA graph in src/cuda/, the
   * Metal graph in src/metal/), built on the graph layer's kind-neutral runner: it builds a graph
   * over the runner's items (every device of which is of this kind) and takes the runner on
   * success; inflight is the replays one graph may have in flight (0: the HCQ_GRAPH_INFLIGHT
   * default). Optional: NULL means its devices run the queue graph, the HCQ graph runner
   * (src/graph/queue_graph.c). */
  hcq_status_t (*graph_create)(struct hcq__runner *runner, bool profile, unsigned inflight,
                               hcq_graph_t **out);
  /* With graph_create: its graphs hold kernel items only (the JIT leaves transfers eager), and one
   * graph spans one device (the JIT batches each device's items apart). */
  bool graph_kernels_only, graph_one_device;
} hcq__backend_t;

/* The row of kind; NULL for a kind no row serves (kinds are public enum values). */
HCQ__PRIVATE_EXPORT const hcq__backend_t *hcq__backend(hcq_device_kind_t kind);

/* Every row, in kind order, NULL-terminated (src/backends.c). */
extern const hcq__backend_t *const hcq__backends[];

/* ---- the device vtable ----
 * What every open device's backend does for the core. Every member is mandatory unless marked
 * optional. The core validates arguments and holds the device lock where stated; backends trust
 * what they are given. */
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
  hcq_status_t (*submit)(hcq_device_t *dev, hcq_queue_kind_t kind, const uint32_t *words,
                         size_t nwords, bool bound);
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
  hcq_status_t (*program_compile)(hcq_device_t *dev, const char *entry, const char *source,
                                  hcq__program_impl_t *out);
  /* Releases what program_compile made. Optional. */
  void (*program_unload)(hcq_device_t *dev, hcq__program_impl_t *impl);
  /* The memory the device has and what this process could still allocate on it now, as its driver
   * or the host reports them (hcq_device_memory); a field it cannot tell stays 0, and source names
   * where the numbers come from. Optional: NULL means the backend cannot tell (UNAVAILABLE). */
  hcq_status_t (*memory_info)(hcq_device_t *dev, hcq_device_memory_t *out);
  /* Whether a host thread about to wait for a signal of this device's queues should sleep at once
   * rather than spin: when the device's kernels run on this machine's cores (lavapipe), a spinning
   * waiter takes a core from them; when the caller runs on the core the device's engine is pinned
   * to while some core runs no engine, it would only take turns with the engine (a sleeper is moved
   * by the scheduler). Optional (NULL: spin first). Any thread; must not block. */
  bool (*waiter_sleeps_at_once)(hcq_device_t *dev);
  /* A host thread about to sleep until a signal of this device's queues is set lends itself to the
   * device's work while the host is contended (more runnable threads than cores): it takes part in
   * the work-groups of a shared launch in progress, if any are left, as the device's own helper
   * threads do, or else sleeps until the next one is published or max_ns passed. Each thread gets
   * its share of a busy core, so a waiter that works adds a share (docs/cpu-device.md, "Waiting on
   * a busy machine"). It does not sleep when s has reached want, and a device whose queue ends an
   * entry while it sleeps wakes it (the signal a waiter waits for is set by such an entry), so a
   * wait does not last max_ns past its signal. 1: it ran some of a launch; 0: it waited for one;
   * -1: not now (the host is not contended): the waiter sleeps on the signal. Optional. */
  int (*assist)(hcq_device_t *dev, const struct hcq__signal_words *s, uint64_t want,
                uint64_t max_ns);
} hcq__device_vtable_t;

enum { HCQ__HOST_BEGIN, HCQ__HOST_RUN, HCQ__HOST_END };

#endif
