/* Reading precompiled CUDA kernels before the driver sees them (hcq_program_create_binary): the
 * driver's cuModuleLoadData takes no size and trusts the image's own headers, so hcq checks that a
 * cubin or fatbin is whole, that it is for the device's architecture, and reads the kernel's
 * parameter list, which hcq's launches need (cuda_compile.c reads PTX's from its text).
 *
 * A cubin is an ELF64 file (e_machine 190, EM_CUDA). Its architecture is in e_flags: bits 0-7 up to
 * ELF ABI version 7 (CUDA 12 and older), bits 8-15 from ABI version 8 (CUDA 13). Each kernel has a
 * section ".nv.info.NAME" of records, each a format byte, an attribute byte and a 16-bit value;
 * format 4 (EIFMT_SVAL) makes that value the size of a payload that follows. Attribute 0x17
 * (EIATTR_KPARAM_INFO) describes one parameter: u32 index, u16 ordinal, u16 offset, u32 flags whose
 * bits 18-31 are its size in bytes. (Layouts as cuobjdump shows them for nvcc's and NVRTC's
 * output.)
 *
 * A fatbin is a header (u32 magic 0xBA55ED50, u16 version, u16 header size, u64 size of what
 * follows) and entries: u16 kind (1 PTX, 2 ELF), u16 version, u32 header size, u64 payload size,
 * ..., u32 architecture at 28, u64 flags at 40 (0x2000 or 0x8000: the payload is compressed), then
 * the payload. */
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/binary.h"
#include "core/status.h"
#include "cuda/cuda_binary.h"

#define EM_CUDA 190
#define EIATTR_KPARAM_INFO 0x17
#define EIFMT_SVAL 4
#define FATBIN_MAGIC 0xBA55ED50u
#define FATBIN_COMPRESSED (0x2000u | 0x8000u)

static uint16_t rd16(const uint8_t *p) { return (uint16_t)(p[0] | p[1] << 8); }
static uint32_t rd32(const uint8_t *p) {
  return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}
static uint64_t rd64(const uint8_t *p) { return rd32(p) | (uint64_t)rd32(p + 4) << 32; }

/* Whether code built for arch runs on a device of dev_arch: the same major version, a minor version
 * no newer (sm_80 code runs on sm_86; sm_86 code does not run on sm_80, nor sm_80 on sm_90). */
static bool arch_runs(int arch, int dev_arch) {
  return arch / 10 == dev_arch / 10 && arch % 10 <= dev_arch % 10;
}

static hcq_status_t bad(const char *what, const char *entry, const char *fmt, ...) HCQ_PRINTF(3, 4);
static hcq_status_t bad(const char *what, const char *entry, const char *fmt, ...) {
  char text[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(text, sizeof(text), fmt, ap);
  va_end(ap);
  return hcq_status_make(HCQ_COMPILE_ERROR, "%s kernel %s: %s", what, entry, text);
}

typedef struct cuda_elf_view {
  const uint8_t *b;
  size_t size;
  uint64_t shoff;
  uint16_t shnum, shstrndx;
} cuda_elf_view_t;

/* Section i's name (NUL-terminated inside the file: checked), offset and size. */
static const char *section(const cuda_elf_view_t *e, unsigned i, uint64_t *off, uint64_t *size,
                           uint32_t *type) {
  const uint8_t *sh = e->b + e->shoff + (uint64_t)i * 64;
  const uint8_t *str = e->b + e->shoff + (uint64_t)e->shstrndx * 64;
  uint64_t stroff = rd64(str + 24), strsize = rd64(str + 32), name = rd32(sh);
  *type = rd32(sh + 4);
  *off = rd64(sh + 24);
  *size = rd64(sh + 32);
  if (name >= strsize || !memchr(e->b + stroff + name, '\0', strsize - name)) return "";
  return (const char *)e->b + stroff + name;
}

static bool is_elf(const uint8_t *b, size_t size) {
  return size >= 4 && !memcmp(b,
                              "\x7f"
                              "ELF",
                              4);
}

/* The ELF header: a 64-bit little-endian ELF for CUDA whose section and program headers, and the
 * sections they describe, lie inside its size bytes. */
static hcq_status_t check_elf(const char *what, const char *entry, const uint8_t *b, size_t size,
                              cuda_elf_view_t *e) {
  if (size < 64 || !is_elf(b, size) || b[4] != 2 || b[5] != 1 || rd16(b + 18) != EM_CUDA) {
    char desc[128];
    hcq__binary_describe(b, size, desc, sizeof(desc));
    return bad(
        what, entry,
        "%zu bytes are not a cubin (a 64-bit little-endian ELF for CUDA, e_machine %d): %s%s", size,
        EM_CUDA, desc, size < 64 && is_elf(b, size) ? ", shorter than an ELF header" : "");
  }
  *e = (cuda_elf_view_t){b, size, rd64(b + 0x28), rd16(b + 0x3C), rd16(b + 0x3E)};
  uint64_t phoff = rd64(b + 0x20);
  uint16_t shentsize = rd16(b + 0x3A), phentsize = rd16(b + 0x36), phnum = rd16(b + 0x38);
  if (shentsize != 64 || !e->shnum || e->shstrndx >= e->shnum)
    return bad(what, entry,
               "the ELF section header table is damaged (entry size %u, %u sections, names in %u)",
               shentsize, e->shnum, e->shstrndx);
  /* Headers past the end, or sections that are: the whole file, as its headers describe it. */
  if (e->shoff > size || (uint64_t)e->shnum * 64 > size - e->shoff ||
      (phnum && (phoff > size || (uint64_t)phnum * phentsize > size - phoff)))
    return bad(what, entry,
               "truncated: its ELF headers reach past its %zu bytes (section headers at %" PRIu64
               ")",
               size, e->shoff);
  for (unsigned i = 0; i < e->shnum; i++) {
    const uint8_t *sh = b + e->shoff + (uint64_t)i * 64;
    uint64_t off = rd64(sh + 24), sz = rd64(sh + 32);
    if (rd32(sh + 4) == 8 /* SHT_NOBITS */) continue;
    if (off > size || sz > size - off) {
      uint64_t end = off + sz;
      return bad(what, entry,
                 "truncated: section %u ends at byte %" PRIu64 ", but there are %zu bytes", i,
                 end > off ? end : UINT64_MAX, size);
    }
  }
  return NULL;
}

/* The architecture in e_flags (bits 0-7 up to ELF ABI version 7, bits 8-15 from version 8) must run
 * on the device's. */
static hcq_status_t check_cubin_arch(const char *what, const char *entry, const uint8_t *b,
                                     const char *dev_name, int dev_arch) {
  int abi = b[8];
  uint32_t flags = rd32(b + 0x30);
  int arch = (int)(abi >= 8 ? (flags >> 8) & 0xff : flags & 0xff);
  if (!arch_runs(arch, dev_arch))
    return bad(
        what, entry,
        "it is built for sm_%d, which does not run on %s (sm_%d: a cubin runs on its own major "
        "version, at the same or a newer minor one); build it for sm_%d (hcq compile --arch "
        "sm_%d), or load PTX "
        "or a fatbin with code for sm_%d",
        arch, dev_name, dev_arch, dev_arch, dev_arch, dev_arch);
  return NULL;
}

/* The kernel's information section, ".nv.info.ENTRY" (want holds that name). */
static hcq_status_t find_kernel_info(const char *what, const char *entry, const cuda_elf_view_t *e,
                                     char *want, size_t want_size, const uint8_t **info,
                                     uint64_t *info_size) {
  snprintf(want, want_size, ".nv.info.%s", entry);
  *info = NULL;
  *info_size = 0;
  char kernels[256] = "";
  size_t klen = 0;
  for (unsigned i = 0; i < e->shnum; i++) {
    uint64_t off, sz;
    uint32_t type;
    const char *name = section(e, i, &off, &sz, &type);
    if (strncmp(name, ".nv.info.", 9)) continue;
    if (!strcmp(name, want)) {
      *info = e->b + off;
      *info_size = sz;
    }
    if (klen < sizeof(kernels))
      klen += (size_t)snprintf(kernels + klen, sizeof(kernels) - klen, "%s%s", klen ? ", " : "",
                               name + 9);
  }
  if (!*info)
    return bad(what, entry, "the cubin has no kernel named %s (its kernels: %s)%s", entry,
               *kernels ? kernels : "none",
               strstr(kernels, entry)
                   ? "; a mangled name means C++ linkage: declare it extern \"C\" __global__"
                   : "");
  return NULL;
}

#define CUBIN_MAX_PARAMS (HCQ_MAX_KERNEL_BUFS + HCQ_MAX_KERNEL_VALS)

/* Parameter sizes by ordinal from the KPARAM_INFO records (-1: not described), and how many. */
static hcq_status_t read_param_sizes(const char *what, const char *entry, const char *want,
                                     const uint8_t *info, uint64_t info_size,
                                     int sizes[CUBIN_MAX_PARAMS], size_t *out_nparams) {
  size_t nparams = 0;
  for (size_t i = 0; i < CUBIN_MAX_PARAMS; i++) sizes[i] = -1;
  for (uint64_t p = 0; p + 4 <= info_size;) {
    uint8_t fmt = info[p], attr = info[p + 1];
    uint16_t val = rd16(info + p + 2);
    uint64_t payload = fmt == EIFMT_SVAL ? val : 0;
    if (payload > info_size - p - 4)
      return bad(what, entry, "its kernel information (%s) is damaged", want);
    if (fmt == EIFMT_SVAL && attr == EIATTR_KPARAM_INFO && payload >= 12) {
      uint16_t ordinal = rd16(info + p + 8);
      uint32_t pflags = rd32(info + p + 12);
      if (ordinal >= CUBIN_MAX_PARAMS)
        return bad(what, entry,
                   "it takes more than %d parameters; hcq passes at most %d buffers and %d values",
                   CUBIN_MAX_PARAMS, HCQ_MAX_KERNEL_BUFS, HCQ_MAX_KERNEL_VALS);
      sizes[ordinal] = (int)((pflags >> 18) & 0x3fff);
      if ((size_t)ordinal + 1 > nparams) nparams = (size_t)ordinal + 1;
    }
    p += 4 + payload;
  }
  *out_nparams = nparams;
  return NULL;
}

/* hcq's CUDA ABI: 8-byte pointers (the buffers), then 4-byte values, within hcq's limits. */
static hcq_status_t count_params(const char *what, const char *entry, const int *sizes,
                                 size_t nparams, uint32_t *out_nptrs, uint32_t *out_nvals) {
  uint32_t nptrs = 0, nvals = 0;
  for (size_t i = 0; i < nparams; i++) {
    if (sizes[i] == 8 && nvals)
      return bad(what, entry,
                 "parameter %zu is 64-bit after a 32-bit one; hcq's CUDA ABI passes the buffers "
                 "(pointers) first, then 32-bit values",
                 i);
    if (sizes[i] != 8 && sizes[i] != 4)
      return bad(what, entry,
                 sizes[i] < 0 ? "the kernel information lacks parameter %zu"
                              : "parameter %zu is %d bytes, neither a pointer nor a 32-bit value; "
                                "hcq's CUDA ABI takes buffers as "
                                "pointers, then 32-bit values",
                 i, sizes[i]);
    if (sizes[i] == 8)
      nptrs++;
    else
      nvals++;
  }
  if (nptrs > HCQ_MAX_KERNEL_BUFS || nvals > HCQ_MAX_KERNEL_VALS)
    return bad(what, entry,
               "it takes %" PRIu32 " pointers and %" PRIu32 " values; hcq passes at most %d and %d",
               nptrs, nvals, HCQ_MAX_KERNEL_BUFS, HCQ_MAX_KERNEL_VALS);
  *out_nptrs = nptrs;
  *out_nvals = nvals;
  return NULL;
}

hcq_status_t hcq__cuda_cubin_inspect(const uint8_t *b, size_t size, const char *entry,
                                     const char *dev_name, int dev_arch, uint32_t *out_nptrs,
                                     uint32_t *out_nvals) {
  const char *what = "cubin";
  cuda_elf_view_t e = {0};
  HCQ__TRY(check_elf(what, entry, b, size, &e));
  HCQ__TRY(check_cubin_arch(what, entry, b, dev_name, dev_arch));
  char want[128];
  const uint8_t *info = NULL;
  uint64_t info_size = 0;
  HCQ__TRY(find_kernel_info(what, entry, &e, want, sizeof(want), &info, &info_size));
  int sizes[CUBIN_MAX_PARAMS];
  size_t nparams = 0;
  HCQ__TRY(read_param_sizes(what, entry, want, info, info_size, sizes, &nparams));
  return count_params(what, entry, sizes, nparams, out_nptrs, out_nvals);
}

hcq_status_t hcq__cuda_fatbin_inspect(const uint8_t *b, size_t size, const char *entry,
                                      const char *dev_name, int dev_arch, uint32_t *out_nptrs,
                                      uint32_t *out_nvals) {
  const char *what = "fatbin";
  if (size < 16 || rd32(b) != FATBIN_MAGIC) {
    char desc[128];
    hcq__binary_describe(b, size, desc, sizeof(desc));
    return bad(what, entry, "%zu bytes are not a fatbin (magic 0x%08x): %s", size, FATBIN_MAGIC,
               desc);
  }
  uint16_t hs = rd16(b + 6);
  uint64_t fat = rd64(b + 8);
  if (hs < 16 || hs > size || fat > size - hs)
    return bad(what, entry, "truncated: its header says %" PRIu64 " bytes, but there are %zu",
               (uint64_t)hs + fat, size);
  const uint8_t *best_elf = NULL, *best_ptx = NULL;
  uint64_t elf_size = 0, ptx_size = 0;
  int elf_arch = 0, ptx_arch = 0;
  bool compressed_elf = false, compressed_ptx = false;
  char held[256] = "";
  size_t hlen = 0;
  for (uint64_t off = hs, end = hs + fat; off < end;) {
    if (end - off < 32)
      return bad(what, entry, "truncated or damaged: the entry at byte %" PRIu64 " is cut short",
                 off);
    uint16_t kind = rd16(b + off);
    uint32_t ehs = rd32(b + off + 4);
    uint64_t psize = rd64(b + off + 8);
    if (ehs < 32 || ehs > end - off || psize > end - off - ehs)
      return bad(what, entry,
                 "truncated or damaged: entry at byte %" PRIu64 " reaches past the end (%" PRIu64
                 " bytes)",
                 off, end);
    int arch = (int)rd32(b + off + 28);
    uint64_t flags = ehs >= 48 ? rd64(b + off + 40) : 0;
    bool compressed = (flags & FATBIN_COMPRESSED) != 0;
    if (hlen < sizeof(held))
      hlen +=
          (size_t)snprintf(held + hlen, sizeof(held) - hlen, "%s%s %s_%d%s", hlen ? ", " : "",
                           kind == 2   ? "cubin"
                           : kind == 1 ? "PTX"
                                       : "unknown",
                           kind == 2 ? "sm" : "compute", arch, compressed ? " (compressed)" : "");
    const uint8_t *payload = b + off + ehs;
    /* The newest code that runs, an image hcq can read (uncompressed) first. */
    int score = (compressed ? 0 : 1000) + arch;
    if (kind == 2 && arch_runs(arch, dev_arch) &&
        (!best_elf || score > (compressed_elf ? 0 : 1000) + elf_arch)) {
      best_elf = payload, elf_size = psize, elf_arch = arch, compressed_elf = compressed;
    } else if (kind == 1 && arch <= dev_arch &&
               (!best_ptx || score > (compressed_ptx ? 0 : 1000) + ptx_arch)) {
      best_ptx = payload, ptx_size = psize, ptx_arch = arch, compressed_ptx = compressed;
    }
    off += ehs + psize;
  }
  if (best_elf && !compressed_elf)
    return hcq__cuda_cubin_inspect(best_elf, (size_t)elf_size, entry, dev_name, dev_arch, out_nptrs,
                                   out_nvals);
  if (best_ptx && !compressed_ptx) {
    char *text = malloc((size_t)ptx_size + 1);
    if (!text) return hcq_status_make(HCQ_OUT_OF_MEMORY, "out of memory reading %s", entry);
    memcpy(text, best_ptx, (size_t)ptx_size);
    text[ptx_size] = '\0';
    hcq_status_t st = hcq__cuda_ptx_params(text, entry, out_nptrs, out_nvals);
    free(text);
    return st ? hcq_status_annotate(st, "fatbin kernel %s (its PTX for compute_%d)", entry,
                                    ptx_arch)
              : NULL;
  }
  if (best_elf || best_ptx)
    return bad(
        what, entry,
        "its code for %s (sm_%d) is compressed (%s), so hcq cannot read the kernel's parameter "
        "list; load the cubin or PTX itself, or build the fatbin uncompressed (nvcc -Xfatbin "
        "-compress=false)",
        dev_name, dev_arch, held);
  return bad(what, entry, "it has no code that runs on %s (sm_%d): it holds %s", dev_name, dev_arch,
             *held ? held : "nothing");
}
