/* Writing a jit as an hcq-graph/1 file: what `hcq run` needs to replay it on its own. */
#include <errno.h>
#include <inttypes.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/backend.h"
#include "core/vec.h"
#include "hcq/jit.h"
#include "io/graphfile_internal.h"
#include "io/htab.h"

static const char k_b64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

static char *b64_encode(const uint8_t *p, size_t n) {
  char *out = malloc((n + 2) / 3 * 4 + 1), *o = out;
  if (!out) return NULL;
  for (size_t i = 0; i < n; i += 3) {
    uint32_t w = (uint32_t)p[i] << 16 | (i + 1 < n ? (uint32_t)p[i + 1] << 8 : 0) |
                 (i + 2 < n ? p[i + 2] : 0);
    *o++ = k_b64[w >> 18 & 63];
    *o++ = k_b64[w >> 12 & 63];
    *o++ = i + 1 < n ? k_b64[w >> 6 & 63] : '=';
    *o++ = i + 2 < n ? k_b64[w & 63] : '=';
  }
  *o = '\0';
  return out;
}

typedef struct saver {
  json_t *buffers, *programs;
  HCQ__VEC(const hcq_buffer_t *) bufs; /* index i is named names[i] */
  HCQ__VEC(char *) names;
  HCQ__VEC(const hcq_program_t *) progs;
  HCQ__VEC(char *) prog_names;
  /* Lookups stay O(1) for jits with 100k buffers: bufs by address, progs by (name, source), and
   * every name given out (entry 2i: names[i], 2i+1: prog_names[i]). */
  hcq__htab_t buf_index, prog_index, taken;
  size_t next_counter[2]; /* per prefix: no smaller counter is free any more */
} saver_t;

static bool name_taken(saver_t *s, const char *name) {
  size_t cursor = 0;
  for (size_t e; (e = hcq__htab_next(&s->taken, hcq__hash_str(name), &cursor)) != SIZE_MAX;)
    if (!strcmp(e % 2 ? s->prog_names.data[e / 2] : s->names.data[e / 2], name)) return true;
  return false;
}

/* A unique name from a wish, or prefix + counter (counter 0 for "buf", 1 for "program"). Names
 * are only ever added, so the smallest free counter never goes down: the search resumes there. */
static char *unique_name(saver_t *s, const char *wish, const char *prefix, int counter) {
  char buf[96];
  if (wish && hcq__graph_file_name_ok(wish) && !name_taken(s, wish)) return strdup(wish);
  for (size_t i = s->next_counter[counter];; i++) {
    snprintf(buf, sizeof(buf), "%s%zu", prefix, i);
    if (!name_taken(s, buf)) {
      s->next_counter[counter] = i;
      return strdup(buf);
    }
  }
}

static uint64_t program_hash(const hcq_program_t *p) {
  const char *name = hcq_program_name(p), *src = hcq_program_source(p);
  return hcq__hash_bytes(hcq__hash_bytes(0, name, strlen(name) + 1), src, strlen(src));
}

static hcq_status_t oom(void) {
  return hcq_status_make(HCQ_OUT_OF_MEMORY, "out of memory saving a graph file");
}

/* The name of buf in the file, adding it (and its base first) when new. */
static hcq_status_t buffer_name(saver_t *s, const hcq_buffer_t *b, const char **out) {
  size_t cursor = 0;
  for (size_t i; (i = hcq__htab_next(&s->buf_index, hcq__hash_ptr(b), &cursor)) != SIZE_MAX;)
    if (s->bufs.data[i] == b) {
      *out = s->names.data[i];
      return NULL;
    }
  const hcq_buffer_t *base = hcq_buffer_base(b);
  const char *base_name = NULL;
  hcq_status_t st = base != b ? buffer_name(s, base, &base_name) : NULL;
  if (st) return st;
  char *name = unique_name(s, hcq_buffer_label(b), "buf", 0);
  json_t *j = json_object();
  if (!name || !j || !hcq__vec_reserve_for(&s->bufs, s->bufs.len + 1) ||
      !hcq__vec_reserve_for(&s->names, s->names.len + 1) ||
      !hcq__htab_add(&s->buf_index, hcq__hash_ptr(b), s->bufs.len) ||
      !hcq__htab_add(&s->taken, hcq__hash_str(name), 2 * s->names.len)) {
    free(name);
    json_decref(j);
    return oom();
  }
  s->bufs.data[s->bufs.len++] = b;
  s->names.data[s->names.len++] = name;
  if (base != b) {
    json_object_set_new(j, "view", json_string(base_name));
    json_object_set_new(j, "offset", json_integer((json_int_t)hcq_buffer_offset(b)));
    json_object_set_new(j, "bytes", json_integer((json_int_t)hcq_buffer_size(b)));
  } else {
    uint64_t size = hcq_buffer_size(b);
    uint8_t *data = malloc(size);
    if (!data) {
      json_decref(j);
      return oom();
    }
    st = hcq_buffer_copyout((hcq_buffer_t *)b, 0, data, size);
    char *text = st ? NULL : b64_encode(data, size);
    free(data);
    if (st || !text) {
      json_decref(j);
      return st ? st : oom();
    }
    json_object_set_new(j, "device", json_string(hcq_device_name(hcq_buffer_device(b))));
    json_object_set_new(j, "bytes", json_integer((json_int_t)size));
    json_t *init = json_object();
    json_object_set_new(init, "base64", json_string(text));
    json_object_set_new(j, "init", init);
    free(text);
  }
  json_object_set_new(s->buffers, name, j);
  *out = name;
  return NULL;
}

/* Programs are keyed by name and source: the same kernel compiled for two devices is one entry. */
static hcq_status_t program_name(saver_t *s, const hcq_program_t *p, const char **out) {
  const char *src = hcq_program_source(p);
  if (!src)
    return hcq_status_make(
        HCQ_UNIMPLEMENTED,
        "program %s was made from a function pointer: only programs from source can be saved",
        hcq_program_name(p));
  size_t cursor = 0;
  for (size_t i; (i = hcq__htab_next(&s->prog_index, program_hash(p), &cursor)) != SIZE_MAX;) {
    const hcq_program_t *q = s->progs.data[i];
    if (!strcmp(hcq_program_name(q), hcq_program_name(p)) && !strcmp(hcq_program_source(q), src)) {
      *out = s->prog_names.data[i];
      return NULL;
    }
  }
  char *name = unique_name(s, hcq_program_name(p), "program", 1);
  json_t *j = json_object();
  if (!name || !j || !hcq__vec_reserve_for(&s->progs, s->progs.len + 1) ||
      !hcq__vec_reserve_for(&s->prog_names, s->prog_names.len + 1) ||
      !hcq__htab_add(&s->prog_index, program_hash(p), s->progs.len) ||
      !hcq__htab_add(&s->taken, hcq__hash_str(name), 2 * s->prog_names.len + 1)) {
    free(name);
    json_decref(j);
    return oom();
  }
  s->progs.data[s->progs.len++] = p;
  s->prog_names.data[s->prog_names.len++] = name;
  json_object_set_new(j, "entry", json_string(hcq_program_name(p)));
  /* The source is in the language of the device it was compiled for. */
  const hcq__backend_t *b = hcq__backend(hcq_device_kind(hcq_program_device(p)));
  json_object_set_new(j, b ? b->source_key : "c", json_string(src));
  size_t nbufs, nvals;
  /* the counts travel, so the loaded file checks them too */
  if (hcq_program_args(p, &nbufs, &nvals)) {
    json_object_set_new(j, "nbufs", json_integer((json_int_t)nbufs));
    json_object_set_new(j, "nvals", json_integer((json_int_t)nvals));
  }
  json_object_set_new(s->programs, name, j);
  *out = name;
  return NULL;
}

/* NULL when memory runs out. An expression is written whole, however long (a cut one would load
 * as another expression, or not at all). */
static json_t *operand_json(hcq_operand_t op) {
  if (!op.sym) return json_integer((json_int_t)op.value);
  size_t len = hcq_expr_format(op.sym, NULL, 0);
  char *text = malloc(len + 1);
  if (!text) return NULL;
  hcq_expr_format(op.sym, text, len + 1);
  json_t *j = json_string(text);
  free(text);
  return j;
}

/* A transfer item's fields into j: "copy": {dst, src, bytes}. */
static hcq_status_t transfer_json(saver_t *s, const hcq_transfer_item_t *t, json_t *j) {
  const char *name;
  json_t *c = json_object();
  json_object_set_new(j, "copy", c);
  HCQ__TRY(buffer_name(s, t->dst, &name));
  json_object_set_new(c, "dst", json_string(name));
  HCQ__TRY(buffer_name(s, t->src, &name));
  json_object_set_new(c, "src", json_string(name));
  json_object_set_new(c, "bytes", json_integer((json_int_t)t->bytes));
  return NULL;
}

/* A kernel item's fields into j: kernel, device, bufs, outs, vals, global, local. */
static hcq_status_t kernel_json(saver_t *s, const hcq_kernel_item_t *k, json_t *j) {
  const char *name;
  HCQ__TRY(program_name(s, k->program, &name));
  json_object_set_new(j, "kernel", json_string(name));
  json_object_set_new(j, "device", json_string(hcq_device_name(hcq_program_device(k->program))));
  json_t *bufs = json_array(), *outs = json_array(), *vals = json_array(), *g = json_array(),
         *l = json_array();
  json_object_set_new(j, "bufs", bufs);
  if (k->outs) /* no outs array: every buffer, which is what a missing "outs" means */
    json_object_set_new(j, "outs", outs);
  else
    json_decref(outs);
  json_object_set_new(j, "vals", vals);
  json_object_set_new(j, "global", g);
  json_object_set_new(j, "local", l);
  for (size_t i = 0; i < k->nbufs; i++) {
    HCQ__TRY(buffer_name(s, k->bufs[i], &name));
    json_array_append_new(bufs, json_string(name));
  }
  for (size_t i = 0; k->outs && i < k->nouts; i++)
    json_array_append_new(outs, json_integer(k->outs[i]));
  for (size_t i = 0; i < k->nvals; i++)
    if (json_array_append_new(vals, operand_json(k->vals[i]))) return oom();
  for (int i = 0; i < 3; i++)
    if (json_array_append_new(g, operand_json(k->global[i])) ||
        json_array_append_new(l, operand_json(k->local[i])))
      return oom();
  return NULL;
}

static hcq_status_t item_json(saver_t *s, const hcq_exec_item_t *it, json_t **out) {
  json_t *j = json_object();
  if (!j) return oom();
  hcq_status_t st = it->kind == HCQ_ITEM_TRANSFER ? transfer_json(s, &it->transfer, j)
                                                  : kernel_json(s, &it->kernel, j);
  if (st) {
    json_decref(j);
    return st;
  }
  *out = j;
  return NULL;
}

/* "vars": each variable's range and value, under its (unique) name. */
static hcq_status_t vars_json(hcq_jit_t *jit, json_t *vars) {
  for (size_t i = 0; i < hcq_jit_var_count(jit); i++) {
    const hcq_expr_t *v = hcq_jit_var(jit, i);
    if (json_object_get(vars, hcq_var_name(v)))
      return hcq_status_make(HCQ_INVALID_ARGUMENT,
                             "two variables are named %s: a graph file names each once",
                             hcq_var_name(v));
    json_t *jv = json_object();
    json_object_set_new(jv, "min", json_integer(hcq_var_min(v)));
    json_object_set_new(jv, "max", json_integer(hcq_var_max(v)));
    json_object_set_new(jv, "value", json_integer(hcq_jit_var_value(jit, i)));
    json_object_set_new(vars, hcq_var_name(v), jv);
  }
  return NULL;
}

static hcq_status_t items_json(saver_t *s, hcq_jit_t *jit, json_t *items) {
  for (size_t i = 0; i < hcq_jit_item_count(jit); i++) {
    json_t *ji = NULL;
    hcq_status_t st = item_json(s, hcq_jit_item(jit, i), &ji);
    if (st) return hcq_status_annotate(st, "item %zu", i);
    json_array_append_new(items, ji);
  }
  return NULL;
}

static hcq_status_t inputs_json(saver_t *s, hcq_jit_t *jit, json_t *inputs) {
  for (size_t i = 0; i < hcq_jit_input_count(jit); i++) {
    const char *name;
    HCQ__TRY(buffer_name(s, hcq_jit_input(jit, i), &name));
    json_array_append_new(inputs, json_string(name));
  }
  return NULL;
}

hcq_status_t hcq_jit_save(hcq_jit_t *jit, const char *path) {
  if (!jit || !path)
    return hcq_status_make(HCQ_INVALID_ARGUMENT, "hcq_jit_save: jit or path is NULL");
  saver_t s = {json_object(), json_object(), {0}, {0}, {0}, {0}, {0}, {0}, {0}, {0}};
  json_t *root = json_object(), *vars = json_object(), *items = json_array(),
         *inputs = json_array();
  hcq_status_t st = NULL;
  if (!s.buffers || !s.programs || !root || !vars || !items || !inputs) {
    st = oom();
    goto done;
  }
  /* Contents are read with copyout, which waits for the work before it on each device. */
  if ((st = vars_json(jit, vars))) goto done;
  if ((st = items_json(&s, jit, items))) goto done;
  if ((st = inputs_json(&s, jit, inputs))) goto done;
  json_object_set_new(root, "format", json_string("hcq-graph/1"));
  json_object_set_new(root, "vars", vars);
  json_object_set(root, "buffers", s.buffers);
  json_object_set(root, "programs", s.programs);
  json_object_set_new(root, "items", items);
  json_object_set_new(root, "inputs", inputs);
  json_t *runs = json_array();
  json_array_append_new(runs, json_object());
  json_object_set_new(root, "runs", runs);
  vars = items = inputs = NULL;
  if (json_dump_file(root, path, JSON_INDENT(2)) != 0)
    st = hcq_status_make(HCQ_UNAVAILABLE, "cannot write %s: %s", path, strerror(errno));
done:
  json_decref(vars);
  json_decref(items);
  json_decref(inputs);
  json_decref(root);
  json_decref(s.buffers);
  json_decref(s.programs);
  for (size_t i = 0; i < s.names.len; i++) free(s.names.data[i]);
  for (size_t i = 0; i < s.prog_names.len; i++) free(s.prog_names.data[i]);
  hcq__vec_free(&s.bufs);
  hcq__vec_free(&s.names);
  hcq__vec_free(&s.progs);
  hcq__vec_free(&s.prog_names);
  hcq__htab_free(&s.buf_index);
  hcq__htab_free(&s.prog_index);
  hcq__htab_free(&s.taken);
  return st ? hcq_status_annotate(st, "saving %s", path) : NULL;
}
