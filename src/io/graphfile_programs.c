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

/* The text of the file at path f (a string), which holds no NUL byte. */
static hcq_status_t read_text_file(gf_loader_t *L, const json_t *f, char **out) {
  if (!f) return hcq__gf_fail(L, HCQ_INVALID_ARGUMENT, "missing");
  HCQ__TRY(hcq__gf_expect(L, f, JSON_STRING, "a path"));
  size_t len;
  HCQ__TRY(hcq__gf_read_file(L, json_string_value(f), out, &len));
  if (strlen(*out) != len) {
    free(*out);
    return hcq__gf_fail(L, HCQ_INVALID_ARGUMENT, "source files must not contain NUL bytes");
  }
  return NULL;
}

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
    size_t m = hcq__gf_push(L, ".file");
    st = read_text_file(L, json_object_get(j, "file"), out);
    hcq__gf_pop(L, m);
    return st;
  }
  return hcq__gf_fail(L, HCQ_INVALID_ARGUMENT, "must be source text or {\"file\": path}, not %s",
                      hcq__gf_type_name(j));
}

/* The binary's format: format's, else from rel's extension, one that b's devices load. Messages
 * name ".binary" (m marks it) or ".format", the one that decided; the caller pops to m. */
static hcq_status_t binary_format(gf_loader_t *L, const char *rel, const json_t *format,
                                  const hcq__backend_t *b, size_t m, hcq_binary_format_t *out) {
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
      return hcq__gf_fail(L, HCQ_INVALID_ARGUMENT,
                          "cannot tell the format of \"%s\" from its extension (.spv, .ptx, "
                          ".cubin, .fatbin, .metallib): give \"format\"",
                          rel);
  } else {
    hcq__gf_pop(L, m);
    hcq__gf_push(L, ".format");
    HCQ__TRY(hcq__gf_expect(L, format, JSON_STRING,
                            "a binary format (spirv, ptx, cubin, fatbin, metallib)"));
    if (!hcq_binary_format_parse(json_string_value(format), &f))
      return hcq__gf_fail(L, HCQ_INVALID_ARGUMENT,
                          "\"%s\" is not a binary format (spirv, ptx, cubin, fatbin, metallib)",
                          json_string_value(format));
  }
  if (!(b->binary_formats & (1u << f))) {
    char list[96];
    hcq__binary_list(b->binary_formats, list, sizeof(list));
    return hcq__gf_fail(
        L, HCQ_INVALID_ARGUMENT,
        "a %s does not load on %s devices, whose kernels \"%s\" holds (they load: %s)",
        hcq_binary_format_name(f), hcq_device_kind_name(b->kind), b->source_key, list);
  }
  *out = f;
  return NULL;
}

/* The text form (core/binary.h) of the binary file at rel, which is not empty. */
static hcq_status_t binary_file_text(gf_loader_t *L, const char *rel, hcq_binary_format_t f,
                                     char **out) {
  char *data = NULL;
  size_t len = 0;
  hcq_status_t st = hcq__gf_read_file(L, rel, &data, &len);
  if (st) return st;
  if (!len)
    st = hcq__gf_fail(L, HCQ_INVALID_ARGUMENT, "\"%s\" is empty", rel);
  else if (!(*out = hcq__binary_text(f, data, len)))
    st = hcq__gf_oom(L);
  free(data);
  return st;
}

/* A precompiled kernel named by a program's source key: {"binary": PATH, "format": F}, the format
 * from PATH's extension when not given. It becomes the binary's text form (core/binary.h), which
 * the device's program_compile takes like any source. */
static hcq_status_t binary_source(gf_loader_t *L, const json_t *j, const hcq__backend_t *b,
                                  char **out) {
  static const char *const keys[] = {"binary", "format", NULL};
  HCQ__TRY(hcq__gf_only_keys(L, j, keys));
  const json_t *path = json_object_get(j, "binary"), *format = json_object_get(j, "format");
  size_t m = hcq__gf_push(L, ".binary");
  hcq_binary_format_t f = HCQ_BINARY_NONE;
  hcq_status_t st = hcq__gf_expect(L, path, JSON_STRING, "a path");
  if (st) goto done;
  if ((st = binary_format(L, json_string_value(path), format, b, m, &f))) goto done;
  hcq__gf_pop(L, m);
  m = hcq__gf_push(L, ".binary");
  st = binary_file_text(L, json_string_value(path), f, out);
done:
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

/* "nbufs" and "nvals", both or neither. */
static hcq_status_t program_counts(gf_loader_t *L, const json_t *v, gf_program_t *p) {
  const json_t *jnb = json_object_get(v, "nbufs"), *jnv = json_object_get(v, "nvals");
  if (!jnb != !jnv)
    return hcq__gf_fail(L, HCQ_INVALID_ARGUMENT, "give both \"nbufs\" and \"nvals\", or neither");
  if (!jnb) return NULL;
  HCQ__TRY(hcq__gf_get_int_at(L, ".nbufs", jnb, 0, HCQ_MAX_KERNEL_BUFS, &p->nbufs));
  return hcq__gf_get_int_at(L, ".nvals", jnv, 0, HCQ_MAX_KERNEL_VALS, &p->nvals);
}

/* "entry": the function's name, the program's own by default. */
static hcq_status_t program_entry(gf_loader_t *L, const json_t *v, const char *key,
                                  gf_program_t *p) {
  const json_t *entry = json_object_get(v, "entry");
  if (!entry) {
    p->entry = strdup(key);
    return NULL;
  }
  size_t m = hcq__gf_push(L, ".entry");
  hcq_status_t st = hcq__gf_expect(L, entry, JSON_STRING, "a function name");
  if (!st) p->entry = strdup(json_string_value(entry));
  hcq__gf_pop(L, m);
  return st;
}

/* One source per backend, under the backend's key. */
static hcq_status_t program_sources(gf_loader_t *L, const json_t *v, gf_program_t *p) {
  for (const hcq__backend_t *const *b = hcq__backends; *b; b++) {
    const json_t *src = json_object_get(v, (*b)->source_key);
    if (!src) continue;
    char field[32];
    snprintf(field, sizeof(field), ".%s", (*b)->source_key);
    size_t m = hcq__gf_push(L, field);
    hcq_status_t st = program_source(L, src, *b, &p->sources[(*b)->kind]);
    hcq__gf_pop(L, m);
    if (st) return st;
  }
  return NULL;
}

/* The fields a program may have: entry, the counts, and one source key per backend; shape names
 * them for messages. keys holds 4 + HCQ_DEVICE_KIND_COUNT. */
static void program_keys(const char **keys, char shape[128]) {
  keys[0] = "entry", keys[1] = "nbufs", keys[2] = "nvals";
  size_t nkeys = 3;
  snprintf(shape, 128, "an object {entry");
  for (const hcq__backend_t *const *b = hcq__backends; *b; b++) {
    keys[nkeys++] = (*b)->source_key;
    size_t n = strlen(shape);
    snprintf(shape + n, 128 - n, ", %s", (*b)->source_key);
  }
  keys[nkeys] = NULL;
  size_t n = strlen(shape);
  snprintf(shape + n, 128 - n, "}");
}

/* Program key, added to the file's programs and findable by name. */
static hcq_status_t parse_program(gf_loader_t *L, const char *key, const json_t *v) {
  const char *keys[4 + HCQ_DEVICE_KIND_COUNT];
  char shape[128];
  program_keys(keys, shape);
  gf_program_t p = {.nbufs = -1, .nvals = -1};
  hcq_status_t st;
  if ((st = hcq__gf_expect(L, v, JSON_OBJECT, shape))) goto fail;
  if ((st = hcq__gf_only_keys(L, v, keys))) goto fail;
  if ((st = program_counts(L, v, &p))) goto fail;
  if ((st = program_entry(L, v, key, &p))) goto fail;
  if ((st = program_sources(L, v, &p))) goto fail;
  p.name = strdup(key);
  if (!p.name || !p.entry || !hcq__vec_push(&L->gf->programs, p)) {
    st = hcq__gf_oom(L);
    goto fail;
  }
  if (!hcq__htab_add(&L->gf->program_names, hcq__hash_str(key), L->gf->programs.len - 1)) {
    L->gf->programs.len--;
    st = hcq__gf_oom(L);
    goto fail;
  }
  return NULL;
fail:
  free(p.name);
  free(p.entry);
  for (int k = 0; k < HCQ_DEVICE_KIND_COUNT; k++) free(p.sources[k]);
  return st;
}

hcq_status_t hcq__gf_parse_programs(gf_loader_t *L, const json_t *programs) {
  if (!programs) return NULL;
  size_t m = hcq__gf_push(L, "programs");
  hcq_status_t st = hcq__gf_expect(L, programs, JSON_OBJECT, "an object of programs");
  const char *key;
  json_t *v;
  if (st) goto done;
  json_object_foreach((json_t *)programs, key, v) {
    size_t m2 = hcq__gf_push_key(L, key);
    st = parse_program(L, key, v);
    hcq__gf_pop(L, m2);
    if (st) break;
  }
done:
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
  if (st) return hcq__gf_wrap(L, st);
  if (p->nbufs >= 0 && (st = hcq_program_declare_args(*out, (size_t)p->nbufs, (size_t)p->nvals))) {
    hcq_program_release(*out);
    *out = NULL;
    return hcq__gf_wrap(L, st);
  }
  p->compiled[p->ncompiled++] = *out;
  return NULL;
}
