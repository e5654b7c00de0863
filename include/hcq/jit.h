/* hcq capture and batching (the JIT): record eager work once, replay it as graphs.
 *
 * Between hcq_capture_begin() and hcq_capture_end() on one thread, every successful hcq_launch(),
 * hcq_transfer() and hcq_exec_item_run() of that thread runs as usual and is also recorded
 * (hcq_exec_item_run with its symbolic operands). A capture records less than the code did in these
 * cases, and hcq_capture_end() says so (a report line and a warning, see "Warnings"):
 *  - Host copies (copyin/copyout) of the capturing thread run but are not recorded: one warning per
 *    capture counts them and names the first (direction, bytes, buffer, after which item).
 *  - Other threads' work while the capture is open (hcq_launch, hcq_launch_sym, hcq_exec_item_run,
 *    hcq_transfer, copyin, graph and jit replays) runs and is not recorded: one warning per device
 *    that the captured items use counts it and names the first operation (report:
 *    other_thread_work). Their copyouts, which write no device memory, are not counted.
 *
 * Inputs: every input given to hcq_capture_end() must be a buffer some captured item holds (by
 * identity: replays swap (item, argument) slots, so a view of an input is not the input). An input
 * that none holds would make replays change nothing: INVALID_ARGUMENT naming the input index and
 * buffer, or, with the options' allow_unused_inputs, a warning (report: unused_inputs).
 *
 * hcq_capture_end() (or hcq_jit_create() from a list of items) splits the items into batches:
 * consecutive items a graph can hold that share a device, or a device kind whose graph spans
 * devices (the HCQ graph does), go into one batch until it reaches the maximum batch size. That
 * size starts at HCQ_JIT_BATCH_SIZE (32) and doubles after each batch that became a graph, so the
 * first batches are small and start running while later ones are still being prepared. A batch of
 * one item is not graphed; a batch whose graph cannot be built runs eagerly, item by item. A
 * transfer is graphable when both its ends are devices of the graph's kind. hcq_jit_report() says
 * what was graphed, in how many batches, and why anything was left eager.
 *
 * A replay runs each batch as a graph and each eager leftover eagerly, with new input buffers (same
 * count, each the size and device of the one it replaces) and variable values (unset ones keep
 * their last value). An input given as NULL keeps its binding: the buffer the last replay gave it,
 * or before the first replay the one captured (hcq_capture_end's / hcq_jit_create's inputs), as a
 * CUDA graph keeps its kernel parameters; the jit holds a reference to it, so it stays alive after
 * the caller released its own (double-buffered outputs: pass the swapped buffer, NULL for the
 * unchanged inputs). Inputs and variable ranges are checked before anything runs; an expression
 * that cannot be evaluated with the new values (division by zero, a negative launch size) stops the
 * replay at the batch that holds it, with an error naming the batch.
 *
 * Variables: hcq_launch() takes plain numbers, so a capture records them as constants. To keep a
 * scalar or a launch dimension variable, launch with hcq_launch_sym() (operands from hcq_sym(),
 * bound to their current values) or hcq_exec_item_run(). A value given for a variable that no
 * captured item uses (to hcq_capture_end() or a replay of a capture) would change nothing: it is
 * reported, once per variable, as a line of the report and a warning (the options' on_warning, or
 * standard error), or fails the call when the options ask for strict_vars. (A jit made by
 * hcq_jit_create() ignores such values, as graphs do: its items carry their own symbols.) A capture
 * in which hcq_launch_sym bound one variable to several values is reported the same way (as a
 * warning): a replay gives every item the same value, so it cannot repeat such a capture.
 *
 * Warnings go to the options' on_warning, or to standard error as "hcq: warning: ...", and are
 * lines of the report's text too.
 *
 * Ownership: a jit holds references to everything its items use. One thread at a time.
 */
#ifndef HCQ_JIT_H
#define HCQ_JIT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "hcq/graph.h"

#ifdef __cplusplus
extern "C" {
#endif
#pragma GCC visibility push(default) /* exported from libhcq.so (see hcq.h) */

typedef struct hcq_capture hcq_capture_t;
typedef struct hcq_jit hcq_jit_t;

/* Receives a warning's text (one line, no newline), on the thread of the call that found it. */
typedef void (*hcq_jit_warning_fn)(void *ctx, const char *message);

typedef struct hcq_jit_options {
  size_t first_batch_size; /* 0: HCQ_JIT_BATCH_SIZE (default 32) */
  bool profile;            /* build the batch graphs with profiling */
  bool eager_only;         /* build no graphs: every item replays eagerly (ground truth runs) */
  /* A value for a variable that no item uses fails the call (INVALID_ARGUMENT, naming the
   * variable; a replay then runs nothing) instead of being ignored with a warning. */
  bool strict_vars;
  /* Where warnings go; NULL: standard error, as "hcq: warning: ...". */
  hcq_jit_warning_fn on_warning;
  void *warning_ctx;
  /* hcq_capture_end: an input that no captured item holds is a warning (and a report line) instead
   * of an error (see "Inputs" above). */
  bool allow_unused_inputs;
  /* Replays of each batch graph that may be in flight at once (hcq_graph_options_t.inflight; 0:
   * HCQ_GRAPH_INFLIGHT, default 2): a caller that queues several replays ahead of the one it
   * waits for sets it as deep. */
  unsigned inflight;
} hcq_jit_options_t;

/* Starts recording on the calling thread. FAILED_PRECONDITION when it already records. */
HCQ_MUST_USE hcq_status_t hcq_capture_begin(hcq_capture_t **out_capture);
/* Stops recording and builds the replayable object from what was recorded. inputs are the buffers
 * a replay may replace; vals the variable values used while capturing (needed to build graphs):
 * a variable vals does not name takes the value hcq_launch_sym() last bound it to during the
 * capture. The capture is consumed whether or not this succeeds. Recording nothing is an error. */
HCQ_MUST_USE hcq_status_t hcq_capture_end(hcq_capture_t *capture, hcq_buffer_t *const *inputs,
                                          size_t ninputs, const hcq_var_value_t *vals, size_t nvals,
                                          const hcq_jit_options_t *options, hcq_jit_t **out_jit);
/* Stops recording and drops what was recorded. NULL is accepted. */
void hcq_capture_abort(hcq_capture_t *capture);
/* Items recorded so far. */
size_t hcq_capture_item_count(const hcq_capture_t *capture);

/* Batches a list of items directly (what hcq_capture_end does with the recorded ones). */
HCQ_MUST_USE hcq_status_t hcq_jit_create(const hcq_exec_item_t *items, size_t nitems,
                                         hcq_buffer_t *const *inputs, size_t ninputs,
                                         const hcq_var_value_t *vals, size_t nvals,
                                         const hcq_jit_options_t *options, hcq_jit_t **out_jit);

/* Replays everything. With wait, returns once all of it finished and stores the elapsed host time
 * (out_elapsed_ns may be NULL). */
HCQ_MUST_USE hcq_status_t hcq_jit_run(hcq_jit_t *jit, hcq_buffer_t *const *inputs, size_t ninputs,
                                      const hcq_var_value_t *vals, size_t nvals, bool wait,
                                      uint64_t *out_elapsed_ns);

/* Replays everything as hcq_jit_run without waiting, and arms fence (may be NULL; hcq/fence.h) at
 * this replay: it is reached once the replay's graphs and eager items, and everything submitted
 * before them on the jit's devices, finished. On an error the fence is as it was. */
HCQ_MUST_USE hcq_status_t hcq_jit_submit(hcq_jit_t *jit, hcq_buffer_t *const *inputs,
                                         size_t ninputs, const hcq_var_value_t *vals, size_t nvals,
                                         hcq_fence_t *fence);

/* Waits for the graphs' last replays and frees the jit; on a timeout the jit stays valid. A freed
 * jit must not be used again: HCQ_VALIDATE does not check jits. */
HCQ_MUST_USE hcq_status_t hcq_jit_destroy(hcq_jit_t *jit);

typedef struct hcq_jit_report {
  size_t items;              /* items in all */
  size_t graphed_items;      /* items replayed inside graphs */
  size_t batches;            /* graphs built */
  const size_t *batch_sizes; /* items per graph, in order */
  size_t eager_items;        /* items replayed eagerly */
  size_t host_copies;        /* host copies seen during capture and not recorded */
  size_t unused_vars;        /* variables given a value no captured item uses ("Variables" above) */
  const char *text;          /* all of it in words, one line per fact, with the reason for every
                                eager item or run of items */
  size_t unused_inputs;      /* inputs no captured item holds (with allow_unused_inputs) */
  size_t other_thread_work;  /* operations other threads did during the capture on its devices */
} hcq_jit_report_t;

/* Valid until the jit is destroyed. A replay that reports an unused variable adds a line to text
 * (and may move it): read text again after replays. */
const hcq_jit_report_t *hcq_jit_report(const hcq_jit_t *jit);

/* The jit's items, inputs and variables (borrowed), e.g. to save or inspect them. The inputs are
 * the buffers the items were captured with (the ones a replay replaces). */
size_t hcq_jit_item_count(const hcq_jit_t *jit);
const hcq_exec_item_t *hcq_jit_item(const hcq_jit_t *jit, size_t i);
size_t hcq_jit_input_count(const hcq_jit_t *jit);
hcq_buffer_t *hcq_jit_input(const hcq_jit_t *jit, size_t i);
size_t hcq_jit_var_count(const hcq_jit_t *jit);
const hcq_expr_t *hcq_jit_var(const hcq_jit_t *jit, size_t i);
/* The value a variable had in the last replay (or at capture). */
int64_t hcq_jit_var_value(const hcq_jit_t *jit, size_t i);

/* Profile events of the batch graphs' last replays (jit built with profile). */
size_t hcq_jit_graph_count(const hcq_jit_t *jit);
hcq_graph_t *hcq_jit_graph(const hcq_jit_t *jit, size_t i);

/* Writes the jit as an hcq-graph/1 file (programs with their source, every buffer with its current
 * contents, items, inputs as captured, variables with their last values, one run): `hcq run FILE`
 * runs it again. Programs made from function pointers cannot be saved (UNIMPLEMENTED, naming the
 * program). Buffer contents are read after the work queued before the call. */
HCQ_MUST_USE hcq_status_t hcq_jit_save(hcq_jit_t *jit, const char *path);

/* ---- symbolic launches ----
 * hcq_launch() with operands that may be symbolic: each value and launch dimension is a constant
 * (hcq_imm) or an expression over variables (hcq_sym). */
typedef struct hcq_launch_sym_desc {
  hcq_program_t *program;
  hcq_buffer_t *const *bufs;
  size_t nbufs;
  const hcq_operand_t *vals; /* the kernel's 32-bit values */
  size_t nvals;
  hcq_operand_t global[3]; /* grid in work-groups; a constant 0 is INVALID_ARGUMENT, a symbol */
  hcq_operand_t local[3];  /* that evaluates to 0 launches nothing (then and in replays) */
  const uint32_t *outs;    /* indices into bufs of the buffers the kernel writes: NULL every */
  size_t nouts;            /* buffer, non-NULL with nouts 0 none (the rule of hcq_kernel_item_t) */
} hcq_launch_sym_desc_t;

/* Evaluates the descriptor's operands with vals (the current value of each variable they use) and
 * launches eagerly, like hcq_launch(). While the calling thread captures, the launch is recorded
 * with its symbols, so replays compute the operands from the replay's values, and vals are kept as
 * the capture's values (see hcq_capture_end). Errors (nothing runs or is recorded): those of
 * hcq_launch(), a variable without a value (NOT_FOUND), a value outside its variable's range or an
 * operand outside its field (OUT_OF_RANGE); each names the program and the variable or operand.
 * Operands are borrowed; a capture keeps its own references. */
HCQ_MUST_USE hcq_status_t hcq_launch_sym(const hcq_launch_sym_desc_t *desc,
                                         const hcq_var_value_t *vals, size_t nvals);

#pragma GCC visibility pop
#ifdef __cplusplus
}
#endif
#endif
