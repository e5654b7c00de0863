/* Every ggml weight type the llm decoder reads (models/llm/quant.h): F32, F16, BF16, Q4_0, Q4_1,
 * Q5_0, Q5_1, Q8_0, IQ4_NL, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_XS.
 *  - llm_dequantize_row against blocks written by hand from ggml-common.h's layouts (the values
 *    decoded by hand);
 *  - llm_repack: the repacked bytes, read back by quant.h's description of the layouts, are the
 *    dequantized weights (every type repacks exactly);
 *  - a tiny model of each type (every matrix of that type) against the plain C reference that
 *    rounds the same inputs to 8 bits, the same greedy tokens, and the AVX-512 VNNI, AVX2 and
 *    portable kernels the same bits;
 *  - a type without GPU kernels refused on VULKAN, CUDA and METAL by name, before any device opens.
 */
#include <math.h>

#include "llm.h"
#include "llm_reference.h"
#include "llm_test_util.h"
#include "llm_tiny.h"
#include "quant.h"
#include "test_util.h"

static void put_half_at(uint8_t *p, float f) {
  uint16_t h = llm_float_to_half(f);
  memcpy(p, &h, 2);
}

/* Dequantizes one block (or superblock) of bytes and checks the listed elements. */
static void expect_elements(ggml_type_t type, const uint8_t *block, const int *at,
                            const float *want, int n) {
  float x[256];
  llm_dequantize_row(type, block, x, ggml_block_elems(type) == 1 ? 4 : ggml_block_elems(type));
  for (int i = 0; i < n; i++)
    cr_assert(x[at[i]] == want[i], "%s: element %d is %g, expected %g", ggml_type_name(type), at[i],
              x[at[i]], want[i]);
}

TestSuite(llm_types, .timeout = 280);

Test(llm_types, dequantize_hand_written_blocks) {
  uint8_t b[256];
  /* F16, BF16 */
  uint16_t h[4] = {0x3c00, 0xc000, 0x3555, 0x0001};
  expect_elements(GGML_TYPE_F16, (uint8_t *)h, (int[]){0, 1, 3},
                  (float[]){1, -2, 5.9604644775390625e-8f}, 3);
  uint16_t bf[4] = {0x3f80, 0xc040, 0x4049, 0};
  expect_elements(GGML_TYPE_BF16, (uint8_t *)bf, (int[]){0, 1, 2}, (float[]){1, -3, 3.140625f}, 3);
  /* Q4_0: d 0.5, byte 0 = 0x1f: element 0 (15 - 8) d, element 16 (1 - 8) d; 0x88 is 0 */
  memset(b, 0x88, 18), put_half_at(b, 0.5f), b[2] = 0x1f;
  expect_elements(GGML_TYPE_Q4_0, b, (int[]){0, 16, 5}, (float[]){3.5f, -3.5f, 0}, 3);
  /* Q4_1: d 0.5, m -1 */
  memset(b, 0, 20), put_half_at(b, 0.5f), put_half_at(b + 2, -1), b[4] = 0x30;
  expect_elements(GGML_TYPE_Q4_1, b, (int[]){0, 16, 1}, (float[]){-1, 0.5f, -1}, 3);
  /* Q5_0: d 0.25, qh bit 0 (element 0's fifth bit), nibbles 0x2f: element 0 = 31 - 16, 16 = 2 - 16
   */
  memset(b, 0, 22), put_half_at(b, 0.25f), b[2] = 0x01, b[6] = 0x2f;
  expect_elements(GGML_TYPE_Q5_0, b, (int[]){0, 16, 1}, (float[]){3.75f, -3.5f, -4}, 3);
  /* Q5_1: d 0.5, m 1, qh bit 17, byte 1 = 0x2f: element 1 = 15, element 17 = 2 + 16 */
  memset(b, 0, 24), put_half_at(b, 0.5f), put_half_at(b + 2, 1), b[6] = 0x02, b[9] = 0x2f;
  expect_elements(GGML_TYPE_Q5_1, b, (int[]){1, 17, 0}, (float[]){8.5f, 10, 1}, 3);
  /* Q8_0 */
  memset(b, 0, 34), put_half_at(b, 0.5f), b[2 + 3] = (uint8_t)-7;
  expect_elements(GGML_TYPE_Q8_0, b, (int[]){3, 4}, (float[]){-3.5f, 0}, 2);
  /* IQ4_NL: kvalues[0] = -127, kvalues[15] = 113, kvalues[8] = 1 */
  memset(b, 0x88, 18), put_half_at(b, 0.5f), b[2] = 0xf0;
  expect_elements(GGML_TYPE_IQ4_NL, b, (int[]){0, 16, 1}, (float[]){-63.5f, 56.5f, 0.5f}, 3);
}

Test(llm_types, dequantize_hand_written_superblocks) {
  uint8_t b[256];
  /* Q2_K: scales (sc | m << 4) per 16 at 0, 2-bit quants at 16 (element e in byte 32 (e / 128) + e
   * % 32, bits 2 ((e % 128) / 32)), d 1 and dmin 0.5 at 80 */
  memset(b, 0, 84), put_half_at(b + 80, 1), put_half_at(b + 82, 0.5f);
  b[0] = 0x21, b[2] = 0x12, b[4] = 0x03, b[9] = 0xf1, b[16] = 0xe4, b[16 + 53] = 0x03;
  expect_elements(GGML_TYPE_Q2_K, b, (int[]){0, 32, 64, 96, 149, 150},
                  (float[]){0 - 1.0f, 2 * 1 - 0.5f, 3 * 2, 0, 3 - 7.5f, -7.5f}, 6);
  /* Q3_K: hmask at 0, 2-bit quants at 32, 6-bit scales at 96, d 1 at 108. Scale 0: low 1 (byte 0),
   * high 2 (byte 8, bits 0-1): 33 - 32 = 1; scale 9: low 5 (byte 1's high nibble), high 3 (byte 9,
   * bits 4-5): 53 - 32 = 21; scale 2: 0 - 32. Element 0: 3 + 4 (hmask) - 4 = 3; element 1: -4;
   * element 149: 1 + 4 - 4 = 1 (hmask byte 21 bit 4); element 148: -4; element 32: -4 at scale -32.
   */
  memset(b, 0, 110), put_half_at(b + 108, 1);
  b[96] = 0x01, b[96 + 8] = 0x02, b[96 + 1] = 0x50, b[96 + 9] = 0x30;
  b[32] = 0x03, b[0] = 0x01, b[32 + 53] = 0x01, b[21] = 0x10;
  expect_elements(GGML_TYPE_Q3_K, b, (int[]){0, 1, 149, 148, 32}, (float[]){3, -4, 21, -84, 128},
                  5);
  /* Q4_K: d 1, dmin 0.5, 12 bytes of scales at 4 (sub-block 0: sc 3, m 2; sub-block 5: sc 1 | 1 <<
   * 4, m 2 | 3 << 4), nibbles at 16. Element 0: low nibble of byte 0; element 163: high nibble of
   * byte 32 x 2 + 3. */
  memset(b, 0, 176), put_half_at(b, 1), put_half_at(b + 2, 0.5f);
  b[4 + 0] = 3, b[4 + 4] = 2, b[4 + 9] = 0x21, b[4 + 1] = 0x40, b[4 + 5] = 0xc0;
  b[16] = 0x07, b[16 + 67] = 0xa0;
  expect_elements(GGML_TYPE_Q4_K, b, (int[]){0, 163, 32, 1},
                  (float[]){3 * 7 - 1.0f, 17 * 10 - 25.0f, 0, -1}, 4);
  /* Q5_K: the same scales; fifth bits at 16 (element e: byte e % 32, bit e / 32), nibbles at 48 */
  memset(b + 16, 0, 160);
  b[48] = 0x07, b[48 + 67] = 0xa0, b[16 + 3] = 0x20;
  expect_elements(GGML_TYPE_Q5_K, b, (int[]){0, 163, 1},
                  (float[]){3 * 7 - 1.0f, 17 * 26 - 25.0f, -1}, 3);
  /* Q6_K: low nibbles at 0, high 2 bits at 128, int8 scales at 192, d 0.5 at 208. Element 0: 5 | 2
   * << 4, minus 32 = 5 at scale 2; element 213 (n 1, k 2, l 21): high nibble of byte 64 + 21, bits
   * 4-5 of byte 128 + 32 + 21: 3 - 32 at scale -3 (scale 13). */
  memset(b, 0, 210), put_half_at(b + 208, 0.5f);
  b[192] = 2, b[192 + 13] = (uint8_t)-3, b[0] = 0x05, b[128] = 0x02, b[85] = 0x30;
  expect_elements(GGML_TYPE_Q6_K, b, (int[]){0, 213, 1}, (float[]){5, 43.5f, -32}, 3);
  /* IQ4_XS: d 0.5, scales_h 0x0042 at 2, scales_l at 4 (sub-block 0: 1 | 2 << 4 = 33 - 32 = 1;
   * sub-block 3: 4 | 1 << 4 = 20 - 32 = -12), nibbles at 8 (16 bytes a sub-block). */
  memset(b, 0, 136), put_half_at(b, 0.5f);
  b[2] = 0x42, b[4] = 0x01, b[5] = 0x40, b[8] = 0xf0, b[8 + 48 + 1] = 0x90;
  expect_elements(GGML_TYPE_IQ4_XS, b, (int[]){0, 16, 113, 97},
                  (float[]){-63.5f, 56.5f, -78, 0.5f * -12 * -127}, 4);
}

/* ---- the repacked layouts (quant.h's description, read back independently of the kernels) ---- */

/* Element k of row r of a repacked matrix of cols columns. */
static float repacked_element(llm_layout_t layout, const uint8_t *w, size_t cols, size_t r,
                              size_t k) {
  size_t lane = r % 16, b = k / 32, j = k % 32;
  float v;
  switch (layout) {
    case LLM_LAYOUT_F32X16: memcpy(&v, w + (r / 16 * cols + k) * 64 + lane * 4, 4); return v;
    case LLM_LAYOUT_F16X16: {
      uint16_t hv;
      memcpy(&hv, w + (r / 16 * cols + k) * 32 + lane * 2, 2);
      return llm_half_to_float(hv);
    }
    default: break;
  }
  uint16_t d, m;
  if (layout == LLM_LAYOUT_Q5X16) { /* nibbles as Q4X16, mask 2c + h's bit 4 lane + i the fifth bit,
                                       d (q - 16) */
    const uint8_t *blk = w + (r / 16 * (cols / 32) + b) * 352;
    size_t c = j / 8, h = j % 8 / 4, i = j % 4, bit = 4 * lane + i;
    uint8_t byte = blk[64 * c + 4 * lane + i];
    int q = (h ? byte >> 4 : byte & 15) | (blk[256 + 16 * c + 8 * h + bit / 8] >> (bit % 8) & 1)
                                              << 4;
    memcpy(&d, blk + 320 + lane * 2, 2);
    return llm_half_to_float(d) * (float)(q - 16);
  }
  if (layout == LLM_LAYOUT_Q4X16 || layout == LLM_LAYOUT_Q8X16) {
    bool q4 = layout == LLM_LAYOUT_Q4X16;
    const uint8_t *blk = w + (r / 16 * (cols / 32) + b) * (q4 ? 320 : 544);
    memcpy(&d, blk + (q4 ? 256 : 512) + lane * 2, 2);
    if (!q4) return llm_half_to_float(d) * (float)(int8_t)blk[64 * (j / 4) + 4 * lane + j % 4];
    memcpy(&m, blk + 288 + lane * 2, 2);
    uint8_t byte = blk[64 * (j / 8) + 4 * lane + j % 4];
    return llm_half_to_float(d) * (float)(j % 8 < 4 ? byte & 15 : byte >> 4) + llm_half_to_float(m);
  }
  size_t sb = layout == LLM_LAYOUT_K8X16_1 ? 1 : 8, qb = layout == LLM_LAYOUT_K4X16 ? 256 : 512;
  size_t super_bytes = 64 + sb * (qb + 64), supers = cols / 32 / sb;
  const uint8_t *sup = w + (r / 16 * supers + b / sb) * super_bytes,
                *blk = sup + 64 + b % sb * (qb + 64);
  memcpy(&d, sup + lane * 2, 2);
  memcpy(&m, sup + 32 + lane * 2, 2);
  int q = layout == LLM_LAYOUT_K4X16 ? (j % 8 < 4 ? blk[64 * (j / 8) + 4 * lane + j % 4] & 15
                                                  : blk[64 * (j / 8) + 4 * lane + j % 4] >> 4)
                                     : (int8_t)blk[64 * (j / 4) + 4 * lane + j % 4];
  int sc = (int8_t)blk[qb + 16 * (j / 16) + lane], mn = (int8_t)blk[qb + 32 + 16 * (j / 16) + lane];
  return (float)((double)llm_half_to_float(d) * sc * q - (double)llm_half_to_float(m) * mn);
}

static const ggml_type_t k_all_types[] = {
    GGML_TYPE_F32,  GGML_TYPE_F16,  GGML_TYPE_BF16, GGML_TYPE_Q4_0,   GGML_TYPE_Q4_1,
    GGML_TYPE_Q5_0, GGML_TYPE_Q5_1, GGML_TYPE_Q8_0, GGML_TYPE_IQ4_NL, GGML_TYPE_Q2_K,
    GGML_TYPE_Q3_K, GGML_TYPE_Q4_K, GGML_TYPE_Q5_K, GGML_TYPE_Q6_K,   GGML_TYPE_IQ4_XS};
enum { N_TYPES = sizeof(k_all_types) / sizeof(k_all_types[0]) };

Test(llm_types, repacking_keeps_every_weight) {
  enum { ROWS = 37, COLS = 512 };
  uint64_t seed = 5;
  float x[COLS], want[COLS];
  for (int t = 0; t < N_TYPES; t++) {
    ggml_type_t type = k_all_types[t];
    size_t row_bytes = COLS / ggml_block_elems(type) * ggml_block_bytes(type);
    uint8_t *src = malloc(row_bytes * ROWS), *dst = malloc(llm_repack_bytes(type, ROWS, COLS));
    for (int r = 0; r < ROWS; r++) {
      for (int k = 0; k < COLS; k++)
        x[k] = (0.5f + (float)(r % 5)) * tiny_uniform(&seed) + 0.1f * (float)(k % 7);
      llm_quantize_row(type, x, src + (size_t)r * row_bytes, COLS);
    }
    llm_repack(type, src, ROWS, COLS, dst);
    llm_layout_t layout = llm_layout_of(type);
    for (int r = 0; r < ROWS; r++) {
      llm_dequantize_row(type, src + (size_t)r * row_bytes, want, COLS);
      for (int k = 0; k < COLS; k++) {
        float got = repacked_element(layout, dst, COLS, (size_t)r, (size_t)k);
        cr_assert(fabsf(got - want[k]) <= 1e-6f * fmaxf(1, fabsf(want[k])),
                  "%s (%s): row %d, column %d is %g, dequantized %g", ggml_type_name(type),
                  llm_layout_name(layout), r, k, got, want[k]);
      }
    }
    free(src), free(dst);
  }
}

/* ---- tiny models of each type through the decoder ---- */

/* Greedy generation of steps tokens after a 3-token prompt chooses the reference's argmax (its
 * inputs rounded to 8 bits when quantize) at every step. */
static void greedy_matches(llm_decoder_t *d, const llm_model_t *m, const int32_t *prompt,
                           bool quantize, int steps, const char *name) {
  llm_generate_result_t g;
  OK(llm_generate(d, prompt, 3, &(llm_generate_options_t){.steps = steps, .graph = true}, &g));
  llm_ref_t r;
  cr_assert(llm_ref_init(&r, m, 64, quantize));
  const float *lg = NULL;
  for (int p = 0; p < 3; p++) lg = llm_ref_step(&r, prompt[p], p);
  for (int i = 0; i < g.n; i++) {
    int want = llm_ref_argmax(lg, r.c.vocab);
    cr_assert_eq(g.ids[i], want, "%s: token %d is %d, the reference's %d", name, i, g.ids[i], want);
    lg = llm_ref_step(&r, want, 3 + i);
  }
  cr_assert_eq(g.n, steps);
  llm_ref_free(&r);
  free(g.ids);
}

/* The decoder's logits (teacher forced) under every kernel version are the same bits, and within
 * tol of the reference's (its inputs rounded to 8 bits unless float); greedy generation chooses the
 * reference's tokens. */
static void type_path(ggml_type_t type, int dim, int ffn, int heads, int kv_heads, float tol,
                      uint64_t seed) {
  tiny_spec_t s = tiny_uniform_spec(dim, ffn, 2, heads, kv_heads, 97, type, false, seed);
  const char *name = ggml_type_name(type);
  llm_model_t *m = tiny_model(&s, name);
  enum { N = 24 };
  int32_t toks[N];
  random_tokens(toks, N, 97, seed);
  static const char *const caps[] = {"avx512", "avx2", "portable"};
  float *logits[3];
  for (int i = 0; i < 3; i++) {
    setenv("HCQ_LLM_KERNELS", caps[i], 1);
    llm_decoder_t *d = decoder_on(m, HCQ_DEVICE_CPU, 1, 64, 16);
    logits[i] = malloc((size_t)N * 97 * 4);
    forced(d, toks, N, true, logits[i]);
    if (i == 0) {
      bool quantized = llm_layout_quantized(llm_layout_of(type));
      float *want = malloc((size_t)N * 97 * 4);
      ref_forced(m, toks, N, quantized, want);
      compare_logits(logits[0], want, N, 97, tol, 0.1f, name);
      free(want);
      greedy_matches(d, m, toks, quantized, 20, name);
    }
    OK(llm_decoder_destroy(d));
  }
  unsetenv("HCQ_LLM_KERNELS");
  for (int i = 1; i < 3; i++)
    cr_assert(!memcmp(logits[0], logits[i], (size_t)N * 97 * 4),
              "%s: the %s kernels' logits differ from the %s ones'", name, caps[i], caps[0]);
  for (int i = 0; i < 3; i++) free(logits[i]);
  llm_model_close(m);
}

/* Rows of 160 (5 heads of 32, 1 KV head) and 96 for the types of 32-element blocks; 256 and 512 for
 * the K-quants and IQ4_XS (superblocks of 256). */
Test(llm_types, bf16_weights_match_the_float_reference) {
  type_path(GGML_TYPE_BF16, 40, 72, 5, 1, 1e-4f, 101);
}
Test(llm_types, q5_0_weights_match_the_reference) {
  type_path(GGML_TYPE_Q5_0, 160, 96, 5, 1, 0.05f, 102);
}
Test(llm_types, q5_1_weights_match_the_reference) {
  type_path(GGML_TYPE_Q5_1, 160, 96, 5, 1, 0.05f, 103);
}
Test(llm_types, iq4_nl_weights_match_the_reference) {
  type_path(GGML_TYPE_IQ4_NL, 160, 96, 5, 1, 0.05f, 104);
}
Test(llm_types, q2_k_weights_match_the_reference) {
  type_path(GGML_TYPE_Q2_K, 256, 512, 4, 2, 0.05f, 105);
}
Test(llm_types, q3_k_weights_match_the_reference) {
  type_path(GGML_TYPE_Q3_K, 256, 512, 4, 2, 0.05f, 106);
}
Test(llm_types, q4_k_weights_match_the_reference) {
  type_path(GGML_TYPE_Q4_K, 256, 512, 4, 2, 0.05f, 107);
}
Test(llm_types, q5_k_weights_match_the_reference) {
  type_path(GGML_TYPE_Q5_K, 256, 512, 4, 2, 0.05f, 108);
}
Test(llm_types, q6_k_weights_match_the_reference) {
  type_path(GGML_TYPE_Q6_K, 256, 512, 4, 2, 0.05f, 109);
}
Test(llm_types, iq4_xs_weights_match_the_reference) {
  type_path(GGML_TYPE_IQ4_XS, 256, 512, 4, 2, 0.05f, 110);
}

/* Gemma 3 270M Q4_K_M's mix, one type per matrix (Q8_0 embedding, Q5_0, Q4_K, Q6_K), with the other
 * K types and Q5_1 in the rest; the three kernel versions the same bits. */
Test(llm_types, a_model_mixing_every_layout_matches_the_reference) {
  tiny_spec_t s = tiny_uniform_spec(256, 512, 2, 4, 2, 97, GGML_TYPE_Q4_K, false, 111);
  s.types[TINY_EMB] = GGML_TYPE_Q6_K;
  s.types[TINY_Q] = GGML_TYPE_Q5_0;
  s.types[TINY_K] = GGML_TYPE_Q2_K;
  s.types[TINY_V] = GGML_TYPE_Q6_K;
  s.types[TINY_O] = GGML_TYPE_Q3_K;
  s.types[TINY_GATE] = GGML_TYPE_Q5_K;
  s.types[TINY_UP] = GGML_TYPE_IQ4_XS;
  s.types[TINY_DOWN] = GGML_TYPE_Q5_1;
  s.types[TINY_OUT] = GGML_TYPE_IQ4_NL;
  llm_model_t *m = tiny_model(&s, "every_layout");
  enum { N = 24 };
  int32_t toks[N];
  random_tokens(toks, N, 97, 112);
  llm_decoder_t *d = decoder_on(m, HCQ_DEVICE_CPU, 1, 64, 16);
  forced_matches_reference(d, m, toks, N, true, 0.05f, 0.1f, "every layout");
  OK(llm_decoder_destroy(d));
  llm_model_close(m);
}

/* A matrix of a type no kernel reads (IQ2_XXS) is refused when the model opens: UNIMPLEMENTED (exit
 * 3) naming the tensor and the type, not a damaged file. */
Test(llm_types, a_type_without_kernels_is_refused_by_name) {
  tiny_spec_t s = tiny_uniform_spec(256, 256, 1, 4, 2, 97, GGML_TYPE_Q8_0, false, 121);
  s.omit = "blk.0.ffn_up.weight";
  gguf_writer_t *w;
  OK(tiny_build(&s, &w));
  uint64_t ne[2] = {256, 256};
  uint8_t *zeros = calloc(256, 66);
  OK(gguf_writer_add_tensor(w, "blk.0.ffn_up.weight", GGML_TYPE_IQ2_XXS, ne, 2, zeros));
  free(zeros);
  char path[PATH_MAX];
  tmp_path(path, sizeof(path), "iq2");
  OK(gguf_writer_write(w, path));
  gguf_writer_free(w);
  llm_model_t *m;
  FAILS(llm_model_open(path, &m), HCQ_UNIMPLEMENTED, "\"blk.0.ffn_up.weight\"", "IQ2_XXS");
  unlink(path);
}
