/* Weight formats on the host: half floats, ggml's block formats (quantizing, for the models the
 * tests write, and dequantizing, for the plain C reference) and the device layouts the CPU kernels
 * read (kernels_tiles.c), into which the decoder repacks each weight matrix once when it loads.
 *
 * ggml's blocks (ggml-common.h; d, dmin, m are half floats):
 *   BF16: the high 16 bits of a float.
 *   Q4_0 (32 elements, 18 bytes): d, 16 bytes of nibbles; element j < 16 is the low nibble of byte
 *   j, element j + 16 its high nibble; value = d (q - 8).
 *   Q4_1 (32, 20): d, m, nibbles as Q4_0; value = d q + m.
 *   Q5_0 (32, 22): d, 32 bits qh (bit j: the fifth bit of element j), nibbles as Q4_0; d (q - 16).
 *   Q5_1 (32, 24): d, m, qh, nibbles; value = d q + m.
 *   Q8_0 (32, 34): d, 32 int8; value = d q.
 *   IQ4_NL (32, 18): d, nibbles as Q4_0; value = d kvalues[q] (kvalues: 16 int8, -127 .. 113).
 * The K-quants' superblocks of 256 elements; sub-block scales sc and mins m are small integers:
 *   Q2_K (84): 16 bytes of (sc | m << 4) per 16 elements, 64 bytes of 2-bit quants, d, dmin;
 *     value = d sc q - dmin m.
 *   Q3_K (110): 32 bytes hmask, 64 bytes 2-bit quants, 12 bytes of 6-bit scales s per 16, d;
 *     value = d (s - 32) (q - 4), q the 3-bit quant (its high bit in hmask).
 *   Q4_K (144): d, dmin, 12 bytes of 6-bit sc and m per 32, 128 bytes of nibbles; d sc q - dmin m.
 *   Q5_K (176): as Q4_K plus 32 bytes of fifth bits; q 0..31.
 *   Q6_K (210): 128 bytes low nibbles, 64 bytes high 2 bits, 16 int8 scales per 16, d;
 *     value = d sc (q - 32).
 *   IQ4_XS (136): d, 16 + 32 bits of 6-bit scales ls per 32, nibbles;
 *     value = d (ls - 32) kvalues[q].
 *
 * The device layouts interleave 16 rows (a row group; rows past the matrix's end are zeros), so
 * that one 64-byte load holds 4 bytes of each of the 16 rows and one instruction multiplies them
 * with the same 4 activation bytes (kernels.c says why). A matrix of R rows and K columns is ceil(R
 * / 16) row groups one after the other. Every type is repacked exactly (no weight is rounded):
 *   LLM_LAYOUT_F32X16 (F32, BF16), LLM_LAYOUT_F16X16 (F16): per column k, the 16 rows' values
 *     (64 or 32 bytes).
 *   LLM_LAYOUT_Q4X16 (Q4_0, Q4_1): per block of 32 columns 320 bytes: chunk c = 0..3 is 64 bytes,
 *     4 per row (row r at 4 r), byte i of a row's 4 holding element 8c + i in its low nibble and
 *     element 8c + 4 + i in its high nibble; then 16 half d, then 16 half m (value d q + m; Q4_0:
 *     m = -8 d, exactly).
 *   LLM_LAYOUT_Q8X16 (Q8_0; IQ4_NL as kvalues[q]): per block 544 bytes: chunk c = 0..7
 *     is 64 bytes, byte i of row r's 4 (at 4 r) being the int8 of element 4c + i; then 16 half d.
 *   LLM_LAYOUT_Q5X16 (Q5_0, 5.5 bits a weight as in the file): per block 352 bytes: the low 4 bits
 *   of q (0..31) as Q4X16's 256 bytes; then 8 little-endian 64-bit masks of fifth bits, mask 2c + h
 *   (h = 0: the chunk's low nibbles, 1: its high ones) holding in bit 4 r + i the fifth bit of
 *   element 8c + 4h + i of row r (one bit per byte of the chunk's 64); then 16 half d; value d (q -
 *   16). The GPUs read Q5_0 as Q8X16 (llm_gpu_layout_of).
 *   The K layouts, two-level scales: element j of a block of 32 is d sc_h q_j - dmin m_h, h = j /
 *   16 its half, sc_h and m_h int8 per row and half block, d and dmin halves per row and superblock
 *   (SB blocks). Per superblock: 16 half d, 16 half dmin (64 bytes), then its SB blocks, each the
 *   quants, then int8 sc[2][16] (half 0's 16 rows, then half 1's) and int8 m[2][16]:
 *   LLM_LAYOUT_K4X16: unsigned 4-bit q in Q4X16's 256 bytes; SB = 8 (2624 bytes per 256 columns).
 *     Q4_K (sc, m per 32 on both halves), Q2_K (q 0..3, sc and m per 16), Q3_K (q 0..7,
 *     sc = s - 32, m = 4 (s - 32), dmin = d).
 *   LLM_LAYOUT_K8X16: int8 q in Q8X16's 512 bytes; SB = 8 (4672 bytes per 256 columns). Q5_K
 *     (q 0..31), Q6_K (q - 32, m = 0, dmin = 0), IQ4_XS (kvalues[q], sc = ls - 32, m = 0).
 *   LLM_LAYOUT_K8X16_1: as K8X16 with SB = 1 (640 bytes per 32 columns): Q5_1 (q 0..31, sc = 1,
 *     m = -1, dmin = the block's m).
 */
#ifndef HCQ_LLM_QUANT_H
#define HCQ_LLM_QUANT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "gguf.h"

#ifdef __cplusplus
extern "C" {
#endif

float llm_half_to_float(uint16_t h);
uint16_t llm_float_to_half(float f); /* round to nearest even; overflow to infinity */

/* ggml's reference quantization of n elements (a multiple of the block) into dst, and back. */
void llm_quantize_row(ggml_type_t type, const float *x, void *dst, size_t n);
void llm_dequantize_row(ggml_type_t type, const void *src, float *x, size_t n);

/* The device layouts. */
typedef enum llm_layout {
  LLM_LAYOUT_F32X16,
  LLM_LAYOUT_F16X16,
  LLM_LAYOUT_Q4X16,
  LLM_LAYOUT_Q8X16,
  LLM_LAYOUT_K4X16,
  LLM_LAYOUT_K8X16,
  LLM_LAYOUT_K8X16_1,
  LLM_LAYOUT_Q5X16
} llm_layout_t;
#define LLM_ROW_GROUP 16
llm_layout_t llm_layout_of(ggml_type_t type);
/* The layout the GPU kinds' kernels read the type in (below; the CPU's where they are the same:
 * Q5_0 is Q5X16 on the CPU, Q8X16 on the GPUs). */
llm_layout_t llm_gpu_layout_of(ggml_type_t type);
/* Whether the layout's products take 8-bit input blocks (all but the float layouts). */
bool llm_layout_quantized(llm_layout_t layout);
/* "F32X16" ... (also the kernels' #define suffix). */
const char *llm_layout_name(llm_layout_t layout);
/* Bytes of the repacked matrix (rows padded to a multiple of 16). */
size_t llm_repack_bytes(ggml_type_t type, size_t rows, size_t cols);
/* Repacks rows x cols elements of type (ggml layout, row-major) into dst (llm_repack_bytes). */
void llm_repack(ggml_type_t type, const void *src, size_t rows, size_t cols, void *dst);

/* The GPU layout (kernels.glsl, kernels.cu, kernels.metal: gpu_abi.h), one per matrix, rows in
 * order, no interleave; block b of row r is block r x cols / 32 + b of the matrix:
 *   F32, F16: the rows as they are (rows x cols values). BF16 as F32.
 *   Q4_0, Q4_1: the blocks' 16 bytes of nibbles (ggml's order: element j < 16 the low nibble of
 *   byte j, j + 16 its high nibble), rows x cols / 32 blocks of 16 bytes; then per block two floats
 *   d, m (value = d x q + m; Q4_0: m = -8 d), 8 bytes each, in the same order.
 *   Q8_0: the blocks' 32 int8, rows x cols / 32 blocks of 32 bytes; then per block the float d.
 *     Q5_0 (q - 16) and IQ4_NL (kvalues[q]) the same way.
 *   The K layouts (the CPU's K4X16, K8X16, K8X16_1 terms, llm_kparts: element j of a block is
 *     d sc_h q_j - dmin m_h, h = j / 16): the blocks' quants (K4: 16 bytes of unsigned nibbles in
 *     Q4_0's order; K8 and K8_1: 32 int8); then per block one 32-bit word of int8 {sc_0, sc_1, m_0,
 *     m_1}; then per superblock (8 blocks; K8_1: 1) two floats d, dmin (the halves widened). The
 *     kernels keep the CPU's sums: per half block an integer sum, sc_0 sA + sc_1 sB and m_0 s16 +
 *     m_1 (s - s16) in integers, scaled by floats once per block.
 * Quants and scales apart keep every load aligned (a Q4_1 block is 20 bytes, a Q8_0 block 34). */
/* Whether the GPU layout holds the type: every type the CPU layouts hold (all of ggml's that the
 * decoder reads). */
bool llm_gpu_has_layout(ggml_type_t type);
size_t llm_gpu_pack_bytes(ggml_type_t type, size_t rows, size_t cols);
void llm_gpu_pack(ggml_type_t type, const void *src, size_t rows, size_t cols, void *dst);

/* An activation block as the kernels write it before a quantized matrix product: d = max |x| / 127,
 * q = x / d rounded to nearest (ties to even), s = the sum of the q, sd = s x d, s16 = the sum of
 * the first 16 q (the K layouts' mins take each half's sum). 48 bytes. */
typedef struct llm_act_block {
  float d, sd;
  int32_t s, s16;
  int8_t q[32];
} llm_act_block_t;
/* The same quantization as the kernels (for the reference). n need not be a multiple of 32: the
 * last block is padded with zeros. */
void llm_quantize_act(const float *x, size_t n, llm_act_block_t *out);
/* The inputs of a K-quant (or IQ4_XS) matrix, rounded as llama.cpp's Q8_K: one scale per 256 (the
 * element of largest magnitude maps to -127: d = -max / 127, q = min(127, round(x / d))), the 8
 * blocks of a superblock sharing it. n a multiple of 256. */
void llm_quantize_act_k(const float *x, size_t n, llm_act_block_t *out);
/* Whether a matrix of this layout takes Q8_K-style inputs (llm_quantize_act_k): K4X16, K8X16. */
bool llm_act_superblock(llm_layout_t layout);

/* ---- between quant.c and quant_k.c ---- */

/* The int8 values of the 32 elements of one block of a type that repacks into LLM_LAYOUT_Q8X16
 * (Q8_0, Q5_0, IQ4_NL), and its half d: value = d q. */
void llm_q8_parts(ggml_type_t type, const uint8_t *block, int8_t q[32], uint16_t *d);
/* One superblock of a type that repacks into a K layout, in that layout's terms (quant.h's header):
 * element j of block b is d sc[b][j / 16] q[32 b + j] - dmin m[b][j / 16]. */
typedef struct llm_kparts {
  int blocks; /* SB: 8, or 1 for Q5_1 */
  uint16_t d, dmin;
  int8_t sc[8][2], m[8][2];
  int8_t q[256];
} llm_kparts_t;
void llm_kparts(ggml_type_t type, const uint8_t *superblock, llm_kparts_t *out);
/* Q2_K ... IQ4_XS (quant_k.c): n a multiple of 256. */
void llm_quantize_row_k(ggml_type_t type, const float *x, uint8_t *dst, size_t n);
void llm_dequantize_row_k(ggml_type_t type, const uint8_t *src, float *x, size_t n);
extern const int8_t llm_iq4_values[16];
int llm_iq4_nearest(float v); /* the index of the kvalue nearest v */

#ifdef __cplusplus
}
#endif
#endif
