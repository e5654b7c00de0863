/* CUDA programs: CUDA C through NVRTC (cached on disk, nvrtc.c) or PTX text, loaded into the
 * device's primary context; the kernel's parameter list is read from its PTX and must follow the
 * kernargs layout (docs/cuda.md, "Programs") (pointers, then 32-bit values), which is what one
 * packed argument block can feed. */
#include <ctype.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/binary.h"
#include "core/device.h"
#include "core/options.h"
#include "cuda/cuda_binary.h"
#include "cuda/cuda_internal.h"
#include "cuda/nvrtc.h"

/* Skips blanks and comments. */
static const char *skip_space(const char *p) {
  for (;;) {
    while (isspace((unsigned char)*p)) p++;
    if (p[0] == '/' && p[1] == '/') {
      while (*p && *p != '\n') p++;
    } else if (p[0] == '/' && p[1] == '*') {
      const char *e = strstr(p + 2, "*/");
      p = e ? e + 2 : p + strlen(p);
    } else {
      return p;
    }
  }
}

/* The start of entry's parameter list (just after its '('), or NULL. */
static const char *find_entry(const char *ptx, const char *entry) {
  size_t len = strlen(entry);
  for (const char *p = strstr(ptx, ".entry"); p; p = strstr(p + 6, ".entry")) {
    const char *q = skip_space(p + 6);
    if (strncmp(q, entry, len) != 0) continue;
    q = skip_space(q + len);
    if (*q == '(') return q + 1;
  }
  return NULL;
}

/* The C++-mangled name of a kernel called entry in the PTX (_Z3addPi for add(int *), _ZN2ns3addEPi
 * inside a namespace), written to out; false when there is none. */
static bool find_mangled_entry(const char *ptx, const char *entry, char *out, size_t size) {
  char marker[96];
  snprintf(marker, sizeof(marker), "%zu%s", strlen(entry), entry);
  size_t mlen = strlen(marker);
  for (const char *p = strstr(ptx, ".entry"); p; p = strstr(p + 6, ".entry")) {
    const char *q = skip_space(p + 6), *e = q;
    while (isalnum((unsigned char)*e) || *e == '_' || *e == '$') e++;
    if (strncmp(q, "_Z", 2) != 0) continue;
    for (const char *m = q + 2; m + mlen <= e; m++) {
      /* A whole length-prefixed name: the digits before it are not part of a longer length. */
      if (strncmp(m, marker, mlen) != 0 || isdigit((unsigned char)m[-1])) continue;
      snprintf(out, size, "%.*s", (int)(e - q < 200 ? e - q : 200), q);
      return true;
    }
  }
  return false;
}

hcq_status_t hcq__cuda_ptx_params(const char *ptx, const char *entry, uint32_t *out_nptrs,
                                  uint32_t *out_nvals) {
  const char *p = find_entry(ptx, entry);
  char mangled[208];
  if (!p && find_mangled_entry(ptx, entry, mangled, sizeof(mangled)))
    return hcq_status_make(
        HCQ_COMPILE_ERROR,
        "entry point \"%s\" is not a kernel (.entry) of the program under that name: "
        "the source gives it C++ linkage (its name is mangled to %s); declare it extern \"C\" "
        "__global__",
        entry, mangled);
  if (!p)
    return hcq_status_make(HCQ_COMPILE_ERROR,
                           "entry point \"%s\" is not a kernel (.entry) of the program", entry);
  uint32_t nptrs = 0, nvals = 0, index = 0;
  p = skip_space(p);
  while (*p && *p != ')') {
    const char *end = p;
    while (*end && *end != ',' && *end != ')') end++;
    /* One parameter: ".param .u64 [.ptr .global .align 4] name" */
    char param[256];
    size_t n = (size_t)(end - p) < sizeof(param) - 1 ? (size_t)(end - p) : sizeof(param) - 1;
    memcpy(param, p, n);
    param[n] = '\0';
    int size = 0;
    if (strchr(param, '[') || (strstr(param, ".align") && !strstr(param, ".ptr")))
      size = -1;
    else if (strstr(param, ".u64") || strstr(param, ".s64") || strstr(param, ".b64"))
      size = 8;
    else if (strstr(param, ".u32") || strstr(param, ".s32") || strstr(param, ".b32") ||
             strstr(param, ".f32"))
      size = 4;
    if (size == 8 && nvals)
      return hcq_status_make(HCQ_COMPILE_ERROR,
                             "kernel %s: parameter %" PRIu32
                             " is 64-bit after a 32-bit one; hcq's CUDA "
                             "ABI passes the buffers (pointers) first, then 32-bit values",
                             entry, index);
    if (size <= 0)
      return hcq_status_make(HCQ_COMPILE_ERROR,
                             "kernel %s: parameter %" PRIu32
                             " (%s) is neither a pointer nor a 32-bit "
                             "value; hcq's CUDA ABI takes buffers as pointers, then 32-bit values",
                             entry, index, param);
    if (size == 8)
      nptrs++;
    else
      nvals++;
    index++;
    p = *end == ',' ? skip_space(end + 1) : end;
  }
  if (*p != ')')
    return hcq_status_make(HCQ_COMPILE_ERROR,
                           "kernel %s: its parameter list in the PTX does not end", entry);
  if (nptrs > HCQ_MAX_KERNEL_BUFS || nvals > HCQ_MAX_KERNEL_VALS)
    return hcq_status_make(HCQ_COMPILE_ERROR,
                           "kernel %s takes %" PRIu32 " pointers and %" PRIu32
                           " values; hcq passes at "
                           "most %d and %d",
                           entry, nptrs, nvals, HCQ_MAX_KERNEL_BUFS, HCQ_MAX_KERNEL_VALS);
  *out_nptrs = nptrs;
  *out_nvals = nvals;
  return NULL;
}

/* HCQ_CUDA_ARCH ("sm_90", "90" or "9.0"), else the device's compute capability. */
static int target_arch(hcq_device_t *dev) {
  int arch = hcq__binary_arch(hcq__options()->cuda_arch); /* the one parser, hcq compile --arch's */
  if (arch) return arch;
  int major, minor;
  hcq__cuda_device_arch(dev, &major, &minor);
  return major * 10 + minor;
}

static hcq_status_t load_module(hcq_device_t *dev, const char *entry, const void *image,
                                hcq_CUmodule *out) {
  const hcq__cuda_api_t *api = hcq__cuda_device_api(dev);
  char log[4096] = "";
  int opts[2] = {HCQ_CU_JIT_ERROR_LOG_BUFFER, HCQ_CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES};
  void *values[2] = {log, (void *)(uintptr_t)sizeof(log)};
  hcq_CUresult rc = api->cuModuleLoadDataEx(out, image, 2, opts, values);
  if (rc == 0) return NULL;
  log[sizeof(log) - 1] = '\0';
  const char *v =
      rc == HCQ_CUDA_ERROR_UNSUPPORTED_PTX_VERSION ? strstr((const char *)image, ".version") : NULL;
  int major = 0, minor = 0;
  if (v && !memchr(image, '\0', (size_t)(v - (const char *)image)) &&
      sscanf(v + 8, " %d.%d", &major, &minor) == 2) {
    /* PTX (a cubin starts with a NUL-holding ELF header): say which ISA, and what the driver takes.
     */
    int driver = api->driver_version, isa = hcq__cuda_ptx_isa(driver);
    return hcq__cuda_fail(
        dev, rc,
        "loading kernel %s (PTX ISA %d.%d; the driver, for CUDA %d.%d, loads PTX ISA up to "
        "%d.%d)%s%s",
        entry, major, minor, driver / 1000, driver % 1000 / 10, isa / 10, isa % 10,
        *log ? ": " : "", log);
  }
  return hcq__cuda_fail(dev, rc, "loading kernel %s%s%s", entry, *log ? ": " : "", log);
}

/* A precompiled kernel's image (the text form's bytes; core/binary.h), checked, with its
 * parameters read; *out_image is what the driver loads (NUL-terminated PTX, or the bytes). */
static hcq_status_t binary_image(hcq_device_t *dev, const char *entry, const char *source,
                                 hcq__cuda_kernel_t *k, uint8_t **out_image) {
  hcq_binary_format_t format = hcq__binary_of_source(source);
  uint8_t *bytes = NULL;
  size_t len = 0;
  hcq_status_t st = hcq__binary_decode(source, entry, &bytes, &len);
  if (st) return st;
  int major, minor;
  hcq__cuda_device_arch(dev, &major, &minor);
  int arch = major * 10 + minor;
  if (format == HCQ_BINARY_PTX) {
    /* Text: NUL bytes may end it (a C string written whole), never sit inside it. */
    size_t text_len = len;
    while (text_len && !bytes[text_len - 1]) text_len--;
    bool holed = memchr(bytes, '\0', text_len) != NULL;
    uint8_t *text = holed ? NULL : realloc(bytes, text_len + 1);
    if (!holed && !text) {
      free(bytes);
      return hcq_status_make(HCQ_OUT_OF_MEMORY, "out of memory loading %s", entry);
    }
    if (text) {
      bytes = text;
      bytes[text_len] = '\0';
    }
    if (holed || !hcq__cuda_is_ptx((const char *)bytes)) {
      char what[128];
      hcq__binary_describe(bytes, len, what, sizeof(what));
      free(bytes);
      return hcq_status_make(HCQ_COMPILE_ERROR,
                             "PTX kernel %s: %zu bytes are not PTX text (its first directive is "
                             ".version): %s",
                             entry, len, what);
    }
    st = hcq__cuda_ptx_params((const char *)bytes, entry, &k->nptrs, &k->nvals);
  } else if (format == HCQ_BINARY_CUBIN) {
    st = hcq__cuda_cubin_inspect(bytes, len, entry, dev->name, arch, &k->nptrs, &k->nvals);
  } else {
    st = hcq__cuda_fatbin_inspect(bytes, len, entry, dev->name, arch, &k->nptrs, &k->nvals);
  }
  if (st) {
    free(bytes);
    return st;
  }
  *out_image = bytes;
  return NULL;
}

/* Loads the module and resolves and loads the kernel, with the device's context current. A cubin
 * for another architecture (HCQ_CUDA_ARCH) does not load: the PTX does, through the driver. */
static hcq_status_t load_kernel(hcq_device_t *dev, const char *entry, hcq__cuda_kernel_t *k,
                                const void *binary, const void *cubin, const char *ptx) {
  const hcq__cuda_api_t *api = hcq__cuda_device_api(dev);
  hcq_status_t st = load_module(dev, entry,
                                binary  ? binary
                                : cubin ? cubin
                                        : (const void *)ptx,
                                &k->module);
  if (st && !binary && cubin && !hcq__device_is_lost(dev)) {
    hcq_status_destroy(st);
    st = load_module(dev, entry, ptx, &k->module);
  }
  if (st) return st;
  hcq_CUresult rc = api->cuModuleGetFunction(&k->fn, k->module, entry);
  if (rc) {
    st = rc == HCQ_CUDA_ERROR_NOT_FOUND
             ? hcq_status_make(
                   HCQ_COMPILE_ERROR,
                   "entry point \"%s\" is not defined by the %s (declare it extern \"C\" "
                   "__global__)",
                   entry, binary ? "binary" : "source")
             : hcq__cuda_fail(dev, rc, "resolving kernel %s", entry);
  } else if (api->cuFuncLoad && (rc = api->cuFuncLoad(k->fn)) != 0) {
    /* Loaded now rather than at its first launch, where a lazy load synchronises the context and
     * would wait for streams that wait on the host (the caller's own later work). */
    st = hcq__cuda_fail(dev, rc, "loading kernel %s (cuFuncLoad)", entry);
  }
  if (st) api->cuModuleUnload(k->module);
  return st;
}

hcq_status_t hcq__cuda_compile(hcq_device_t *dev, const char *entry, const char *source,
                               hcq__program_impl_t *out) {
  hcq__cuda_image_t img;
  memset(&img, 0, sizeof(img));
  const char *ptx = source;
  uint8_t *binary = NULL;
  hcq_status_t st;
  hcq__cuda_kernel_t *k = calloc(1, sizeof(*k));
  if (!k) return hcq_status_make(HCQ_OUT_OF_MEMORY, "out of memory loading %s", entry);
  if (hcq__binary_of_source(source)) {
    if ((st = binary_image(dev, entry, source, k, &binary))) goto fail;
  } else {
    if (!hcq__cuda_is_ptx(source)) {
      if ((st = hcq__cuda_nvrtc_compile(entry, source, target_arch(dev), &img))) goto fail;
      ptx = img.ptx;
    }
    if ((st = hcq__cuda_ptx_params(ptx, entry, &k->nptrs, &k->nvals))) goto fail;
  }
  if ((st = hcq__cuda_push(dev))) goto fail;
  st = load_kernel(dev, entry, k, binary, img.cubin, ptx);
  hcq__cuda_pop(dev);
  if (st) goto fail;
  hcq__cuda_image_free(&img);
  free(binary); /* the driver copied what it keeps */
  k->param_bytes = k->nptrs * 8 + k->nvals * 4;
  /* The core checks every launch and item against the parameter list: a launch with fewer values
   * would have the kernel read past its argument block. */
  out->args = hcq__args_pack(k->nptrs, k->nvals, HCQ__ARGS_FROM_BACKEND);
  out->handle = (uint64_t)(uintptr_t)k;
  out->object = k;
  return NULL;
fail:
  free(k);
  free(binary);
  hcq__cuda_image_free(&img);
  return st;
}

/* The row's binary_compile: CUDA C through NVRTC into a cubin (the default) or PTX for arch. */
hcq_status_t hcq__cuda_binary_compile(const char *entry, const char *source,
                                      hcq_binary_format_t format, const char *arch, void **out,
                                      size_t *out_size) {
  if (format == HCQ_BINARY_FATBIN)
    return hcq_status_make(HCQ_INVALID_ARGUMENT,
                           "NVRTC makes PTX and cubins, not fatbins (nvcc -fatbin makes those)");
  if (!format) format = HCQ_BINARY_CUBIN;
  if (!arch || !*arch) arch = *hcq__options()->cuda_arch ? hcq__options()->cuda_arch : NULL;
  int want = hcq__binary_arch(arch);
  if (!want)
    return hcq_status_make(HCQ_INVALID_ARGUMENT,
                           "a CUDA binary is built for an architecture: name one (sm_90; "
                           "HCQ_CUDA_ARCH or hcq compile --arch)%s%s%s",
                           arch ? " (\"" : "", arch ? arch : "", arch ? "\" is not one)" : "");
  hcq__cuda_image_t img;
  memset(&img, 0, sizeof(img));
  hcq_status_t st = hcq__cuda_nvrtc_compile(entry, source, want, &img);
  if (st) return st;
  uint32_t nptrs, nvals;
  /* What hcq could not launch is an error now, not on the machine that loads it. */
  if ((st = hcq__cuda_ptx_params(img.ptx, entry, &nptrs, &nvals))) {
    hcq__cuda_image_free(&img);
    return st;
  }
  if (format == HCQ_BINARY_CUBIN && (!img.cubin || img.arch != want)) {
    st = hcq_status_make(
        HCQ_UNAVAILABLE,
        "this NVRTC cannot make a cubin for sm_%d (it compiled PTX for compute_%d): "
        "ask for --format ptx, or use an NVRTC that knows sm_%d",
        want, img.arch, want);
    hcq__cuda_image_free(&img);
    return st;
  }
  if (format == HCQ_BINARY_CUBIN) {
    *out = img.cubin;
    *out_size = img.cubin_len;
    img.cubin = NULL;
  } else {
    *out = img.ptx;
    *out_size = img.ptx_len;
    img.ptx = NULL;
  }
  hcq__cuda_image_free(&img);
  return NULL;
}

void hcq__cuda_unload(hcq_device_t *dev, hcq__program_impl_t *impl) {
  hcq__cuda_kernel_t *k = impl->object;
  if (!k) return;
  hcq_status_t st = hcq__cuda_push(dev);
  if (!st) {
    hcq__cuda_device_api(dev)->cuModuleUnload(k->module);
    hcq__cuda_pop(dev);
  }
  hcq_status_destroy(st);
  free(k);
  impl->object = NULL;
}
