/* The command words queues record and engines run (docs/design.md, "Queues and patch points"):
 * opcodes, lengths and operand positions. */
#ifndef HCQ_CORE_COMMAND_H
#define HCQ_CORE_COMMAND_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

/* Every command starts with a header word: opcode in the low 8 bits, length in words above.
 * 64-bit operands take two words, low first. CALL and JUMP appear only in device rings.
 * WAIT, EXEC and COPY carry a tag (the graph item index + 1, or 0) and EXEC the hcq_program_t it
 * runs, so a hang report or a crash message can name the item and the kernel from the words alone.
 */
// clang-format off
#define HCQ__OPS(X) \
  X(NOP, 1)         \
  X(WAIT, 5)        \
  X(SIGNAL, 4)      \
  X(TIMESTAMP, 3)   \
  X(BARRIER, 1)     \
  X(EXEC, 15)       \
  X(COPY, 8)        \
  X(CALL, 4)        \
  X(JUMP, 1)
// clang-format on

enum {
#define HCQ__OP_ENUM(name, len) HCQ__OP_##name,
  HCQ__OPS(HCQ__OP_ENUM)
#undef HCQ__OP_ENUM
};
enum {
#define HCQ__OP_LEN(name, len) HCQ__LEN_##name = len,
  HCQ__OPS(HCQ__OP_LEN)
#undef HCQ__OP_LEN
};

/* The longest command (EXEC). */
#define HCQ__MAX_CMD_WORDS 15

#define HCQ__HDR(op) ((uint32_t)HCQ__OP_##op | ((uint32_t)HCQ__LEN_##op << 8))
#define HCQ__HDR_OP(w) ((w)&0xffu)
#define HCQ__HDR_LEN(w) ((w) >> 8)

/* Operand positions (word offsets from the header). */
enum {
  HCQ__WAIT_ADDR = 1,
  HCQ__WAIT_VALUE = 3,
  HCQ__WAIT_TAG = 4,
  HCQ__SIGNAL_ADDR = 1,
  HCQ__SIGNAL_VALUE = 3,
  HCQ__TIMESTAMP_ADDR = 1,
  HCQ__EXEC_FN = 1,
  HCQ__EXEC_ARGS = 3,
  HCQ__EXEC_NBUFS = 5,
  HCQ__EXEC_GLOBAL = 6,
  HCQ__EXEC_LOCAL = 9,
  HCQ__EXEC_TAG = 12,
  HCQ__EXEC_PROGRAM = 13,
  HCQ__COPY_DST = 1,
  HCQ__COPY_SRC = 3,
  HCQ__COPY_SIZE = 5,
  HCQ__COPY_TAG = 7,
  HCQ__CALL_PTR = 1,
  HCQ__CALL_LEN = 3,
};

/* Command words are read and written as host integers; the encoding assumes little-endian 64-bit
 * operands split low word first, which is what every supported host is. */
_Static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
               "hcq command words assume a little-endian host");

static inline uint64_t hcq__rd64(const uint32_t *w) {
  uint64_t v;
  memcpy(&v, w, sizeof(v));
  return v;
}
static inline void hcq__wr64(uint32_t *w, uint64_t v) { memcpy(w, &v, sizeof(v)); }

/* A CALL of a bound command list, as rings carry it (call has HCQ__LEN_CALL words). */
static inline void hcq__encode_call(uint32_t *call, const uint32_t *words, size_t nwords) {
  call[0] = HCQ__HDR(CALL);
  hcq__wr64(call + HCQ__CALL_PTR, (uint64_t)(uintptr_t)words);
  call[HCQ__CALL_LEN] = (uint32_t)nwords;
}

/* Copies the command at w (its header says its length, at most HCQ__MAX_CMD_WORDS) to out. */
static inline void hcq__copy_command(const uint32_t *w, uint32_t out[HCQ__MAX_CMD_WORDS]) {
  uint32_t len = HCQ__HDR_LEN(w[0]);
  memcpy(out, w, (len < HCQ__MAX_CMD_WORDS ? len : HCQ__MAX_CMD_WORDS) * sizeof(uint32_t));
}

#endif
