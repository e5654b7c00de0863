/* A graph file's "items": kernels (program, buffers, written buffers, values, launch dims, device)
 * and copies, in order. Operands may be expressions over the file's variables; their values are
 * checked against each run's later (graphfile_runs.c), once the runs are known. */
#include <inttypes.h>
#include <jansson.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/buffer.h"
#include "core/device.h"
#include "core/program.h"
#include "core/vec.h"
#include "io/graphfile_internal.h"

/* An integer operand or an expression over the file's variables. */
static hcq_status_t parse_operand(gf_loader_t *L, const json_t *j, int64_t lo, int64_t hi,
                                  hcq_operand_t *out) {
  if (json_is_integer(j)) {
    int64_t v;
    hcq_status_t st = hcq__gf_get_int(L, j, lo, hi, &v);
    if (!st) *out = hcq_imm(v);
    return st;
  }
  if (!json_is_string(j))
    return hcq__gf_fail(L, HCQ_INVALID_ARGUMENT, "must be an integer or an expression, not %s",
                        hcq__gf_type_name(j));
  size_t n = L->gf->vars.len;
  if (n && !L->var_exprs) {
    if (!(L->var_exprs = malloc(n * sizeof(*L->var_exprs)))) return hcq__gf_oom(L);
    for (size_t i = 0; i < n; i++) L->var_exprs[i] = L->gf->vars.data[i].var;
  }
  hcq_expr_t *e = NULL;
  hcq_status_t st = hcq_expr_parse(json_string_value(j), L->var_exprs, n, &e);
  if (st) return hcq__gf_wrap(L, st);
  if (hcq_expr_is_const(e)) {
    int64_t v = hcq_expr_const_value(e);
    hcq_expr_release(e);
    if (v < lo || v > hi)
      return hcq__gf_fail(L, HCQ_OUT_OF_RANGE, "%" PRId64 " is outside [%" PRId64 ", %" PRId64 "]",
                          v, lo, hi);
    *out = hcq_imm(v);
    return NULL;
  }
  *out = hcq_sym(e);
  return NULL;
}

/* One launch dim: >= 1. */
static hcq_status_t parse_dim(gf_loader_t *L, const json_t *j, hcq_operand_t *dim) {
  HCQ__TRY(parse_operand(L, j, 0, UINT32_MAX, dim));
  /* Missing dims are 1; an explicit constant 0 would run nothing, silently. */
  if (dim->sym ? hcq_expr_is_const(dim->sym) && hcq_expr_const_value(dim->sym) == 0 : !dim->value)
    return hcq__gf_fail(L, HCQ_INVALID_ARGUMENT,
                        "is 0 (launch dims must be >= 1; use 1 for unused dims)");
  return NULL;
}

/* 1 to 3 dims (what it pushes on failure, the caller pops). */
static hcq_status_t parse_dim_array(gf_loader_t *L, const json_t *j, hcq_operand_t dims[3]) {
  HCQ__TRY(hcq__gf_expect(L, j, JSON_ARRAY, "an array of 1 to 3 sizes"));
  if (json_array_size(j) < 1 || json_array_size(j) > 3)
    return hcq__gf_fail(L, HCQ_INVALID_ARGUMENT, "must have 1 to 3 entries, not %zu",
                        json_array_size(j));
  for (size_t i = 0; i < json_array_size(j); i++) {
    size_t m = hcq__gf_push(L, "[%zu]", i);
    HCQ__TRY(parse_dim(L, json_array_get(j, i), &dims[i]));
    hcq__gf_pop(L, m);
  }
  return NULL;
}

static hcq_status_t parse_dims(gf_loader_t *L, const json_t *j, const char *name,
                               hcq_operand_t dims[3]) {
  for (int i = 0; i < 3; i++) dims[i] = hcq_imm(1);
  if (!j) return NULL;
  size_t m = hcq__gf_push(L, ".%s", name);
  hcq_status_t st = parse_dim_array(L, j, dims);
  hcq__gf_pop(L, m); /* and what parse_dim_array pushed */
  return st;
}

/* An optional array field of at most max entries; *n is 0 when it is absent. */
static hcq_status_t optional_array(gf_loader_t *L, const json_t *j, const char *field,
                                   const char *what, const char *noun, size_t max, size_t *n) {
  *n = 0;
  if (!j) return NULL;
  size_t m = hcq__gf_push(L, "%s", field);
  char kind[64];
  snprintf(kind, sizeof(kind), "an array of %s", what);
  hcq_status_t st = hcq__gf_expect(L, j, JSON_ARRAY, kind);
  if (st) goto done;
  if (json_array_size(j) > max) {
    st = hcq__gf_fail(L, HCQ_INVALID_ARGUMENT, "at most %zu %s", max, noun);
    goto done;
  }
  *n = json_array_size(j);
done:
  hcq__gf_pop(L, m);
  return st;
}

/* "kernel": the program the item runs, by name. */
static hcq_status_t kernel_program(gf_loader_t *L, const json_t *jk, gf_program_t **out) {
  hcq_graph_file_t *gf = L->gf;
  size_t m = hcq__gf_push(L, ".kernel");
  gf_program_t *prog = NULL;
  hcq_status_t st = hcq__gf_expect(L, jk, JSON_STRING, "a program name");
  if (!st) {
    size_t cursor = 0;
    const char *name = json_string_value(jk);
    for (size_t i; !prog && (i = hcq__htab_next(&gf->program_names, hcq__hash_str(name),
                                                &cursor)) != SIZE_MAX;)
      if (!strcmp(gf->programs.data[i].name, name)) prog = &gf->programs.data[i];
    if (!prog)
      st = hcq__gf_fail(L, HCQ_NOT_FOUND, "unknown program \"%.64s\"", json_string_value(jk));
  }
  hcq__gf_pop(L, m);
  *out = prog;
  return st;
}

/* "bufs": the buffers the kernel gets, in order. k->bufs is set as soon as it exists, so that the
 * item frees it even when a name is wrong. */
static hcq_status_t kernel_bufs(gf_loader_t *L, const json_t *jbufs, hcq_kernel_item_t *k) {
  size_t nbufs;
  hcq_status_t st =
      optional_array(L, jbufs, ".bufs", "buffer names", "buffers", HCQ_MAX_KERNEL_BUFS, &nbufs);
  if (st) return st;
  hcq_buffer_t **bufs = calloc(nbufs + 1, sizeof(*bufs));
  if (!bufs) return hcq__gf_oom(L);
  k->bufs = bufs;
  for (size_t i = 0; i < nbufs; i++) {
    size_t m = hcq__gf_push(L, ".bufs[%zu]", i);
    gf_buffer_t *b;
    st = hcq__gf_buffer_ref(L, json_array_get(jbufs, i), &b);
    hcq__gf_pop(L, m);
    if (st) break;
    bufs[i] = b->buf;
  }
  k->nbufs = nbufs;
  return st;
}

/* The device the kernel runs on: "device", else its first buffer's. Every buffer must be on it
 * (a kernel reads only its own device's memory). */
static hcq_status_t kernel_device(gf_loader_t *L, const json_t *jdev, const hcq_kernel_item_t *k,
                                  hcq_device_t **out) {
  hcq_status_t st;
  hcq_device_t *dev = k->nbufs ? k->bufs[0]->dev : NULL;
  if (jdev) {
    size_t m = hcq__gf_push(L, ".device");
    if (!(st = hcq__gf_expect(L, jdev, JSON_STRING, "a device name")))
      st = hcq__gf_open_device(L, json_string_value(jdev), &dev);
    hcq__gf_pop(L, m);
    if (st) return st;
  }
  if (!dev)
    return hcq__gf_fail(L, HCQ_INVALID_ARGUMENT, "a kernel without buffers must name its device");
  for (size_t i = 0; i < k->nbufs; i++)
    if (k->bufs[i]->dev != dev) {
      size_t m = hcq__gf_push(L, ".bufs[%zu]", i);
      st = hcq__gf_fail(L, HCQ_INVALID_ARGUMENT, "buffer \"%s\" is on %s but the kernel runs on %s",
                        hcq_buffer_label(k->bufs[i]), k->bufs[i]->dev->name, dev->name);
      hcq__gf_pop(L, m);
      return st;
    }
  *out = dev;
  return NULL;
}

/* outs: which buffers the kernel writes. Unless the file says, every buffer counts as written: an
 * undeclared write could let a replay reorder the item; an extra dependency only costs overlap. */
static hcq_status_t kernel_outs(gf_loader_t *L, const json_t *jouts, hcq_kernel_item_t *k) {
  size_t nbufs = k->nbufs, nouts = jouts ? json_array_size(jouts) : nbufs;
  uint32_t *outs = calloc(nouts + 1, sizeof(*outs));
  if (!outs) return hcq__gf_oom(L);
  k->outs = outs;
  for (size_t i = 0; !jouts && i < nbufs; i++) outs[i] = (uint32_t)i;
  if (jouts) {
    size_t m = hcq__gf_push(L, ".outs");
    hcq_status_t st = hcq__gf_expect(L, jouts, JSON_ARRAY, "an array of buffer indices");
    hcq__gf_pop(L, m);
    if (st) return st;
    for (size_t i = 0; i < nouts; i++) {
      m = hcq__gf_push(L, ".outs[%zu]", i);
      int64_t o;
      st = nbufs == 0 ? hcq__gf_fail(L, HCQ_OUT_OF_RANGE, "the kernel has no buffers")
                      : hcq__gf_get_int(L, json_array_get(jouts, i), 0, (int64_t)nbufs - 1, &o);
      hcq__gf_pop(L, m);
      if (st) return st;
      outs[i] = (uint32_t)o;
    }
  }
  k->nouts = nouts;
  return NULL;
}

/* "vals": 32-bit operands. k->nvals counts those parsed, whose expressions the item releases. */
static hcq_status_t kernel_vals(gf_loader_t *L, const json_t *jvals, hcq_kernel_item_t *k) {
  size_t nvals;
  hcq_status_t st =
      optional_array(L, jvals, ".vals", "values", "values", HCQ_MAX_KERNEL_VALS, &nvals);
  if (st) return st;
  hcq_operand_t *vals = calloc(nvals + 1, sizeof(*vals));
  if (!vals) return hcq__gf_oom(L);
  k->vals = vals;
  for (size_t i = 0; i < nvals; i++) {
    size_t m = hcq__gf_push(L, ".vals[%zu]", i);
    st = parse_operand(L, json_array_get(jvals, i), INT32_MIN, INT32_MAX, &vals[i]);
    hcq__gf_pop(L, m);
    if (st) return st;
    k->nvals = i + 1;
  }
  return NULL;
}

static hcq_status_t parse_kernel(gf_loader_t *L, const json_t *j, hcq_exec_item_t *it) {
  static const char *const keys[] = {"kernel", "bufs",  "outs",   "vals",
                                     "global", "local", "device", NULL};
  hcq_status_t st = hcq__gf_only_keys(L, j, keys);
  if (st) return st;
  it->kind = HCQ_ITEM_KERNEL;
  hcq_kernel_item_t *k = &it->kernel;
  for (int i = 0; i < 3; i++) k->global[i] = k->local[i] = hcq_imm(1);
  gf_program_t *prog = NULL;
  hcq_device_t *dev = NULL;
  if ((st = kernel_program(L, json_object_get(j, "kernel"), &prog))) return st;
  if ((st = kernel_bufs(L, json_object_get(j, "bufs"), k))) return st;
  if ((st = kernel_device(L, json_object_get(j, "device"), k, &dev))) return st;
  if ((st = kernel_outs(L, json_object_get(j, "outs"), k))) return st;
  if ((st = kernel_vals(L, json_object_get(j, "vals"), k))) return st;
  if ((st = parse_dims(L, json_object_get(j, "global"), "global", k->global))) return st;
  if ((st = parse_dims(L, json_object_get(j, "local"), "local", k->local))) return st;
  size_t m = hcq__gf_push(L, ".kernel");
  st = hcq__gf_program_for(L, prog, dev, &k->program);
  hcq__gf_pop(L, m);
  if (st) return st;
  /* Counts the program declares (or its compiled code tells): bad input, like an unknown buffer. */
  if (!hcq__program_args_ok(k->program, k->nbufs, k->nvals))
    return hcq__gf_wrap(L,
                        hcq__program_check_args(k->program, k->nbufs, k->nvals, "bufs and vals"));
  return NULL;
}

/* Member name of a copy ("dst", "src"): a buffer. */
static hcq_status_t copy_buffer(gf_loader_t *L, const json_t *c, const char *name,
                                gf_buffer_t **out) {
  size_t m = hcq__gf_push(L, ".%s", name);
  const json_t *j = json_object_get(c, name);
  hcq_status_t st =
      j ? hcq__gf_buffer_ref(L, j, out) : hcq__gf_fail(L, HCQ_INVALID_ARGUMENT, "missing");
  hcq__gf_pop(L, m);
  return st;
}

/* "copy": {dst, src, bytes} (bytes default to the smaller buffer's size). */
static hcq_status_t parse_copy_fields(gf_loader_t *L, const json_t *c, hcq_exec_item_t *it) {
  static const char *const ckeys[] = {"dst", "src", "bytes", NULL};
  HCQ__TRY(hcq__gf_expect(L, c, JSON_OBJECT, "an object {dst, src, bytes}"));
  HCQ__TRY(hcq__gf_only_keys(L, c, ckeys));
  gf_buffer_t *dst = NULL, *src = NULL;
  HCQ__TRY(copy_buffer(L, c, "dst", &dst));
  HCQ__TRY(copy_buffer(L, c, "src", &src));
  uint64_t ds = hcq_buffer_size(dst->buf), ss = hcq_buffer_size(src->buf);
  uint64_t bytes = ds < ss ? ds : ss;
  const json_t *jb = json_object_get(c, "bytes");
  it->kind = HCQ_ITEM_TRANSFER;
  it->transfer = (hcq_transfer_item_t){dst->buf, src->buf, bytes};
  if (jb) {
    int64_t b;
    HCQ__TRY(hcq__gf_get_int_at(L, ".bytes", jb, 0, (int64_t)bytes, &b));
    it->transfer.bytes = (uint64_t)b;
  }
  return NULL;
}

static hcq_status_t parse_copy(gf_loader_t *L, const json_t *j, hcq_exec_item_t *it) {
  static const char *const keys[] = {"copy", NULL};
  HCQ__TRY(hcq__gf_only_keys(L, j, keys));
  size_t m = hcq__gf_push(L, ".copy");
  hcq_status_t st = parse_copy_fields(L, json_object_get(j, "copy"), it);
  hcq__gf_pop(L, m);
  return st;
}

/* Item j: a kernel or a copy, appended to the file's items (even when it failed half way: gf_free,
 * in graphfile.c, releases what it holds). */
static hcq_status_t parse_item(gf_loader_t *L, const json_t *j) {
  hcq_exec_item_t it;
  memset(&it, 0, sizeof(it));
  if (!hcq__vec_reserve_for(&L->gf->items, L->gf->items.len + 1)) return hcq__gf_oom(L);
  HCQ__TRY(hcq__gf_expect(L, j, JSON_OBJECT, "an object with \"kernel\" or \"copy\""));
  bool is_kernel = json_object_get(j, "kernel") != NULL,
       is_copy = json_object_get(j, "copy") != NULL;
  if (is_kernel == is_copy) {
    /* A misspelt field ("kernal") is named as such, not reported as a missing kernel. */
    static const char *const any_item[] = {"kernel", "bufs",   "outs", "vals", "global",
                                           "local",  "device", "copy", NULL};
    HCQ__TRY(hcq__gf_only_keys(L, j, any_item));
    return hcq__gf_fail(L, HCQ_INVALID_ARGUMENT,
                        "an item has exactly one of \"kernel\" and \"copy\"");
  }
  it.kind = is_kernel ? HCQ_ITEM_KERNEL : HCQ_ITEM_TRANSFER;
  hcq_status_t st = is_kernel ? parse_kernel(L, j, &it) : parse_copy(L, j, &it);
  L->gf->items.data[L->gf->items.len++] = it;
  return st;
}

hcq_status_t hcq__gf_parse_items(gf_loader_t *L, const json_t *items) {
  size_t m = hcq__gf_push(L, "items");
  hcq_status_t st = hcq__gf_required_section(L, items, JSON_ARRAY, "an array of items");
  if (st) goto done;
  for (size_t i = 0; i < json_array_size(items); i++) {
    size_t m2 = hcq__gf_push(L, "[%zu]", i);
    st = parse_item(L, json_array_get(items, i));
    hcq__gf_pop(L, m2);
    if (st) break;
  }
done:
  hcq__gf_pop(L, m);
  return st;
}
