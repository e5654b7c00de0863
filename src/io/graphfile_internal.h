/* The loaded form of a graph file, and what the loader's files (graphfile*.c) share. */
#ifndef HCQ_IO_GRAPHFILE_INTERNAL_H
#define HCQ_IO_GRAPHFILE_INTERNAL_H

#include <jansson.h>
#include <sys/types.h>

#include "core/status.h"
#include "core/vec.h"
#include "hcq/graphfile.h"
#include "io/htab.h"

#define GF_MAX_DEVICES 64

typedef enum {
  GF_INIT_ZEROS,
  GF_INIT_IOTA32,
  GF_INIT_RANDOM,
  GF_INIT_FILL32,
  GF_INIT_UNIFORM_F32,
  GF_INIT_DATA
} gf_init_t;

typedef struct gf_buffer {
  char *name;
  hcq_buffer_t *buf;
  hcq_device_t *dev;
  uint64_t bytes;
  bool is_view;
  gf_init_t init;
  uint64_t init_value;    /* seed or fill word (fill_f32: the float's bits) */
  float init_lo, init_hi; /* uniform_f32 range */
  char *init_data;        /* GF_INIT_DATA: bytes bytes */
} gf_buffer_t;

typedef struct gf_program {
  char *name, *entry;
  /* Per device kind, the source under its backend's key ("c", "cuda", "glsl", ...: core/backend.h).
   */
  char *sources[HCQ_DEVICE_KIND_COUNT];
  hcq_program_t *compiled[GF_MAX_DEVICES];
  size_t ncompiled;
  /* "nbufs"/"nvals": what the kernel reads (hcq_program_declare_args); -1 unsaid */
  int64_t nbufs, nvals;
} gf_program_t;

typedef struct gf_run {
  hcq_buffer_t **inputs;
  hcq_var_value_t *vals;
} gf_run_t;

struct hcq_graph_file {
  hcq_device_t *devices[GF_MAX_DEVICES];
  size_t ndevices;
  HCQ__VEC(gf_buffer_t) buffers;
  HCQ__VEC(gf_program_t) programs;
  HCQ__VEC(hcq_var_value_t) vars; /* declared values; the variables are owned */
  HCQ__VEC(hcq_exec_item_t) items;
  hcq_buffer_t **inputs;
  size_t ninputs;
  HCQ__VEC(gf_run_t) runs;
  uint64_t total_bytes;
  /* Names to indices in buffers, programs and vars (hashes of the names). */
  hcq__htab_t buffer_names, program_names, var_names;
};

/* Buffer names (they become file names with --out): letters, digits, '_', '-', '.', at most 64,
 * not starting with '.'. */
bool hcq__graph_file_name_ok(const char *name);

/* ---- the loader ----
 * One load is split by what it reads: graphfile.c the file as a whole and its devices,
 * graphfile_errors.c the JSON path and the readers that report against it, graphfile_data.c the
 * bytes a file brings in (named files, base64, initial contents), graphfile_buffers.c buffers and
 * views, graphfile_programs.c programs, graphfile_items.c items, graphfile_runs.c variables,
 * inputs and runs. */

typedef struct gf_loader {
  hcq_graph_file_t *gf;
  const char *name;     /* for messages */
  const char *base_dir; /* for {"file": ...} */
  const hcq_graph_file_options_t *opts;
  char path[512];
  size_t path_len;
  size_t *input_of;             /* by buffer index: its index in inputs + 1, or 0 */
  const hcq_expr_t **var_exprs; /* the variables, for the expression parser (made on first use) */
} gf_loader_t;

/* The JSON path of what is being read: push appends to it and returns the mark that pop goes back
 * to; push_key appends an object's key. */
size_t hcq__gf_push(gf_loader_t *L, const char *fmt, ...) HCQ_PRINTF(2, 3);
void hcq__gf_pop(gf_loader_t *L, size_t mark);
size_t hcq__gf_push_key(gf_loader_t *L, const char *key);
/* Errors at the path: fail makes one, wrap prefixes a status from the library, oom is out of
 * memory. */
HCQ_MUST_USE hcq_status_t hcq__gf_fail(gf_loader_t *L, hcq_status_code_t code, const char *fmt, ...)
    HCQ_PRINTF(3, 4);
HCQ_MUST_USE hcq_status_t hcq__gf_wrap(gf_loader_t *L, hcq_status_t st);
HCQ_MUST_USE hcq_status_t hcq__gf_oom(gf_loader_t *L);
/* Readers of one JSON value: a wrong type or value is an error at the path. */
const char *hcq__gf_type_name(const json_t *j);
HCQ_MUST_USE hcq_status_t hcq__gf_expect(gf_loader_t *L, const json_t *j, json_type type,
                                         const char *what);
HCQ_MUST_USE hcq_status_t hcq__gf_only_keys(gf_loader_t *L, const json_t *obj,
                                            const char *const *allowed);
HCQ_MUST_USE hcq_status_t hcq__gf_get_int(gf_loader_t *L, const json_t *j, int64_t lo, int64_t hi,
                                          int64_t *out);
HCQ_MUST_USE hcq_status_t hcq__gf_get_f32(gf_loader_t *L, const json_t *j, float *out);
/* The same for a member at path (".min"), pushed for the read and popped after. */
HCQ_MUST_USE hcq_status_t hcq__gf_get_int_at(gf_loader_t *L, const char *path, const json_t *j,
                                             int64_t lo, int64_t hi, int64_t *out);
HCQ_MUST_USE hcq_status_t hcq__gf_get_f32_at(gf_loader_t *L, const char *path, const json_t *j,
                                             float *out);
HCQ_MUST_USE hcq_status_t hcq__gf_required_section(gf_loader_t *L, const json_t *j, json_type type,
                                                   const char *what);

/* A device by its name in the file, after the device map; the file holds one reference to each. */
HCQ_MUST_USE hcq_status_t hcq__gf_open_device(gf_loader_t *L, const char *name, hcq_device_t **out);

/* A regular file's whole contents (rel: from the graph file's folder); what a non-regular one is.
 */
HCQ_MUST_USE hcq_status_t hcq__gf_read_file(gf_loader_t *L, const char *rel, char **out,
                                            size_t *out_len);
const char *hcq__gf_file_type(mode_t mode);
/* A base buffer's "init", and writing it to the buffer (at load and at hcq_graph_file_reset). */
HCQ_MUST_USE hcq_status_t hcq__gf_parse_init(gf_loader_t *L, const json_t *j, gf_buffer_t *b);
HCQ_MUST_USE hcq_status_t hcq__gf_write_init(const gf_buffer_t *b);

/* A buffer by name: its index (-1 when unknown), or from a JSON string with an error at the path.
 */
ssize_t hcq__gf_find_buffer(const hcq_graph_file_t *gf, const char *name);
HCQ_MUST_USE hcq_status_t hcq__gf_buffer_ref(gf_loader_t *L, const json_t *j, gf_buffer_t **out);

/* The program compiled for dev (once per device). */
HCQ_MUST_USE hcq_status_t hcq__gf_program_for(gf_loader_t *L, gf_program_t *p, hcq_device_t *dev,
                                              hcq_program_t **out);

/* The sections, in the order the load reads them: each may use what the ones before it made. */
HCQ_MUST_USE hcq_status_t hcq__gf_parse_vars(gf_loader_t *L, const json_t *vars);
HCQ_MUST_USE hcq_status_t hcq__gf_parse_buffers(gf_loader_t *L, const json_t *buffers);
HCQ_MUST_USE hcq_status_t hcq__gf_parse_programs(gf_loader_t *L, const json_t *programs);
HCQ_MUST_USE hcq_status_t hcq__gf_parse_items(gf_loader_t *L, const json_t *items);
HCQ_MUST_USE hcq_status_t hcq__gf_parse_inputs(gf_loader_t *L, const json_t *inputs);
HCQ_MUST_USE hcq_status_t hcq__gf_parse_runs(gf_loader_t *L, const json_t *runs);
HCQ_MUST_USE hcq_status_t hcq__gf_check_items(gf_loader_t *L);

#endif
