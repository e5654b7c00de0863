/* Symbolic launches: hcq_launch() with operands that may be expressions. The launch runs as a kernel
 * exec item, which evaluates the operands and which a capture records with its symbols. */
#include "core/program.h"
#include "jit/jit_internal.h"

hcq_status_t hcq_launch_sym(const hcq_launch_sym_desc_t *d, const hcq_var_value_t *vals, size_t nvals) {
  if (!d || !d->program) return hcq_status_make(HCQ_INVALID_ARGUMENT, "hcq_launch_sym: descriptor or program is NULL");
  if (d->nbufs > HCQ_MAX_KERNEL_BUFS)
    return hcq_status_make(HCQ_INVALID_ARGUMENT, "launch of %s: %zu buffers exceed the limit (%d)", d->program->name,
                           d->nbufs, HCQ_MAX_KERNEL_BUFS);
  /* The one rule (graph.h): no outs array, every buffer written (recorded as the full list, as
   * hcq_launch's are); an empty array, nothing. */
  uint32_t every[HCQ_MAX_KERNEL_BUFS];
  for (size_t i = 0; i < d->nbufs; i++) every[i] = (uint32_t)i;
  hcq_exec_item_t it = {.kind = HCQ_ITEM_KERNEL};
  hcq_kernel_item_t *k = &it.kernel;
  k->program = d->program;
  k->bufs = d->bufs;
  k->nbufs = d->nbufs;
  k->outs = d->outs ? d->outs : every;
  k->nouts = d->outs ? d->nouts : d->nbufs;
  k->vals = d->vals;
  k->nvals = d->nvals;
  for (int i = 0; i < 3; i++) {
    k->global[i] = d->global[i];
    k->local[i] = d->local[i];
  }
  hcq_status_t st = hcq_exec_item_run(&it, vals, nvals);
  if (st) return hcq_status_annotate(st, "hcq_launch_sym of %s", d->program->name);
  hcq__capture_bind(vals, nvals);
  return NULL;
}
