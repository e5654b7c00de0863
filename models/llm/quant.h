/* Weight formats on the host: half floats, ggml's block formats (quantizing, for the models the
 * tests write, and dequantizing, for the plain C reference) and the device layouts the CPU kernels
 * read (kernels.c), into which the decoder repacks each weight matrix once when it loads.
 *
 * ggml's blocks hold 32 consecutive elements of a row:
 *   Q4_0 (18 bytes): half d, 16 bytes of nibbles; element j < 16 is the low nibble of byte j, element
 *                    j + 16 its high nibble; value = d x (q - 8).
 *   Q4_1 (20 bytes): half d, half m, nibbles as Q4_0; value = d x q + m.
 *   Q8_0 (34 bytes): half d, 32 int8; value = d x q.
 *
 * The device layouts interleave 16 rows (a row group; rows past the matrix's end are zeros), so that
 * one 64-byte load holds 4 bytes of each of the 16 rows and one instruction multiplies them with the
 * same 4 activation bytes (kernels.c says why). A matrix of R rows and K columns is ceil(R / 16) row
 * groups one after the other; a row group is K / 32 blocks (K elements for the float layouts):
 *   LLM_LAYOUT_Q4X16 (Q4_0 and Q4_1 weights): per block 320 bytes: chunk c = 0..3 is 64 bytes, 4 per
 *     row (row r at 4 r), byte i of a row's 4 holding element 8c + i in its low nibble and element
 *     8c + 4 + i in its high nibble; then 16 half d, then 16 half m (Q4_0: m = -8 d, exactly).
 *   LLM_LAYOUT_Q8X16 (Q8_0): per block 544 bytes: chunk c = 0..7 is 64 bytes, byte i of row r's 4
 *     (at 4 r) being element 4c + i; then 16 half d.
 *   LLM_LAYOUT_F32X16, LLM_LAYOUT_F16X16 (F32, F16): per column k, the 16 rows' values (64 or 32
 *     bytes).
 */
#ifndef HCQ_LLM_QUANT_H
#define HCQ_LLM_QUANT_H

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
typedef enum llm_layout { LLM_LAYOUT_F32X16, LLM_LAYOUT_F16X16, LLM_LAYOUT_Q4X16, LLM_LAYOUT_Q8X16 } llm_layout_t;
#define LLM_ROW_GROUP 16
llm_layout_t llm_layout_of(ggml_type_t type);
/* "F32X16" ... (also the kernels' #define suffix). */
const char *llm_layout_name(llm_layout_t layout);
/* Bytes of the repacked matrix (rows padded to a multiple of 16). */
size_t llm_repack_bytes(ggml_type_t type, size_t rows, size_t cols);
/* Repacks rows x cols elements of type (ggml layout, row-major) into dst (llm_repack_bytes). */
void llm_repack(ggml_type_t type, const void *src, size_t rows, size_t cols, void *dst);

/* The GPU layout (kernels.glsl, and the CUDA and Metal kernels to come: gpu_abi.h), one per matrix,
 * rows in order, no interleave:
 *   F32, F16: the rows as they are (rows x cols values).
 *   Q4_0, Q4_1: the blocks' 16 bytes of nibbles (ggml's order: element j < 16 the low nibble of byte
 *     j, j + 16 its high nibble), rows x cols / 32 blocks of 16 bytes; then per block two floats
 *     d, m (value = d x q + m; Q4_0: m = -8 d), 8 bytes each, in the same order.
 *   Q8_0: the blocks' 32 int8, rows x cols / 32 blocks of 32 bytes; then per block the float d.
 * Quants and scales apart keep every load aligned (a Q4_1 block is 20 bytes, a Q8_0 block 34). */
size_t llm_gpu_pack_bytes(ggml_type_t type, size_t rows, size_t cols);
void llm_gpu_pack(ggml_type_t type, const void *src, size_t rows, size_t cols, void *dst);

/* An activation block as the kernels write it before a quantized matrix product: d = max |x| / 127,
 * q = x / d rounded to nearest (ties to even), s = the sum of the q, sd = s x d. 48 bytes. */
typedef struct llm_act_block {
  float d, sd;
  int32_t s, pad;
  int8_t q[32];
} llm_act_block_t;
/* The same quantization as the kernels (for the reference). n need not be a multiple of 32: the
 * last block is padded with zeros. */
void llm_quantize_act(const float *x, size_t n, llm_act_block_t *out);

#ifdef __cplusplus
}
#endif
#endif
