/* The graph file loader's errors and its readers of single JSON values. Every message names the
 * file and the JSON path of what was being read ("g.json: items[3].bufs[1]: unknown buffer"), so
 * the loader keeps that path as it descends (hcq__gf_push and hcq__gf_pop around each field) and
 * every reader that can refuse a value reports through hcq__gf_fail, here, instead of each part
 * of the loader formatting its own. */
#include <float.h>
#include <inttypes.h>
#include <jansson.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "io/graphfile_internal.h"

size_t hcq__gf_push(gf_loader_t *L, const char *fmt, ...) {
  size_t mark = L->path_len;
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(L->path + L->path_len, sizeof(L->path) - L->path_len, fmt, ap);
  va_end(ap);
  if (n > 0)
    L->path_len +=
        (size_t)n < sizeof(L->path) - L->path_len ? (size_t)n : sizeof(L->path) - L->path_len - 1;
  return mark;
}
void hcq__gf_pop(gf_loader_t *L, size_t mark) {
  L->path_len = mark;
  L->path[mark] = '\0';
}

/* A key in a path: bare when it is an identifier, quoted otherwise. */
size_t hcq__gf_push_key(gf_loader_t *L, const char *key) {
  bool plain = *key != '\0';
  for (const char *c = key; *c; c++)
    if (!((*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') || (*c >= '0' && *c <= '9') ||
          *c == '_'))
      plain = false;
  if (plain) return hcq__gf_push(L, "%s%.64s", L->path_len ? "." : "", key);
  return hcq__gf_push(L, "%s\"%.64s\"", L->path_len ? "." : "", key);
}

hcq_status_t hcq__gf_fail(gf_loader_t *L, hcq_status_code_t code, const char *fmt, ...) {
  char msg[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof(msg), fmt, ap);
  va_end(ap);
  return hcq_status_make(code, "%s: %s%s%s", L->name, L->path, L->path_len ? ": " : "", msg);
}

/* Prefixes a status from the library with the file and path. */
hcq_status_t hcq__gf_wrap(gf_loader_t *L, hcq_status_t st) {
  if (!st) return NULL;
  return L->path_len ? hcq_status_annotate(st, "%s: %s", L->name, L->path)
                     : hcq_status_annotate(st, "%s", L->name);
}

const char *hcq__gf_type_name(const json_t *j) {
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

hcq_status_t hcq__gf_expect(gf_loader_t *L, const json_t *j, json_type type, const char *what) {
  if (json_typeof(j) == type) return NULL;
  return hcq__gf_fail(L, HCQ_INVALID_ARGUMENT, "must be %s, not %s", what, hcq__gf_type_name(j));
}

/* Rejects keys other than the allowed ones (typos should not pass silently). */
hcq_status_t hcq__gf_only_keys(gf_loader_t *L, const json_t *obj, const char *const *allowed) {
  const char *key;
  json_t *v;
  json_object_foreach((json_t *)obj, key, v) {
    bool ok = false;
    for (const char *const *a = allowed; *a; a++) ok |= !strcmp(*a, key);
    if (!ok) {
      size_t m = hcq__gf_push_key(L, key);
      hcq_status_t st = hcq__gf_fail(L, HCQ_INVALID_ARGUMENT, "unknown field");
      hcq__gf_pop(L, m);
      return st;
    }
  }
  return NULL;
}

hcq_status_t hcq__gf_get_int(gf_loader_t *L, const json_t *j, int64_t lo, int64_t hi,
                             int64_t *out) {
  hcq_status_t st = hcq__gf_expect(L, j, JSON_INTEGER, "an integer");
  if (st) return st;
  json_int_t v = json_integer_value(j);
  if (v < lo || v > hi)
    return hcq__gf_fail(L, HCQ_OUT_OF_RANGE, "%lld is outside [%" PRId64 ", %" PRId64 "]",
                        (long long)v, lo, hi);
  *out = (int64_t)v;
  return NULL;
}

/* A finite JSON number (integer or real) that a float holds without overflowing. */
hcq_status_t hcq__gf_get_f32(gf_loader_t *L, const json_t *j, float *out) {
  if (!json_is_number(j))
    return hcq__gf_fail(L, HCQ_INVALID_ARGUMENT, "must be a number, not %s", hcq__gf_type_name(j));
  double v = json_number_value(j);
  if (!isfinite(v) || fabs(v) > FLT_MAX)
    return hcq__gf_fail(L, HCQ_OUT_OF_RANGE, "%g does not fit a 32-bit float", v);
  *out = (float)v;
  return NULL;
}

hcq_status_t hcq__gf_get_int_at(gf_loader_t *L, const char *path, const json_t *j, int64_t lo,
                                int64_t hi, int64_t *out) {
  size_t m = hcq__gf_push(L, "%s", path);
  hcq_status_t st = hcq__gf_get_int(L, j, lo, hi, out);
  hcq__gf_pop(L, m);
  return st;
}

hcq_status_t hcq__gf_get_f32_at(gf_loader_t *L, const char *path, const json_t *j, float *out) {
  size_t m = hcq__gf_push(L, "%s", path);
  hcq_status_t st = hcq__gf_get_f32(L, j, out);
  hcq__gf_pop(L, m);
  return st;
}

hcq_status_t hcq__gf_oom(gf_loader_t *L) {
  return hcq__gf_fail(L, HCQ_OUT_OF_MEMORY, "out of memory");
}

/* A top-level section every file needs: present, of its type, not empty. */
hcq_status_t hcq__gf_required_section(gf_loader_t *L, const json_t *j, json_type type,
                                      const char *what) {
  if (!j) return hcq__gf_fail(L, HCQ_INVALID_ARGUMENT, "missing (a graph file needs it)");
  HCQ__TRY(hcq__gf_expect(L, j, type, what));
  if ((type == JSON_OBJECT ? json_object_size(j) : json_array_size(j)) == 0)
    return hcq__gf_fail(L, HCQ_INVALID_ARGUMENT, "is empty");
  return NULL;
}
