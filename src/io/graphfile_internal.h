/* The loaded form of a graph file. */
#ifndef HCQ_IO_GRAPHFILE_INTERNAL_H
#define HCQ_IO_GRAPHFILE_INTERNAL_H

#include "core/vec.h"
#include "hcq/graphfile.h"
#include "io/htab.h"

#define GF_MAX_DEVICES 64

typedef enum { GF_INIT_ZEROS, GF_INIT_IOTA32, GF_INIT_RANDOM, GF_INIT_FILL32, GF_INIT_UNIFORM_F32, GF_INIT_DATA } gf_init_t;

typedef struct gf_buffer {
  char *name;
  hcq_buffer_t *buf;
  hcq_device_t *dev;
  uint64_t bytes;
  bool is_view;
  gf_init_t init;
  uint64_t init_value; /* seed or fill word (fill_f32: the float's bits) */
  float init_lo, init_hi; /* uniform_f32 range */
  char *init_data;     /* GF_INIT_DATA: bytes bytes */
} gf_buffer_t;

typedef struct gf_program {
  char *name, *entry;
  /* Per device kind, the source under its backend's key ("c", "cuda", "glsl", ...: core/backend.h). */
  char *sources[HCQ_DEVICE_KIND_COUNT];
  hcq_program_t *compiled[GF_MAX_DEVICES];
  size_t ncompiled;
  int64_t nbufs, nvals; /* "nbufs"/"nvals": what the kernel reads (hcq_program_declare_args); -1 unsaid */
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

#endif
