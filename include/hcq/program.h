/* hcq programs: compiled kernels for one device, and eager launches.
 *
 * CPU kernels follow this ABI. Sources are compiled with a prelude that includes <stdint.h>
 * and <stddef.h> and defines hcq_launch_t; the device calls the entry once per work-group of the
 * grid, spreading groups over its threads, and the kernel loops over its own lsz threads:
 *
 *   typedef struct { uint32_t gid[3], gsz[3], lsz[3]; } hcq_launch_t;
 *   void NAME(void *const *bufs, const int32_t *vals, const hcq_launch_t *launch);
 *
 * C sources are compiled by the system C compiler (HCQ_CC, default "cc", may carry arguments;
 * HCQ_CFLAGS, default "-O2 -march=native -ffp-contract=off") into a shared object cached on disk
 * (HCQ_CACHE_DIR, default $XDG_CACHE_HOME/hcq, ~/.cache/hcq or $TMPDIR/hcq-cache-<uid>, created
 * 0700): a second process loads it without compiling. docs/kernel-cache.md has the details.
 *
 * The cache key covers the prelude, the entry, the source, the HCQ_CC words with the identity
 * (resolved path, size, mtime) of the executables among them, the HCQ_CFLAGS words, the fixed
 * arguments, and the host CPU when a word contains "native" (-march=native). It does NOT cover
 * headers the source includes, the compiler's own helpers and libraries (cc1, as, ld, libm), or
 * environment variables the compiler reads: after changing those, change the source or the flags,
 * or delete the cache.
 *
 * Only objects no other user could have written are loaded: the cache directory must be owned by
 * the effective uid and writable by no one else (a group write bit is fine only for the user's
 * private group), the directories above it owned by that uid or root and writable by no one else
 * unless sticky; cached objects must be regular files of that uid that no one else can write
 * (others are compiled again and replaced). An untrusted, read-only
 * or full cache directory is not an error: kernels are compiled in a private temporary directory,
 * uncached, and one warning per process on stderr says why. Objects are written under unique
 * temporary names and renamed into place, so no partial object is ever visible.
 *
 * Compiles work whatever the application's signal dispositions (SIGCHLD ignored or handled by a
 * handler that reaps every child): the compiler runs with SIGCHLD and SIGPIPE at their defaults,
 * and its exact exit status or signal is reported (through a forked helper when SIGCHLD does not
 * let us wait for it ourselves).
 * Programs are reference counted; graphs retain the programs they use.
 */
#ifndef HCQ_PROGRAM_H
#define HCQ_PROGRAM_H

#include <stddef.h>
#include <stdint.h>

#include "hcq/buffer.h"
#include "hcq/device.h"

#ifdef __cplusplus
extern "C" {
#endif
#pragma GCC visibility push(default) /* exported from libhcq.so (see hcq.h) */

typedef struct hcq_program hcq_program_t;

typedef struct {
  uint32_t gid[3], gsz[3], lsz[3];
} hcq_launch_t;

typedef void (*hcq_cpu_kernel_fn)(void *const *bufs, const int32_t *vals, const hcq_launch_t *launch);

/* Compiles source (C on CPU devices) and looks up entry. An entry that is not a C identifier is
 * INVALID_ARGUMENT, before anything is compiled or written; one the compiled source does not define
 * is COMPILE_ERROR ("entry point \"k\" is not defined by the source"), as is a compile error, with
 * the compiler's exit status or signal and its output in the message; bad HCQ_CC, HCQ_CFLAGS or
 * HCQ_CACHE_DIR values are INVALID_ARGUMENT naming the variable. */
HCQ_MUST_USE hcq_status_t hcq_program_create(hcq_device_t *device, const char *entry, const char *source,
                                             hcq_program_t **out_program);
/* A CPU program from a C function pointer (devices with HCQ_CAP_HOST_CALLABLE). name is copied. */
HCQ_MUST_USE hcq_status_t hcq_program_create_fn(hcq_device_t *device, const char *name, hcq_cpu_kernel_fn fn,
                                                hcq_program_t **out_program);
hcq_program_t *hcq_program_retain(hcq_program_t *program);
/* Drops one reference. After the last one the program is gone: launching or releasing it again is
 * undefined behaviour that may return OK, unless HCQ_VALIDATE=1 (hcq.h), which reports it by name. */
void hcq_program_release(hcq_program_t *program);
const char *hcq_program_name(const hcq_program_t *program);
hcq_device_t *hcq_program_device(const hcq_program_t *program);
/* The source text a program was compiled from; NULL for function-pointer programs. */
const char *hcq_program_source(const hcq_program_t *program);

/* Declares how many buffers and 32-bit values the kernel reads (optional; it cannot be told from C
 * or GLSL source). From then on every launch of the program, on every backend (hcq_launch, graph
 * items at build, hcq_exec_item_run, hcq_launch_sym, captures, graph files' "nbufs"/"nvals"), must
 * pass exactly that many: else INVALID_ARGUMENT naming the kernel and both counts, and nothing runs
 * (a kernel given fewer arguments than it reads reads garbage or crashes). Where the backend reads
 * the parameters from the compiled kernel (CUDA: the PTX .entry parameter list), launches are
 * checked against those without a declaration, and a declaration that disagrees is INVALID_ARGUMENT.
 * Declaring the same counts again is fine; other counts are FAILED_PRECONDITION. Declare before the
 * program's first launch. */
HCQ_MUST_USE hcq_status_t hcq_program_declare_args(hcq_program_t *program, size_t nbufs, size_t nvals);
/* The counts launches are checked against: true when declared or known to the backend. */
bool hcq_program_args(const hcq_program_t *program, size_t *out_nbufs, size_t *out_nvals);

/* The text every CPU kernel source is compiled after. */
const char *hcq_cpu_prelude(void);

/* Launches program eagerly: wait for the device timeline, memory barrier, exec, signal the
 * timeline. Buffers must be on the program's device; kernargs are the buffer addresses then the
 * 32-bit values. global is the grid in work-groups, local the group size; every dim must be >= 1
 * (give 1 for unused dims: {n} leaves y and z 0): a 0 is INVALID_ARGUMENT naming the program and the
 * dim ("global[1] is 0"). Returns once the launch is queued. */
typedef struct hcq_launch_desc {
  hcq_program_t *program;
  hcq_buffer_t *const *bufs;
  size_t nbufs;
  const int32_t *vals;
  size_t nvals;
  uint32_t global[3];
  uint32_t local[3];
  /* Which buffers the kernel writes (indices into bufs), by the rule of hcq_kernel_item_t (graph.h):
   * outs NULL, every buffer; outs given with nouts 0, none. A capture records it, to order replays.
   * With HCQ_VALIDATE=1 a launch that gives outs has them checked: the buffers whose base is not
   * the base of a listed one are copied out before the kernel and compared after it; a changed byte
   * fails the launch (INVALID_ARGUMENT naming the kernel, the buffer's index and label, and the first
   * changed offset; the kernel did run, and a capture does not record it). Slow (two copies of
   * those buffers per launch), blind to a write of the bytes already there, and it assumes no other
   * thread writes those buffers meanwhile. */
  const uint32_t *outs;
  size_t nouts;
} hcq_launch_desc_t;

HCQ_MUST_USE hcq_status_t hcq_launch(const hcq_launch_desc_t *desc);

/* Limits of one launch's argument lists. */
#define HCQ_MAX_KERNEL_BUFS 256
#define HCQ_MAX_KERNEL_VALS 256

#pragma GCC visibility pop
#ifdef __cplusplus
}
#endif
#endif
