/* Remote devices: the contract with the optional MPI layer (src/mpi; docs/mpi.md). */
#ifndef HCQ_CORE_REMOTE_H
#define HCQ_CORE_REMOTE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/device.h"
#include "core/export.h"
#include "hcq/device.h"

/* The core never links MPI: the layer installs these hooks when it starts (hcq_mpi_init) and
 * removes them when it stops. A remote device ("R/KIND:N" of another rank) is an ordinary device
 * struct whose backend (the layer) gives its buffers addresses with no storage and runs its queues
 * on the layer's communication thread: kernels are skipped, copies to or from the rank become MPI
 * sends and receives. Such devices carry HCQ__CAP_REMOTE. */
#define HCQ__CAP_REMOTE (1u << 30)
/* Set on a CPU-kind device whose engine runs copies with one end on another rank itself (the
 * layer's copy_* hooks), so a hop between ranks crosses no thread on either side. */
#define HCQ__CAP_ENGINE_REMOTE_COPY (1u << 29)
/* COPY tag words with this bit carry an eager cross-rank transfer's sequence number, not a graph
 * item. */
#define HCQ__TAG_EAGER_REMOTE (1u << 31)
/* A graph's cross-rank transfer run by a local engine: bit 30 | (graph id mod 1024) << 20 | (item
 * mod 2^20), so the engine can tag its message from the words alone. Other graph tags are item + 1.
 */
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
  /* Opens a name with a rank ("1/CPU:0"): the local device on its own rank, a remote device
   * elsewhere. */
  hcq_status_t (*open)(const char *name, const hcq_device_options_t *options, hcq_device_t **out);
  /* Graph build (every rank, same items): the cross-rank agreement check; a graph id for tags. */
  hcq_status_t (*graph_check)(const struct hcq_exec_item *items, size_t nitems);
  /* Called after graph_check's build finished (ok or not): ends the build's tagging window. */
  void (*graph_built)(void);
  /* Eager transfer with a remote end, before it is submitted: the tag (HCQ__TAG_EAGER_REMOTE |
   * seq). */
  uint32_t (*eager_tag)(hcq_device_t *src, hcq_device_t *dst);
  /* More words for a hang report about cmd on a remote device's queue, or about a COPY with a
   * remote end on a local engine's ("recv of 4 bytes from rank 1..."). */
  void (*describe)(hcq_device_t *dev, const uint32_t *cmd, char *out, size_t size);
  /* Graph build: the tag word of item's cross-rank transfer run by a local engine
   * (HCQ__TAG_GRAPH_REMOTE). */
  uint32_t (*graph_copy_tag)(uint32_t item);
  /* Engine-run cross-rank copies (devices with HCQ__CAP_ENGINE_REMOTE_COPY), on the engine's
   * thread: copy_start posts cmd's send or receive (NULL: failed, dev is marked lost); copy_poll
   * makes MPI progress and says 0 (in flight), 1 (done) or -1 (failed, dev marked lost), and frees
   * a finished op; copy_drop cancels and frees one still in flight (a lost device). */
  void *(*copy_start)(hcq_device_t *dev, const uint32_t *cmd);
  int (*copy_poll)(hcq_device_t *dev, void *op);
  void (*copy_drop)(void *op);
  /* How long an engine waiting for its copy polls MPI back to back (HCQ_MPI_SPIN_NS) before
   * napping. */
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
HCQ__PRIVATE_EXPORT HCQ_MUST_USE hcq_status_t hcq__device_open_with(
    const char *name, hcq_device_kind_t kind, int index,
    hcq_status_t (*create)(hcq_device_t *dev, void *ctx), void *ctx, hcq_device_t **out);
static inline bool hcq__device_is_remote(const hcq_device_t *dev) {
  return dev->caps & HCQ__CAP_REMOTE;
}
/* Remote devices marked lost so far: engines look for orphaned waits only once there is one. */
extern _Atomic unsigned hcq__remote_lost;
/* True when the WAIT at cmd is for a signal of a lost remote device: only that device's queues (run
 * by the MPI layer) set it, so the wait can never end; why names the signal and the device. */
bool hcq__wait_is_orphaned(const uint32_t *cmd, char *why, size_t why_size);
/* Marks dev lost when one of its queues is at such a wait (called by engines before they sleep, and
 * by graph destroys that free a lost device's signals while dev may still wait for them). */
void hcq__device_lose_if_orphaned(hcq_device_t *dev);

#endif
