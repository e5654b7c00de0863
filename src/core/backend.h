/* The backend table: what the core, the graph layer, the JIT and the graph-file loader know about a
 * device kind, in one row per backend (src/backends.c lists the rows). Nothing outside a backend's
 * own folder and that list names a backend; differences are fields of the row or device caps. */
#ifndef HCQ_CORE_BACKEND_H
#define HCQ_CORE_BACKEND_H

#include <stdbool.h>

#include "core/export.h"
#include "hcq/device.h"
#include "hcq/program.h"

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
  hcq_status_t (*binary_compile)(const char *entry, const char *source, hcq_binary_format_t format, const char *arch,
                                 void **out, size_t *out_size);
  const char *no_compile_why;
  /* Its binaries are made for an architecture (hcq_binary_compile's arch; CUDA's sm_XY). */
  bool binary_arch;
  /* The caps its devices have for running and compiling kernels (HCQ_CAP_HOST_CALLABLE,
   * HCQ_CAP_COMPILE_*), which another rank's device of the kind shows too (the MPI layer). */
  uint32_t kernel_caps;
} hcq__backend_t;

/* The row of kind; NULL for a kind no row serves (kinds are public enum values). */
HCQ__PRIVATE_EXPORT const hcq__backend_t *hcq__backend(hcq_device_kind_t kind);

/* Every row, in kind order, NULL-terminated (src/backends.c). */
extern const hcq__backend_t *const hcq__backends[];

#endif
