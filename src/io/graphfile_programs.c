/* A graph file's "programs": each one's entry point, argument counts and a source per backend
 * (text, a file, or a precompiled binary), and the program compiled for a device when an item
 * first runs it there (once per device: items share it). */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/backend.h"
#include "core/binary.h"
#include "core/device.h"
#include "core/vec.h"
#include "io/graphfile_internal.h"

/* A string field that may be given as {"file": path}. */
static hcq_status_t text_or_file(gf_loader_t *L, const json_t *j, char **out) {
  if (json_is_string(j)) {
    *out = strdup(json_string_value(j));
    return *out ? NULL : hcq__gf_oom(L);
  }
  if (json_is_object(j)) {
    static const char *const keys[] = {"file", NULL};
    hcq_status_t st = hcq__gf_only_keys(L, j, keys);
    if (st) return st;
    const json_t *f = json_object_get(j, "file");
    size_t m = hcq__gf_push(L, ".file");
    if (!f) st = hcq__gf_fail(L, HCQ_INVALID_ARGUMENT, "missing");
    if (!st) st = hcq__gf_expect(L, f, JSON_STRING, "a path");
    size_t len;
    if (!st) st = hcq__gf_read_file(L, json_string_value(f), out, &len);
    if (!st && strlen(*out) != len) {
      free(*out);
      st = hcq__gf_fail(L, HCQ_INVALID_ARGUMENT, "source files must not contain NUL bytes");
    }
    hcq__gf_pop(L, m);
    return st;
  }
  return hcq__gf_fail(L, HCQ_INVALID_ARGUMENT, "must be source text or {\"file\": path}, not %s",
                      hcq__gf_type_name(j));
}

/* A precompiled kernel named by a program's source key: {"binary": PATH, "format": F}, the format
 * from PATH's extension when not given. It becomes the binary's text form (core/binary.h), which
 * the device's program_compile takes like any source. */
static hcq_status_t binary_source(gf_loader_t *L, const json_t *j, const hcq__backend_t *b,
                                  char **out) {
  static const char *const keys[] = {"binary", "format", NULL};
  hcq_status_t st = hcq__gf_only_keys(L, j, keys);
  if (st) return st;
  const json_t *path = json_object_get(j, "binary"), *format = json_object_get(j, "format");
  size_t m = hcq__gf_push(L, ".binary");
  if ((st = hcq__gf_expect(L, path, JSON_STRING, "a path"))) {
    hcq__gf_pop(L, m);
    return st;
  }
  const char *rel = json_string_value(path);
  hcq_binary_format_t f = HCQ_BINARY_NONE;
  if (!format) {
    static const struct {
      const char *ext;
      hcq_binary_format_t f;
    } exts[] = {{".spv", HCQ_BINARY_SPIRV},     {".spirv", HCQ_BINARY_SPIRV},
                {".ptx", HCQ_BINARY_PTX},       {".cubin", HCQ_BINARY_CUBIN},
                {".fatbin", HCQ_BINARY_FATBIN}, {".metallib", HCQ_BINARY_METALLIB}};
    const char *dot = strrchr(rel, '.');
    for (size_t i = 0; dot && !strchr(dot, '/') && i < sizeof(exts) / sizeof(exts[0]); i++)
      if (!strcmp(dot, exts[i].ext)) f = exts[i].f;
    if (!f)
      st = hcq__gf_fail(L, HCQ_INVALID_ARGUMENT,
                        "cannot tell the format of \"%s\" from its extension (.spv, .ptx, .cubin, "
                        ".fatbin, .metallib): give \"format\"",
                        rel);
  } else {
    hcq__gf_pop(L, m);
    m = hcq__gf_push(L, ".format");
    if (!(st = hcq__gf_expect(L, format, JSON_STRING,
                              "a binary format (spirv, ptx, cubin, fatbin, metallib)")) &&
        !hcq_binary_format_parse(json_string_value(format), &f))
      st = hcq__gf_fail(L, HCQ_INVALID_ARGUMENT,
                        "\"%s\" is not a binary format (spirv, ptx, cubin, fatbin, metallib)",
                        json_string_value(format));
  }
  if (!st && !(b->binary_formats & (1u << f))) {
    char list[96];
    hcq__binary_list(b->binary_formats, list, sizeof(list));
    st =
        hcq__gf_fail(L, HCQ_INVALID_ARGUMENT,
                     "a %s does not load on %s devices, whose kernels \"%s\" holds (they load: %s)",
                     hcq_binary_format_name(f), hcq_device_kind_name(b->kind), b->source_key, list);
  }
  hcq__gf_pop(L, m);
  if (st) return st;
  m = hcq__gf_push(L, ".binary");
  char *data = NULL;
  size_t len = 0;
  if (!(st = hcq__gf_read_file(L, rel, &data, &len)) && !len)
    st = hcq__gf_fail(L, HCQ_INVALID_ARGUMENT, "\"%s\" is empty", rel);
  if (!st && !(*out = hcq__binary_text(f, data, len))) st = hcq__gf_oom(L);
  free(data);
  hcq__gf_pop(L, m);
  return st;
}

/* A program's source for one backend: text, {"file": PATH} or {"binary": PATH, ...}. */
static hcq_status_t program_source(gf_loader_t *L, const json_t *j, const hcq__backend_t *b,
                                   char **out) {
  if (json_is_object(j) && json_object_get(j, "binary")) return binary_source(L, j, b, out);
  if (!json_is_string(j) && !json_is_object(j))
    return hcq__gf_fail(L, HCQ_INVALID_ARGUMENT,
                        "must be source text, {\"file\": path} or {\"binary\": path}, not %s",
                        hcq__gf_type_name(j));
  return text_or_file(L, j, out);
}

hcq_status_t hcq__gf_parse_programs(gf_loader_t *L, const json_t *programs) {
  if (!programs) return NULL;
  size_t m = hcq__gf_push(L, "programs");
  hcq_status_t st = hcq__gf_expect(L, programs, JSON_OBJECT, "an object of programs");
  const char *key;
  json_t *v;
  if (!st) json_object_foreach((json_t *)programs, key, v) {
      size_t m2 = hcq__gf_push_key(L, key);
      /* The fields: entry, the counts, and one source key per backend. */
      const char *keys[4 + HCQ_DEVICE_KIND_COUNT] = {"entry", "nbufs", "nvals"};
      char shape[128] = "an object {entry";
      size_t nkeys = 3;
      for (const hcq__backend_t *const *b = hcq__backends; *b; b++) {
        keys[nkeys++] = (*b)->source_key;
        size_t n = strlen(shape);
        snprintf(shape + n, sizeof(shape) - n, ", %s", (*b)->source_key);
      }
      keys[nkeys] = NULL;
      size_t n = strlen(shape);
      snprintf(shape + n, sizeof(shape) - n, "}");
      gf_program_t p = {.nbufs = -1, .nvals = -1};
      if (!(st = hcq__gf_expect(L, v, JSON_OBJECT, shape)) &&
          !(st = hcq__gf_only_keys(L, v, keys))) {
        const json_t *jnb = json_object_get(v, "nbufs"), *jnv = json_object_get(v, "nvals");
        if (!jnb != !jnv)
          st = hcq__gf_fail(L, HCQ_INVALID_ARGUMENT,
                            "give both \"nbufs\" and \"nvals\", or neither");
        if (!st && jnb) {
          size_t m3 = hcq__gf_push(L, ".nbufs");
          st = hcq__gf_get_int(L, jnb, 0, HCQ_MAX_KERNEL_BUFS, &p.nbufs);
          hcq__gf_pop(L, m3);
          m3 = hcq__gf_push(L, ".nvals");
          if (!st) st = hcq__gf_get_int(L, jnv, 0, HCQ_MAX_KERNEL_VALS, &p.nvals);
          hcq__gf_pop(L, m3);
        }
        const json_t *entry = json_object_get(v, "entry");
        if (entry) {
          size_t m3 = hcq__gf_push(L, ".entry");
          if (!(st = hcq__gf_expect(L, entry, JSON_STRING, "a function name")))
            p.entry = strdup(json_string_value(entry));
          hcq__gf_pop(L, m3);
        } else {
          p.entry = strdup(key);
        }
        for (const hcq__backend_t *const *b = hcq__backends; *b && !st; b++) {
          const json_t *src = json_object_get(v, (*b)->source_key);
          if (!src) continue;
          char field[32];
          snprintf(field, sizeof(field), ".%s", (*b)->source_key);
          size_t m3 = hcq__gf_push(L, field);
          st = program_source(L, src, *b, &p.sources[(*b)->kind]);
          hcq__gf_pop(L, m3);
        }
      }
      p.name = strdup(key);
      if (!st && (!p.name || !p.entry || !hcq__vec_push(&L->gf->programs, p))) st = hcq__gf_oom(L);
      if (!st &&
          !hcq__htab_add(&L->gf->program_names, hcq__hash_str(key), L->gf->programs.len - 1)) {
        L->gf->programs.len--;
        st = hcq__gf_oom(L);
      }
      if (st) {
        free(p.name);
        free(p.entry);
        for (int k = 0; k < HCQ_DEVICE_KIND_COUNT; k++) free(p.sources[k]);
      }
      hcq__gf_pop(L, m2);
      if (st) break;
    }
  hcq__gf_pop(L, m);
  return st;
}

static void noop_kernel(void *const *bufs, const int32_t *vals, const hcq_launch_t *launch) {
  (void)bufs, (void)vals, (void)launch;
}

/* The program compiled for dev (once per device). */
hcq_status_t hcq__gf_program_for(gf_loader_t *L, gf_program_t *p, hcq_device_t *dev,
                                 hcq_program_t **out) {
  for (size_t i = 0; i < p->ncompiled; i++)
    if (p->compiled[i]->dev == dev) {
      *out = p->compiled[i];
      return NULL;
    }
  if (p->ncompiled == GF_MAX_DEVICES) return hcq__gf_oom(L);
  hcq_status_t st;
  /* Each device compiles the source of its kind, under its backend's key. */
  uint32_t caps = hcq_device_caps(dev);
  const hcq__backend_t *b = hcq__backend(dev->kind);
  const char *source = b ? p->sources[dev->kind] : NULL;
  if (L->opts->skip_compile && (caps & HCQ_CAP_HOST_CALLABLE))
    st = hcq_program_create_fn(dev, p->entry, noop_kernel, out);
  else if (!source)
    st = hcq_status_make(HCQ_INVALID_ARGUMENT, "program \"%s\" has no source for %s (give \"%s\")",
                         p->name, dev->name, b ? b->source_key : "?");
  else
    st = hcq_program_create(dev, p->entry, source, out);
  if (!st && p->nbufs >= 0 &&
      (st = hcq_program_declare_args(*out, (size_t)p->nbufs, (size_t)p->nvals))) {
    hcq_program_release(*out);
    *out = NULL;
  }
  if (st) return hcq__gf_wrap(L, st);
  p->compiled[p->ncompiled++] = *out;
  return NULL;
}
