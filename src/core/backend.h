/* The backend table: what the core, the graph layer, the JIT and the graph-file loader know about a
 * device kind, in one row per backend (src/backends.c lists the rows). Nothing outside a backend's
 * own folder and that list names a backend; differences are fields of the row or device caps. */
#ifndef HCQ_CORE_BACKEND_H
#define HCQ_CORE_BACKEND_H

#include <stdbool.h>

#include "hcq/device.h"
#include "hcq/program.h"

struct hcq__runner;
struct hcq_graph;

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
  /* The kind's own graph runner (docs/design.md, "The CUDA graph", "The Metal graph"), which holds
   * devices of this backend only; NULL: its devices run the HCQ graph. On success the runner moves
   * into the graph. */
  hcq_status_t (*graph_create)(struct hcq__runner *runner, bool profile, unsigned inflight, struct hcq_graph **out);
  /* The kind's own runner holds kernel items only (the Metal graph): the JIT leaves its transfers
   * eager. */
  bool graph_kernels_only;
  /* ... and spans one device: the JIT batches each device's items apart. */
  bool graph_one_device;
  /* The precompiled formats its devices load (bit 1 << hcq_binary_format_t; hcq/program.h): the
   * core refuses others, naming the kind and these. 0: none. */
  unsigned binary_formats;
  /* Compiles source into a binary of format (HCQ_BINARY_NONE: the kind's default) without a device
   * (hcq_binary_compile validated the arguments; format is one the kind loads); arch as given by
   * the caller, may be NULL. On success *out is malloc'd. Optional: NULL means hcq cannot make
   * binaries for the kind, and no_compile_why says why. */
  hcq_status_t (*binary_compile)(const char *entry, const char *source, hcq_binary_format_t format, const char *arch,
                                 void **out, size_t *out_size);
  const char *no_compile_why;
} hcq__backend_t;

/* The row of kind; NULL for a kind no row serves (kinds are public enum values). */
const hcq__backend_t *hcq__backend(hcq_device_kind_t kind);

/* Every row, in kind order, NULL-terminated (src/backends.c). */
extern const hcq__backend_t *const hcq__backends[];

#endif
