#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/buffer.h"
#include "core/device.h"
#include "core/program.h"
#include "core/queue.h"
#include "core/status.h"
#include "graph/runner.h"

static hcq_status_t oom(void) {
  return hcq_status_make(HCQ_OUT_OF_MEMORY, "out of memory building a graph");
}

uint32_t hcq__runner_device_index(const hcq__runner_t *r, const hcq_device_t *dev) {
  for (size_t i = 0; i < r->ndevices; i++)
    if (r->devices[i] == dev) return (uint32_t)i;
  return UINT32_MAX;
}

static hcq_status_t add_device(hcq__runner_t *r, hcq_device_t *dev) {
  if (hcq__runner_device_index(r, dev) != UINT32_MAX) return NULL;
  if (!hcq__vec_reserve((void **)&r->devices, &r->devices_cap, r->ndevices + 1,
                        sizeof(*r->devices)))
    return oom();
  r->devices[r->ndevices++] = dev;
  return NULL;
}

static hcq_status_t add_vars(hcq__runner_t *r, const hcq_expr_t *e) {
  const hcq_expr_t *found[16];
  size_t n = hcq_expr_vars(e, found, 16);
  const hcq_expr_t **all = found;
  if (n > 16) {
    all = malloc(n * sizeof(*all));
    if (!all) return oom();
    hcq_expr_vars(e, all, n);
  }
  hcq_status_t st = NULL;
  for (size_t i = 0; i < n; i++) {
    bool have = false;
    for (size_t k = 0; k < r->vars.len; k++) have |= r->vars.data[k] == all[i];
    if (have) continue;
    if (!hcq__vec_push(&r->vars, all[i])) {
      st = oom();
      break;
    }
    hcq_expr_retain(all[i]);
  }
  if (all != found) free((void *)all);
  return st;
}

void hcq__runner_deinit(hcq__runner_t *r) {
  for (size_t j = 0; j < r->nitems; j++) hcq__exec_item_release(&r->items[j]);
  free(r->items);
  for (size_t i = 0; i < r->ninputs && r->inputs; i++) hcq_buffer_release(r->inputs[i]);
  free(r->inputs);
  free(r->pending_inputs);
  for (size_t i = 0; i < r->vars.len; i++) hcq_expr_release(r->vars.data[i]);
  hcq__vec_free(&r->vars);
  hcq__vec_free(&r->slots);
  free(r->values);
  free(r->pending_values);
  if (r->objs) {
    for (size_t i = 0; i < r->ndevices; i++) {
      if (!r->objs[i].next) continue; /* never added */
      hcq__obj_remove(&r->objs[i]);
      hcq__device_struct_release(r->devices[i]);
    }
  }
  free(r->objs);
  free(r->label);
  free(r->devices);
  for (size_t i = 0; i < r->ninputs && r->build_inputs; i++) hcq_buffer_release(r->build_inputs[i]);
  free(r->build_inputs);
  free(r->fixed);
  free(r->input_base);
  free(r->input_writer);
  hcq__vec_free(&r->symdim_items);
  free(r->eval_vals);
  memset(r, 0, sizeof(*r));
}

void hcq__runner_mark(hcq__runner_t *r, const char *created_by, const hcq__runner_t *holder) {
  for (size_t i = 0; i < r->ndevices && r->objs; i++) {
    if (created_by) { /* messages read it under the device's object lock */
      pthread_mutex_lock(&r->devices[i]->obj_lock);
      r->objs[i].created_by = created_by;
      pthread_mutex_unlock(&r->devices[i]->obj_lock);
    }
    uint32_t k = holder ? hcq__runner_device_index(holder, r->devices[i]) : UINT32_MAX;
    if (k != UINT32_MAX && holder->objs) hcq__obj_set_holder(&r->objs[i], &holder->objs[k]);
  }
}

static int key_cmp(const void *a, const void *b) {
  uintptr_t x = ((const struct hcq__runner_key *)a)->base,
            y = ((const struct hcq__runner_key *)b)->base;
  return (x > y) - (x < y);
}

/* Fixed keys (bases of buffers in slots that are not inputs) and per-input bases, with a writer
 * of each where one exists. */
static hcq_status_t collect_aliasing(hcq__runner_t *r) {
  size_t nargs = 0;
  for (size_t j = 0; j < r->nitems; j++) {
    hcq__item_access_t acc;
    hcq__item_access(&r->items[j], &acc);
    nargs += acc.n;
  }
  r->fixed = calloc(nargs + 1, sizeof(*r->fixed));
  r->input_base = calloc(r->ninputs + 1, sizeof(*r->input_base));
  r->input_writer = calloc(r->ninputs + 1, sizeof(*r->input_writer));
  if (!r->fixed || !r->input_base || !r->input_writer) return oom();
  for (size_t k = 0; k < r->ninputs; k++) {
    r->input_base[k] = (uintptr_t)hcq_buffer_base(r->build_inputs[k]);
    r->input_writer[k] = UINT32_MAX;
  }
  for (uint32_t j = 0; j < r->nitems; j++) {
    hcq__item_access_t acc;
    hcq__item_access(&r->items[j], &acc);
    for (size_t i = 0; i < acc.n; i++) {
      size_t k = 0;
      while (k < r->ninputs && acc.bufs[i] != r->build_inputs[k]) k++;
      if (k < r->ninputs) {
        if (acc.writes[i] && r->input_writer[k] == UINT32_MAX) r->input_writer[k] = j;
        continue;
      }
      hcq_buffer_t *base = hcq_buffer_base(acc.bufs[i]);
      r->fixed[r->nfixed++] =
          (struct hcq__runner_key){(uintptr_t)base, base, acc.writes[i] ? j : UINT32_MAX};
    }
  }
  qsort(r->fixed, r->nfixed, sizeof(*r->fixed), key_cmp);
  size_t kept = 0;
  for (size_t i = 0; i < r->nfixed; i++) {
    if (kept && r->fixed[kept - 1].base == r->fixed[i].base) {
      if (r->fixed[kept - 1].writer == UINT32_MAX) r->fixed[kept - 1].writer = r->fixed[i].writer;
      continue;
    }
    r->fixed[kept++] = r->fixed[i];
  }
  r->nfixed = kept;
  return NULL;
}

static const struct hcq__runner_key *find_fixed(const hcq__runner_t *r, uintptr_t base) {
  size_t lo = 0, hi = r->nfixed;
  while (lo < hi) {
    size_t mid = (lo + hi) / 2;
    if (r->fixed[mid].base < base)
      lo = mid + 1;
    else
      hi = mid;
  }
  return lo < r->nfixed && r->fixed[lo].base == base ? &r->fixed[lo] : NULL;
}

/* A replacement input must not merge two buffers the build kept apart when either is written:
 * the dependencies between their items were never recorded. */
static hcq_status_t check_aliasing(const hcq__runner_t *r, size_t k) {
  const hcq_buffer_t *nb_buf = r->pending_inputs[k];
  uintptr_t nb = (uintptr_t)hcq_buffer_base(nb_buf), ob = r->input_base[k];
  if (nb == ob) return NULL;
  bool k_written = r->input_writer[k] != UINT32_MAX;
  const struct hcq__runner_key *f = find_fixed(r, nb);
  char n1[96], n2[96];
  if (f && (k_written || f->writer != UINT32_MAX))
    return hcq_status_make(
        HCQ_INVALID_ARGUMENT,
        "input %zu: %s aliases %s, which the graph uses as a fixed buffer (%s by item %" PRIu32
        "): dependencies were fixed at build; pass a buffer that does not overlap the graph's "
        "others",
        k, hcq__buffer_name(nb_buf, n1), hcq__buffer_name(f->buf, n2),
        k_written ? "the input is written" : "written", k_written ? r->input_writer[k] : f->writer);
  for (size_t j = 0; j < r->ninputs; j++) {
    if (j == k || r->input_base[j] == ob) continue;
    if ((uintptr_t)hcq_buffer_base(r->pending_inputs[j]) != nb) continue;
    if (!k_written && r->input_writer[j] == UINT32_MAX) continue;
    return hcq_status_make(
        HCQ_INVALID_ARGUMENT,
        "input %zu: %s aliases input %zu (%s), and item %" PRIu32
        " writes one of them: dependencies were fixed at build; pass buffers that do not overlap",
        k, hcq__buffer_name(nb_buf, n1), j, hcq__buffer_name(r->pending_inputs[j], n2),
        k_written ? r->input_writer[k] : r->input_writer[j]);
  }
  return NULL;
}

hcq_status_t hcq__runner_enter(hcq__runner_t *r, const char *what) {
  bool expected = false;
  if (!atomic_compare_exchange_strong_explicit(&r->busy, &expected, true, memory_order_acquire,
                                               memory_order_relaxed))
    return hcq_status_make(
        HCQ_FAILED_PRECONDITION,
        "%s: %s is being used by another thread (one thread at a time per graph or jit)", what,
        r->label ? r->label : "the graph");
  return NULL;
}

void hcq__runner_leave(hcq__runner_t *r) {
  atomic_store_explicit(&r->busy, false, memory_order_release);
}

/* First pass: structure, devices, variables, input slots. Symbols are not evaluated yet (vals
 * NULL). */
static hcq_status_t collect(hcq__runner_t *r, const hcq_exec_item_t *items, size_t nitems) {
  const hcq_var_value_t *vals = NULL;
  size_t nvals = 0;
  for (size_t j = 0; j < nitems; j++) {
    const hcq_exec_item_t *it = &items[j];
    hcq_status_t st;
    char who[32];
    snprintf(who, sizeof(who), "item %zu", j);
    if (it->kind == HCQ_ITEM_KERNEL)
      st = hcq__kernel_item_check(&it->kernel, who, vals, nvals);
    else if (it->kind == HCQ_ITEM_TRANSFER)
      st = hcq__transfer_item_check(&it->transfer, who);
    else
      st = hcq_status_make(HCQ_INVALID_ARGUMENT, "item %zu: unknown kind %d", j, (int)it->kind);
    if (st) return st;
    hcq__item_access_t acc;
    hcq__item_access(it, &acc);
    if ((st = add_device(r, hcq__item_device(it)))) return st;
    for (size_t i = 0; i < acc.n; i++)
      if ((st = add_device(r, acc.bufs[i]->dev))) return st;
    if (it->kind == HCQ_ITEM_KERNEL) {
      const hcq_kernel_item_t *k = &it->kernel;
      for (size_t i = 0; i < k->nvals; i++)
        if (k->vals[i].sym) HCQ__TRY(add_vars(r, k->vals[i].sym));
      for (int i = 0; i < 3; i++) {
        if (k->global[i].sym) HCQ__TRY(add_vars(r, k->global[i].sym));
        if (k->local[i].sym) HCQ__TRY(add_vars(r, k->local[i].sym));
      }
    }
    for (size_t i = 0; i < acc.n; i++)
      for (size_t k = 0; k < r->ninputs; k++)
        if (acc.bufs[i] == r->inputs[k]) {
          hcq__input_slot_t slot = {(uint32_t)j, (uint32_t)i, (uint32_t)k};
          if (!hcq__vec_push(&r->slots, slot)) return oom();
        }
  }
  return NULL;
}

/* The arguments of hcq__runner_init that need no runner: counts, NULL arrays, values, inputs. */
static hcq_status_t check_init_args(const hcq_exec_item_t *items, size_t nitems,
                                    hcq_buffer_t *const *inputs, size_t ninputs,
                                    const hcq_var_value_t *vals, size_t nvals, const char *kind) {
  if (!items || nitems == 0)
    return hcq_status_make(HCQ_INVALID_ARGUMENT, "a graph needs at least one item");
  if (nitems >= UINT32_MAX / 2)
    return hcq_status_make(HCQ_INVALID_ARGUMENT, "%zu items are too many", nitems);
  if (ninputs && !inputs)
    return hcq_status_make(HCQ_INVALID_ARGUMENT, "%zu inputs but the array is NULL", ninputs);
  if (nvals && !vals)
    return hcq_status_make(HCQ_INVALID_ARGUMENT, "%zu values but the array is NULL", nvals);
  HCQ__TRY(hcq__var_values_check(vals, nvals, kind));
  for (size_t k = 0; k < ninputs; k++) {
    if (!inputs[k]) return hcq_status_make(HCQ_INVALID_ARGUMENT, "input %zu is NULL", k);
    if (hcq__validating) {
      char what[32];
      snprintf(what, sizeof(what), "input %zu", k);
      HCQ__TRY(hcq__obj_check(&inputs[k]->obj, HCQ__OBJ_BUFFER, what));
    }
    for (size_t i = 0; i < k; i++)
      if (inputs[i] == inputs[k])
        return hcq_status_make(HCQ_INVALID_ARGUMENT, "input %zu (%s) is listed twice", k,
                               inputs[k]->label);
  }
  return NULL;
}

/* The runner's input arrays: current, as built, pending; the first two hold the inputs. */
static hcq_status_t take_inputs(hcq__runner_t *r, hcq_buffer_t *const *inputs, size_t ninputs) {
  r->ninputs = ninputs;
  r->inputs = calloc(ninputs ? ninputs : 1, sizeof(*r->inputs));
  r->build_inputs = calloc(ninputs ? ninputs : 1, sizeof(*r->build_inputs));
  r->pending_inputs = calloc(ninputs ? ninputs : 1, sizeof(*r->pending_inputs));
  if (!r->inputs || !r->build_inputs || !r->pending_inputs) return oom();
  for (size_t k = 0; k < ninputs; k++) {
    r->inputs[k] = hcq_buffer_retain(inputs[k]);
    r->build_inputs[k] = hcq_buffer_retain(inputs[k]);
  }
  return NULL;
}

/* Every variable's initial value (each one must have one, in its range). */
static hcq_status_t take_initial_values(hcq__runner_t *r, const hcq_var_value_t *vals,
                                        size_t nvals) {
  r->values = calloc(r->vars.len + 1, sizeof(int64_t));
  r->pending_values = calloc(r->vars.len + 1, sizeof(int64_t));
  if (!r->values || !r->pending_values) return oom();
  for (size_t i = 0; i < r->vars.len; i++) {
    const hcq_expr_t *var = r->vars.data[i];
    size_t k = 0;
    while (k < nvals && vals[k].var != var) k++;
    if (k == nvals)
      return hcq_status_make(HCQ_NOT_FOUND, "variable %s has no initial value", hcq_var_name(var));
    HCQ__TRY(hcq_var_check(var, vals[k].value));
    r->values[i] = vals[k].value;
  }
  return NULL;
}

/* Second pass: every symbolic operand evaluates into its field with the initial values. */
static hcq_status_t check_kernel_items(const hcq_exec_item_t *items, size_t nitems,
                                       const hcq_var_value_t *vals, size_t nvals) {
  for (size_t j = 0; j < nitems; j++) {
    if (items[j].kind != HCQ_ITEM_KERNEL) continue;
    char who[96];
    snprintf(who, sizeof(who), "item %zu (%s)", j, items[j].kernel.program->name);
    HCQ__TRY(
        hcq__kernel_item_check(&items[j].kernel, who, nvals ? vals : hcq__no_var_values, nvals));
  }
  return NULL;
}

static hcq_status_t copy_items(hcq__runner_t *r, const hcq_exec_item_t *items, size_t nitems) {
  r->items = calloc(nitems, sizeof(*r->items));
  if (!r->items) return oom();
  for (size_t j = 0; j < nitems; j++) {
    hcq_status_t st = hcq__exec_item_copy(&items[j], &r->items[j]);
    r->nitems = j + 1; /* a partly copied item is released safely: its arrays are NULL */
    if (st) return st;
  }
  return NULL;
}

/* The kernels whose symbolic dims a replay must check, and the scratch that evaluates them. */
static hcq_status_t prepare_symbolic_dims(hcq__runner_t *r) {
  for (uint32_t j = 0; j < r->nitems; j++)
    if (r->items[j].kind == HCQ_ITEM_KERNEL && hcq__kernel_dims_symbolic(&r->items[j].kernel) &&
        !hcq__kernel_dims_always_ok(&r->items[j].kernel) && !hcq__vec_push(&r->symdim_items, j))
      return oom();
  r->eval_vals = calloc(r->vars.len + 1, sizeof(*r->eval_vals));
  if (!r->eval_vals) return oom();
  for (size_t i = 0; i < r->vars.len; i++) r->eval_vals[i].var = r->vars.data[i];
  return NULL;
}

/* The runner's label, and its object on each of its devices (what leak reports list). */
static hcq_status_t register_objects(hcq__runner_t *r, const char *kind) {
  static atomic_ulong counter;
  char label[64];
  snprintf(label, sizeof(label), "%s#%lu (%zu items)", kind, atomic_fetch_add(&counter, 1) + 1,
           r->nitems);
  r->label = strdup(label);
  r->objs = calloc(r->ndevices, sizeof(*r->objs));
  if (!r->label || !r->objs) return oom();
  bool jit = !strcmp(kind, "jit");
  for (size_t i = 0; i < r->ndevices; i++)
    hcq__obj_add_from(r->devices[i], &r->objs[i], jit ? HCQ__OBJ_JIT : HCQ__OBJ_GRAPH, r->label,
                      jit ? "hcq_jit_create" : "hcq_graph_create");
  return NULL;
}

hcq_status_t hcq__runner_init(hcq__runner_t *r, const hcq_exec_item_t *items, size_t nitems,
                              hcq_buffer_t *const *inputs, size_t ninputs,
                              const hcq_var_value_t *vals, size_t nvals, const char *kind) {
  memset(r, 0, sizeof(*r));
  HCQ__TRY(check_init_args(items, nitems, inputs, ninputs, vals, nvals, kind));
  hcq_status_t st;
  if ((st = take_inputs(r, inputs, ninputs))) goto fail;
  if ((st = collect(r, items, nitems))) goto fail;
  if ((st = take_initial_values(r, vals, nvals))) goto fail;
  if ((st = check_kernel_items(items, nitems, vals, nvals))) goto fail;
  if ((st = copy_items(r, items, nitems))) goto fail;
  if ((st = collect_aliasing(r))) goto fail;
  if ((st = prepare_symbolic_dims(r))) goto fail;
  for (size_t i = 0; i < r->ndevices; i++)
    if ((st = hcq__device_check(r->devices[i]))) goto fail;
  if ((st = register_objects(r, kind))) goto fail;
  return NULL;
fail:
  hcq__runner_deinit(r);
  return st;
}

static hcq_status_t check_input_count(const hcq__runner_t *r, size_t ninputs) {
  if (ninputs == r->ninputs) return NULL;
  return hcq_status_make(HCQ_INVALID_ARGUMENT, "the graph has %zu inputs but the replay passed %zu",
                         r->ninputs, ninputs);
}

/* The replay's variable values over the current ones (others keep theirs); check: each within its
 * variable's range. */
static hcq_status_t stage_values(hcq__runner_t *r, const hcq_var_value_t *vals, size_t nvals,
                                 bool check) {
  memcpy(r->pending_values, r->values, r->vars.len * sizeof(int64_t));
  for (size_t i = 0; i < nvals; i++) {
    bool used = false;
    for (size_t v = 0; v < r->vars.len; v++) {
      if (r->vars.data[v] != vals[i].var) continue;
      hcq_status_t st = check ? hcq_var_check(vals[i].var, vals[i].value) : NULL;
      if (st) return st;
      r->pending_values[v] = vals[i].value;
      used = true;
    }
    /* Another variable object that goes by the name of one the items use: its value would be
     * dropped while the caller believes it was set (variables are matched by object, not name). */
    const char *name = check && !used ? hcq_var_name(vals[i].var) : NULL;
    for (size_t v = 0; name && v < r->vars.len; v++) {
      const char *mine = hcq_var_name(r->vars.data[v]);
      if (mine && !strcmp(mine, name))
        return hcq_status_make(
            HCQ_INVALID_ARGUMENT,
            "variable %s is not the one %s was built with but another of the same name "
            "(variables are matched by object: pass the one the items use)",
            name, r->label);
    }
  }
  return NULL;
}

hcq_status_t hcq__runner_stage(hcq__runner_t *r, hcq_buffer_t *const *inputs, size_t ninputs,
                               const hcq_var_value_t *vals, size_t nvals) {
  hcq_status_t cst = check_input_count(r, ninputs);
  if (cst) return cst;
  if ((ninputs && !inputs) || (nvals && !vals))
    return hcq_status_make(HCQ_INVALID_ARGUMENT, "an input or value array is NULL");
  /* No prefix of ours: the graph and jit replays that stage say "graph replay" / "jit replay". */
  if ((cst = hcq__var_values_check(vals, nvals, NULL))) return cst;
  for (size_t k = 0; k < ninputs; k++) {
    hcq_buffer_t *want = r->inputs[k], *got = inputs[k];
    if (!got && !r->null_input_keeps)
      return hcq_status_make(HCQ_INVALID_ARGUMENT, "input %zu is missing (NULL)", k);
    /* Kept: the runner holds a reference to its current input (the last replay's, or the built
     * one), so it is alive; validation checks it again below. */
    if (!got) got = want;
    char n1[96], n2[96];
    if (got->size != want->size)
      return hcq_status_make(
          HCQ_INVALID_ARGUMENT,
          "input %zu: %s has %" PRIu64 " bytes but the graph's input %s has %" PRIu64, k,
          hcq__buffer_name(got, n1), got->size, hcq__buffer_name(want, n2), want->size);
    if (got->dev != want->dev)
      return hcq_status_make(
          HCQ_INVALID_ARGUMENT, "input %zu: %s is on %s but the graph's input %s is on %s", k,
          hcq__buffer_name(got, n1), got->dev->name, hcq__buffer_name(want, n2), want->dev->name);
    if (hcq__validating) {
      char what[32];
      snprintf(what, sizeof(what), "input %zu", k);
      hcq_status_t vst = hcq__obj_check(&got->obj, HCQ__OBJ_BUFFER, what);
      if (vst) return vst;
    }
    r->pending_inputs[k] = got;
  }
  for (size_t k = 0; k < ninputs; k++) {
    if (r->pending_inputs[k] == r->inputs[k] && r->pending_inputs[k] == r->build_inputs[k])
      continue;
    hcq_status_t st = check_aliasing(r, k);
    if (st) return st;
  }
  for (size_t i = 0; i < r->ndevices; i++) {
    hcq_status_t st = hcq__device_check(r->devices[i]);
    if (st) return st;
  }
  if ((cst = stage_values(r, vals, nvals, true))) return cst;
  /* Symbolic launch sizes: each must still make a valid launch with these values. */
  if (r->symdim_items.len) {
    for (size_t i = 0; i < r->vars.len; i++) r->eval_vals[i].value = r->pending_values[i];
    for (size_t i = 0; i < r->symdim_items.len; i++) {
      uint32_t j = r->symdim_items.data[i];
      const hcq_kernel_item_t *k = &r->items[j].kernel;
      if (hcq__kernel_dims_ok(k, r->eval_vals, r->vars.len)) continue;
      /* Something is wrong: the full validation says what. */
      char who[96];
      snprintf(who, sizeof(who), "item %" PRIu32 " (%s)", j, k->program->name);
      hcq_status_t st = hcq__kernel_item_check(k, who, r->eval_vals, r->vars.len);
      if (st) return st;
    }
  }
  return NULL;
}

hcq_status_t hcq__runner_stage_prechecked(hcq__runner_t *r, hcq_buffer_t *const *inputs,
                                          size_t ninputs, const hcq_var_value_t *vals,
                                          size_t nvals) {
  hcq_status_t st = check_input_count(r, ninputs);
  if (st) return st;
  memcpy(r->pending_inputs, inputs, ninputs * sizeof(*inputs));
  return stage_values(r, vals, nvals, false);
}

void hcq__runner_commit(hcq__runner_t *r) {
  for (size_t k = 0; k < r->ninputs; k++) {
    if (r->pending_inputs[k] == r->inputs[k]) continue;
    hcq_buffer_release(r->inputs[k]);
    r->inputs[k] = hcq_buffer_retain(r->pending_inputs[k]);
  }
  memcpy(r->values, r->pending_values, r->vars.len * sizeof(int64_t));
}

hcq_exec_item_t hcq__runner_item_with_inputs(const hcq__runner_t *r, size_t j, size_t from,
                                             size_t to, hcq_buffer_t **bufs) {
  hcq_exec_item_t it = r->items[j];
  if (it.kind == HCQ_ITEM_KERNEL && from < to) {
    memcpy(bufs, it.kernel.bufs, it.kernel.nbufs * sizeof(*bufs));
    it.kernel.bufs = bufs;
  }
  for (size_t k = from; k < to; k++) {
    const hcq__input_slot_t *slot = &r->slots.data[k];
    hcq_buffer_t *b = r->pending_inputs[slot->input];
    if (it.kind == HCQ_ITEM_KERNEL)
      bufs[slot->arg] = b;
    else if (slot->arg == 0)
      it.transfer.dst = b;
    else
      it.transfer.src = b;
  }
  return it;
}
