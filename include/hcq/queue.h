/* hcq queues: command lists built once, with symbolic patch points, submitted many times.
 *
 * Two kinds: compute (wait, signal, timestamp, memory barrier, exec) and copy (wait, signal,
 * timestamp, copy). Commands of one queue run in order; a later command starts after earlier ones
 * finished. Any numeric operand may be symbolic (hcq_sym()); recording one stores a placeholder and
 * a patch point. Patch points also live in other device memory (kernel arguments, see
 * hcq_queue_kernargs). Symbols are deduplicated per queue.
 *
 * hcq_queue_submit() evaluates every symbol with the given variable values, rewrites only the patch
 * points whose value changed since the previous submit, and hands the words to the device. It
 * allocates nothing. Either every check passes and everything is patched, or nothing is written.
 * hcq_queue_bind() places the words in device-visible memory once, so later submits copy nothing;
 * a bound queue takes no further commands.
 *
 * Patching rewrites words in place: a queue (bound, or with kernargs patch points) must not be
 * resubmitted with changed values while its previous submission may still be running. Wait for a
 * signal it sets first. Signal values in commands are 32-bit; addresses and copy sizes 64-bit.
 * A queue is used by one thread at a time.
 */
#ifndef HCQ_QUEUE_H
#define HCQ_QUEUE_H

#include <stddef.h>
#include <stdint.h>

#include "hcq/buffer.h"
#include "hcq/program.h"
#include "hcq/signal.h"
#include "hcq/symbolic.h"

#ifdef __cplusplus
extern "C" {
#endif
#pragma GCC visibility push(default) /* exported from libhcq.so (see hcq.h) */

typedef struct hcq_queue hcq_queue_t;

typedef enum hcq_queue_kind { HCQ_QUEUE_COMPUTE, HCQ_QUEUE_COPY } hcq_queue_kind_t;

/* A command operand: a constant (sym == NULL) or a symbolic expression (borrowed while recording;
 * the queue keeps its own reference). */
typedef struct hcq_operand {
  const hcq_expr_t *sym;
  int64_t value;
} hcq_operand_t;

static inline hcq_operand_t hcq_imm(int64_t value) {
  hcq_operand_t op = {NULL, value};
  return op;
}
static inline hcq_operand_t hcq_sym(const hcq_expr_t *sym) {
  hcq_operand_t op = {sym, 0};
  return op;
}

HCQ_MUST_USE hcq_status_t hcq_queue_create(hcq_queue_kind_t kind, hcq_queue_t **out_queue);
/* Frees the queue. A freed queue must not be used again: HCQ_VALIDATE does not check queues. */
void hcq_queue_destroy(hcq_queue_t *queue);
hcq_queue_kind_t hcq_queue_kind(const hcq_queue_t *queue); /* HCQ_QUEUE_COMPUTE for NULL */
/* Number of 32-bit command words recorded. */
size_t hcq_queue_size(const hcq_queue_t *queue);
/* Number of patch points and of distinct symbols. */
size_t hcq_queue_patch_count(const hcq_queue_t *queue);
size_t hcq_queue_symbol_count(const hcq_queue_t *queue);

/* Waits until the signal at address signal_addr holds a value >= value. */
HCQ_MUST_USE hcq_status_t hcq_queue_wait(hcq_queue_t *queue, hcq_operand_t signal_addr,
                                         hcq_operand_t value);
/* Sets the signal's value to value (after every earlier command finished). */
HCQ_MUST_USE hcq_status_t hcq_queue_signal(hcq_queue_t *queue, hcq_operand_t signal_addr,
                                           hcq_operand_t value);
/* Writes the current device time into the signal's timestamp word. */
HCQ_MUST_USE hcq_status_t hcq_queue_timestamp(hcq_queue_t *queue, hcq_operand_t signal_addr);
/* Makes memory writes before it visible to commands after it (compute queues). */
HCQ_MUST_USE hcq_status_t hcq_queue_memory_barrier(hcq_queue_t *queue);
/* Runs program over the global grid of local-sized groups, its arguments read from kernargs_addr
 * (nbufs 64-bit buffer addresses, then the 32-bit values). Compute queues only. The queue retains
 * program. A constant 0 dim is INVALID_ARGUMENT naming it (a symbolic one that evaluates to 0 at a
 * submit runs nothing); so is an nbufs other than the program's declared or known buffer count
 * (hcq_program_declare_args). */
HCQ_MUST_USE hcq_status_t hcq_queue_exec(hcq_queue_t *queue, hcq_program_t *program,
                                         hcq_operand_t kernargs_addr, size_t nbufs,
                                         const hcq_operand_t global[3],
                                         const hcq_operand_t local[3]);
/* Copies size bytes from src to dst (device addresses). Copy queues only. */
HCQ_MUST_USE hcq_status_t hcq_queue_copy(hcq_queue_t *queue, hcq_operand_t dst, hcq_operand_t src,
                                         hcq_operand_t size);

/* Writes a kernel argument block into mem at offset: nbufs 64-bit addresses, then nvals 32-bit
 * values. Constant operands are written now; symbolic ones become patch points written by submit.
 * The block must fit in mem (8*nbufs + 4*nvals bytes); offset must be 16-byte aligned. The queue
 * retains mem. */
HCQ_MUST_USE hcq_status_t hcq_queue_kernargs(hcq_queue_t *queue, hcq_buffer_t *mem, uint64_t offset,
                                             const hcq_operand_t *bufs, size_t nbufs,
                                             const hcq_operand_t *vals, size_t nvals);
/* Bytes a kernel argument block takes, rounded up to 16 (16 for a kernel without arguments). */
uint64_t hcq_kernargs_size(size_t nbufs, size_t nvals);

/* Places the words in device memory of device; later submits to that device copy nothing. */
HCQ_MUST_USE hcq_status_t hcq_queue_bind(hcq_queue_t *queue, hcq_device_t *device);
/* Evaluates symbols with vals, patches what changed, hands the queue to device. */
HCQ_MUST_USE hcq_status_t hcq_queue_submit(hcq_queue_t *queue, hcq_device_t *device,
                                           const hcq_var_value_t *vals, size_t nvals);

/* Reads back the current value of word i (after patching), for inspection and tests. */
uint32_t hcq_queue_word(const hcq_queue_t *queue, size_t i);

#pragma GCC visibility pop
#ifdef __cplusplus
}
#endif
#endif
