/* hcq graph files ("format": "hcq-graph/1", see docs/graph-format.md): devices, buffers with their
 * initial contents, programs, items, inputs, variables and a sequence of runs, loaded into ready
 * objects that hcq_graph_create(), hcq_jit_create() or hcq_exec_item_run() take.
 *
 * Errors: JSON syntax errors give "FILE:LINE:COLUMN: message"; anything else gives the JSON path of
 * the bad field: `g.json: items[3].bufs[1]: unknown buffer "q"`. Codes: INVALID_ARGUMENT, NOT_FOUND
 * and OUT_OF_RANGE for a bad file; COMPILE_ERROR (with the compiler's output), UNAVAILABLE and
 * OUT_OF_MEMORY when the machine cannot do what the file asks.
 */
#ifndef HCQ_GRAPHFILE_H
#define HCQ_GRAPHFILE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "hcq/graph.h"

#ifdef __cplusplus
extern "C" {
#endif
#pragma GCC visibility push(default) /* exported from libhcq.so (see hcq.h) */

typedef struct hcq_graph_file hcq_graph_file_t;

typedef struct hcq_graph_file_options {
  /* Device renaming, comma separated: "CPU=CUDA" maps every CPU:N to CUDA:N, "CPU:1=CPU:0" one
   * device. NULL or "" maps nothing. */
  const char *device_map;
  /* Programs are not compiled; kernels become no-ops (for validating files, and fuzzing). */
  bool skip_compile;
  /* Refuse files whose buffers need more bytes in all (0: no limit). */
  uint64_t max_total_bytes;
} hcq_graph_file_options_t;

/* Loads path; relative {"file": ...} paths are relative to its folder. options may be NULL. The
 * file and every {"file": ...} must be regular files (a FIFO, device or folder is INVALID_ARGUMENT,
 * found without blocking), and paths are used whole: one past PATH_MAX is INVALID_ARGUMENT. */
HCQ_MUST_USE hcq_status_t hcq_graph_file_load(const char *path,
                                              const hcq_graph_file_options_t *options,
                                              hcq_graph_file_t **out_file);
/* Loads JSON text of len bytes; name appears in messages, base_dir resolves {"file": ...}. */
HCQ_MUST_USE hcq_status_t hcq_graph_file_load_text(const char *text, size_t len, const char *name,
                                                   const char *base_dir,
                                                   const hcq_graph_file_options_t *options,
                                                   hcq_graph_file_t **out_file);
/* Waits for nothing: the caller synchronizes first. Releases every object the file made. */
void hcq_graph_file_destroy(hcq_graph_file_t *file);

/* Rewrites every base buffer with its initial contents ("init"), in order after earlier work. */
HCQ_MUST_USE hcq_status_t hcq_graph_file_reset(hcq_graph_file_t *file);

size_t hcq_graph_file_item_count(const hcq_graph_file_t *file);
const hcq_exec_item_t *hcq_graph_file_items(const hcq_graph_file_t *file);
size_t hcq_graph_file_input_count(const hcq_graph_file_t *file);
hcq_buffer_t *const *hcq_graph_file_inputs(const hcq_graph_file_t *file);
/* The variables with their declared values. */
size_t hcq_graph_file_var_count(const hcq_graph_file_t *file);
const hcq_var_value_t *hcq_graph_file_vars(const hcq_graph_file_t *file);
/* Buffers (base buffers and views) in file order, with their names. */
size_t hcq_graph_file_buffer_count(const hcq_graph_file_t *file);
const char *hcq_graph_file_buffer_name(const hcq_graph_file_t *file, size_t i);
hcq_buffer_t *hcq_graph_file_buffer(const hcq_graph_file_t *file, size_t i);
/* The devices the file uses (after the device map). */
size_t hcq_graph_file_device_count(const hcq_graph_file_t *file);
hcq_device_t *hcq_graph_file_device(const hcq_graph_file_t *file, size_t i);

/* Runs: each is the full list of inputs (declared ones with the run's swaps applied) and a value
 * for every variable (declared value unless the run sets it). At least one run exists. */
size_t hcq_graph_file_run_count(const hcq_graph_file_t *file);
void hcq_graph_file_run(const hcq_graph_file_t *file, size_t run, hcq_buffer_t *const **out_inputs,
                        const hcq_var_value_t **out_vals);

/* The generator behind {"random": SEED}: SplitMix64 from SEED, each output's 8 bytes little
 * endian, in order. Fills size bytes. */
void hcq_graph_file_random_bytes(uint64_t seed, void *dst, size_t size);

#pragma GCC visibility pop
#ifdef __cplusplus
}
#endif
#endif
