/* What a graph file's replays are given: the variables ("vars", with their declared values), the
 * replaceable inputs ("inputs") and the runs, each its own inputs and values; then every item's
 * operands checked against every run's values, so that a value that breaks a launch is a load
 * error, not a replay's. */
#include <inttypes.h>
#include <jansson.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "io/graphfile_internal.h"

/* Variable key: {min, max, value}, made and named. */
static hcq_status_t parse_var(gf_loader_t *L, const char *key, const json_t *v) {
  static const char *const keys[] = {"min", "max", "value", NULL};
  HCQ__TRY(hcq__gf_expect(L, v, JSON_OBJECT, "an object {min, max, value}"));
  HCQ__TRY(hcq__gf_only_keys(L, v, keys));
  const json_t *jmin = json_object_get(v, "min"), *jmax = json_object_get(v, "max"),
               *jval = json_object_get(v, "value");
  if (!jmin || !jmax) return hcq__gf_fail(L, HCQ_INVALID_ARGUMENT, "needs min and max");
  int64_t lo, hi, value;
  HCQ__TRY(hcq__gf_get_int_at(L, ".min", jmin, INT64_MIN, INT64_MAX, &lo));
  HCQ__TRY(hcq__gf_get_int_at(L, ".max", jmax, INT64_MIN, INT64_MAX, &hi));
  if (hi < lo) {
    size_t m = hcq__gf_push(L, ".max");
    hcq_status_t st =
        hcq__gf_fail(L, HCQ_INVALID_ARGUMENT, "max %" PRId64 " is below min %" PRId64, hi, lo);
    hcq__gf_pop(L, m);
    return st;
  }
  value = lo;
  if (jval) HCQ__TRY(hcq__gf_get_int_at(L, ".value", jval, lo, hi, &value));
  hcq_expr_t *var = NULL;
  hcq_status_t st = hcq_var_create(key, lo, hi, &var);
  if (st) return hcq__gf_wrap(L, st);
  if (!hcq__vec_push(&L->gf->vars, ((hcq_var_value_t){var, value}))) {
    hcq_expr_release(var);
    return hcq__gf_oom(L);
  }
  if (!hcq__htab_add(&L->gf->var_names, hcq__hash_str(key), L->gf->vars.len - 1))
    return hcq__gf_oom(L);
  return NULL;
}

hcq_status_t hcq__gf_parse_vars(gf_loader_t *L, const json_t *vars) {
  if (!vars) return NULL;
  size_t m = hcq__gf_push(L, "vars");
  hcq_status_t st = hcq__gf_expect(L, vars, JSON_OBJECT, "an object of variables");
  const char *key;
  json_t *v;
  if (st) goto done;
  json_object_foreach((json_t *)vars, key, v) {
    size_t m2 = hcq__gf_push_key(L, key);
    st = parse_var(L, key, v);
    hcq__gf_pop(L, m2);
    if (st) break;
  }
done:
  hcq__gf_pop(L, m);
  return st;
}

/* Input i: a buffer, listed once. */
static hcq_status_t parse_input(gf_loader_t *L, const json_t *j, size_t i) {
  hcq_graph_file_t *gf = L->gf;
  gf_buffer_t *b;
  HCQ__TRY(hcq__gf_buffer_ref(L, j, &b));
  size_t bi = (size_t)(b - gf->buffers.data);
  if (L->input_of[bi])
    return hcq__gf_fail(L, HCQ_INVALID_ARGUMENT, "buffer \"%s\" is listed twice", b->name);
  L->input_of[bi] = i + 1;
  gf->inputs[i] = b->buf;
  return NULL;
}

hcq_status_t hcq__gf_parse_inputs(gf_loader_t *L, const json_t *inputs) {
  hcq_graph_file_t *gf = L->gf;
  size_t n = inputs ? json_array_size(inputs) : 0;
  size_t m = hcq__gf_push(L, "inputs");
  hcq_status_t st =
      inputs ? hcq__gf_expect(L, inputs, JSON_ARRAY, "an array of buffer names") : NULL;
  gf->inputs = calloc(n + 1, sizeof(*gf->inputs));
  L->input_of = calloc(gf->buffers.len + 1, sizeof(*L->input_of));
  if (st) goto done;
  if (!gf->inputs || !L->input_of) {
    st = hcq__gf_oom(L);
    goto done;
  }
  for (size_t i = 0; i < n; i++) {
    size_t m2 = hcq__gf_push(L, "[%zu]", i);
    st = parse_input(L, json_array_get(inputs, i), i);
    hcq__gf_pop(L, m2);
    if (st) goto done;
  }
  gf->ninputs = n;
done:
  hcq__gf_pop(L, m);
  return st;
}

/* Input "key" of run r bound to buffer v (null: the previous run's binding, the first run's the
 * declared one). */
static hcq_status_t parse_run_input(gf_loader_t *L, size_t r, gf_run_t *run, const char *key,
                                    const json_t *v) {
  hcq_graph_file_t *gf = L->gf;
  ssize_t bi = hcq__gf_find_buffer(gf, key), input = bi >= 0 ? (ssize_t)L->input_of[bi] - 1 : -1;
  if (input < 0) return hcq__gf_fail(L, HCQ_NOT_FOUND, "\"%.64s\" is not an input", key);
  if (json_is_null(v)) {
    run->inputs[input] = r ? gf->runs.data[r - 1].inputs[input] : gf->inputs[input];
    return NULL;
  }
  gf_buffer_t *b = NULL;
  HCQ__TRY(hcq__gf_buffer_ref(L, v, &b));
  const hcq_buffer_t *want = gf->inputs[input];
  if (hcq_buffer_size(b->buf) != hcq_buffer_size(want))
    return hcq__gf_fail(L, HCQ_INVALID_ARGUMENT,
                        "buffer \"%s\" has %" PRIu64 " bytes but input \"%s\" has %" PRIu64,
                        b->name, hcq_buffer_size(b->buf), key, hcq_buffer_size(want));
  if (hcq_buffer_device(b->buf) != hcq_buffer_device(want))
    return hcq__gf_fail(L, HCQ_INVALID_ARGUMENT, "buffer \"%s\" is on %s but input \"%s\" is on %s",
                        b->name, hcq_device_name(hcq_buffer_device(b->buf)), key,
                        hcq_device_name(hcq_buffer_device(want)));
  run->inputs[input] = b->buf;
  return NULL;
}

/* Variable "key" of a run set to v (within the variable's range). */
static hcq_status_t parse_run_var(gf_loader_t *L, size_t r, gf_run_t *run, const char *key,
                                  const json_t *v) {
  (void)r;
  hcq_graph_file_t *gf = L->gf;
  ssize_t vi = -1;
  size_t cursor = 0;
  for (size_t k;
       vi < 0 && (k = hcq__htab_next(&gf->var_names, hcq__hash_str(key), &cursor)) != SIZE_MAX;)
    if (!strcmp(hcq_var_name(gf->vars.data[k].var), key)) vi = (ssize_t)k;
  if (vi < 0) return hcq__gf_fail(L, HCQ_NOT_FOUND, "unknown variable \"%.64s\"", key);
  int64_t value;
  HCQ__TRY(hcq__gf_get_int(L, v, hcq_var_min(gf->vars.data[vi].var),
                           hcq_var_max(gf->vars.data[vi].var), &value));
  run->vals[vi].value = value;
  return NULL;
}

typedef hcq_status_t (*run_member_fn)(gf_loader_t *L, size_t r, gf_run_t *run, const char *key,
                                      const json_t *v);

/* A run's object member (".inputs", ".vars"), if present: each of its keys through parse. */
static hcq_status_t parse_run_members(gf_loader_t *L, const json_t *obj, const char *path,
                                      const char *what, size_t r, gf_run_t *run,
                                      run_member_fn parse) {
  if (!obj) return NULL;
  size_t m = hcq__gf_push(L, "%s", path);
  hcq_status_t st = hcq__gf_expect(L, obj, JSON_OBJECT, what);
  const char *key;
  json_t *v;
  if (st) goto done;
  json_object_foreach((json_t *)obj, key, v) {
    size_t m2 = hcq__gf_push_key(L, key);
    st = parse(L, r, run, key, v);
    hcq__gf_pop(L, m2);
    if (st) break;
  }
done:
  hcq__gf_pop(L, m);
  return st;
}

/* Run r (runs NULL: the one run of the declared inputs and values). */
static hcq_status_t parse_run(gf_loader_t *L, const json_t *runs, size_t r) {
  hcq_graph_file_t *gf = L->gf;
  gf_run_t run = {calloc(gf->ninputs + 1, sizeof(hcq_buffer_t *)),
                  calloc(gf->vars.len + 1, sizeof(hcq_var_value_t))};
  if (!run.inputs || !run.vals || !hcq__vec_push(&gf->runs, run)) {
    free(run.inputs);
    free(run.vals);
    return hcq__gf_oom(L);
  }
  if (gf->ninputs) memcpy(run.inputs, gf->inputs, gf->ninputs * sizeof(hcq_buffer_t *));
  if (gf->vars.len) memcpy(run.vals, gf->vars.data, gf->vars.len * sizeof(hcq_var_value_t));
  const json_t *j = runs ? json_array_get(runs, r) : NULL;
  if (!j) return NULL;
  static const char *const keys[] = {"inputs", "vars", NULL};
  HCQ__TRY(hcq__gf_expect(L, j, JSON_OBJECT, "an object {inputs, vars}"));
  HCQ__TRY(hcq__gf_only_keys(L, j, keys));
  HCQ__TRY(parse_run_members(L, json_object_get(j, "inputs"), ".inputs",
                             "an object {input: buffer}", r, &run, parse_run_input));
  return parse_run_members(L, json_object_get(j, "vars"), ".vars", "an object {variable: value}", r,
                           &run, parse_run_var);
}

hcq_status_t hcq__gf_parse_runs(gf_loader_t *L, const json_t *runs) {
  size_t m = hcq__gf_push(L, "runs");
  hcq_status_t st = NULL;
  size_t n = 1;
  if (runs) {
    n = json_array_size(runs);
    if ((st = hcq__gf_expect(L, runs, JSON_ARRAY, "an array of runs"))) goto done;
    if (n == 0) {
      st = hcq__gf_fail(L, HCQ_INVALID_ARGUMENT, "is empty (leave it out for one run)");
      goto done;
    }
  }
  for (size_t r = 0; r < n; r++) {
    size_t m2 = hcq__gf_push(L, "[%zu]", r);
    st = parse_run(L, runs, r);
    hcq__gf_pop(L, m2);
    if (st) break;
  }
done:
  hcq__gf_pop(L, m);
  return st;
}

/* sym evaluated with vals, within [lo, hi]. */
static hcq_status_t eval_in_range(const hcq_expr_t *sym, const hcq_var_value_t *vals, size_t nvals,
                                  int64_t lo, int64_t hi) {
  int64_t x;
  HCQ__TRY(hcq_expr_eval(sym, vals, nvals, &x));
  if (x < lo || x > hi)
    return hcq_status_make(HCQ_OUT_OF_RANGE,
                           "evaluates to %" PRId64 ", outside [%" PRId64 ", %" PRId64 "]", x, lo,
                           hi);
  return NULL;
}

/* Every item checked against the variables' declared values (and each run's), so that a value
 * that would break a launch dim is a load error with its path, not a replay failure. */
hcq_status_t hcq__gf_check_items(gf_loader_t *L) {
  hcq_graph_file_t *gf = L->gf;
  for (size_t r = 0; r < gf->runs.len; r++) {
    for (size_t i = 0; i < gf->items.len; i++) {
      const hcq_exec_item_t *it = &gf->items.data[i];
      if (it->kind != HCQ_ITEM_KERNEL) continue;
      const hcq_kernel_item_t *k = &it->kernel;
      for (size_t v = 0; v < k->nvals + 6; v++) {
        hcq_operand_t op = v < k->nvals       ? k->vals[v]
                           : v < k->nvals + 3 ? k->global[v - k->nvals]
                                              : k->local[v - k->nvals - 3];
        if (!op.sym) continue;
        int64_t lo = v < k->nvals ? INT32_MIN : 0, hi = v < k->nvals ? INT32_MAX : UINT32_MAX;
        hcq_status_t st = eval_in_range(op.sym, gf->runs.data[r].vals, gf->vars.len, lo, hi);
        if (st) {
          char where[64];
          if (v < k->nvals)
            snprintf(where, sizeof(where), "items[%zu].vals[%zu]", i, v);
          else
            snprintf(where, sizeof(where), "items[%zu].%s[%zu]", i,
                     v < k->nvals + 3 ? "global" : "local", (v - k->nvals) % 3);
          hcq_status_t out =
              hcq_status_make(hcq_status_code(st), "%s: %s: %s (with the values of run %zu)",
                              L->name, where, hcq_status_message(st), r);
          hcq_status_destroy(st);
          return out;
        }
      }
    }
  }
  return NULL;
}
