/* A "world" for graph tests: buffers on CPU devices, each with a mirror of identical contents.
 * Items run as graph replays on the buffers and eagerly on the mirrors (the ground truth); then
 * every buffer is compared with its mirror byte for byte. */
#ifndef HCQ_TEST_WORLD_H
#define HCQ_TEST_WORLD_H

#include "test_util.h"

#define WORLD_MAX_DEVS 4
#define WORLD_MAX_BUFS 96

typedef struct world {
  hcq_device_t *devs[WORLD_MAX_DEVS];
  hcq_program_t *mix[WORLD_MAX_DEVS];
  int ndev;
  hcq_buffer_t *buf[WORLD_MAX_BUFS], *mirror[WORLD_MAX_BUFS];
  int nbufs;
} world_t;

void world_open(world_t *w, int ndev);
/* The same on devices of backend b (world_open is CPU). */
void world_open_on(world_t *w, const test_backend_t *b, int ndev);
void world_close(world_t *w);
/* A base buffer of count int32 on device d filled from seed (same in both worlds); its index. */
int world_buffer(world_t *w, int d, size_t count, uint32_t seed);
int world_view(world_t *w, int base, size_t offset_words, size_t count);
int world_index(const world_t *w, const hcq_buffer_t *b);
int world_device_of(const world_t *w, int idx);

/* Items on world buffers. The returned item points into static storage of the slot given. */
typedef struct world_item {
  hcq_exec_item_t item;
  hcq_buffer_t *bufs[3];
  uint32_t outs[1];
  hcq_operand_t vals[3];
} world_item_t;

/* mix(out, x, y; mul, add, n) on the device of out, n elements in groups of 64. Operands may be
 * symbolic (NULL sym: the constant). groups: a symbolic dim to use instead of n's ceiling, or NULL.
 */
void world_mix(world_t *w, world_item_t *wi, int out, int x, int y, hcq_operand_t mul,
               hcq_operand_t add, hcq_operand_t n, const hcq_expr_t *groups);
void world_copy(world_t *w, world_item_t *wi, int dst, int src, uint64_t bytes);

/* Runs items eagerly on the mirrors, with inputs[k] of the graph replaced by swaps[k] (world
 * indices; -1 keeps the original). */
void world_run_eager(world_t *w, world_item_t *items, int nitems, const int *inputs,
                     const int *swaps, int ninputs, const hcq_var_value_t *vals, size_t nvals);
/* Asserts that every buffer equals its mirror; what names the moment. */
void world_compare(world_t *w, const char *what);

/* A graph of items (asserted to be of kind "hcq", or "cuda" on CUDA devices) with world buffers
 * inputs as its inputs. */
hcq_graph_t *world_graph(world_t *w, world_item_t *items, int n, const int *inputs, int ninputs,
                         const hcq_var_value_t *vals, size_t nvals, bool profile);
/* One replay in both worlds (inputs swapped as in world_run_eager), then the comparison. */
void world_replay(world_t *w, hcq_graph_t *g, world_item_t *items, int n, const int *inputs,
                  const int *swaps, int ninputs, const hcq_var_value_t *vals, size_t nvals,
                  bool wait, const char *what);
/* times replays without inputs or variables, waiting on every other one. */
void world_replay_n(world_t *w, hcq_graph_t *g, world_item_t *items, int n, int times);

/* Random worlds for fuzzing: 1-4 devices, base buffers and views, inputs with one replacement
 * each, and up to 24 items (kernels with symbolic or constant operands, transfers). */
typedef struct world_vars {
  hcq_expr_t *n, *k, *groups; /* n in [1, 64], k in [-9, 9], groups = (n+63)//64 */
} world_vars_t;
void world_vars_open(world_vars_t *v);
void world_vars_close(world_vars_t *v);

typedef struct world_random {
  world_item_t items[24];
  int nitems;
  int inputs[WORLD_MAX_DEVS], alts[WORLD_MAX_DEVS], ninputs;
} world_random_t;

uint32_t world_rand(uint32_t *seed);
/* Opens w and fills it at random. */
void world_random(world_t *w, uint32_t *seed, const world_vars_t *v, world_random_t *out);
void world_random_on(world_t *w, const test_backend_t *b, uint32_t *seed, const world_vars_t *v,
                     world_random_t *out);
/* Random swaps (-1 keeps an input) and values {n, k} for one replay. */
void world_random_replay(const world_random_t *rw, uint32_t *seed, const world_vars_t *v,
                         int *swaps, hcq_var_value_t vals[2]);

/* rounds random worlds on backend b, each an HCQ graph replayed replays times with random swaps
 * and values, every replay compared with eager execution. */
void world_graph_fuzz(const test_backend_t *b, uint32_t seed, int rounds, int replays);

#endif
