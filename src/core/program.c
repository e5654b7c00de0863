#include <stdio.h>
#include <stdlib.h>

#include "core/backend.h"
#include "core/binary.h"
#include "core/device.h"
#include "core/object.h"
#include "core/program.h"
#include "core/status.h"

static hcq_status_t program_new(hcq_device_t *dev, const char *name, hcq_program_t **out) {
  hcq_program_t *p = calloc(1, sizeof(*p));
  if (!p) return hcq_status_make(HCQ_OUT_OF_MEMORY, "out of memory creating program %s", name);
  atomic_init(&p->refs, 1);
  p->dev = dev;
  snprintf(p->name, sizeof(p->name), "%s", name);
  *out = p;
  return NULL;
}

static hcq_status_t check_name(const char *what, hcq_device_t *dev, const char *name) {
  hcq_status_t st = hcq__device_handle_check(dev, what);
  if (st) return st;
  if (!name || !*name)
    return hcq_status_make(HCQ_INVALID_ARGUMENT, "%s on %s: the program name is empty", what,
                           dev->name);
  if (strlen(name) >= sizeof(((hcq_program_t *)0)->name))
    return hcq_status_make(HCQ_INVALID_ARGUMENT,
                           "%s on %s: program name \"%.32s...\" is longer than %zu bytes", what,
                           dev->name, name, sizeof(((hcq_program_t *)0)->name) - 1);
  return NULL;
}

hcq_status_t hcq_program_create(hcq_device_t *dev, const char *entry, const char *source,
                                hcq_program_t **out_program) {
  if (!out_program)
    return hcq_status_make(HCQ_INVALID_ARGUMENT, "hcq_program_create: out_program is NULL");
  *out_program = NULL;
  hcq_status_t st = check_name("hcq_program_create", dev, entry);
  if (st) return st;
  if (!source)
    return hcq_status_make(HCQ_INVALID_ARGUMENT, "program %s on %s: source is NULL", entry,
                           dev->name);
  /* The entry names a function in the source (and, on CPU, files in the kernel cache). */
  if (!hcq__is_c_identifier(entry)) {
    char quoted[300];
    hcq__quote(entry, quoted, sizeof(quoted));
    return hcq_status_make(HCQ_INVALID_ARGUMENT,
                           "program on %s: entry %s is not a C identifier (letters, digits and _, "
                           "not starting with a digit)",
                           dev->name, quoted);
  }
  /* A binary's text form (core/binary.h) reaches only backends that load its format. */
  hcq_binary_format_t bf = hcq__binary_of_source(source);
  const hcq__backend_t *row = hcq__backend(dev->kind);
  if (bf && !(row && (row->binary_formats & (1u << bf)))) {
    char list[96];
    hcq__binary_list(row ? row->binary_formats : 0, list, sizeof(list));
    return hcq_status_make(HCQ_INVALID_ARGUMENT,
                           "program %s on %s: the source is a %s (\"#%s\"), which does not load on "
                           "%s devices (they load: %s)",
                           entry, dev->name, hcq_binary_format_name(bf), hcq_binary_format_name(bf),
                           hcq_device_kind_name(dev->kind), list);
  }
  if ((st = hcq__device_check(dev))) return hcq_status_annotate(st, "program %s", entry);
  if (!dev->vt->program_compile)
    return hcq_status_make(HCQ_UNIMPLEMENTED, "program %s: %s cannot compile source", entry,
                           dev->name);
  hcq_program_t *p;
  if ((st = program_new(dev, entry, &p))) return st;
  p->source = strdup(source);
  if (!p->source) {
    free(p);
    return hcq_status_make(HCQ_OUT_OF_MEMORY, "out of memory creating program %s", entry);
  }
  if ((st = dev->vt->program_compile(dev, entry, source, &p->impl))) {
    free(p->source);
    free(p);
    return hcq_status_annotate(st, "program %s on %s", entry, dev->name);
  }
  atomic_store_explicit(&p->args, p->impl.args, memory_order_relaxed);
  hcq__obj_add(dev, &p->obj, HCQ__OBJ_PROGRAM, p->name);
  *out_program = p;
  return NULL;
}

hcq_status_t hcq_program_create_fn(hcq_device_t *dev, const char *name, hcq_cpu_kernel_fn fn,
                                   hcq_program_t **out_program) {
  if (!out_program)
    return hcq_status_make(HCQ_INVALID_ARGUMENT, "hcq_program_create_fn: out_program is NULL");
  *out_program = NULL;
  hcq_status_t st = check_name("hcq_program_create_fn", dev, name);
  if (st) return st;
  if (!fn)
    return hcq_status_make(HCQ_INVALID_ARGUMENT, "program %s on %s: function is NULL", name,
                           dev->name);
  if (!(dev->caps & HCQ_CAP_HOST_CALLABLE))
    return hcq_status_make(HCQ_UNIMPLEMENTED, "program %s: %s cannot run host function pointers",
                           name, dev->name);
  hcq_program_t *p;
  if ((st = program_new(dev, name, &p))) return st;
  p->impl.handle = (uint64_t)(uintptr_t)fn;
  hcq__obj_add(dev, &p->obj, HCQ__OBJ_PROGRAM, p->name);
  *out_program = p;
  return NULL;
}

hcq_program_t *hcq_program_retain(hcq_program_t *p) {
  if (p) atomic_fetch_add_explicit(&p->refs, 1, memory_order_relaxed);
  return p;
}

void hcq_program_release(hcq_program_t *p) {
  if (!p || hcq__obj_released_again(&p->obj, "hcq_program_release")) return;
  if (atomic_fetch_sub_explicit(&p->refs, 1, memory_order_acq_rel) != 1) return;
  hcq_device_t *dev = p->dev;
  hcq__obj_remove(&p->obj);
  hcq__device_defer_program(dev, p);
  hcq__device_struct_release(dev); /* after defer: the last reference may destroy the device */
}

const char *hcq_program_name(const hcq_program_t *p) { return p ? p->name : ""; }
hcq_device_t *hcq_program_device(const hcq_program_t *p) { return p ? p->dev : NULL; }

void hcq__program_destroy(hcq_program_t *p) {
  hcq_device_t *dev = p->dev;
  if (dev->vt->program_unload) dev->vt->program_unload(dev, &p->impl);
  free(p->source);
  p->source = NULL;
  /* Validation keeps the struct to recognise it if passed again. */
  if (hcq__validating)
    hcq__keep(p);
  else
    free(p);
}

const char *hcq_program_source(const hcq_program_t *p) { return p ? p->source : NULL; }

static const char *plural(size_t n, const char *one, const char *many) {
  return n == 1 ? one : many;
}

hcq_status_t hcq__program_check_args(const hcq_program_t *p, size_t nbufs, size_t nvals,
                                     const char *who) {
  if (hcq__program_args_ok(p, nbufs, nvals)) return NULL;
  uint32_t a = atomic_load_explicit(&((hcq_program_t *)p)->args, memory_order_relaxed);
  size_t want_bufs = (a >> 16) & 0x3fffu, want_vals = a & 0xffffu;
  return hcq_status_make(
      HCQ_INVALID_ARGUMENT,
      "%s: kernel %s takes %zu %s and %zu %s (%s), but %zu %s and %zu %s are passed", who, p->name,
      want_bufs, plural(want_bufs, "buffer", "buffers"), want_vals,
      plural(want_vals, "value", "values"),
      a & HCQ__ARGS_FROM_BACKEND ? "by its compiled parameter list" : "as declared", nbufs,
      plural(nbufs, "buffer", "buffers"), nvals, plural(nvals, "value", "values"));
}

hcq_status_t hcq_program_declare_args(hcq_program_t *p, size_t nbufs, size_t nvals) {
  if (!p) return hcq_status_make(HCQ_INVALID_ARGUMENT, "hcq_program_declare_args: program is NULL");
  hcq_status_t st = hcq__obj_check(&p->obj, HCQ__OBJ_PROGRAM, "hcq_program_declare_args: program");
  if (st) return st;
  if (nbufs > HCQ_MAX_KERNEL_BUFS || nvals > HCQ_MAX_KERNEL_VALS)
    return hcq_status_make(HCQ_INVALID_ARGUMENT,
                           "program %s: %zu buffers and %zu values exceed the limits (%d, %d)",
                           p->name, nbufs, nvals, HCQ_MAX_KERNEL_BUFS, HCQ_MAX_KERNEL_VALS);
  uint32_t want = hcq__args_pack(nbufs, nvals, HCQ__ARGS_DECLARED), had = 0;
  if (atomic_compare_exchange_strong_explicit(&p->args, &had, want, memory_order_relaxed,
                                              memory_order_relaxed))
    return NULL;
  if (hcq__program_args_ok(p, nbufs, nvals))
    return NULL; /* the same counts again, or what the backend knows */
  size_t hb = (had >> 16) & 0x3fffu, hv = had & 0xffffu;
  if (had & HCQ__ARGS_FROM_BACKEND)
    return hcq_status_make(
        HCQ_INVALID_ARGUMENT,
        "program %s on %s: declared %zu buffers and %zu values, but its compiled parameter list "
        "takes %zu and %zu",
        p->name, p->dev->name, nbufs, nvals, hb, hv);
  return hcq_status_make(HCQ_FAILED_PRECONDITION,
                         "program %s: declared %zu buffers and %zu values, but it was declared "
                         "with %zu and %zu already",
                         p->name, nbufs, nvals, hb, hv);
}

bool hcq_program_args(const hcq_program_t *p, size_t *out_nbufs, size_t *out_nvals) {
  uint32_t a = p ? atomic_load_explicit(&((hcq_program_t *)p)->args, memory_order_relaxed) : 0;
  if (out_nbufs) *out_nbufs = a ? (a >> 16) & 0x3fffu : 0;
  if (out_nvals) *out_nvals = a ? a & 0xffffu : 0;
  return a != 0;
}
