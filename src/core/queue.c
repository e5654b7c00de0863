#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>

#include "core/buffer.h"
#include "core/command.h"
#include "core/device.h"
#include "core/eager.h"
#include "core/memory.h"
#include "core/program.h"
#include "core/queue.h"
#include "core/remote.h"
#include "core/symset.h"
#include "core/vec.h"

#define NO_PATCH UINT32_MAX

static hcq_status_t oom(const char *what) {
  return hcq_status_make(HCQ_OUT_OF_MEMORY, "out of memory %s", what);
}

hcq_status_t hcq__queue_create(hcq_queue_kind_t kind, bool retain_refs, hcq_queue_t **out) {
  hcq_queue_t *q = calloc(1, sizeof(*q));
  if (!q) return oom("creating a queue");
  q->kind = kind;
  q->retain_refs = retain_refs;
  hcq__symset_init(&q->syms);
  *out = q;
  return NULL;
}

hcq_status_t hcq_queue_create(hcq_queue_kind_t kind, hcq_queue_t **out_queue) {
  if (!out_queue)
    return hcq_status_make(HCQ_INVALID_ARGUMENT, "hcq_queue_create: out_queue is NULL");
  *out_queue = NULL;
  if (kind != HCQ_QUEUE_COMPUTE && kind != HCQ_QUEUE_COPY)
    return hcq_status_make(HCQ_INVALID_ARGUMENT, "hcq_queue_create: unknown queue kind %d",
                           (int)kind);
  return hcq__queue_create(kind, true, out_queue);
}

static void release_refs(hcq_queue_t *q) {
  if (q->retain_refs) {
    for (size_t i = 0; i < q->programs.len; i++) hcq_program_release(q->programs.data[i]);
    for (size_t i = 0; i < q->mems.len; i++) hcq_buffer_release(q->mems.data[i]);
  }
  q->programs.len = q->mems.len = 0;
}

void hcq__queue_reset(hcq_queue_t *q) {
  release_refs(q);
  q->words.len = 0;
  q->patches.len = 0;
  q->sym_head.len = q->sym_lo.len = q->sym_hi.len = q->sym_last.len = q->sym_new.len = 0;
  if (q->syms.syms.len || q->syms.vars.len) hcq__symset_deinit(&q->syms);
  q->submitted = false;
  q->device = NULL;
}

/* ---- bound queues by address, for hang reports ---- */

static pthread_mutex_t g_bound_lock = PTHREAD_MUTEX_INITIALIZER;
static hcq_queue_t *g_bound_head;

static void bound_add(hcq_queue_t *q) {
  pthread_mutex_lock(&g_bound_lock);
  q->reg_prev = NULL;
  q->reg_next = g_bound_head;
  if (g_bound_head) g_bound_head->reg_prev = q;
  g_bound_head = q;
  pthread_mutex_unlock(&g_bound_lock);
}

static void bound_remove(hcq_queue_t *q) {
  pthread_mutex_lock(&g_bound_lock);
  if (q->reg_prev)
    q->reg_prev->reg_next = q->reg_next;
  else
    g_bound_head = q->reg_next;
  if (q->reg_next) q->reg_next->reg_prev = q->reg_prev;
  pthread_mutex_unlock(&g_bound_lock);
}

const hcq_queue_t *hcq__queue_find_bound(const uint32_t *word, char *label, size_t label_size) {
  pthread_mutex_lock(&g_bound_lock);
  hcq_queue_t *q = g_bound_head;
  for (; q; q = q->reg_next) {
    const uint32_t *base = q->bound.host;
    if (word >= base && word < base + q->words.len) break;
  }
  if (q) snprintf(label, label_size, "%s", q->label ? q->label : "a bound queue");
  pthread_mutex_unlock(&g_bound_lock);
  return q;
}

void hcq_queue_destroy(hcq_queue_t *q) {
  if (!q) return;
  release_refs(q);
  if (q->bound_dev) {
    bound_remove(q);
    hcq__mem_count(q->bound_dev, HCQ__MEMC_COMMANDS, -(int64_t)q->bound.size);
    /* An engine may still be running these words: free them once it is past. */
    hcq__device_defer_mem(q->bound_dev, q->bound);
  }
  hcq__symset_deinit(&q->syms);
  hcq__vec_free(&q->words);
  hcq__vec_free(&q->patches);
  hcq__vec_free(&q->sym_head);
  hcq__vec_free(&q->sym_lo);
  hcq__vec_free(&q->sym_hi);
  hcq__vec_free(&q->sym_last);
  hcq__vec_free(&q->sym_new);
  hcq__vec_free(&q->programs);
  hcq__vec_free(&q->mems);
  free(q);
}

hcq_queue_kind_t hcq_queue_kind(const hcq_queue_t *q) { return q ? q->kind : HCQ_QUEUE_COMPUTE; }
size_t hcq_queue_size(const hcq_queue_t *q) { return q ? q->words.len : 0; }
size_t hcq_queue_patch_count(const hcq_queue_t *q) { return q ? q->patches.len : 0; }
size_t hcq_queue_symbol_count(const hcq_queue_t *q) { return q ? hcq__symset_count(&q->syms) : 0; }

uint32_t hcq_queue_word(const hcq_queue_t *q, size_t i) {
  if (!q || i >= q->words.len) return 0;
  return q->bound_dev ? ((const uint32_t *)q->bound.host)[i] : q->words.data[i];
}

/* ---- recording ---- */

static void field_range(hcq__field_t f, int64_t *lo, int64_t *hi) {
  switch (f) {
    case HCQ__FIELD_U32: *lo = 0, *hi = UINT32_MAX; break;
    case HCQ__FIELD_I32: *lo = INT32_MIN, *hi = INT32_MAX; break;
    default: *lo = 0, *hi = INT64_MAX; break;
  }
}

static const char *field_name(hcq__field_t f) {
  return f == HCQ__FIELD_U32   ? "unsigned 32-bit"
         : f == HCQ__FIELD_I32 ? "signed 32-bit"
                               : "unsigned 64-bit";
}

static hcq_status_t check_recordable(hcq_queue_t *q, const char *cmd) {
  if (!q) return hcq_status_make(HCQ_INVALID_ARGUMENT, "%s: queue is NULL", cmd);
  if (q->bound_dev)
    return hcq_status_make(HCQ_FAILED_PRECONDITION,
                           "%s: the queue is bound to %s and takes no more commands", cmd,
                           q->bound_dev->name);
  return NULL;
}

void hcq__operand_name(uint16_t what, char *out, size_t size) {
  unsigned i = what & 0xffu;
  switch (what & 0xff00u) {
    case HCQ__WHAT_SIGNAL_ADDR: snprintf(out, size, "signal address"); break;
    case HCQ__WHAT_VALUE: snprintf(out, size, "signal value"); break;
    case HCQ__WHAT_KERNARGS: snprintf(out, size, "kernargs address"); break;
    case HCQ__WHAT_GLOBAL: snprintf(out, size, "global[%u]", i); break;
    case HCQ__WHAT_LOCAL: snprintf(out, size, "local[%u]", i); break;
    case HCQ__WHAT_COPY_DST: snprintf(out, size, "copy destination"); break;
    case HCQ__WHAT_COPY_SRC: snprintf(out, size, "copy source"); break;
    case HCQ__WHAT_COPY_SIZE: snprintf(out, size, "copy size"); break;
    case HCQ__WHAT_ARG_BUFFER: snprintf(out, size, "buffer %u", i); break;
    case HCQ__WHAT_ARG_VALUE: snprintf(out, size, "value %u", i); break;
    default: snprintf(out, size, "operand"); break;
  }
}

/* Registers a patch point for a symbolic operand. Nothing changes when it fails. */
static hcq_status_t add_patch(hcq_queue_t *q, const hcq_expr_t *sym, hcq__field_t field,
                              hcq__patch_place_t place, uint64_t offset, hcq_buffer_t *mem,
                              uint16_t what) {
  /* room for a new symbol, whether or not it is new */
  size_t nsyms = hcq__symset_count(&q->syms) + 1;
  if (!hcq__vec_reserve_for(&q->sym_head, nsyms) || !hcq__vec_reserve_for(&q->sym_lo, nsyms) ||
      !hcq__vec_reserve_for(&q->sym_hi, nsyms) || !hcq__vec_reserve_for(&q->sym_last, nsyms) ||
      !hcq__vec_reserve_for(&q->sym_new, nsyms) ||
      !hcq__vec_reserve_for(&q->patches, q->patches.len + 1))
    return oom("recording a patch point");
  uint32_t idx;
  hcq_status_t st = hcq__symset_add(&q->syms, sym, &idx);
  if (st) return st;
  int64_t lo, hi;
  field_range(field, &lo, &hi);
  if (idx == q->sym_head.len) {
    q->sym_head.data[q->sym_head.len++] = NO_PATCH;
    q->sym_lo.data[q->sym_lo.len++] = lo;
    q->sym_hi.data[q->sym_hi.len++] = hi;
    q->sym_last.data[q->sym_last.len++] = 0;
    q->sym_new.len++;
  } else {
    if (lo > q->sym_lo.data[idx]) q->sym_lo.data[idx] = lo;
    if (hi < q->sym_hi.data[idx]) q->sym_hi.data[idx] = hi;
  }
  hcq__patch_t p = {
      idx, q->sym_head.data[idx], (uint8_t)field, (uint8_t)place, what, q->tag, offset, mem};
  q->sym_head.data[idx] = (uint32_t)q->patches.len;
  q->patches.data[q->patches.len++] = p;
  q->submitted = false; /* a new patch point has never been written */
  return NULL;
}

static bool constant_fits(hcq_operand_t op, hcq__field_t field) {
  int64_t lo, hi;
  field_range(field, &lo, &hi);
  return op.value >= lo && op.value <= hi;
}

/* Validates a constant operand before anything is recorded, so a failing command leaves no trace.
 */
static hcq_status_t check_operand(hcq_operand_t op, hcq__field_t field, const char *cmd,
                                  const char *what) {
  if (op.sym && hcq_expr_is_const(op.sym)) op = hcq_imm(hcq_expr_const_value(op.sym));
  if (op.sym || constant_fits(op, field)) return NULL;
  return hcq_status_make(HCQ_OUT_OF_RANGE, "%s: %s %" PRId64 " does not fit its %s field", cmd,
                         what, op.value, field_name(field));
}

#define CHECK_OPERAND(op, field, cmd, what)                          \
  do {                                                               \
    hcq_status_t cst_ = check_operand((op), (field), (cmd), (what)); \
    if (cst_) return cst_;                                           \
  } while (0)

/* Writes a constant operand into the words, or a placeholder plus a patch point. */
static hcq_status_t put_operand(hcq_queue_t *q, size_t at, hcq_operand_t op, hcq__field_t field,
                                const char *cmd, const char *what, uint16_t what_code) {
  if (op.sym && hcq_expr_is_const(op.sym)) op = hcq_imm(hcq_expr_const_value(op.sym));
  if (!op.sym) {
    if (field == HCQ__FIELD_U64)
      hcq__wr64(&q->words.data[at], (uint64_t)op.value);
    else
      q->words.data[at] = (uint32_t)op.value;
    return NULL;
  }
  if (field == HCQ__FIELD_U64)
    hcq__wr64(&q->words.data[at], 0);
  else
    q->words.data[at] = 0;
  hcq_status_t st = add_patch(q, op.sym, field, HCQ__PATCH_IN_QUEUE, at, NULL, what_code);
  return st ? hcq_status_annotate(st, "%s: %s", cmd, what) : NULL;
}

/* Appends a command of len words; *out_at is where its header went. Rolls back on failure. */
static hcq_status_t begin_cmd(hcq_queue_t *q, uint32_t header, size_t *out_at) {
  size_t len = HCQ__HDR_LEN(header);
  if (!hcq__vec_reserve_for(&q->words, q->words.len + len)) return oom("recording a command");
  q->cmd_mark = hcq__symset_mark(&q->syms);
  *out_at = q->words.len;
  memset(q->words.data + q->words.len, 0, len * sizeof(uint32_t));
  q->words.data[q->words.len] = header;
  q->words.len += len;
  return NULL;
}

/* Drops patch points recorded since patch_mark and symbols added since the command began: a
 * failed record leaves no trace. */
static void rollback_patches(hcq_queue_t *q, size_t patch_mark) {
  while (q->patches.len > patch_mark) {
    hcq__patch_t *p = &q->patches.data[--q->patches.len];
    q->sym_head.data[p->sym] = p->next;
  }
  size_t before = hcq__symset_count(&q->syms);
  hcq__symset_truncate(&q->syms, q->cmd_mark);
  size_t n = hcq__symset_count(&q->syms);
  if (n < before)
    q->sym_head.len = q->sym_lo.len = q->sym_hi.len = q->sym_last.len = q->sym_new.len = n;
}

/* Undo of a command whose operands failed: drop its words and any patch points recorded into them.
 */
static void abort_cmd(hcq_queue_t *q, size_t at) {
  size_t mark = q->patches.len;
  while (mark && q->patches.data[mark - 1].place == HCQ__PATCH_IN_QUEUE &&
         q->patches.data[mark - 1].offset >= at)
    mark--;
  rollback_patches(q, mark);
  q->words.len = at;
}

#define TRY_OPERAND(q, at, off, op, field, cmd, what, code)                                  \
  do {                                                                                       \
    hcq_status_t st_ = put_operand((q), (at) + (off), (op), (field), (cmd), (what), (code)); \
    if (st_) {                                                                               \
      abort_cmd((q), (at));                                                                  \
      return st_;                                                                            \
    }                                                                                        \
  } while (0)

/* wait and signal share a layout: header, 64-bit signal address, 32-bit value. */
static hcq_status_t signal_command(hcq_queue_t *q, uint32_t header, const char *cmd,
                                   hcq_operand_t signal_addr, hcq_operand_t value) {
  _Static_assert(HCQ__WAIT_ADDR == HCQ__SIGNAL_ADDR && HCQ__WAIT_VALUE == HCQ__SIGNAL_VALUE,
                 "same layout");
  hcq_status_t st = check_recordable(q, cmd);
  if (st) return st;
  CHECK_OPERAND(signal_addr, HCQ__FIELD_U64, cmd, "signal address");
  CHECK_OPERAND(value, HCQ__FIELD_U32, cmd, "value");
  size_t at;
  if ((st = begin_cmd(q, header, &at))) return st;
  if (HCQ__HDR_OP(header) == HCQ__OP_WAIT) q->words.data[at + HCQ__WAIT_TAG] = q->tag;
  TRY_OPERAND(q, at, HCQ__SIGNAL_ADDR, signal_addr, HCQ__FIELD_U64, cmd, "signal address",
              HCQ__WHAT_SIGNAL_ADDR);
  TRY_OPERAND(q, at, HCQ__SIGNAL_VALUE, value, HCQ__FIELD_U32, cmd, "value", HCQ__WHAT_VALUE);
  return NULL;
}

hcq_status_t hcq_queue_wait(hcq_queue_t *q, hcq_operand_t signal_addr, hcq_operand_t value) {
  return signal_command(q, HCQ__HDR(WAIT), "wait", signal_addr, value);
}

hcq_status_t hcq_queue_signal(hcq_queue_t *q, hcq_operand_t signal_addr, hcq_operand_t value) {
  return signal_command(q, HCQ__HDR(SIGNAL), "signal", signal_addr, value);
}

hcq_status_t hcq_queue_timestamp(hcq_queue_t *q, hcq_operand_t signal_addr) {
  hcq_status_t st = check_recordable(q, "timestamp");
  if (st) return st;
  CHECK_OPERAND(signal_addr, HCQ__FIELD_U64, "timestamp", "signal address");
  size_t at;
  if ((st = begin_cmd(q, HCQ__HDR(TIMESTAMP), &at))) return st;
  TRY_OPERAND(q, at, HCQ__TIMESTAMP_ADDR, signal_addr, HCQ__FIELD_U64, "timestamp",
              "signal address", HCQ__WHAT_SIGNAL_ADDR);
  return NULL;
}

hcq_status_t hcq_queue_memory_barrier(hcq_queue_t *q) {
  hcq_status_t st = check_recordable(q, "memory_barrier");
  if (st) return st;
  if (q->kind != HCQ_QUEUE_COMPUTE)
    return hcq_status_make(HCQ_INVALID_ARGUMENT,
                           "memory_barrier: only compute queues take memory barriers");
  size_t at;
  return begin_cmd(q, HCQ__HDR(BARRIER), &at);
}

static hcq_status_t note_device(hcq_queue_t *q, hcq_device_t *dev, const char *cmd,
                                const char *what) {
  if (q->device && q->device != dev)
    return hcq_status_make(HCQ_INVALID_ARGUMENT, "%s: %s is on %s but the queue already uses %s",
                           cmd, what, dev->name, q->device->name);
  q->device = dev;
  return NULL;
}

hcq_status_t hcq_queue_exec(hcq_queue_t *q, hcq_program_t *program, hcq_operand_t kernargs_addr,
                            size_t nbufs, const hcq_operand_t global[3],
                            const hcq_operand_t local[3]) {
  hcq_status_t st = check_recordable(q, "exec");
  if (st) return st;
  if (q->kind != HCQ_QUEUE_COMPUTE)
    return hcq_status_make(HCQ_INVALID_ARGUMENT, "exec: only compute queues run programs");
  if (!program || !global || !local)
    return hcq_status_make(HCQ_INVALID_ARGUMENT, "exec: program or dims are NULL");
  if (nbufs > HCQ_MAX_KERNEL_BUFS)
    return hcq_status_make(HCQ_INVALID_ARGUMENT, "exec of %s: %zu buffers, at most %d",
                           program->name, nbufs, HCQ_MAX_KERNEL_BUFS);
  static const char *gname[3] = {"global[0]", "global[1]", "global[2]"};
  static const char *lname[3] = {"local[0]", "local[1]", "local[2]"};
  CHECK_OPERAND(kernargs_addr, HCQ__FIELD_U64, "exec", "kernargs address");
  for (int i = 0; i < 3; i++) {
    CHECK_OPERAND(global[i], HCQ__FIELD_U32, "exec", gname[i]);
    CHECK_OPERAND(local[i], HCQ__FIELD_U32, "exec", lname[i]);
    /* A constant 0 is a dim left out, as for hcq_launch; a symbolic one may be 0 at a submit. */
    for (int w = 0; w < 2; w++) {
      hcq_operand_t op = w ? local[i] : global[i];
      if (op.sym ? hcq_expr_is_const(op.sym) && hcq_expr_const_value(op.sym) == 0 : op.value == 0)
        return hcq__zero_dim_error(w ? "local" : "global", i, "exec of %s", program->name);
    }
  }
  size_t want_bufs;
  if (hcq_program_args(program, &want_bufs, NULL) && want_bufs != nbufs)
    return hcq_status_make(HCQ_INVALID_ARGUMENT,
                           "exec of %s: the kernel takes %zu buffer%s, the exec passes %zu",
                           program->name, want_bufs, want_bufs == 1 ? "" : "s", nbufs);
  if ((st = note_device(q, program->dev, "exec", program->name))) return st;
  if (q->retain_refs && !hcq__vec_reserve_for(&q->programs, q->programs.len + 1))
    return oom("recording exec");
  size_t at;
  if ((st = begin_cmd(q, HCQ__HDR(EXEC), &at))) return st;
  hcq__wr64(&q->words.data[at + HCQ__EXEC_FN], program->impl.handle);
  hcq__wr64(&q->words.data[at + HCQ__EXEC_PROGRAM], (uint64_t)(uintptr_t)program);
  q->words.data[at + HCQ__EXEC_NBUFS] = (uint32_t)nbufs;
  q->words.data[at + HCQ__EXEC_TAG] = q->tag;
  TRY_OPERAND(q, at, HCQ__EXEC_ARGS, kernargs_addr, HCQ__FIELD_U64, "exec", "kernargs address",
              HCQ__WHAT_KERNARGS);
  for (int i = 0; i < 3; i++) {
    TRY_OPERAND(q, at, HCQ__EXEC_GLOBAL + i, global[i], HCQ__FIELD_U32, "exec", gname[i],
                HCQ__WHAT_GLOBAL | i);
    TRY_OPERAND(q, at, HCQ__EXEC_LOCAL + i, local[i], HCQ__FIELD_U32, "exec", lname[i],
                HCQ__WHAT_LOCAL | i);
  }
  if (q->retain_refs) q->programs.data[q->programs.len++] = hcq_program_retain(program);
  return NULL;
}

hcq_status_t hcq_queue_copy(hcq_queue_t *q, hcq_operand_t dst, hcq_operand_t src,
                            hcq_operand_t size) {
  hcq_status_t st = check_recordable(q, "copy");
  if (st) return st;
  if (q->kind != HCQ_QUEUE_COPY)
    return hcq_status_make(HCQ_INVALID_ARGUMENT, "copy: only copy queues copy");
  CHECK_OPERAND(dst, HCQ__FIELD_U64, "copy", "destination");
  CHECK_OPERAND(src, HCQ__FIELD_U64, "copy", "source");
  CHECK_OPERAND(size, HCQ__FIELD_U64, "copy", "size");
  size_t at;
  if ((st = begin_cmd(q, HCQ__HDR(COPY), &at))) return st;
  q->words.data[at + HCQ__COPY_TAG] = q->tag;
  TRY_OPERAND(q, at, HCQ__COPY_DST, dst, HCQ__FIELD_U64, "copy", "destination", HCQ__WHAT_COPY_DST);
  TRY_OPERAND(q, at, HCQ__COPY_SRC, src, HCQ__FIELD_U64, "copy", "source", HCQ__WHAT_COPY_SRC);
  TRY_OPERAND(q, at, HCQ__COPY_SIZE, size, HCQ__FIELD_U64, "copy", "size", HCQ__WHAT_COPY_SIZE);
  return NULL;
}

uint64_t hcq_kernargs_size(size_t nbufs, size_t nvals) {
  uint64_t bytes = ((uint64_t)nbufs * 8 + (uint64_t)nvals * 4 + 15) & ~15ull;
  return bytes ? bytes
               : 16; /* every launch gets a block, so an argument-less kernel has an address too */
}

void hcq__kernargs_fill(void *host, hcq_buffer_t *const *bufs, size_t nbufs, const int32_t *vals,
                        size_t nvals) {
  uint64_t *addrs = host;
  for (size_t i = 0; i < nbufs; i++) addrs[i] = bufs[i]->addr;
  if (nvals) memcpy((char *)host + nbufs * 8, vals, nvals * sizeof(int32_t));
}

hcq_status_t hcq_queue_kernargs(hcq_queue_t *q, hcq_buffer_t *mem, uint64_t offset,
                                const hcq_operand_t *bufs, size_t nbufs, const hcq_operand_t *vals,
                                size_t nvals) {
  hcq_status_t st = check_recordable(q, "kernargs");
  if (st) return st;
  if (!mem) return hcq_status_make(HCQ_INVALID_ARGUMENT, "kernargs: memory is NULL");
  if ((nbufs && !bufs) || (nvals && !vals))
    return hcq_status_make(HCQ_INVALID_ARGUMENT,
                           "kernargs: %zu buffers / %zu values but the array is NULL", nbufs,
                           nvals);
  if (nbufs > HCQ_MAX_KERNEL_BUFS || nvals > HCQ_MAX_KERNEL_VALS)
    return hcq_status_make(HCQ_INVALID_ARGUMENT,
                           "kernargs: %zu buffers and %zu values exceed the limits (%d, %d)", nbufs,
                           nvals, HCQ_MAX_KERNEL_BUFS, HCQ_MAX_KERNEL_VALS);
  uint64_t need = (uint64_t)nbufs * 8 + (uint64_t)nvals * 4;
  if (offset % 16 || offset > mem->size || need > mem->size - offset)
    return hcq_status_make(HCQ_OUT_OF_RANGE,
                           "kernargs: %" PRIu64 " bytes at offset %" PRIu64
                           " do not fit %s (%" PRIu64
                           " bytes) or the offset is not 16-byte aligned",
                           need, offset, mem->label, mem->size);
  for (size_t i = 0; i < nbufs + nvals; i++) {
    bool is_buf = i < nbufs;
    char what[32];
    snprintf(what, sizeof(what), "%s %zu", is_buf ? "buffer" : "value", is_buf ? i : i - nbufs);
    CHECK_OPERAND(is_buf ? bufs[i] : vals[i - nbufs], is_buf ? HCQ__FIELD_U64 : HCQ__FIELD_I32,
                  "kernargs", what);
  }
  if ((st = note_device(q, mem->dev, "kernargs", mem->label))) return st;
  if (q->retain_refs && !hcq__vec_reserve_for(&q->mems, q->mems.len + 1))
    return oom("recording kernargs");
  hcq_buffer_t *base = hcq_buffer_base(mem);
  if (!base->mem.host)
    return hcq_status_make(HCQ_INVALID_ARGUMENT,
                           "kernargs: %s has no host mapping on %s (kernel arguments need one)",
                           mem->label, mem->dev->name);
  uint64_t base_off = mem->offset + offset;
  char *host = (char *)base->mem.host + base_off;
  size_t patch_mark = q->patches.len;
  q->cmd_mark = hcq__symset_mark(&q->syms);
  /* A failure restores the block as it was. */
  char saved[HCQ_MAX_KERNEL_BUFS * 8 + HCQ_MAX_KERNEL_VALS * 4];
  memcpy(saved, host, need);
  for (size_t i = 0; i < nbufs + nvals; i++) {
    bool is_buf = i < nbufs;
    hcq_operand_t op = is_buf ? bufs[i] : vals[i - nbufs];
    if (op.sym && hcq_expr_is_const(op.sym)) op = hcq_imm(hcq_expr_const_value(op.sym));
    hcq__field_t field = is_buf ? HCQ__FIELD_U64 : HCQ__FIELD_I32;
    uint64_t at = is_buf ? i * 8 : nbufs * 8 + (i - nbufs) * 4;
    if (!op.sym) {
      if (is_buf) {
        uint64_t v = (uint64_t)op.value;
        memcpy(host + at, &v, 8);
      } else {
        int32_t v = (int32_t)op.value;
        memcpy(host + at, &v, 4);
      }
      continue;
    }
    memset(host + at, 0, is_buf ? 8 : 4);
    uint16_t what = (uint16_t)((is_buf ? HCQ__WHAT_ARG_BUFFER : HCQ__WHAT_ARG_VALUE) |
                               ((is_buf ? i : i - nbufs) & 0xff));
    if ((st = add_patch(q, op.sym, field, HCQ__PATCH_IN_MEMORY, base_off + at, base, what))) {
      st = hcq_status_annotate(st, "kernargs: %s %zu", is_buf ? "buffer" : "value",
                               is_buf ? i : i - nbufs);
      goto fail;
    }
  }
  if (q->retain_refs) q->mems.data[q->mems.len++] = hcq_buffer_retain(base);
  return NULL;
fail:
  rollback_patches(q, patch_mark);
  memcpy(host, saved, need);
  return st;
}

/* ---- bind and submit ---- */

hcq_status_t hcq_queue_bind(hcq_queue_t *q, hcq_device_t *dev) {
  if (!q || !dev) return hcq_status_make(HCQ_INVALID_ARGUMENT, "bind: queue or device is NULL");
  if (q->bound_dev)
    return hcq_status_make(HCQ_FAILED_PRECONDITION, "bind: queue is already bound to %s",
                           q->bound_dev->name);
  if (q->device && q->device != dev)
    return hcq_status_make(HCQ_INVALID_ARGUMENT,
                           "bind: queue uses programs or memory of %s, not %s", q->device->name,
                           dev->name);
  if (q->words.len == 0) return hcq_status_make(HCQ_FAILED_PRECONDITION, "bind: queue is empty");
  hcq_status_t st = hcq__device_check(dev);
  if (st) return hcq_status_annotate(st, "bind");
  st = dev->vt->mem_alloc(dev, q->words.len * sizeof(uint32_t), HCQ__MEM_HOST_VISIBLE, &q->bound);
  if (st) return hcq_status_annotate(st, "bind to %s", dev->name);
  memcpy(q->bound.host, q->words.data, q->words.len * sizeof(uint32_t));
  hcq__mem_count(dev, HCQ__MEMC_COMMANDS, (int64_t)q->bound.size);
  q->bound_dev = dev;
  bound_add(q);
  return NULL;
}

/* Evaluates every symbol; all-or-nothing: on failure nothing has been written. */
static hcq_status_t evaluate(hcq_queue_t *q, const hcq_var_value_t *vals, size_t nvals) {
  q->failed_patch = NULL;
  hcq_status_t st = hcq__symset_bind(&q->syms, vals, nvals);
  if (st) return st;
  size_t n = hcq__symset_count(&q->syms);
  for (uint32_t i = 0; i < n; i++) {
    int64_t v;
    st = hcq__symset_eval(&q->syms, i, &v);
    if (!st && v >= q->sym_lo.data[i] && v <= q->sym_hi.data[i]) {
      q->sym_new.data[i] = v;
      continue;
    }
    /* Name the operand (and, through its tag, the graph item) the symbol patches. */
    const hcq__patch_t *p =
        q->sym_head.data[i] != NO_PATCH ? &q->patches.data[q->sym_head.data[i]] : NULL;
    q->failed_patch = p;
    char what[48] = "operand", item[32] = "";
    if (p) hcq__operand_name(p->what, what, sizeof(what));
    uint32_t j;
    if (p && hcq__tag_item(p->tag, &j)) snprintf(item, sizeof(item), "item %" PRIu32 ": ", j);
    if (st) return hcq_status_annotate(st, "%s%s", item, what);
    char text[128];
    hcq_expr_format(q->syms.syms.data[i], text, sizeof(text));
    return hcq_status_make(HCQ_OUT_OF_RANGE,
                           "%s%s: %s = %" PRId64 " does not fit its field [%" PRId64 ", %" PRId64
                           "]",
                           item, what, text, v, q->sym_lo.data[i], q->sym_hi.data[i]);
  }
  return NULL;
}

static void write_patches(hcq_queue_t *q, uint32_t *words) {
  size_t n = hcq__symset_count(&q->syms);
  q->last_patch_writes = 0;
  for (uint32_t i = 0; i < n; i++) {
    int64_t v = q->sym_new.data[i];
    if (q->submitted && v == q->sym_last.data[i]) continue;
    q->sym_last.data[i] = v;
    for (uint32_t p = q->sym_head.data[i]; p != NO_PATCH; p = q->patches.data[p].next) {
      const hcq__patch_t *pt = &q->patches.data[p];
      q->last_patch_writes++;
      if (pt->place == HCQ__PATCH_IN_MEMORY) {
        char *dst = (char *)pt->mem->mem.host + pt->offset;
        if (pt->field == HCQ__FIELD_U64) {
          uint64_t u = (uint64_t)v;
          memcpy(dst, &u, 8);
        } else {
          uint32_t u = (uint32_t)v;
          memcpy(dst, &u, 4);
        }
      } else if (pt->field == HCQ__FIELD_U64) {
        hcq__wr64(&words[pt->offset], (uint64_t)v);
        if (words != q->words.data) hcq__wr64(&q->words.data[pt->offset], (uint64_t)v);
      } else {
        words[pt->offset] = (uint32_t)v;
        if (words != q->words.data) q->words.data[pt->offset] = (uint32_t)v;
      }
    }
  }
  q->submitted = true;
}

hcq_status_t hcq__queue_prepare(hcq_queue_t *q, const hcq_var_value_t *vals, size_t nvals) {
  return evaluate(q, vals, nvals);
}

hcq_status_t hcq__queue_reserve_locked(hcq_queue_t *q, hcq_device_t *dev) {
  return dev->vt->reserve(dev, q->kind, q->words.len, q->bound_dev != NULL);
}

hcq_status_t hcq__queue_commit_locked(hcq_queue_t *q, hcq_device_t *dev) {
  uint32_t *words = q->bound_dev ? q->bound.host : q->words.data;
  write_patches(q, words);
  return dev->vt->submit(dev, q->kind, words, q->words.len, q->bound_dev != NULL);
}

hcq_status_t hcq__queue_submit_locked(hcq_queue_t *q, hcq_device_t *dev,
                                      const hcq_var_value_t *vals, size_t nvals) {
  hcq_status_t st = hcq__queue_prepare(q, vals, nvals);
  return st ? st : hcq__queue_commit_locked(q, dev);
}

hcq_status_t hcq_queue_submit(hcq_queue_t *q, hcq_device_t *dev, const hcq_var_value_t *vals,
                              size_t nvals) {
  if (!q || !dev) return hcq_status_make(HCQ_INVALID_ARGUMENT, "submit: queue or device is NULL");
  if (nvals && !vals)
    return hcq_status_make(HCQ_INVALID_ARGUMENT, "submit: %zu values but vals is NULL", nvals);
  hcq_status_t vst = hcq__var_values_check(vals, nvals, "submit");
  if (vst) return vst;
  if (q->bound_dev && q->bound_dev != dev)
    return hcq_status_make(HCQ_INVALID_ARGUMENT, "submit: queue is bound to %s, not %s",
                           q->bound_dev->name, dev->name);
  if (q->device && q->device != dev)
    return hcq_status_make(HCQ_INVALID_ARGUMENT,
                           "submit: queue uses programs or memory of %s, not %s", q->device->name,
                           dev->name);
  if (q->words.len == 0) return NULL;
  hcq_status_t st = hcq__device_check(dev);
  if (st) return hcq_status_annotate(st, "submit");
  pthread_mutex_lock(&dev->lock);
  st = hcq__queue_submit_locked(q, dev, vals, nvals);
  pthread_mutex_unlock(&dev->lock);
  return st;
}
