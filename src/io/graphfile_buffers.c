/* A graph file's "buffers": base buffers, created on their devices, and views of them. Views may
 * name views declared anywhere in the object, so they are resolved after every base buffer exists,
 * chain by chain. Items, inputs and runs name buffers through hcq__gf_buffer_ref, so an unknown
 * name reads the same wherever it appears. */
#include <inttypes.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "io/graphfile_internal.h"

#define MAX_BUFFER_BYTES (UINT64_C(1) << 40)

bool hcq__graph_file_name_ok(const char *s) {
  if (!*s || *s == '.' || strlen(s) > 64) return false;
  for (; *s; s++)
    if (!((*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') || (*s >= '0' && *s <= '9') ||
          *s == '_' || *s == '-' || *s == '.'))
      return false;
  return true;
}

ssize_t hcq__gf_find_buffer(const hcq_graph_file_t *gf, const char *name) {
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

/* The device a buffer names ("device": "CPU:0"). */
static hcq_status_t open_named_device(gf_loader_t *L, const json_t *jdev, hcq_device_t **out) {
  HCQ__TRY(hcq__gf_expect(L, jdev, JSON_STRING, "a device name"));
  return hcq__gf_open_device(L, json_string_value(jdev), out);
}

static hcq_status_t add_base_buffer(gf_loader_t *L, const char *key, const json_t *v) {
  hcq_graph_file_t *gf = L->gf;
  static const char *const keys[] = {"device", "bytes", "init", NULL};
  hcq_status_t st = hcq__gf_only_keys(L, v, keys);
  if (st) return st;
  const json_t *jdev = json_object_get(v, "device"), *jbytes = json_object_get(v, "bytes");
  if (!jdev || !jbytes)
    return hcq__gf_fail(L, HCQ_INVALID_ARGUMENT,
                        "a buffer needs device and bytes (or view, offset, bytes)");
  gf_buffer_t b = {0};
  int64_t bytes;
  size_t m = hcq__gf_push(L, ".bytes");
  st = hcq__gf_get_int(L, jbytes, 1, (int64_t)MAX_BUFFER_BYTES, &bytes);
  hcq__gf_pop(L, m);
  if (st) return st;
  b.bytes = (uint64_t)bytes;
  if (L->opts->max_total_bytes && gf->total_bytes + b.bytes > L->opts->max_total_bytes) {
    m = hcq__gf_push(L, ".bytes");
    st = hcq__gf_fail(L, HCQ_OUT_OF_RANGE,
                      "the file's buffers need more than the %" PRIu64 " bytes allowed",
                      L->opts->max_total_bytes);
    hcq__gf_pop(L, m);
    return st;
  }
  gf->total_bytes += b.bytes;
  const json_t *init = json_object_get(v, "init");
  if (init && (st = hcq__gf_parse_init(L, init, &b))) return st;
  m = hcq__gf_push(L, ".device");
  st = open_named_device(L, jdev, &b.dev);
  hcq__gf_pop(L, m);
  if (st) goto fail;
  if ((st = hcq_buffer_create(b.dev, b.bytes, &b.buf))) {
    st = hcq__gf_wrap(L, st);
    goto fail;
  }
  hcq_buffer_set_label(b.buf, key);
  b.name = strdup(key);
  if (!b.name || !push_buffer(gf, b)) {
    st = hcq__gf_oom(L);
    goto fail;
  }
  return NULL;
fail:
  hcq_buffer_release(b.buf);
  free(b.name);
  free(b.init_data);
  return st;
}

/* Views may name views declared anywhere, in chains of any length: each chain is walked from the
 * view toward its base buffer without recursion (a 100k-deep chain must not need 100k stack
 * frames), then created from the base outward. */
typedef struct view_walk {
  hcq__htab_t seen;             /* every view a walk has reached, by name */
  HCQ__VEC(const char *) names; /* their names (keys of the JSON object), by table entry */
  HCQ__VEC(const char *) chain; /* the walk under way, from the view asked for toward its base */
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
/* View key's fields and the buffer it views, under the view's path (what it pushes, the caller
 * pops). */
static hcq_status_t check_view_fields(gf_loader_t *L, const json_t *buffers, const char *key,
                                      const char **base_name) {
  const json_t *v = json_object_get(buffers, key);
  static const char *const keys[] = {"view", "offset", "bytes", NULL};
  HCQ__TRY(hcq__gf_only_keys(L, v, keys));
  if (!json_object_get(v, "bytes"))
    return hcq__gf_fail(L, HCQ_INVALID_ARGUMENT,
                        "a view needs view and bytes (offset defaults to 0)");
  hcq__gf_push(L, ".view");
  const json_t *jview = json_object_get(v, "view");
  HCQ__TRY(hcq__gf_expect(L, jview, JSON_STRING, "a buffer name"));
  *base_name = json_string_value(jview);
  if (!json_object_get(buffers, *base_name))
    return hcq__gf_fail(L, HCQ_NOT_FOUND, "unknown buffer \"%.64s\"", *base_name);
  if (!strcmp(*base_name, key))
    return hcq__gf_fail(L, HCQ_INVALID_ARGUMENT, "a view cannot view itself");
  return NULL;
}

static hcq_status_t check_view(gf_loader_t *L, const json_t *buffers, const char *key,
                               const char **base_name) {
  size_t m = hcq__gf_push(L, "buffers");
  hcq__gf_push_key(L, key);
  hcq_status_t st = check_view_fields(L, buffers, key, base_name);
  hcq__gf_pop(L, m); /* and what check_view_fields pushed */
  return st;
}

/* Creates view key, whose base exists already. */
static hcq_status_t make_view(gf_loader_t *L, const json_t *buffers, const char *key) {
  hcq_graph_file_t *gf = L->gf;
  const json_t *v = json_object_get(buffers, key);
  const json_t *joff = json_object_get(v, "offset"), *jbytes = json_object_get(v, "bytes");
  size_t m = hcq__gf_push(L, "buffers");
  hcq__gf_push_key(L, key);
  hcq_status_t st = NULL;
  int64_t off = 0, bytes;
  if (joff) {
    size_t m3 = hcq__gf_push(L, ".offset");
    st = hcq__gf_get_int(L, joff, 0, (int64_t)MAX_BUFFER_BYTES, &off);
    hcq__gf_pop(L, m3);
    if (st) goto out;
  }
  size_t m3 = hcq__gf_push(L, ".bytes");
  st = hcq__gf_get_int(L, jbytes, 1, (int64_t)MAX_BUFFER_BYTES, &bytes);
  hcq__gf_pop(L, m3);
  if (st) goto out;
  gf_buffer_t *base =
      &gf->buffers.data[hcq__gf_find_buffer(gf, json_string_value(json_object_get(v, "view")))];
  uint64_t base_bytes = hcq_buffer_size(base->buf);
  /* Both are at most 2^40, so the end is the true sum, not a wrapped one. */
  if ((uint64_t)off + (uint64_t)bytes > base_bytes) {
    st = hcq__gf_fail(L, HCQ_OUT_OF_RANGE,
                      "view [%" PRId64 ", %" PRId64 ") is outside its base \"%s\" (%" PRIu64
                      " bytes)",
                      off, off + bytes, base->name, base_bytes);
    goto out;
  }
  gf_buffer_t b = {0};
  b.is_view = true;
  b.dev = base->dev;
  b.bytes = (uint64_t)bytes;
  if ((st = hcq_buffer_view_create(base->buf, (uint64_t)off, (uint64_t)bytes, &b.buf))) {
    st = hcq__gf_wrap(L, st);
    goto out;
  }
  hcq_buffer_set_label(b.buf, key);
  b.name = strdup(key);
  if (!b.name || !push_buffer(gf, b)) {
    hcq_buffer_release(b.buf);
    free(b.name);
    st = hcq__gf_oom(L);
  }
out:
  hcq__gf_pop(L, m);
  return st;
}

/* "a -> b -> a": the cycle that starts at chain[from], at most a few names of it. */
static hcq_status_t cycle_error(gf_loader_t *L, const view_walk_t *w, size_t from) {
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
  size_t m = hcq__gf_push(L, "buffers");
  hcq__gf_push_key(L, w->chain.data[from]);
  hcq_status_t st = hcq__gf_fail(L, HCQ_INVALID_ARGUMENT, "views form a cycle of %zu: %s", n, text);
  hcq__gf_pop(L, m);
  return st;
}

static hcq_status_t resolve_view(gf_loader_t *L, const json_t *buffers, view_walk_t *w,
                                 const char *key) {
  hcq_graph_file_t *gf = L->gf;
  w->chain.len = 0;
  for (const char *at = key; hcq__gf_find_buffer(gf, at) < 0;) {
    /* Earlier walks created every view they reached (or failed the load): a view seen before
     * and still missing is on this walk's chain. */
    if (view_seen(w, at)) {
      size_t from = 0;
      while (strcmp(w->chain.data[from], at)) from++;
      return cycle_error(L, w, from);
    }
    if (!hcq__vec_push(&w->names, at) ||
        !hcq__htab_add(&w->seen, hcq__hash_str(at), w->names.len - 1) ||
        !hcq__vec_push(&w->chain, at))
      return hcq__gf_oom(L);
    HCQ__TRY(check_view(L, buffers, at, &at));
  }
  for (size_t i = w->chain.len; i-- > 0;) HCQ__TRY(make_view(L, buffers, w->chain.data[i]));
  return NULL;
}

hcq_status_t hcq__gf_parse_buffers(gf_loader_t *L, const json_t *buffers) {
  size_t m = hcq__gf_push(L, "buffers");
  hcq_status_t st = hcq__gf_required_section(L, buffers, JSON_OBJECT, "an object of buffers");
  const char *key;
  json_t *v;
  /* Base buffers first (in file order), then views. */
  if (!st) json_object_foreach((json_t *)buffers, key, v) {
      size_t m2 = hcq__gf_push_key(L, key);
      if (!hcq__graph_file_name_ok(key))
        st = hcq__gf_fail(L, HCQ_INVALID_ARGUMENT,
                          "buffer names use letters, digits, '_', '-' and '.' (at most 64)");
      else if (!(st = hcq__gf_expect(L, v, JSON_OBJECT, "an object")) &&
               !json_object_get(v, "view"))
        st = add_base_buffer(L, key, v);
      hcq__gf_pop(L, m2);
      if (st) break;
    }
  hcq__gf_pop(L, m);
  view_walk_t walk = {0};
  if (!st) json_object_foreach((json_t *)buffers, key, v) {
      if ((st = resolve_view(L, buffers, &walk, key))) break;
    }
  view_walk_free(&walk);
  return st;
}

hcq_status_t hcq__gf_buffer_ref(gf_loader_t *L, const json_t *j, gf_buffer_t **out) {
  hcq_status_t st = hcq__gf_expect(L, j, JSON_STRING, "a buffer name");
  if (st) return st;
  ssize_t i = hcq__gf_find_buffer(L->gf, json_string_value(j));
  if (i < 0)
    return hcq__gf_fail(L, HCQ_NOT_FOUND, "unknown buffer \"%.64s\"", json_string_value(j));
  *out = &L->gf->buffers.data[i];
  return NULL;
}
