/* The update planner: which nodes of an instantiated graph need new parameters for a replay.
 *
 * Backend neutral and pure (no device, no driver): a graph runner describes each item's operands
 * that can change between replays (an argument slot holding an input buffer, a symbolic value, a
 * symbolic launch dim), the planner keeps the values the instantiated graph holds, and for a
 * replay's input addresses and variable values it lists the items whose operands differ, with the
 * new values. Work is proportional to what changed: only items that use an input or variable whose
 * value differs from the last committed replay are evaluated.
 *
 * Use: init once; per replay prepare (nothing held changes), apply the listed items' new values to
 * the graph, then commit (the graph holds them now) or abort (applying failed: those items are
 * evaluated and listed again on the next replay). Single-threaded, like the graph that owns it. */
#ifndef HCQ_GRAPH_UPDATE_PLAN_H
#define HCQ_GRAPH_UPDATE_PLAN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "hcq/queue.h"
#include "hcq/status.h"
#include "hcq/symbolic.h"

#define HCQ__PLAN_NO_INPUT UINT32_MAX

/* One item as the planner sees it. For a kernel: nargs buffer arguments, arg_input[i] the input
 * index argument i holds (HCQ__PLAN_NO_INPUT: a fixed buffer), vals and the dims as operands. For a
 * transfer: nargs 2 (0 dst, 1 src), no values, global/local NULL. Arrays are read during init only.
 */
typedef struct hcq__plan_item {
  size_t nargs;
  const uint32_t *arg_input;
  size_t nvals;
  const hcq_operand_t *vals;
  const hcq_operand_t *global, *local; /* 3 each, or NULL */
} hcq__plan_item_t;

/* What the planner says an item's operands are: every argument address (inputs' current ones,
 * fixed ones as given at init), value and dim. Valid until the next prepare. */
typedef struct hcq__plan_values {
  const uint64_t *args;   /* nargs */
  const int32_t *vals;    /* nvals */
  const uint32_t *global; /* 3, or NULL for transfers */
  const uint32_t *local;
} hcq__plan_values_t;

typedef struct hcq__update_plan hcq__update_plan_t;

/* Builds the plan. fixed_args[j] holds item j's argument addresses (those of inputs are ignored),
 * inputs the input addresses the graph was instantiated with, vars/values the variables and the
 * values it was instantiated with (every variable of the items must be among them). The held
 * values start as these. */
HCQ_MUST_USE hcq_status_t hcq__update_plan_create(const hcq__plan_item_t *items, size_t nitems,
                                                  const uint64_t *const *fixed_args,
                                                  const uint64_t *inputs, size_t ninputs,
                                                  const hcq_expr_t *const *vars,
                                                  const int64_t *values, size_t nvars,
                                                  hcq__update_plan_t **out);
void hcq__update_plan_free(hcq__update_plan_t *plan);

/* Evaluates the items that depend on an input or variable whose value differs from the last
 * committed replay (and items left stale by an abort) and lists, ascending, those whose operands
 * differ from what the graph holds. values are per variable, in the order given at create.
 * Nothing held changes, and nothing is allocated (create sized every list). Fails (OUT_OF_RANGE
 * naming the item and operand) when an operand does not fit its field; then nothing is listed. */
HCQ_MUST_USE hcq_status_t hcq__update_plan_prepare(hcq__update_plan_t *plan, const uint64_t *inputs,
                                                   const int64_t *values,
                                                   const uint32_t **out_items, size_t *out_count);
/* The operands of item j as of the last prepare (changed items: the new ones). */
void hcq__update_plan_values(const hcq__update_plan_t *plan, uint32_t item,
                             hcq__plan_values_t *out);
/* The graph now holds what prepare listed. */
void hcq__update_plan_commit(hcq__update_plan_t *plan);
/* Applying failed: the listed items hold unknown values and are listed again next time. */
void hcq__update_plan_abort(hcq__update_plan_t *plan);

/* Items that can ever change (they hold an input, a symbolic value or a symbolic dim). */
size_t hcq__update_plan_updatable_count(const hcq__update_plan_t *plan);

/* The plan of a graph runner's items (kernels and transfers, input slots, variables) as
 * instantiated with its build inputs and initial values: what every graph runner that patches an
 * instantiated graph (the CUDA graph, the Metal graph) starts from. */
struct hcq__runner;
HCQ_MUST_USE hcq_status_t hcq__update_plan_for_runner(const struct hcq__runner *r,
                                                      hcq__update_plan_t **out);

#endif
