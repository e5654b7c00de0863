/* Precompiled kernels (hcq/program.h): the checks every backend shares, the text form binaries
 * travel in (core/binary.h), and offline compiles through the backend table. */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <strings.h>

#include "core/backend.h"
#include "core/binary.h"
#include "core/device.h"
#include "core/status.h"

static const char *const k_names[] = {"none",
#define HCQ__BINARY_FORMAT_NAME(name, text) text,
                                      HCQ_BINARY_FORMATS(HCQ__BINARY_FORMAT_NAME)
#undef HCQ__BINARY_FORMAT_NAME
};

const char *hcq_binary_format_name(hcq_binary_format_t f) {
  return (unsigned)f < HCQ_BINARY_FORMAT_COUNT ? k_names[f] : "?";
}

bool hcq_binary_format_parse(const char *name, hcq_binary_format_t *out) {
  for (int f = 1; name && f < HCQ_BINARY_FORMAT_COUNT; f++)
    if (!strcasecmp(name, k_names[f])) {
      if (out) *out = (hcq_binary_format_t)f;
      return true;
    }
  return false;
}

void hcq__binary_list(unsigned mask, char *out, size_t size) {
  size_t used = 0;
  out[0] = '\0';
  for (int f = 1; f < HCQ_BINARY_FORMAT_COUNT; f++)
    if (mask & (1u << f))
      used += (size_t)snprintf(out + used, used < size ? size - used : 0, "%s%s", used ? ", " : "",
                               k_names[f]);
  if (!used) snprintf(out, size, "none");
}

/* ---- base64 ---- */

static const char k_b64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

static int b64_value(char c) {
  const char *p = c ? strchr(k_b64, c) : NULL;
  return p ? (int)(p - k_b64) : -1;
}

uint8_t *hcq__b64_decode(const char *text, size_t *out_len, const char **why) {
  size_t cap = strlen(text) / 4 * 3 + 3, len = 0;
  uint8_t *out = malloc(cap);
  if (!out) {
    *why = "out of memory";
    return NULL;
  }
  uint32_t acc = 0;
  int bits = 0;
  bool padding = false;
  for (const char *c = text; *c; c++) {
    if (*c == ' ' || *c == '\n' || *c == '\r' || *c == '\t') continue;
    if (*c == '=') {
      padding = true;
      continue;
    }
    int v = b64_value(*c);
    if (v < 0 || padding) {
      free(out);
      *why = padding ? "text after the '=' padding" : "a character that is not base64";
      return NULL;
    }
    acc = (acc << 6) | (uint32_t)v;
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out[len++] = (uint8_t)(acc >> bits);
    }
  }
  *out_len = len;
  return out;
}

char *hcq__b64_encode(const uint8_t *data, size_t n) {
  char *out = malloc(n / 3 * 4 + 8 + n / 57 + 2);
  if (!out) return NULL;
  size_t o = 0;
  for (size_t i = 0; i < n; i += 3) {
    uint32_t v = (uint32_t)data[i] << 16 | (i + 1 < n ? (uint32_t)data[i + 1] << 8 : 0) |
                 (i + 2 < n ? data[i + 2] : 0);
    out[o++] = k_b64[v >> 18];
    out[o++] = k_b64[(v >> 12) & 63];
    out[o++] = i + 1 < n ? k_b64[(v >> 6) & 63] : '=';
    out[o++] = i + 2 < n ? k_b64[v & 63] : '=';
    if ((i / 3 + 1) % 19 == 0) out[o++] = '\n';
  }
  out[o] = '\0';
  return out;
}

/* ---- the text form ---- */

char *hcq__binary_text(hcq_binary_format_t format, const void *bytes, size_t size) {
  char *b64 = hcq__b64_encode(bytes, size);
  const char *name = hcq_binary_format_name(format);
  char *text = b64 ? malloc(strlen(name) + strlen(b64) + 3) : NULL;
  if (text) sprintf(text, "#%s\n%s", name, b64);
  free(b64);
  return text;
}

hcq_binary_format_t hcq__binary_of_source(const char *source) {
  if (!source || source[0] != '#') return HCQ_BINARY_NONE;
  for (int f = 1; f < HCQ_BINARY_FORMAT_COUNT; f++) {
    size_t n = strlen(k_names[f]);
    char after = source[1 + n];
    if (!strncmp(source + 1, k_names[f], n) &&
        (after == '\n' || after == '\r' || after == ' ' || after == '\t'))
      return (hcq_binary_format_t)f;
  }
  return HCQ_BINARY_NONE;
}

hcq_status_t hcq__binary_decode(const char *source, const char *entry, uint8_t **out,
                                size_t *out_len) {
  hcq_binary_format_t f = hcq__binary_of_source(source);
  const char *why = NULL;
  uint8_t *bytes = hcq__b64_decode(source + 1 + strlen(hcq_binary_format_name(f)), out_len, &why);
  if (!bytes)
    return hcq_status_make(HCQ_COMPILE_ERROR, "%s kernel %s: the base64 text has %s",
                           hcq_binary_format_name(f), entry, why);
  *out = bytes;
  return NULL;
}

/* ---- what bytes look like ---- */

static bool is_ptx_text(const char *t, size_t n) {
  size_t i = 0;
  for (;;) {
    while (i < n && isspace((unsigned char)t[i])) i++;
    if (i + 1 < n && t[i] == '/' && t[i + 1] == '/') {
      while (i < n && t[i] != '\n') i++;
    } else if (i + 1 < n && t[i] == '/' && t[i + 1] == '*') {
      for (i += 2; i + 1 < n && !(t[i] == '*' && t[i + 1] == '/');) i++;
      i += 2;
    } else {
      return i + 8 <= n && !strncmp(t + i, ".version", 8);
    }
  }
}

hcq_binary_format_t hcq__binary_sniff(const void *bytes, size_t size) {
  const uint8_t *b = bytes;
  uint32_t w = 0;
  if (size >= 4) memcpy(&w, b, 4);
  if (w == 0x07230203u) return HCQ_BINARY_SPIRV;
  if (w == 0xBA55ED50u) return HCQ_BINARY_FATBIN;
  if (size >= 4 && !memcmp(b, "MTLB", 4)) return HCQ_BINARY_METALLIB;
  /* An ELF for NVIDIA CUDA (e_machine 190, EM_CUDA) is a cubin. */
  if (size >= 20 &&
      !memcmp(b,
              "\x7f"
              "ELF",
              4) &&
      b[18] == 190 && b[19] == 0)
    return HCQ_BINARY_CUBIN;
  if (is_ptx_text(bytes, size)) return HCQ_BINARY_PTX;
  return HCQ_BINARY_NONE;
}

void hcq__binary_describe(const void *bytes, size_t size, char *out, size_t out_size) {
  const uint8_t *b = bytes;
  static const char *const what[] = {
      "", "a SPIR-V module", "PTX text", "a CUDA ELF cubin", "a CUDA fatbin", "a Metal library"};
  hcq_binary_format_t f = hcq__binary_sniff(bytes, size);
  if (f != HCQ_BINARY_NONE) {
    snprintf(out, out_size, "%s (format %s)", what[f], hcq_binary_format_name(f));
    return;
  }
  if (size >= 4 && !memcmp(b,
                           "\x7f"
                           "ELF",
                           4)) {
    snprintf(out, out_size, "an ELF file that is not for CUDA (e_machine %u)",
             size >= 20 ? b[18] | b[19] << 8 : 0);
    return;
  }
  size_t n = size < 16 ? size : 16, printable = 0;
  for (size_t i = 0; i < n; i++) printable += isprint(b[i]) || b[i] == '\n' || b[i] == '\t';
  if (n && printable == n) {
    char text[20], quoted[80];
    memcpy(text, b, n);
    text[n] = '\0';
    hcq__quote(text, quoted, sizeof(quoted));
    snprintf(out, out_size, "text starting %s", quoted);
    return;
  }
  size_t used = (size_t)snprintf(out, out_size, "%zu bytes starting", size);
  for (size_t i = 0; i < (size < 8 ? size : 8) && used < out_size; i++)
    used += (size_t)snprintf(out + used, out_size - used, " %02x", b[i]);
}

/* ---- public ---- */

hcq_status_t hcq_program_create_binary(hcq_device_t *dev, hcq_binary_format_t format,
                                       const void *bytes, size_t size, const char *entry,
                                       hcq_program_t **out_program) {
  if (!out_program)
    return hcq_status_make(HCQ_INVALID_ARGUMENT, "hcq_program_create_binary: out_program is NULL");
  *out_program = NULL;
  hcq_status_t st = hcq__device_handle_check(dev, "hcq_program_create_binary");
  if (st) return st;
  if (format <= HCQ_BINARY_NONE || format >= HCQ_BINARY_FORMAT_COUNT)
    return hcq_status_make(HCQ_INVALID_ARGUMENT,
                           "hcq_program_create_binary on %s: format %d is not a binary format "
                           "(HCQ_BINARY_SPIRV ... HCQ_BINARY_METALLIB)",
                           dev->name, (int)format);
  const hcq__backend_t *b = hcq__backend(dev->kind);
  unsigned loads = b ? b->binary_formats : 0;
  char list[96];
  hcq__binary_list(loads, list, sizeof(list));
  if (!(loads & (1u << format))) {
    if (!loads)
      return hcq_status_make(
          HCQ_INVALID_ARGUMENT,
          "hcq_program_create_binary on %s: %s devices load no precompiled "
          "kernels (a %s cannot load; CPU kernels come from C source, hcq_program_create)",
          dev->name, hcq_device_kind_name(dev->kind), hcq_binary_format_name(format));
    return hcq_status_make(HCQ_INVALID_ARGUMENT,
                           "hcq_program_create_binary on %s: a %s does not load on %s devices, "
                           "which load: %s",
                           dev->name, hcq_binary_format_name(format),
                           hcq_device_kind_name(dev->kind), list);
  }
  if (!bytes || !size)
    return hcq_status_make(HCQ_INVALID_ARGUMENT, "hcq_program_create_binary on %s: %s", dev->name,
                           !bytes ? "bytes is NULL" : "size is 0");
  if (size > HCQ__BINARY_MAX_BYTES)
    return hcq_status_make(HCQ_OUT_OF_RANGE,
                           "hcq_program_create_binary on %s: %zu bytes of %s, at most %u",
                           dev->name, size, hcq_binary_format_name(format), HCQ__BINARY_MAX_BYTES);
  char *text = hcq__binary_text(format, bytes, size);
  if (!text)
    return hcq_status_make(HCQ_OUT_OF_MEMORY, "out of memory loading a %s",
                           hcq_binary_format_name(format));
  /* hcq_program_create checks the entry and hands the text to the backend, which decodes it. */
  st = hcq_program_create(dev, entry, text, out_program);
  free(text);
  return st;
}

/* "sm_90", "90", "9.0", "compute_90" -> 90; 0 when it is none of those. */
static int parse_arch(const char *a) {
  if (!strncmp(a, "sm_", 3))
    a += 3;
  else if (!strncmp(a, "compute_", 8))
    a += 8;
  int major = 0, minor = 0, n = 0;
  if (sscanf(a, "%d.%d%n", &major, &minor, &n) == 2 && !a[n] && major > 0 && minor >= 0 &&
      minor < 10)
    return major * 10 + minor;
  n = 0;
  if (sscanf(a, "%d%n", &major, &n) == 1 &&
      (!a[n] || ((a[n] == 'a' || a[n] == 'f') && !a[n + 1])) && major >= 10 && major < 1000)
    return major;
  return 0;
}

hcq_status_t hcq_binary_compile(hcq_device_kind_t kind, hcq_binary_format_t format,
                                const char *arch, const char *entry, const char *source,
                                void **out_bytes, size_t *out_size) {
  if (!out_bytes || !out_size)
    return hcq_status_make(HCQ_INVALID_ARGUMENT,
                           "hcq_binary_compile: out_bytes or out_size is NULL");
  *out_bytes = NULL;
  *out_size = 0;
  const hcq__backend_t *b = (unsigned)kind < HCQ_DEVICE_KIND_COUNT ? hcq__backend(kind) : NULL;
  if (!b)
    return hcq_status_make(HCQ_INVALID_ARGUMENT, "hcq_binary_compile: device kind %d is not a kind",
                           (int)kind);
  const char *kname = hcq_device_kind_name(kind);
  if (!entry || !source)
    return hcq_status_make(HCQ_INVALID_ARGUMENT, "hcq_binary_compile: %s is NULL",
                           !entry ? "entry" : "source");
  if (!hcq__is_c_identifier(entry) || strlen(entry) >= sizeof(((hcq_program_t *)0)->name)) {
    char quoted[300];
    hcq__quote(entry, quoted, sizeof(quoted));
    return hcq_status_make(HCQ_INVALID_ARGUMENT,
                           "compiling for %s: entry %s is not a C identifier of at most %zu "
                           "characters",
                           kname, quoted, sizeof(((hcq_program_t *)0)->name) - 1);
  }
  if ((unsigned)format >= HCQ_BINARY_FORMAT_COUNT)
    return hcq_status_make(HCQ_INVALID_ARGUMENT,
                           "compiling %s for %s: format %d is not a binary format", entry, kname,
                           (int)format);
  char list[96];
  hcq__binary_list(b->binary_formats, list, sizeof(list));
  if (format != HCQ_BINARY_NONE && !(b->binary_formats & (1u << format)))
    return hcq_status_make(HCQ_INVALID_ARGUMENT,
                           "compiling %s: a %s does not load on %s devices, which load: %s", entry,
                           hcq_binary_format_name(format), kname, list);
  if (!b->binary_compile)
    return hcq_status_make(
        b->binary_formats ? HCQ_UNIMPLEMENTED : HCQ_INVALID_ARGUMENT, "compiling %s for %s: %s",
        entry, kname,
        b->no_compile_why ? b->no_compile_why : "hcq makes no binaries for this kind");
  /* A check here keeps backends whose binaries name no architecture from parsing one. */
  if (arch && !b->binary_arch) {
    char with_arch[64] = "";
    size_t used = 0;
    for (const hcq__backend_t *const *r = hcq__backends; *r && used < sizeof(with_arch); r++)
      if ((*r)->binary_arch)
        used += (size_t)snprintf(with_arch + used, sizeof(with_arch) - used, "%s%s",
                                 used ? ", " : "", hcq_device_kind_name((*r)->kind));
    return hcq_status_make(HCQ_INVALID_ARGUMENT,
                           "compiling %s for %s: an architecture (\"%.40s\") is for %s only", entry,
                           kname, arch, with_arch);
  }
  if (arch && !parse_arch(arch))
    return hcq_status_make(HCQ_INVALID_ARGUMENT,
                           "compiling %s for %s: architecture \"%.40s\" is not sm_XY (sm_90), "
                           "XY or X.Y",
                           entry, kname, arch);
  hcq_status_t st = b->binary_compile(entry, source, format, arch, out_bytes, out_size);
  if (st) return hcq_status_annotate(st, "compiling %s for %s", entry, kname);
  return NULL;
}

int hcq__binary_arch(const char *arch) { return arch ? parse_arch(arch) : 0; }

void hcq_binary_free(void *bytes) { free(bytes); }
