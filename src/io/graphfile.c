/* Loading hcq-graph/1 files with Jansson: every field validated, errors with the JSON path. */
#include <errno.h>
#include <fcntl.h>
#include <float.h>
#include <inttypes.h>
#include <jansson.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/backend.h"
#include "core/binary.h"
#include "core/internal.h"
#include "hcq/graphfile.h"
#include "io/graphfile_internal.h"

#define MAX_BUFFER_BYTES (UINT64_C(1) << 40)
#define MAX_FILE_BYTES (64u << 20)

/* ---- errors with a JSON path ---- */

typedef struct loader {
  hcq_graph_file_t *gf;
  const char *name;     /* for messages */
  const char *base_dir; /* for {"file": ...} */
  const hcq_graph_file_options_t *opts;
  char path[512];
  size_t path_len;
  size_t *input_of; /* by buffer index: its index in inputs + 1, or 0 */
  const hcq_expr_t **var_exprs; /* the variables, for the expression parser (made on first use) */
} loader_t;

static size_t push(loader_t *L, const char *fmt, ...) HCQ_PRINTF(2, 3);
static size_t push(loader_t *L, const char *fmt, ...) {
  size_t mark = L->path_len;
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(L->path + L->path_len, sizeof(L->path) - L->path_len, fmt, ap);
  va_end(ap);
  if (n > 0) L->path_len += (size_t)n < sizeof(L->path) - L->path_len ? (size_t)n : sizeof(L->path) - L->path_len - 1;
  return mark;
}
static void pop(loader_t *L, size_t mark) {
  L->path_len = mark;
  L->path[mark] = '\0';
}

/* A key in a path: bare when it is an identifier, quoted otherwise. */
static size_t push_key(loader_t *L, const char *key) {
  bool plain = *key != '\0';
  for (const char *c = key; *c; c++)
    if (!((*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') || (*c >= '0' && *c <= '9') || *c == '_')) plain = false;
  if (plain) return push(L, "%s%.64s", L->path_len ? "." : "", key);
  return push(L, "%s\"%.64s\"", L->path_len ? "." : "", key);
}

static hcq_status_t fail(loader_t *L, hcq_status_code_t code, const char *fmt, ...) HCQ_PRINTF(3, 4);
static hcq_status_t fail(loader_t *L, hcq_status_code_t code, const char *fmt, ...) {
  char msg[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof(msg), fmt, ap);
  va_end(ap);
  return hcq_status_make(code, "%s: %s%s%s", L->name, L->path, L->path_len ? ": " : "", msg);
}

/* Prefixes a status from the library with the file and path. */
static hcq_status_t wrap(loader_t *L, hcq_status_t st) {
  if (!st) return NULL;
  return L->path_len ? hcq_status_annotate(st, "%s: %s", L->name, L->path) : hcq_status_annotate(st, "%s", L->name);
}

static const char *type_name(const json_t *j) {
  switch (json_typeof(j)) {
    case JSON_OBJECT: return "an object";
    case JSON_ARRAY: return "an array";
    case JSON_STRING: return "a string";
    case JSON_INTEGER: return "an integer";
    case JSON_REAL: return "a number with a fraction";
    case JSON_TRUE:
    case JSON_FALSE: return "a boolean";
    default: return "null";
  }
}

static hcq_status_t expect(loader_t *L, const json_t *j, json_type type, const char *what) {
  if (json_typeof(j) == type) return NULL;
  return fail(L, HCQ_INVALID_ARGUMENT, "must be %s, not %s", what, type_name(j));
}

/* Rejects keys other than the allowed ones (typos should not pass silently). */
static hcq_status_t only_keys(loader_t *L, const json_t *obj, const char *const *allowed) {
  const char *key;
  json_t *v;
  json_object_foreach((json_t *)obj, key, v) {
    bool ok = false;
    for (const char *const *a = allowed; *a; a++) ok |= !strcmp(*a, key);
    if (!ok) {
      size_t m = push_key(L, key);
      hcq_status_t st = fail(L, HCQ_INVALID_ARGUMENT, "unknown field");
      pop(L, m);
      return st;
    }
  }
  return NULL;
}

static hcq_status_t get_int(loader_t *L, const json_t *j, int64_t lo, int64_t hi, int64_t *out) {
  hcq_status_t st = expect(L, j, JSON_INTEGER, "an integer");
  if (st) return st;
  json_int_t v = json_integer_value(j);
  if (v < lo || v > hi)
    return fail(L, HCQ_OUT_OF_RANGE, "%lld is outside [%" PRId64 ", %" PRId64 "]", (long long)v, lo, hi);
  *out = (int64_t)v;
  return NULL;
}

/* A finite JSON number (integer or real) that a float holds without overflowing. */
static hcq_status_t get_f32(loader_t *L, const json_t *j, float *out) {
  if (!json_is_number(j)) return fail(L, HCQ_INVALID_ARGUMENT, "must be a number, not %s", type_name(j));
  double v = json_number_value(j);
  if (!isfinite(v) || fabs(v) > FLT_MAX) return fail(L, HCQ_OUT_OF_RANGE, "%g does not fit a 32-bit float", v);
  *out = (float)v;
  return NULL;
}

/* ---- the loaded file ---- */

static void gf_free(hcq_graph_file_t *gf) {
  if (!gf) return;
  for (size_t i = 0; i < gf->items.len; i++) {
    hcq_exec_item_t *it = &gf->items.data[i];
    if (it->kind != HCQ_ITEM_KERNEL) continue;
    for (size_t k = 0; k < it->kernel.nvals; k++) hcq_expr_release(it->kernel.vals[k].sym);
    for (int k = 0; k < 3; k++) {
      hcq_expr_release(it->kernel.global[k].sym);
      hcq_expr_release(it->kernel.local[k].sym);
    }
    free((void *)it->kernel.bufs);
    free((void *)it->kernel.outs);
    free((void *)it->kernel.vals);
  }
  hcq__vec_free(&gf->items);
  for (size_t i = 0; i < gf->runs.len; i++) {
    free(gf->runs.data[i].inputs);
    free(gf->runs.data[i].vals);
  }
  hcq__vec_free(&gf->runs);
  free(gf->inputs);
  for (size_t i = 0; i < gf->programs.len; i++) {
    gf_program_t *p = &gf->programs.data[i];
    for (size_t d = 0; d < p->ncompiled; d++) hcq_program_release(p->compiled[d]);
    free(p->name);
    free(p->entry);
    for (int k = 0; k < HCQ_DEVICE_KIND_COUNT; k++) free(p->sources[k]);
  }
  hcq__vec_free(&gf->programs);
  for (size_t i = gf->buffers.len; i-- > 0;) {
    gf_buffer_t *b = &gf->buffers.data[i];
    hcq_buffer_release(b->buf);
    free(b->name);
    free(b->init_data);
  }
  hcq__vec_free(&gf->buffers);
  for (size_t i = 0; i < gf->vars.len; i++) hcq_expr_release(gf->vars.data[i].var);
  hcq__vec_free(&gf->vars);
  for (size_t i = 0; i < gf->ndevices; i++) hcq_status_free(hcq_device_close(gf->devices[i]));
  hcq__htab_free(&gf->buffer_names);
  hcq__htab_free(&gf->program_names);
  hcq__htab_free(&gf->var_names);
  free(gf);
}

void hcq_graph_file_free(hcq_graph_file_t *gf) { gf_free(gf); }

static hcq_status_t oom(loader_t *L) { return fail(L, HCQ_OUT_OF_MEMORY, "out of memory"); }

/* ---- devices and the device map ---- */

/* Checks the map's syntax: comma-separated FROM=TO entries, both sides non-empty. */
static hcq_status_t check_device_map(const char *map) {
  if (!map || !*map) return NULL;
  char buf[512];
  if (strlen(map) >= sizeof(buf)) return hcq_status_make(HCQ_INVALID_ARGUMENT, "device map is longer than %zu bytes", sizeof(buf) - 1);
  snprintf(buf, sizeof(buf), "%s", map);
  for (char *save = NULL, *e = strtok_r(buf, ",", &save); e; e = strtok_r(NULL, ",", &save)) {
    char *eq = strchr(e, '=');
    if (!eq || eq == e || !eq[1] || strchr(eq + 1, '='))
      return hcq_status_make(HCQ_INVALID_ARGUMENT, "device map entry \"%s\" is not FROM=TO (e.g. CPU=CUDA or CPU:1=CPU:0)", e);
  }
  return NULL;
}

/* Applies the map to a device name: exact names first ("CPU" counts as "CPU:0"), then kinds
 * ("CPU=CUDA" keeps the index). */
static void map_device(const char *map, const char *name, char *out, size_t size) {
  snprintf(out, size, "%s", name);
  if (!map || !*map) return;
  const char *colon = strchr(name, ':');
  size_t kind_len = colon ? (size_t)(colon - name) : strlen(name);
  const char *index = colon ? colon + 1 : "0";
  char full[160];
  snprintf(full, sizeof(full), "%.*s:%s", (int)kind_len, name, index);
  for (int exact = 1; exact >= 0; exact--) {
    char copy[512];
    snprintf(copy, sizeof(copy), "%s", map);
    for (char *save = NULL, *e = strtok_r(copy, ",", &save); e; e = strtok_r(NULL, ",", &save)) {
      char *eq = strchr(e, '=');
      if (!eq) continue;
      *eq = '\0';
      const char *from = e, *to = eq + 1;
      if (exact && strchr(from, ':') && !strcasecmp(from, full)) {
        snprintf(out, size, "%s", to);
        return;
      }
      if (!exact && !strchr(from, ':') && strlen(from) == kind_len && !strncasecmp(from, name, kind_len)) {
        snprintf(out, size, "%s:%s", to, index);
        return;
      }
    }
  }
}

static hcq_status_t open_device(loader_t *L, const char *name, hcq_device_t **out) {
  hcq_graph_file_t *gf = L->gf;
  char mapped[128];
  map_device(L->opts->device_map, name, mapped, sizeof(mapped));
  if (atomic_load(&hcq__remote) && !strchr(mapped, '/')) {
    /* Under MPI (docs/mpi.md) a file describes one job run by every rank: a device the map does not
     * send to a rank is rank 0's, on every rank (plain names would mean each rank's own). */
    char qualified[sizeof(mapped)];
    snprintf(qualified, sizeof(qualified), "0/%.120s", mapped);
    snprintf(mapped, sizeof(mapped), "%s", qualified);
  }
  hcq_device_t *dev = NULL;
  hcq_status_t st = hcq_device_open(mapped, &dev);
  if (st) return wrap(L, st);
  for (size_t i = 0; i < gf->ndevices; i++)
    if (gf->devices[i] == dev) {
      hcq_status_free(hcq_device_close(dev)); /* one reference per device is enough */
      *out = dev;
      return NULL;
    }
  if (gf->ndevices == GF_MAX_DEVICES) {
    hcq_status_free(hcq_device_close(dev));
    return fail(L, HCQ_INVALID_ARGUMENT, "a graph file uses at most %d devices", GF_MAX_DEVICES);
  }
  gf->devices[gf->ndevices++] = dev;
  *out = dev;
  return NULL;
}

/* ---- file contents from {"file": path} ---- */

static const char *file_type(mode_t mode) {
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISFIFO(mode)) return "a FIFO (named pipe)";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISSOCK(mode)) return "a socket";
  return "a special file";
}

/* Opens a regular file for reading, never blocking: a FIFO (or a character device) would wait
 * for a writer forever, or stream without end, so anything else is refused by type. */
static hcq_status_t open_regular(loader_t *L, const char *path, FILE **out) {
  int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) return fail(L, HCQ_NOT_FOUND, "cannot open \"%s\": %s", path, strerror(errno));
  struct stat sb;
  if (fstat(fd, &sb) != 0) {
    int e = errno;
    close(fd);
    return fail(L, HCQ_UNAVAILABLE, "cannot read \"%s\": %s", path, strerror(e));
  }
  if (!S_ISREG(sb.st_mode)) {
    close(fd);
    return fail(L, HCQ_INVALID_ARGUMENT, "\"%s\" is %s, not a regular file", path, file_type(sb.st_mode));
  }
  int flags = fcntl(fd, F_GETFL);
  if (flags >= 0) (void)fcntl(fd, F_SETFL, flags & ~O_NONBLOCK);
  *out = fdopen(fd, "rb");
  if (!*out) {
    close(fd);
    return oom(L);
  }
  return NULL;
}

static hcq_status_t read_file(loader_t *L, const char *rel, char **out, size_t *out_len) {
  /* The whole path or an error: a path cut at PATH_MAX could name another file that exists. */
  bool relative = rel[0] != '/' && L->base_dir && *L->base_dir;
  size_t need = (relative ? strlen(L->base_dir) + 1 : 0) + strlen(rel);
  if (need >= PATH_MAX)
    return fail(L, HCQ_INVALID_ARGUMENT, "path \"%.80s%s\" is too long: %zu bytes%s, the limit (PATH_MAX) is %d", rel,
                strlen(rel) > 80 ? "..." : "", need, relative ? " with the graph file's folder" : "", PATH_MAX - 1);
  char *full = malloc(need + 1);
  if (!full) return oom(L);
  snprintf(full, need + 1, relative ? "%s/%s" : "%s%s", relative ? L->base_dir : "", rel);
  FILE *f;
  hcq_status_t st = open_regular(L, full, &f);
  if (st) {
    free(full);
    return st;
  }
  size_t cap = 4096, len = 0;
  char *buf = malloc(cap + 1);
  while (buf) {
    size_t n = fread(buf + len, 1, cap - len, f);
    len += n;
    if (ferror(f)) {
      int e = errno;
      free(buf);
      fclose(f);
      st = fail(L, HCQ_UNAVAILABLE, "cannot read \"%s\": %s", full, strerror(e));
      free(full);
      return st;
    }
    if (len < cap) break;
    if (cap >= MAX_FILE_BYTES) {
      free(buf);
      fclose(f);
      st = fail(L, HCQ_OUT_OF_RANGE, "\"%s\" is larger than %u bytes", full, MAX_FILE_BYTES);
      free(full);
      return st;
    }
    cap *= 2;
    char *nb = realloc(buf, cap + 1);
    if (!nb) free(buf);
    buf = nb;
  }
  fclose(f);
  free(full);
  if (!buf) return oom(L);
  buf[len] = '\0';
  *out = buf;
  *out_len = len;
  return NULL;
}

/* A string field that may be given as {"file": path}. */
static hcq_status_t text_or_file(loader_t *L, const json_t *j, char **out) {
  if (json_is_string(j)) {
    *out = strdup(json_string_value(j));
    return *out ? NULL : oom(L);
  }
  if (json_is_object(j)) {
    static const char *const keys[] = {"file", NULL};
    hcq_status_t st = only_keys(L, j, keys);
    if (st) return st;
    const json_t *f = json_object_get(j, "file");
    size_t m = push(L, ".file");
    if (!f) st = fail(L, HCQ_INVALID_ARGUMENT, "missing");
    if (!st) st = expect(L, f, JSON_STRING, "a path");
    size_t len;
    if (!st) st = read_file(L, json_string_value(f), out, &len);
    if (!st && strlen(*out) != len) {
      free(*out);
      st = fail(L, HCQ_INVALID_ARGUMENT, "source files must not contain NUL bytes");
    }
    pop(L, m);
    return st;
  }
  return fail(L, HCQ_INVALID_ARGUMENT, "must be source text or {\"file\": path}, not %s", type_name(j));
}

/* A precompiled kernel named by a program's source key: {"binary": PATH, "format": F}, the format
 * from PATH's extension when not given. It becomes the binary's text form (core/binary.h), which the
 * device's program_compile takes like any source. */
static hcq_status_t binary_source(loader_t *L, const json_t *j, const hcq__backend_t *b, char **out) {
  static const char *const keys[] = {"binary", "format", NULL};
  hcq_status_t st = only_keys(L, j, keys);
  if (st) return st;
  const json_t *path = json_object_get(j, "binary"), *format = json_object_get(j, "format");
  size_t m = push(L, ".binary");
  if ((st = expect(L, path, JSON_STRING, "a path"))) {
    pop(L, m);
    return st;
  }
  const char *rel = json_string_value(path);
  hcq_binary_format_t f = HCQ_BINARY_NONE;
  if (!format) {
    static const struct {
      const char *ext;
      hcq_binary_format_t f;
    } exts[] = {{".spv", HCQ_BINARY_SPIRV},     {".spirv", HCQ_BINARY_SPIRV}, {".ptx", HCQ_BINARY_PTX},
                {".cubin", HCQ_BINARY_CUBIN},   {".fatbin", HCQ_BINARY_FATBIN}, {".metallib", HCQ_BINARY_METALLIB}};
    const char *dot = strrchr(rel, '.');
    for (size_t i = 0; dot && !strchr(dot, '/') && i < sizeof(exts) / sizeof(exts[0]); i++)
      if (!strcmp(dot, exts[i].ext)) f = exts[i].f;
    if (!f)
      st = fail(L, HCQ_INVALID_ARGUMENT, "cannot tell the format of \"%s\" from its extension (.spv, .ptx, .cubin, "
                ".fatbin, .metallib): give \"format\"", rel);
  } else {
    pop(L, m);
    m = push(L, ".format");
    if (!(st = expect(L, format, JSON_STRING, "a binary format (spirv, ptx, cubin, fatbin, metallib)")) &&
        !hcq_binary_format_parse(json_string_value(format), &f))
      st = fail(L, HCQ_INVALID_ARGUMENT, "\"%s\" is not a binary format (spirv, ptx, cubin, fatbin, metallib)",
                json_string_value(format));
  }
  if (!st && !(b->binary_formats & (1u << f))) {
    char list[96];
    hcq__binary_list(b->binary_formats, list, sizeof(list));
    st = fail(L, HCQ_INVALID_ARGUMENT, "a %s does not load on %s devices, whose kernels \"%s\" holds (they load: %s)",
              hcq_binary_format_name(f), hcq_device_kind_name(b->kind), b->source_key, list);
  }
  pop(L, m);
  if (st) return st;
  m = push(L, ".binary");
  char *data = NULL;
  size_t len = 0;
  if (!(st = read_file(L, rel, &data, &len)) && !len) st = fail(L, HCQ_INVALID_ARGUMENT, "\"%s\" is empty", rel);
  if (!st && !(*out = hcq__binary_text(f, data, len))) st = oom(L);
  free(data);
  pop(L, m);
  return st;
}

/* A program's source for one backend: text, {"file": PATH} or {"binary": PATH, ...}. */
static hcq_status_t program_source(loader_t *L, const json_t *j, const hcq__backend_t *b, char **out) {
  if (json_is_object(j) && json_object_get(j, "binary")) return binary_source(L, j, b, out);
  if (!json_is_string(j) && !json_is_object(j))
    return fail(L, HCQ_INVALID_ARGUMENT, "must be source text, {\"file\": path} or {\"binary\": path}, not %s",
                type_name(j));
  return text_or_file(L, j, out);
}

/* ---- base64 (the "base64" init, used by saved files) ---- */

static int b64_value(char c) {
  if (c >= 'A' && c <= 'Z') return c - 'A';
  if (c >= 'a' && c <= 'z') return c - 'a' + 26;
  if (c >= '0' && c <= '9') return c - '0' + 52;
  if (c == '+') return 62;
  if (c == '/') return 63;
  return -1;
}

/* Decodes into out (exactly size bytes expected); false on malformed input or a size mismatch. */
static bool b64_decode(const char *s, uint8_t *out, size_t size) {
  size_t n = strlen(s), o = 0;
  if (n % 4) return false;
  for (size_t i = 0; i < n; i += 4) {
    int v[4];
    for (int k = 0; k < 4; k++) v[k] = s[i + k] == '=' ? -2 : b64_value(s[i + k]);
    if (v[0] < 0 || v[1] < 0 || v[2] == -1 || v[3] == -1 || (v[2] == -2 && v[3] != -2)) return false;
    if ((v[2] == -2 || v[3] == -2) && i + 4 != n) return false;
    uint32_t w = (uint32_t)v[0] << 18 | (uint32_t)v[1] << 12 | (uint32_t)(v[2] < 0 ? 0 : v[2]) << 6 | (uint32_t)(v[3] < 0 ? 0 : v[3]);
    int bytes = v[2] == -2 ? 1 : v[3] == -2 ? 2 : 3;
    for (int k = 0; k < bytes; k++) {
      if (o >= size) return false;
      out[o++] = (uint8_t)(w >> (16 - 8 * k));
    }
  }
  return o == size;
}

/* ---- initial contents ---- */

/* The i-th output (0-based) of the SplitMix64 stream of seed, without producing the ones before. */
static uint64_t splitmix64_at(uint64_t seed, uint64_t i) {
  uint64_t z = seed + UINT64_C(0x9E3779B97F4A7C15) * (i + 1);
  z = (z ^ (z >> 30)) * UINT64_C(0xBF58476D1CE4E5B9);
  z = (z ^ (z >> 27)) * UINT64_C(0x94D049BB133111EB);
  return z ^ (z >> 31);
}

/* uniform_f32: lo + (hi - lo) * u in float, u in [0, 1). The sum can round up to hi itself (u near
 * 1 and lo + (hi - lo) * u within half a step of hi: [1, 2) does it at the largest u); such values
 * become the largest float below hi, so that lo <= x < hi holds as documented. */
static float uniform_f32_at(float lo, float hi, float u) {
  float x = lo + (hi - lo) * u;
  return x >= hi && lo < hi ? nextafterf(hi, lo) : x;
}

/* uniform_f32 word i: u = the top 24 bits of output i / 2^24. */
static uint32_t uniform_f32_word(const gf_buffer_t *b, uint64_t i) {
  float u = (float)(splitmix64_at(b->init_value, i) >> 40) * (1.0f / 16777216.0f);
  float x = uniform_f32_at(b->init_lo, b->init_hi, u);
  uint32_t w;
  memcpy(&w, &x, 4);
  return w;
}

static hcq_status_t parse_uniform_f32(loader_t *L, const json_t *v, gf_buffer_t *b) {
  static const char *const keys[] = {"seed", "lo", "hi", NULL};
  hcq_status_t st = expect(L, v, JSON_OBJECT, "an object {\"seed\": S, \"lo\": A, \"hi\": B}");
  if (!st) st = only_keys(L, v, keys);
  const char *names[3] = {"seed", "lo", "hi"};
  for (int k = 0; k < 3 && !st; k++)
    if (!json_object_get(v, names[k])) st = fail(L, HCQ_INVALID_ARGUMENT, "needs \"%s\"", names[k]);
  if (st) return st;
  int64_t seed;
  size_t m = push(L, ".seed");
  st = get_int(L, json_object_get(v, "seed"), 0, INT64_MAX, &seed);
  pop(L, m);
  if (!st) {
    m = push(L, ".lo");
    st = get_f32(L, json_object_get(v, "lo"), &b->init_lo);
    pop(L, m);
  }
  if (!st) {
    m = push(L, ".hi");
    st = get_f32(L, json_object_get(v, "hi"), &b->init_hi);
    if (!st && !(b->init_lo <= b->init_hi))
      st = fail(L, HCQ_INVALID_ARGUMENT, "%g is below lo %g", (double)b->init_hi, (double)b->init_lo);
    pop(L, m);
  }
  /* hi - lo past FLT_MAX would make every value +inf (NaN at u = 0), not lo <= x < hi. */
  if (!st && !isfinite(b->init_hi - b->init_lo))
    st = fail(L, HCQ_OUT_OF_RANGE, "lo %.9g, hi %.9g: hi - lo overflows a float, so the values would be infinite",
              json_number_value(json_object_get(v, "lo")), json_number_value(json_object_get(v, "hi")));
  b->init_value = (uint64_t)seed;
  return st;
}

void hcq_graph_file_random_bytes(uint64_t seed, void *dst, size_t size) {
  uint8_t *p = dst;
  uint64_t state = seed;
  for (size_t i = 0; i < size; i += 8) {
    state += UINT64_C(0x9E3779B97F4A7C15);
    uint64_t z = state;
    z = (z ^ (z >> 30)) * UINT64_C(0xBF58476D1CE4E5B9);
    z = (z ^ (z >> 27)) * UINT64_C(0x94D049BB133111EB);
    z ^= z >> 31;
    for (size_t k = 0; k < 8 && i + k < size; k++) p[i + k] = (uint8_t)(z >> (8 * k));
  }
}

static hcq_status_t parse_init(loader_t *L, const json_t *j, gf_buffer_t *b) {
  size_t m = push(L, ".init");
  hcq_status_t st = NULL;
  if (json_is_string(j)) {
    const char *s = json_string_value(j);
    if (!strcmp(s, "zeros"))
      b->init = GF_INIT_ZEROS;
    else if (!strcmp(s, "iota32"))
      b->init = GF_INIT_IOTA32;
    else
      st = fail(L, HCQ_INVALID_ARGUMENT,
                "unknown init \"%.64s\" (zeros, iota32, {\"random\": SEED}, {\"fill32\": N}, {\"fill_f32\": X}, "
                "{\"uniform_f32\": {...}})",
                s);
  } else if (json_is_object(j)) {
    static const char *const keys[] = {"random", "fill32", "fill_f32", "uniform_f32", "base64", "file", NULL};
    if ((st = only_keys(L, j, keys))) goto out;
    if (json_object_size(j) != 1) {
      st = fail(L, HCQ_INVALID_ARGUMENT, "must have exactly one of random, fill32, fill_f32, uniform_f32, base64, file");
      goto out;
    }
    const char *key = json_object_iter_key(json_object_iter((json_t *)j));
    const json_t *v = json_object_iter_value(json_object_iter((json_t *)j));
    size_t m2 = push(L, ".%s", key);
    int64_t n;
    if (!strcmp(key, "random")) {
      b->init = GF_INIT_RANDOM;
      if (!(st = get_int(L, v, 0, INT64_MAX, &n))) b->init_value = (uint64_t)n;
    } else if (!strcmp(key, "fill32")) {
      b->init = GF_INIT_FILL32;
      if (!(st = get_int(L, v, INT32_MIN, UINT32_MAX, &n))) b->init_value = (uint32_t)n;
    } else if (!strcmp(key, "fill_f32")) {
      float x;
      b->init = GF_INIT_FILL32;
      if (!(st = get_f32(L, v, &x))) {
        uint32_t w;
        memcpy(&w, &x, 4);
        b->init_value = w;
      }
    } else if (!strcmp(key, "uniform_f32")) {
      b->init = GF_INIT_UNIFORM_F32;
      st = parse_uniform_f32(L, v, b);
    } else {
      b->init = GF_INIT_DATA;
      char *data = NULL;
      size_t len = 0;
      if (!strcmp(key, "base64")) {
        if (!(st = expect(L, v, JSON_STRING, "base64 text"))) {
          data = malloc(b->bytes ? b->bytes : 1);
          if (!data)
            st = oom(L);
          else if (!b64_decode(json_string_value(v), (uint8_t *)data, b->bytes))
            st = fail(L, HCQ_INVALID_ARGUMENT, "is not base64 of exactly %" PRIu64 " bytes", b->bytes);
        }
      } else if (!(st = expect(L, v, JSON_STRING, "a path")) && !(st = read_file(L, json_string_value(v), &data, &len)) &&
                 len != b->bytes) {
        st = fail(L, HCQ_INVALID_ARGUMENT, "the file has %zu bytes but the buffer has %" PRIu64, len, b->bytes);
      }
      if (st) free(data);
      else b->init_data = data;
    }
    pop(L, m2);
  } else {
    st = fail(L, HCQ_INVALID_ARGUMENT, "must be \"zeros\", \"iota32\" or an object, not %s", type_name(j));
  }
out:
  pop(L, m);
  return st;
}

/* Writes a base buffer's initial contents (through the device's copyin, so it is ordered). */
static hcq_status_t write_init(const gf_buffer_t *b) {
  if (b->init == GF_INIT_DATA) return hcq_buffer_copyin(b->buf, 0, b->init_data, b->bytes);
  /* Small buffers get a small scratch: a file of 100k tiny buffers must not map 100k MiB. */
  size_t chunk = b->bytes < (1u << 20) ? (size_t)(b->bytes + 7) / 8 * 8 : 1u << 20;
  uint8_t *tmp = malloc(chunk);
  if (!tmp) return hcq_status_make(HCQ_OUT_OF_MEMORY, "out of memory initializing %s", b->name);
  hcq_status_t st = NULL;
  if (b->init == GF_INIT_RANDOM) {
    /* The generator is sequential: produce the whole stream chunk by chunk. */
    uint64_t state = b->init_value;
    for (uint64_t done = 0; done < b->bytes && !st; done += chunk) {
      size_t n = b->bytes - done < chunk ? (size_t)(b->bytes - done) : chunk;
      hcq_graph_file_random_bytes(state, tmp, n);
      state += UINT64_C(0x9E3779B97F4A7C15) * (uint64_t)(chunk / 8);
      st = hcq_buffer_copyin(b->buf, done, tmp, n);
    }
  } else {
    for (uint64_t done = 0; done < b->bytes && !st; done += chunk) {
      size_t n = b->bytes - done < chunk ? (size_t)(b->bytes - done) : chunk;
      for (size_t i = 0; i < n; i++) {
        uint64_t at = done + i;
        uint32_t word = b->init == GF_INIT_IOTA32         ? (uint32_t)(at / 4)
                        : b->init == GF_INIT_FILL32       ? (uint32_t)b->init_value
                        : b->init == GF_INIT_UNIFORM_F32  ? uniform_f32_word(b, at / 4)
                                                          : 0;
        tmp[i] = (uint8_t)(word >> (8 * (at % 4)));
      }
      st = hcq_buffer_copyin(b->buf, done, tmp, n);
    }
  }
  free(tmp);
  return st;
}

/* ---- sections ---- */

bool hcq__graph_file_name_ok(const char *s) {
  if (!*s || *s == '.' || strlen(s) > 64) return false;
  for (; *s; s++)
    if (!((*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') || (*s >= '0' && *s <= '9') || *s == '_' ||
          *s == '-' || *s == '.'))
      return false;
  return true;
}

static hcq_status_t parse_vars(loader_t *L, const json_t *vars) {
  if (!vars) return NULL;
  size_t m = push(L, "vars");
  hcq_status_t st = expect(L, vars, JSON_OBJECT, "an object of variables");
  const char *key;
  json_t *v;
  json_object_foreach((json_t *)vars, key, v) {
    if (st) break;
    size_t m2 = push_key(L, key);
    static const char *const keys[] = {"min", "max", "value", NULL};
    int64_t lo = 0, hi = 0, value;
    const json_t *jmin = json_object_get(v, "min"), *jmax = json_object_get(v, "max"), *jval = json_object_get(v, "value");
    if (!(st = expect(L, v, JSON_OBJECT, "an object {min, max, value}")) && !(st = only_keys(L, v, keys))) {
      if (!jmin || !jmax) st = fail(L, HCQ_INVALID_ARGUMENT, "needs min and max");
    }
    if (!st) {
      size_t m3 = push(L, ".min");
      st = get_int(L, jmin, INT64_MIN, INT64_MAX, &lo);
      pop(L, m3);
    }
    if (!st) {
      size_t m3 = push(L, ".max");
      st = get_int(L, jmax, INT64_MIN, INT64_MAX, &hi);
      if (!st && hi < lo) st = fail(L, HCQ_INVALID_ARGUMENT, "max %" PRId64 " is below min %" PRId64, hi, lo);
      pop(L, m3);
    }
    value = lo;
    if (!st && jval) {
      size_t m3 = push(L, ".value");
      st = get_int(L, jval, lo, hi, &value);
      pop(L, m3);
    }
    hcq_expr_t *var = NULL;
    if (!st && (st = hcq_var_create(key, lo, hi, &var))) st = wrap(L, st);
    if (!st && !hcq__vec_push(&L->gf->vars, ((hcq_var_value_t){var, value}))) {
      hcq_expr_release(var);
      st = oom(L);
    }
    if (!st && !hcq__htab_add(&L->gf->var_names, hcq__hash_str(key), L->gf->vars.len - 1)) st = oom(L);
    pop(L, m2);
  }
  pop(L, m);
  return st;
}

static ssize_t find_buffer(const hcq_graph_file_t *gf, const char *name) {
  size_t cursor = 0;
  for (size_t i; (i = hcq__htab_next(&gf->buffer_names, hcq__hash_str(name), &cursor)) != SIZE_MAX;)
    if (!strcmp(gf->buffers.data[i].name, name)) return (ssize_t)i;
  return -1;
}

/* Appends b to the buffers, findable by name; false when memory runs out (b is not added). */
static bool push_buffer(hcq_graph_file_t *gf, gf_buffer_t b) {
  if (!hcq__vec_push(&gf->buffers, b)) return false;
  if (hcq__htab_add(&gf->buffer_names, hcq__hash_str(b.name), gf->buffers.len - 1)) return true;
  gf->buffers.len--;
  return false;
}

static hcq_status_t add_base_buffer(loader_t *L, const char *key, const json_t *v) {
  hcq_graph_file_t *gf = L->gf;
  static const char *const keys[] = {"device", "bytes", "init", NULL};
  hcq_status_t st = only_keys(L, v, keys);
  if (st) return st;
  const json_t *jdev = json_object_get(v, "device"), *jbytes = json_object_get(v, "bytes");
  if (!jdev || !jbytes) return fail(L, HCQ_INVALID_ARGUMENT, "a buffer needs device and bytes (or view, offset, bytes)");
  gf_buffer_t b = {0};
  int64_t bytes;
  size_t m = push(L, ".bytes");
  st = get_int(L, jbytes, 1, (int64_t)MAX_BUFFER_BYTES, &bytes);
  pop(L, m);
  if (st) return st;
  b.bytes = (uint64_t)bytes;
  if (L->opts->max_total_bytes && gf->total_bytes + b.bytes > L->opts->max_total_bytes) {
    m = push(L, ".bytes");
    st = fail(L, HCQ_OUT_OF_RANGE, "the file's buffers need more than the %" PRIu64 " bytes allowed",
              L->opts->max_total_bytes);
    pop(L, m);
    return st;
  }
  gf->total_bytes += b.bytes;
  const json_t *init = json_object_get(v, "init");
  if (init && (st = parse_init(L, init, &b))) return st;
  m = push(L, ".device");
  if (!(st = expect(L, jdev, JSON_STRING, "a device name"))) st = open_device(L, json_string_value(jdev), &b.dev);
  pop(L, m);
  if (!st && (st = hcq_buffer_create(b.dev, b.bytes, &b.buf))) st = wrap(L, st);
  if (!st) hcq_buffer_set_label(b.buf, key);
  b.name = strdup(key);
  if (!st && (!b.name || !push_buffer(gf, b))) st = oom(L);
  if (st) {
    hcq_buffer_release(b.buf);
    free(b.name);
    free(b.init_data);
  }
  return st;
}

/* Views may name views declared anywhere, in chains of any length: each chain is walked from the
 * view toward its base buffer without recursion (a 100k-deep chain must not need 100k stack
 * frames), then created from the base outward. */
typedef struct view_walk {
  hcq__htab_t seen;              /* every view a walk has reached, by name */
  HCQ__VEC(const char *) names;  /* their names (keys of the JSON object), by table entry */
  HCQ__VEC(const char *) chain;  /* the walk under way, from the view asked for toward its base */
} view_walk_t;

static void view_walk_free(view_walk_t *w) {
  hcq__htab_free(&w->seen);
  hcq__vec_free(&w->names);
  hcq__vec_free(&w->chain);
}

static bool view_seen(const view_walk_t *w, const char *name) {
  size_t cursor = 0;
  for (size_t i; (i = hcq__htab_next(&w->seen, hcq__hash_str(name), &cursor)) != SIZE_MAX;)
    if (!strcmp(w->names.data[i], name)) return true;
  return false;
}

/* The fields of view key that do not depend on its base; *base_name is the buffer it views. */
static hcq_status_t check_view(loader_t *L, const json_t *buffers, const char *key, const char **base_name) {
  const json_t *v = json_object_get(buffers, key);
  size_t m = push(L, "buffers");
  push_key(L, key);
  static const char *const keys[] = {"view", "offset", "bytes", NULL};
  hcq_status_t st = only_keys(L, v, keys);
  const json_t *jview = json_object_get(v, "view");
  if (!st && !json_object_get(v, "bytes"))
    st = fail(L, HCQ_INVALID_ARGUMENT, "a view needs view and bytes (offset defaults to 0)");
  size_t m3 = push(L, ".view");
  if (!st && !(st = expect(L, jview, JSON_STRING, "a buffer name"))) {
    *base_name = json_string_value(jview);
    if (!json_object_get(buffers, *base_name))
      st = fail(L, HCQ_NOT_FOUND, "unknown buffer \"%.64s\"", *base_name);
    else if (!strcmp(*base_name, key))
      st = fail(L, HCQ_INVALID_ARGUMENT, "a view cannot view itself");
  }
  pop(L, m3);
  pop(L, m);
  return st;
}

/* Creates view key, whose base exists already. */
static hcq_status_t make_view(loader_t *L, const json_t *buffers, const char *key) {
  hcq_graph_file_t *gf = L->gf;
  const json_t *v = json_object_get(buffers, key);
  const json_t *joff = json_object_get(v, "offset"), *jbytes = json_object_get(v, "bytes");
  size_t m = push(L, "buffers");
  push_key(L, key);
  hcq_status_t st = NULL;
  int64_t off = 0, bytes;
  if (joff) {
    size_t m3 = push(L, ".offset");
    st = get_int(L, joff, 0, (int64_t)MAX_BUFFER_BYTES, &off);
    pop(L, m3);
    if (st) goto out;
  }
  size_t m3 = push(L, ".bytes");
  st = get_int(L, jbytes, 1, (int64_t)MAX_BUFFER_BYTES, &bytes);
  pop(L, m3);
  if (st) goto out;
  gf_buffer_t *base = &gf->buffers.data[find_buffer(gf, json_string_value(json_object_get(v, "view")))];
  uint64_t base_bytes = hcq_buffer_size(base->buf);
  /* Both are at most 2^40, so the end is the true sum, not a wrapped one. */
  if ((uint64_t)off + (uint64_t)bytes > base_bytes) {
    st = fail(L, HCQ_OUT_OF_RANGE, "view [%" PRId64 ", %" PRId64 ") is outside its base \"%s\" (%" PRIu64 " bytes)", off,
              off + bytes, base->name, base_bytes);
    goto out;
  }
  gf_buffer_t b = {0};
  b.is_view = true;
  b.dev = base->dev;
  b.bytes = (uint64_t)bytes;
  if ((st = hcq_buffer_view_create(base->buf, (uint64_t)off, (uint64_t)bytes, &b.buf))) {
    st = wrap(L, st);
    goto out;
  }
  hcq_buffer_set_label(b.buf, key);
  b.name = strdup(key);
  if (!b.name || !push_buffer(gf, b)) {
    hcq_buffer_release(b.buf);
    free(b.name);
    st = oom(L);
  }
out:
  pop(L, m);
  return st;
}

/* "a -> b -> a": the cycle that starts at chain[from], at most a few names of it. */
static hcq_status_t cycle_error(loader_t *L, const view_walk_t *w, size_t from) {
  char text[512];
  size_t len = 0, n = w->chain.len - from;
  for (size_t i = from; i <= w->chain.len && len < sizeof(text); i++) {
    const char *name = i < w->chain.len ? w->chain.data[i] : w->chain.data[from];
    if (i - from == 6 && n > 7) {
      len += (size_t)snprintf(text + len, sizeof(text) - len, " -> ...");
      i = w->chain.len - 2;
      continue;
    }
    len += (size_t)snprintf(text + len, sizeof(text) - len, "%s%s", i > from ? " -> " : "", name);
  }
  size_t m = push(L, "buffers");
  push_key(L, w->chain.data[from]);
  hcq_status_t st = fail(L, HCQ_INVALID_ARGUMENT, "views form a cycle of %zu: %s", n, text);
  pop(L, m);
  return st;
}

static hcq_status_t resolve_view(loader_t *L, const json_t *buffers, view_walk_t *w, const char *key) {
  hcq_graph_file_t *gf = L->gf;
  w->chain.len = 0;
  hcq_status_t st = NULL;
  for (const char *at = key; !st && find_buffer(gf, at) < 0;) {
    /* Earlier walks created every view they reached (or failed the load): a view seen before
     * and still missing is on this walk's chain. */
    if (view_seen(w, at)) {
      size_t from = 0;
      while (strcmp(w->chain.data[from], at)) from++;
      return cycle_error(L, w, from);
    }
    if (!hcq__vec_push(&w->names, at) || !hcq__htab_add(&w->seen, hcq__hash_str(at), w->names.len - 1) ||
        !hcq__vec_push(&w->chain, at))
      return oom(L);
    st = check_view(L, buffers, at, &at);
  }
  for (size_t i = w->chain.len; i-- > 0 && !st;) st = make_view(L, buffers, w->chain.data[i]);
  return st;
}

/* A top-level section every file needs: present, of its type, not empty. */
static hcq_status_t required_section(loader_t *L, const json_t *j, json_type type, const char *what) {
  if (!j) return fail(L, HCQ_INVALID_ARGUMENT, "missing (a graph file needs it)");
  hcq_status_t st = expect(L, j, type, what);
  if (!st && (type == JSON_OBJECT ? json_object_size(j) : json_array_size(j)) == 0)
    st = fail(L, HCQ_INVALID_ARGUMENT, "is empty");
  return st;
}

static hcq_status_t parse_buffers(loader_t *L, const json_t *buffers) {
  size_t m = push(L, "buffers");
  hcq_status_t st = required_section(L, buffers, JSON_OBJECT, "an object of buffers");
  const char *key;
  json_t *v;
  /* Base buffers first (in file order), then views. */
  if (!st) json_object_foreach((json_t *)buffers, key, v) {
    size_t m2 = push_key(L, key);
    if (!hcq__graph_file_name_ok(key))
      st = fail(L, HCQ_INVALID_ARGUMENT, "buffer names use letters, digits, '_', '-' and '.' (at most 64)");
    else if (!(st = expect(L, v, JSON_OBJECT, "an object")) && !json_object_get(v, "view"))
      st = add_base_buffer(L, key, v);
    pop(L, m2);
    if (st) break;
  }
  pop(L, m);
  view_walk_t walk = {0};
  if (!st) json_object_foreach((json_t *)buffers, key, v) {
    if ((st = resolve_view(L, buffers, &walk, key))) break;
  }
  view_walk_free(&walk);
  return st;
}

static hcq_status_t parse_programs(loader_t *L, const json_t *programs) {
  if (!programs) return NULL;
  size_t m = push(L, "programs");
  hcq_status_t st = expect(L, programs, JSON_OBJECT, "an object of programs");
  const char *key;
  json_t *v;
  if (!st) json_object_foreach((json_t *)programs, key, v) {
    size_t m2 = push_key(L, key);
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
    if (!(st = expect(L, v, JSON_OBJECT, shape)) && !(st = only_keys(L, v, keys))) {
      const json_t *jnb = json_object_get(v, "nbufs"), *jnv = json_object_get(v, "nvals");
      if (!jnb != !jnv) st = fail(L, HCQ_INVALID_ARGUMENT, "give both \"nbufs\" and \"nvals\", or neither");
      if (!st && jnb) {
        size_t m3 = push(L, ".nbufs");
        st = get_int(L, jnb, 0, HCQ_MAX_KERNEL_BUFS, &p.nbufs);
        pop(L, m3);
        m3 = push(L, ".nvals");
        if (!st) st = get_int(L, jnv, 0, HCQ_MAX_KERNEL_VALS, &p.nvals);
        pop(L, m3);
      }
      const json_t *entry = json_object_get(v, "entry");
      if (entry) {
        size_t m3 = push(L, ".entry");
        if (!(st = expect(L, entry, JSON_STRING, "a function name"))) p.entry = strdup(json_string_value(entry));
        pop(L, m3);
      } else {
        p.entry = strdup(key);
      }
      for (const hcq__backend_t *const *b = hcq__backends; *b && !st; b++) {
        const json_t *src = json_object_get(v, (*b)->source_key);
        if (!src) continue;
        char field[32];
        snprintf(field, sizeof(field), ".%s", (*b)->source_key);
        size_t m3 = push(L, field);
        st = program_source(L, src, *b, &p.sources[(*b)->kind]);
        pop(L, m3);
      }
    }
    p.name = strdup(key);
    if (!st && (!p.name || !p.entry || !hcq__vec_push(&L->gf->programs, p))) st = oom(L);
    if (!st && !hcq__htab_add(&L->gf->program_names, hcq__hash_str(key), L->gf->programs.len - 1)) {
      L->gf->programs.len--;
      st = oom(L);
    }
    if (st) {
      free(p.name);
      free(p.entry);
      for (int k = 0; k < HCQ_DEVICE_KIND_COUNT; k++) free(p.sources[k]);
    }
    pop(L, m2);
    if (st) break;
  }
  pop(L, m);
  return st;
}

static void noop_kernel(void *const *bufs, const int32_t *vals, const hcq_launch_t *launch) {
  (void)bufs, (void)vals, (void)launch;
}

/* The program compiled for dev (once per device). */
static hcq_status_t program_for(loader_t *L, gf_program_t *p, hcq_device_t *dev, hcq_program_t **out) {
  for (size_t i = 0; i < p->ncompiled; i++)
    if (p->compiled[i]->dev == dev) {
      *out = p->compiled[i];
      return NULL;
    }
  if (p->ncompiled == GF_MAX_DEVICES) return oom(L);
  hcq_status_t st;
  /* Each device compiles the source of its kind, under its backend's key. */
  uint32_t caps = hcq_device_caps(dev);
  const hcq__backend_t *b = hcq__backend(dev->kind);
  const char *source = b ? p->sources[dev->kind] : NULL;
  if (L->opts->skip_compile && (caps & HCQ_CAP_HOST_CALLABLE))
    st = hcq_program_create_fn(dev, p->entry, noop_kernel, out);
  else if (!source)
    st = hcq_status_make(HCQ_INVALID_ARGUMENT, "program \"%s\" has no source for %s (give \"%s\")", p->name, dev->name,
                         b ? b->source_key : "?");
  else
    st = hcq_program_create(dev, p->entry, source, out);
  if (!st && p->nbufs >= 0 && (st = hcq_program_declare_args(*out, (size_t)p->nbufs, (size_t)p->nvals))) {
    hcq_program_release(*out);
    *out = NULL;
  }
  if (st) return wrap(L, st);
  p->compiled[p->ncompiled++] = *out;
  return NULL;
}

/* An integer operand or an expression over the file's variables. */
static hcq_status_t parse_operand(loader_t *L, const json_t *j, int64_t lo, int64_t hi, hcq_operand_t *out) {
  if (json_is_integer(j)) {
    int64_t v;
    hcq_status_t st = get_int(L, j, lo, hi, &v);
    if (!st) *out = hcq_imm(v);
    return st;
  }
  if (!json_is_string(j)) return fail(L, HCQ_INVALID_ARGUMENT, "must be an integer or an expression, not %s", type_name(j));
  size_t n = L->gf->vars.len;
  if (n && !L->var_exprs) {
    if (!(L->var_exprs = malloc(n * sizeof(*L->var_exprs)))) return oom(L);
    for (size_t i = 0; i < n; i++) L->var_exprs[i] = L->gf->vars.data[i].var;
  }
  hcq_expr_t *e = NULL;
  hcq_status_t st = hcq_expr_parse(json_string_value(j), L->var_exprs, n, &e);
  if (st) return wrap(L, st);
  if (hcq_expr_is_const(e)) {
    int64_t v = hcq_expr_const_value(e);
    hcq_expr_release(e);
    if (v < lo || v > hi) return fail(L, HCQ_OUT_OF_RANGE, "%" PRId64 " is outside [%" PRId64 ", %" PRId64 "]", v, lo, hi);
    *out = hcq_imm(v);
    return NULL;
  }
  *out = hcq_sym(e);
  return NULL;
}

static hcq_status_t buffer_ref(loader_t *L, const json_t *j, gf_buffer_t **out) {
  hcq_status_t st = expect(L, j, JSON_STRING, "a buffer name");
  if (st) return st;
  ssize_t i = find_buffer(L->gf, json_string_value(j));
  if (i < 0) return fail(L, HCQ_NOT_FOUND, "unknown buffer \"%.64s\"", json_string_value(j));
  *out = &L->gf->buffers.data[i];
  return NULL;
}

static hcq_status_t parse_dims(loader_t *L, const json_t *j, const char *name, hcq_operand_t dims[3]) {
  for (int i = 0; i < 3; i++) dims[i] = hcq_imm(1);
  if (!j) return NULL;
  size_t m = push(L, ".%s", name);
  hcq_status_t st = expect(L, j, JSON_ARRAY, "an array of 1 to 3 sizes");
  if (!st && (json_array_size(j) < 1 || json_array_size(j) > 3))
    st = fail(L, HCQ_INVALID_ARGUMENT, "must have 1 to 3 entries, not %zu", json_array_size(j));
  for (size_t i = 0; i < json_array_size(j) && !st; i++) {
    size_t m2 = push(L, "[%zu]", i);
    st = parse_operand(L, json_array_get(j, i), 0, UINT32_MAX, &dims[i]);
    /* Missing dims are 1; an explicit constant 0 would run nothing, silently. */
    if (!st && (dims[i].sym ? hcq_expr_is_const(dims[i].sym) && hcq_expr_const_value(dims[i].sym) == 0 : !dims[i].value))
      st = fail(L, HCQ_INVALID_ARGUMENT, "is 0 (launch dims must be >= 1; use 1 for unused dims)");
    pop(L, m2);
  }
  pop(L, m);
  return st;
}

/* An optional array field of at most max entries; *n is 0 when it is absent. */
static hcq_status_t optional_array(loader_t *L, const json_t *j, const char *field, const char *what,
                                   const char *noun, size_t max, size_t *n) {
  *n = 0;
  if (!j) return NULL;
  size_t m = push(L, "%s", field);
  char kind[64];
  snprintf(kind, sizeof(kind), "an array of %s", what);
  hcq_status_t st = expect(L, j, JSON_ARRAY, kind);
  if (!st && json_array_size(j) > max) st = fail(L, HCQ_INVALID_ARGUMENT, "at most %zu %s", max, noun);
  pop(L, m);
  if (!st) *n = json_array_size(j);
  return st;
}

static hcq_status_t parse_kernel(loader_t *L, const json_t *j, hcq_exec_item_t *it) {
  static const char *const keys[] = {"kernel", "bufs", "outs", "vals", "global", "local", "device", NULL};
  hcq_status_t st = only_keys(L, j, keys);
  if (st) return st;
  hcq_graph_file_t *gf = L->gf;
  it->kind = HCQ_ITEM_KERNEL;
  hcq_kernel_item_t *k = &it->kernel;
  for (int i = 0; i < 3; i++) k->global[i] = k->local[i] = hcq_imm(1);
  const json_t *jk = json_object_get(j, "kernel"), *jbufs = json_object_get(j, "bufs"), *jouts = json_object_get(j, "outs");
  const json_t *jvals = json_object_get(j, "vals"), *jdev = json_object_get(j, "device");
  size_t m = push(L, ".kernel");
  gf_program_t *prog = NULL;
  if (!(st = expect(L, jk, JSON_STRING, "a program name"))) {
    size_t cursor = 0;
    const char *name = json_string_value(jk);
    for (size_t i; !prog && (i = hcq__htab_next(&gf->program_names, hcq__hash_str(name), &cursor)) != SIZE_MAX;)
      if (!strcmp(gf->programs.data[i].name, name)) prog = &gf->programs.data[i];
    if (!prog) st = fail(L, HCQ_NOT_FOUND, "unknown program \"%.64s\"", json_string_value(jk));
  }
  pop(L, m);
  if (st) return st;

  size_t nbufs;
  if ((st = optional_array(L, jbufs, ".bufs", "buffer names", "buffers", HCQ_MAX_KERNEL_BUFS, &nbufs))) return st;
  hcq_buffer_t **bufs = calloc(nbufs + 1, sizeof(*bufs));
  if (!bufs) return oom(L);
  k->bufs = bufs;
  for (size_t i = 0; i < nbufs && !st; i++) {
    m = push(L, ".bufs[%zu]", i);
    gf_buffer_t *b;
    if (!(st = buffer_ref(L, json_array_get(jbufs, i), &b))) bufs[i] = b->buf;
    pop(L, m);
  }
  k->nbufs = nbufs;
  if (st) return st;

  hcq_device_t *dev = nbufs ? bufs[0]->dev : NULL;
  if (jdev) {
    m = push(L, ".device");
    if (!(st = expect(L, jdev, JSON_STRING, "a device name"))) st = open_device(L, json_string_value(jdev), &dev);
    pop(L, m);
    if (st) return st;
  }
  if (!dev) return fail(L, HCQ_INVALID_ARGUMENT, "a kernel without buffers must name its device");
  for (size_t i = 0; i < nbufs; i++)
    if (bufs[i]->dev != dev) {
      m = push(L, ".bufs[%zu]", i);
      st = fail(L, HCQ_INVALID_ARGUMENT, "buffer \"%s\" is on %s but the kernel runs on %s", hcq_buffer_label(bufs[i]),
                bufs[i]->dev->name, dev->name);
      pop(L, m);
      return st;
    }

  /* outs: which buffers the kernel writes. Unless the file says, every buffer counts as written:
   * an undeclared write could let a replay reorder the item; an extra dependency only costs
   * overlap. */
  size_t nouts = jouts ? json_array_size(jouts) : nbufs;
  uint32_t *outs = calloc(nouts + 1, sizeof(*outs));
  if (!outs) return oom(L);
  k->outs = outs;
  for (size_t i = 0; !jouts && i < nbufs; i++) outs[i] = (uint32_t)i;
  if (jouts) {
    m = push(L, ".outs");
    st = expect(L, jouts, JSON_ARRAY, "an array of buffer indices");
    pop(L, m);
    for (size_t i = 0; i < nouts && !st; i++) {
      m = push(L, ".outs[%zu]", i);
      int64_t o;
      if (nbufs == 0)
        st = fail(L, HCQ_OUT_OF_RANGE, "the kernel has no buffers");
      else if (!(st = get_int(L, json_array_get(jouts, i), 0, (int64_t)nbufs - 1, &o)))
        outs[i] = (uint32_t)o;
      pop(L, m);
    }
  }
  k->nouts = st ? 0 : nouts;
  if (st) return st;

  size_t nvals;
  if ((st = optional_array(L, jvals, ".vals", "values", "values", HCQ_MAX_KERNEL_VALS, &nvals))) return st;
  hcq_operand_t *vals = calloc(nvals + 1, sizeof(*vals));
  if (!vals) return oom(L);
  k->vals = vals;
  for (size_t i = 0; i < nvals && !st; i++) {
    m = push(L, ".vals[%zu]", i);
    st = parse_operand(L, json_array_get(jvals, i), INT32_MIN, INT32_MAX, &vals[i]);
    pop(L, m);
    k->nvals = i + (st ? 0 : 1);
  }
  if (st) return st;
  if ((st = parse_dims(L, json_object_get(j, "global"), "global", k->global))) return st;
  if ((st = parse_dims(L, json_object_get(j, "local"), "local", k->local))) return st;
  m = push(L, ".kernel");
  st = program_for(L, prog, dev, &k->program);
  pop(L, m);
  /* Counts the program declares (or its compiled code tells): bad input, like an unknown buffer. */
  if (!st && !hcq__program_args_ok(k->program, nbufs, nvals))
    st = wrap(L, hcq__program_check_args(k->program, nbufs, nvals, "bufs and vals"));
  return st;
}

static hcq_status_t parse_copy(loader_t *L, const json_t *j, hcq_exec_item_t *it) {
  static const char *const keys[] = {"copy", NULL};
  hcq_status_t st = only_keys(L, j, keys);
  if (st) return st;
  const json_t *c = json_object_get(j, "copy");
  size_t m = push(L, ".copy");
  static const char *const ckeys[] = {"dst", "src", "bytes", NULL};
  gf_buffer_t *dst = NULL, *src = NULL;
  if (!(st = expect(L, c, JSON_OBJECT, "an object {dst, src, bytes}")) && !(st = only_keys(L, c, ckeys))) {
    size_t m2 = push(L, ".dst");
    const json_t *jd = json_object_get(c, "dst");
    st = jd ? buffer_ref(L, jd, &dst) : fail(L, HCQ_INVALID_ARGUMENT, "missing");
    pop(L, m2);
  }
  if (!st) {
    size_t m2 = push(L, ".src");
    const json_t *js = json_object_get(c, "src");
    st = js ? buffer_ref(L, js, &src) : fail(L, HCQ_INVALID_ARGUMENT, "missing");
    pop(L, m2);
  }
  if (!st) {
    uint64_t ds = hcq_buffer_size(dst->buf), ss = hcq_buffer_size(src->buf);
    uint64_t bytes = ds < ss ? ds : ss;
    const json_t *jb = json_object_get(c, "bytes");
    if (jb) {
      size_t m2 = push(L, ".bytes");
      int64_t b;
      if (!(st = get_int(L, jb, 0, (int64_t)bytes, &b))) bytes = (uint64_t)b;
      pop(L, m2);
    }
    it->kind = HCQ_ITEM_TRANSFER;
    it->transfer = (hcq_transfer_item_t){dst->buf, src->buf, bytes};
  }
  pop(L, m);
  return st;
}

static hcq_status_t parse_items(loader_t *L, const json_t *items) {
  size_t m = push(L, "items");
  hcq_status_t st = required_section(L, items, JSON_ARRAY, "an array of items");
  for (size_t i = 0; !st && i < json_array_size(items); i++) {
    size_t m2 = push(L, "[%zu]", i);
    const json_t *j = json_array_get(items, i);
    hcq_exec_item_t it;
    memset(&it, 0, sizeof(it));
    if (!hcq__vec_reserve_for(&L->gf->items, L->gf->items.len + 1)) {
      st = oom(L);
    } else if (!(st = expect(L, j, JSON_OBJECT, "an object with \"kernel\" or \"copy\""))) {
      bool is_kernel = json_object_get(j, "kernel") != NULL, is_copy = json_object_get(j, "copy") != NULL;
      /* A misspelt field ("kernal") is named as such, not reported as a missing kernel. */
      static const char *const any_item[] = {"kernel", "bufs", "outs", "vals", "global", "local", "device", "copy", NULL};
      if (is_kernel == is_copy && !(st = only_keys(L, j, any_item))) {
        st = fail(L, HCQ_INVALID_ARGUMENT, "an item has exactly one of \"kernel\" and \"copy\"");
      } else if (!st) {
        it.kind = is_kernel ? HCQ_ITEM_KERNEL : HCQ_ITEM_TRANSFER;
        st = is_kernel ? parse_kernel(L, j, &it) : parse_copy(L, j, &it);
        /* Kept even when it failed half way: gf_free releases what it holds. */
        L->gf->items.data[L->gf->items.len++] = it;
      }
    }
    pop(L, m2);
  }
  pop(L, m);
  return st;
}

static hcq_status_t parse_inputs(loader_t *L, const json_t *inputs) {
  hcq_graph_file_t *gf = L->gf;
  size_t n = inputs ? json_array_size(inputs) : 0;
  size_t m = push(L, "inputs");
  hcq_status_t st = inputs ? expect(L, inputs, JSON_ARRAY, "an array of buffer names") : NULL;
  gf->inputs = calloc(n + 1, sizeof(*gf->inputs));
  L->input_of = calloc(gf->buffers.len + 1, sizeof(*L->input_of));
  if (!st && (!gf->inputs || !L->input_of)) st = oom(L);
  for (size_t i = 0; i < n && !st; i++) {
    size_t m2 = push(L, "[%zu]", i);
    gf_buffer_t *b;
    if (!(st = buffer_ref(L, json_array_get(inputs, i), &b))) {
      size_t bi = (size_t)(b - gf->buffers.data);
      if (L->input_of[bi]) st = fail(L, HCQ_INVALID_ARGUMENT, "buffer \"%s\" is listed twice", b->name);
      L->input_of[bi] = i + 1;
      gf->inputs[i] = b->buf;
    }
    pop(L, m2);
  }
  gf->ninputs = st ? 0 : n;
  pop(L, m);
  return st;
}

static hcq_status_t parse_runs(loader_t *L, const json_t *runs) {
  hcq_graph_file_t *gf = L->gf;
  size_t m = push(L, "runs");
  hcq_status_t st = runs ? expect(L, runs, JSON_ARRAY, "an array of runs") : NULL;
  size_t n = runs ? json_array_size(runs) : 0;
  if (!st && runs && n == 0) st = fail(L, HCQ_INVALID_ARGUMENT, "is empty (leave it out for one run)");
  if (!runs) n = 1;
  for (size_t r = 0; r < n && !st; r++) {
    size_t m2 = push(L, "[%zu]", r);
    gf_run_t run = {calloc(gf->ninputs + 1, sizeof(hcq_buffer_t *)), calloc(gf->vars.len + 1, sizeof(hcq_var_value_t))};
    if (!run.inputs || !run.vals || !hcq__vec_push(&gf->runs, run)) {
      free(run.inputs);
      free(run.vals);
      st = oom(L);
      pop(L, m2);
      break;
    }
    if (gf->ninputs) memcpy(run.inputs, gf->inputs, gf->ninputs * sizeof(hcq_buffer_t *));
    if (gf->vars.len) memcpy(run.vals, gf->vars.data, gf->vars.len * sizeof(hcq_var_value_t));
    const json_t *j = runs ? json_array_get(runs, r) : NULL;
    static const char *const keys[] = {"inputs", "vars", NULL};
    if (j && !(st = expect(L, j, JSON_OBJECT, "an object {inputs, vars}"))) st = only_keys(L, j, keys);
    const json_t *ji = j ? json_object_get(j, "inputs") : NULL, *jv = j ? json_object_get(j, "vars") : NULL;
    const char *key;
    json_t *v;
    if (!st && ji) {
      size_t m3 = push(L, ".inputs");
      st = expect(L, ji, JSON_OBJECT, "an object {input: buffer}");
      if (!st) json_object_foreach((json_t *)ji, key, v) {
        size_t m4 = push_key(L, key);
        ssize_t bi = find_buffer(gf, key), input = bi >= 0 ? (ssize_t)L->input_of[bi] - 1 : -1;
        gf_buffer_t *b = NULL;
        if (input < 0)
          st = fail(L, HCQ_NOT_FOUND, "\"%.64s\" is not an input", key);
        else if (!(st = buffer_ref(L, v, &b))) {
          const hcq_buffer_t *want = gf->inputs[input];
          if (hcq_buffer_size(b->buf) != hcq_buffer_size(want))
            st = fail(L, HCQ_INVALID_ARGUMENT, "buffer \"%s\" has %" PRIu64 " bytes but input \"%s\" has %" PRIu64, b->name,
                      hcq_buffer_size(b->buf), key, hcq_buffer_size(want));
          else if (hcq_buffer_device(b->buf) != hcq_buffer_device(want))
            st = fail(L, HCQ_INVALID_ARGUMENT, "buffer \"%s\" is on %s but input \"%s\" is on %s", b->name,
                      hcq_device_name(hcq_buffer_device(b->buf)), key, hcq_device_name(hcq_buffer_device(want)));
          else
            run.inputs[input] = b->buf;
        }
        pop(L, m4);
        if (st) break;
      }
      pop(L, m3);
    }
    if (!st && jv) {
      size_t m3 = push(L, ".vars");
      st = expect(L, jv, JSON_OBJECT, "an object {variable: value}");
      if (!st) json_object_foreach((json_t *)jv, key, v) {
        size_t m4 = push_key(L, key);
        ssize_t vi = -1;
        size_t cursor = 0;
        for (size_t k; vi < 0 && (k = hcq__htab_next(&gf->var_names, hcq__hash_str(key), &cursor)) != SIZE_MAX;)
          if (!strcmp(hcq_var_name(gf->vars.data[k].var), key)) vi = (ssize_t)k;
        int64_t value;
        if (vi < 0)
          st = fail(L, HCQ_NOT_FOUND, "unknown variable \"%.64s\"", key);
        else if (!(st = get_int(L, v, hcq_var_min(gf->vars.data[vi].var), hcq_var_max(gf->vars.data[vi].var), &value)))
          run.vals[vi].value = value;
        pop(L, m4);
        if (st) break;
      }
      pop(L, m3);
    }
    pop(L, m2);
  }
  pop(L, m);
  return st;
}

/* Every item checked against the variables' declared values (and each run's), so that a value
 * that would break a launch dim is a load error with its path, not a replay failure. */
static hcq_status_t check_items(loader_t *L) {
  hcq_graph_file_t *gf = L->gf;
  for (size_t r = 0; r < gf->runs.len; r++) {
    for (size_t i = 0; i < gf->items.len; i++) {
      const hcq_exec_item_t *it = &gf->items.data[i];
      if (it->kind != HCQ_ITEM_KERNEL) continue;
      const hcq_kernel_item_t *k = &it->kernel;
      for (size_t v = 0; v < k->nvals + 6; v++) {
        hcq_operand_t op = v < k->nvals ? k->vals[v] : v < k->nvals + 3 ? k->global[v - k->nvals] : k->local[v - k->nvals - 3];
        if (!op.sym) continue;
        int64_t x;
        hcq_status_t st = hcq_expr_eval(op.sym, gf->runs.data[r].vals, gf->vars.len, &x);
        int64_t lo = v < k->nvals ? INT32_MIN : 0, hi = v < k->nvals ? INT32_MAX : UINT32_MAX;
        if (!st && (x < lo || x > hi))
          st = hcq_status_make(HCQ_OUT_OF_RANGE, "evaluates to %" PRId64 ", outside [%" PRId64 ", %" PRId64 "]", x, lo, hi);
        if (st) {
          char where[64];
          if (v < k->nvals)
            snprintf(where, sizeof(where), "items[%zu].vals[%zu]", i, v);
          else
            snprintf(where, sizeof(where), "items[%zu].%s[%zu]", i, v < k->nvals + 3 ? "global" : "local",
                     (v - k->nvals) % 3);
          hcq_status_t out = hcq_status_make(hcq_status_code(st), "%s: %s: %s (with the values of run %zu)", L->name,
                                             where, hcq_status_message(st), r);
          hcq_status_free(st);
          return out;
        }
      }
    }
  }
  return NULL;
}

static hcq_status_t load(loader_t *L, const char *text, size_t len) {
  json_error_t err;
  json_t *root = json_loadb(text, len, JSON_REJECT_DUPLICATES, &err);
  if (!root) {
    return hcq_status_make(HCQ_INVALID_ARGUMENT, "%s:%d:%d: %s", L->name, err.line < 0 ? 0 : err.line,
                           err.column < 0 ? 0 : err.column, err.text);
  }
  hcq_status_t st = expect(L, root, JSON_OBJECT, "a JSON object");
  static const char *const keys[] = {"format", "vars", "buffers", "programs", "items", "inputs", "runs", NULL};
  if (!st) st = only_keys(L, root, keys);
  if (!st) {
    const json_t *format = json_object_get(root, "format");
    size_t m = push(L, "format");
    if (!format)
      st = fail(L, HCQ_INVALID_ARGUMENT, "missing (\"format\": \"hcq-graph/1\")");
    else if (!json_is_string(format) || strcmp(json_string_value(format), "hcq-graph/1"))
      st = fail(L, HCQ_INVALID_ARGUMENT, "must be \"hcq-graph/1\"");
    pop(L, m);
  }
  if (!st) st = parse_vars(L, json_object_get(root, "vars"));
  if (!st) st = parse_buffers(L, json_object_get(root, "buffers"));
  if (!st) st = parse_programs(L, json_object_get(root, "programs"));
  if (!st) st = parse_items(L, json_object_get(root, "items"));
  if (!st) st = parse_inputs(L, json_object_get(root, "inputs"));
  if (!st) st = parse_runs(L, json_object_get(root, "runs"));
  if (!st) st = check_items(L);
  json_decref(root);
  return st;
}

hcq_status_t hcq_graph_file_load_text(const char *text, size_t len, const char *name, const char *base_dir,
                                      const hcq_graph_file_options_t *options, hcq_graph_file_t **out_file) {
  if (!out_file) return hcq_status_make(HCQ_INVALID_ARGUMENT, "hcq_graph_file_load_text: out_file is NULL");
  *out_file = NULL;
  if (!text && len) return hcq_status_make(HCQ_INVALID_ARGUMENT, "hcq_graph_file_load_text: text is NULL");
  static const hcq_graph_file_options_t defaults;
  loader_t L = {NULL, name ? name : "<graph>", base_dir, options ? options : &defaults, "", 0};
  hcq_status_t map_st = check_device_map(L.opts->device_map);
  if (map_st) return map_st;
  L.gf = calloc(1, sizeof(*L.gf));
  if (!L.gf) return hcq_status_make(HCQ_OUT_OF_MEMORY, "out of memory loading %s", L.name);
  hcq_status_t st = load(&L, text ? text : "", len);
  free(L.input_of);
  free(L.var_exprs);
  for (size_t i = 0; i < L.gf->buffers.len && !st; i++)
    if (!L.gf->buffers.data[i].is_view) st = write_init(&L.gf->buffers.data[i]);
  if (st) {
    /* Initial copies may still be in flight: let them land before freeing. */
    for (size_t i = 0; i < L.gf->ndevices; i++) hcq_status_free(hcq_device_synchronize(L.gf->devices[i]));
    gf_free(L.gf);
    return st;
  }
  *out_file = L.gf;
  return NULL;
}

hcq_status_t hcq_graph_file_load(const char *path, const hcq_graph_file_options_t *options, hcq_graph_file_t **out) {
  if (!out) return hcq_status_make(HCQ_INVALID_ARGUMENT, "hcq_graph_file_load: out_file is NULL");
  *out = NULL;
  if (!path) return hcq_status_make(HCQ_INVALID_ARGUMENT, "hcq_graph_file_load: path is NULL");
  loader_t L = {NULL, path, NULL, options, "", 0};
  char *text;
  size_t len;
  struct stat sb;
  if (stat(path, &sb) != 0)
    return hcq_status_make(HCQ_NOT_FOUND, "cannot read graph file %s: %s", path, strerror(errno));
  if (!S_ISREG(sb.st_mode)) /* read_file checks again on what it opens */
    return hcq_status_make(HCQ_INVALID_ARGUMENT, "%s: cannot read graph file: it is %s, not a regular file", path,
                           file_type(sb.st_mode));
  hcq_status_t st = read_file(&L, path, &text, &len);
  if (st) return hcq_status_annotate(st, "cannot read graph file %s", path);
  /* The folder, whole (a copy cut at PATH_MAX would resolve sources somewhere else). */
  const char *slash = strrchr(path, '/');
  char *dir = slash == path ? strdup("/") : slash ? strndup(path, (size_t)(slash - path)) : strdup(".");
  if (!dir) {
    free(text);
    return hcq_status_make(HCQ_OUT_OF_MEMORY, "out of memory loading %s", path);
  }
  st = hcq_graph_file_load_text(text, len, path, dir, options, out);
  free(dir);
  free(text);
  return st;
}

hcq_status_t hcq_graph_file_reset(hcq_graph_file_t *gf) {
  if (!gf) return hcq_status_make(HCQ_INVALID_ARGUMENT, "hcq_graph_file_reset: file is NULL");
  for (size_t i = 0; i < gf->buffers.len; i++) {
    if (gf->buffers.data[i].is_view) continue;
    hcq_status_t st = write_init(&gf->buffers.data[i]);
    if (st) return st;
  }
  return NULL;
}

size_t hcq_graph_file_item_count(const hcq_graph_file_t *gf) { return gf ? gf->items.len : 0; }
const hcq_exec_item_t *hcq_graph_file_items(const hcq_graph_file_t *gf) { return gf ? gf->items.data : NULL; }
size_t hcq_graph_file_input_count(const hcq_graph_file_t *gf) { return gf ? gf->ninputs : 0; }
hcq_buffer_t *const *hcq_graph_file_inputs(const hcq_graph_file_t *gf) { return gf ? gf->inputs : NULL; }
size_t hcq_graph_file_var_count(const hcq_graph_file_t *gf) { return gf ? gf->vars.len : 0; }
const hcq_var_value_t *hcq_graph_file_vars(const hcq_graph_file_t *gf) { return gf ? gf->vars.data : NULL; }
size_t hcq_graph_file_buffer_count(const hcq_graph_file_t *gf) { return gf ? gf->buffers.len : 0; }
const char *hcq_graph_file_buffer_name(const hcq_graph_file_t *gf, size_t i) {
  return gf && i < gf->buffers.len ? gf->buffers.data[i].name : NULL;
}
hcq_buffer_t *hcq_graph_file_buffer(const hcq_graph_file_t *gf, size_t i) {
  return gf && i < gf->buffers.len ? gf->buffers.data[i].buf : NULL;
}
size_t hcq_graph_file_device_count(const hcq_graph_file_t *gf) { return gf ? gf->ndevices : 0; }
hcq_device_t *hcq_graph_file_device(const hcq_graph_file_t *gf, size_t i) {
  return gf && i < gf->ndevices ? gf->devices[i] : NULL;
}
size_t hcq_graph_file_run_count(const hcq_graph_file_t *gf) { return gf ? gf->runs.len : 0; }
void hcq_graph_file_run(const hcq_graph_file_t *gf, size_t r, hcq_buffer_t *const **out_inputs,
                        const hcq_var_value_t **out_vals) {
  if (out_inputs) *out_inputs = gf && r < gf->runs.len ? gf->runs.data[r].inputs : NULL;
  if (out_vals) *out_vals = gf && r < gf->runs.len ? gf->runs.data[r].vals : NULL;
}
