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

typedef void (*hcq_cpu_kernel_fn)(void *const *bufs, const int32_t *vals,
                                  const hcq_launch_t *launch);

/* Compiles source (C on CPU devices) and looks up entry. An entry that is not a C identifier is
 * INVALID_ARGUMENT, before anything is compiled or written; one the compiled source does not define
 * is COMPILE_ERROR ("entry point \"k\" is not defined by the source"), as is a compile error, with
 * the compiler's exit status or signal and its output in the message; bad HCQ_CC, HCQ_CFLAGS or
 * HCQ_CACHE_DIR values are INVALID_ARGUMENT naming the variable. */
HCQ_MUST_USE hcq_status_t hcq_program_create(hcq_device_t *device, const char *entry,
                                             const char *source, hcq_program_t **out_program);
/* A CPU program from a C function pointer (devices with HCQ_CAP_HOST_CALLABLE). name is copied. */
HCQ_MUST_USE hcq_status_t hcq_program_create_fn(hcq_device_t *device, const char *name,
                                                hcq_cpu_kernel_fn fn, hcq_program_t **out_program);
hcq_program_t *hcq_program_retain(hcq_program_t *program);
/* Drops one reference. After the last one the program is gone: launching or releasing it again is
 * undefined behaviour that may return OK, unless HCQ_VALIDATE=1 (hcq.h), which reports it by name.
 */
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
 * checked against those without a declaration, and a declaration that disagrees is
 * INVALID_ARGUMENT. Declaring the same counts again is fine; other counts are FAILED_PRECONDITION.
 * Declare before the program's first launch. */
HCQ_MUST_USE hcq_status_t hcq_program_declare_args(hcq_program_t *program, size_t nbufs,
                                                   size_t nvals);
/* The counts launches are checked against: true when declared or known to the backend. */
bool hcq_program_args(const hcq_program_t *program, size_t *out_nbufs, size_t *out_nvals);

/* ---- Precompiled kernels ----
 *
 * Kernels built offline, loaded without a compiler. X(name, text): the closed set of formats. */
// clang-format off
#define HCQ_BINARY_FORMATS(X) \
  X(SPIRV, "spirv")           \
  X(PTX, "ptx")               \
  X(CUBIN, "cubin")           \
  X(FATBIN, "fatbin")         \
  X(METALLIB, "metallib")
// clang-format on

typedef enum hcq_binary_format {
  HCQ_BINARY_NONE = 0, /* no format: hcq_binary_compile's "the kind's default" */
#define HCQ__BINARY_FORMAT_ENUM(name, text) HCQ_BINARY_##name,
  HCQ_BINARY_FORMATS(HCQ__BINARY_FORMAT_ENUM)
#undef HCQ__BINARY_FORMAT_ENUM
      HCQ_BINARY_FORMAT_COUNT
} hcq_binary_format_t;

/* "spirv", "ptx", "cubin", "fatbin", "metallib"; "none" for HCQ_BINARY_NONE, "?" out of range. */
const char *hcq_binary_format_name(hcq_binary_format_t format);
/* The format of a name above (any case); false for anything else. */
bool hcq_binary_format_parse(const char *name, hcq_binary_format_t *out_format);

/* A program from a precompiled kernel: size bytes at bytes, in format, whose kernel is entry. Which
 * device kinds load which formats:
 *
 *   VULKAN  spirv      a SPIR-V module whose GLCompute entry point is named entry (the GLSL ABI of
 *                      hcq/vulkan.h; hcq compile --device VULKAN writes one)
 *   CUDA    ptx        PTX text (.version first; NUL bytes only at its end)
 *           cubin      an ELF cubin for sm_XY: it loads on a device of the same major version and
 *                      a minor version at least Y (a cubin for sm_80 on sm_86, not sm_90)
 *           fatbin     a fat binary (nvcc -fatbin): the driver picks its cubin or PTX for the
 *                      device
 *   METAL   metallib   a Metal library (xcrun metal + metallib), kernel function named entry
 *   CPU     none: a shared object is machine code hcq cannot check and would run in-process, so
 *           CPU kernels come from C source (hcq_program_create) or function pointers only.
 *
 * The bytes are copied: the caller may free them on return. CUDA kernels take their parameters as
 * CUDA C kernels do (pointers, then 32-bit values); hcq reads the list from the PTX or from the
 * cubin's kernel information, so launches are checked against it as for CUDA C
 * (hcq_program_declare_args). A fatbin whose only image for the device is compressed PTX is
 * refused: its parameter list cannot be read. The program behaves like one from source (launches,
 * graphs, captures); hcq_program_source() gives its text form, "#FORMAT" and a line break, then the
 * bytes in base64, which hcq_program_create() also takes and saved graph files carry.
 *
 * Errors: out_program, device or bytes NULL, size 0, a format out of range, an entry that is not a
 * C identifier, or a format the device's kind does not load (the message names the kind and what it
 * loads) are INVALID_ARGUMENT; more than 256 MiB is OUT_OF_RANGE. Bytes that are not what format
 * says (garbage, truncated, another format: the message says what they look like), a cubin for
 * another architecture (naming both), and an entry the binary does not define are COMPILE_ERROR. */
HCQ_MUST_USE hcq_status_t hcq_program_create_binary(hcq_device_t *device,
                                                    hcq_binary_format_t format, const void *bytes,
                                                    size_t size, const char *entry,
                                                    hcq_program_t **out_program);

/* Compiles source for entry into a precompiled kernel for devices of kind, without opening one:
 * what `hcq compile` writes. format HCQ_BINARY_NONE picks the kind's default.
 *
 *   VULKAN  GLSL (the hcq/vulkan.h prelude) to spirv, with libshaderc; its entry point is renamed
 *           entry, as hcq_program_create does
 *   CUDA    CUDA C to cubin (the default) or ptx with NVRTC, for arch ("sm_90", "90" or "9.0";
 *           NULL: HCQ_CUDA_ARCH, else INVALID_ARGUMENT); a cubin needs an NVRTC that knows arch
 *   METAL   UNIMPLEMENTED: a metallib is built by Apple's toolchain (xcrun metal, then metallib)
 *   CPU     INVALID_ARGUMENT (CPU devices load no binaries)
 *
 * On success *out_bytes (free with hcq_binary_free) holds *out_size bytes. A compile error is
 * COMPILE_ERROR with the compiler's log; a missing compiler UNAVAILABLE or UNIMPLEMENTED, saying
 * why; a format the kind does not load, or arch given for a kind that takes none,
 * INVALID_ARGUMENT. */
HCQ_MUST_USE hcq_status_t hcq_binary_compile(hcq_device_kind_t kind, hcq_binary_format_t format,
                                             const char *arch, const char *entry,
                                             const char *source, void **out_bytes,
                                             size_t *out_size);
/* Frees what hcq_binary_compile returned (NULL is fine). Plain memory, not a handle: HCQ_VALIDATE
 * does not track it, and freeing it twice is undefined behaviour. */
void hcq_binary_free(void *bytes);

/* The text every CPU kernel source is compiled after. */
const char *hcq_cpu_prelude(void);

/* Launches program eagerly: wait for the device timeline, memory barrier, exec, signal the
 * timeline. Buffers must be on the program's device; kernargs are the buffer addresses then the
 * 32-bit values. global is the grid in work-groups, local the group size; every dim must be >= 1
 * (give 1 for unused dims: {n} leaves y and z 0): a 0 is INVALID_ARGUMENT naming the program and
 * the dim ("global[1] is 0"). Returns once the launch is queued. */
typedef struct hcq_launch_desc {
  hcq_program_t *program;
  hcq_buffer_t *const *bufs;
  size_t nbufs;
  const int32_t *vals;
  size_t nvals;
  uint32_t global[3];
  uint32_t local[3];
  /* Which buffers the kernel writes (indices into bufs), by the rule of hcq_kernel_item_t
   * (graph.h): outs NULL, every buffer; outs given with nouts 0, none. A capture records it, to
   * order replays. With HCQ_VALIDATE=1 a launch that gives outs has them checked: the buffers whose
   * base is not the base of a listed one are copied out before the kernel and compared after it; a
   * changed byte fails the launch (INVALID_ARGUMENT naming the kernel, the buffer's index and
   * label, and the first changed offset; the kernel did run, and a capture does not record it).
   * Slow (two copies of those buffers per launch), blind to a write of the bytes already there, and
   * it assumes no other thread writes those buffers meanwhile. */
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
