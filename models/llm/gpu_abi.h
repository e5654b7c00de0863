/* The decoder's kernel ABI on GPU device kinds: what kernels.glsl (Vulkan), kernels.cu (CUDA) and
 * kernels.metal (Metal) provide, and what decoder_items.c gives them. One item list serves every
 * kind (build_items); only the sources and the launch geometry (cpu_geometry on CPU; on GPU kinds
 * gpu_geometry over the kind's gpu_shape_t; picked in geometry()) differ. A new kind also needs its
 * source embedded (CMakeLists.txt), picked in program() and allowed in llm_decoder_create.
 *
 * Compilation. decoder_items.c compiles the source once per (entry, defines) after:
 *   #define DIM FFN NH NKV HD RD VOCAB CTX   the model's shape (HD the head size, RD the rotary
 *                                            part of it, KV_DIM = NKV HD), CTX the cache positions
 *   #define NORM_EPS 1e-05f  LLM_ISA_CAP n   (the latter CPU only; harmless elsewhere)
 *   the entry's layouts: W_LAYOUT (llm_embed, llm_matmul_add, llm_classify), WQ_/WK_/WV_LAYOUT
 *     (llm_qkv), WG_/WU_LAYOUT (llm_gate_up): quant.h's llm_layout_t: 0 F32 (and BF16), 1 F16, 2 Q4
 *     (Q4_0, Q4_1), 3 Q8 (Q8_0, Q5_0, IQ4_NL), 4 K4 (Q2_K, Q3_K, Q4_K), 5 K8 (Q5_K, Q6_K, IQ4_XS),
 *     6 K8_1 (Q5_1); every kind reads all seven
 *   what the architecture changes (every kind; kernels.c says each): QD (q's width, heads x head
 *     size), ROPE_NEOX, EMB_SCALE, ATTN_SCALE, FFN_GELU; per entry QKV_FUSED 0 (llm_qkv leaves q
 *     and k unrotated: NEOX rope or per-head norms), QKV_BIAS 1, QK_NORM 1 (llm_rope_heads), WINDOW
 *     n (llm_attn on a sliding-window layer), MATMUL_SET 1 (post-norms). kernels.glsl, kernels.cu
 *     and kernels.metal implement them all (and the stand-ins' twins, tests/llm_twins.h)
 *   GPU kinds also: K_IN (llm_matmul_add's input length: QD as a number for wo, FFN for down)
 *   Vulkan also: KERNEL_<entry>, LANES, ROWS, CLS_ROWS, SEL, ID_BITS (the sources' own constants;
 *     a kind adds what its geometry needs in program()).
 *   CUDA and Metal also: KERNEL_<entry>, ROWS (32), CLS_ROWS, SEL, ID_BITS, NORM_EPS_BITS
 *     (NORM_EPS's bits as an integer: the stand-ins' host twins read the shape back: the Metal one
 *     from the source's #defines, the CUDA one from kernels.cu's empty entry llm_shape_<the
 *     integers> and the two float scales from its global llm_scales, a tag and the floats' bytes).
 *
 * Entries: buffers (the first nouts written), then 32-bit values, in this order; n is the pass's
 * token count (1 for a decoding step), p0 its first position. Every entry but llm_embed and
 * llm_begin reads p0 and n from the info buffer ({int32 p0, n}), which those two write, so a replay
 * patches one value per device.
 *   llm_embed      x, info, tokens, embedding; vals p0, n: x[i] = row tokens[p0 + i]
 *   llm_begin      info; vals p0, n: (the second device's info)
 *   llm_norm       xf, xq, x, weights, info; vals last: rows of x RMS-normed into xf (floats) and
 *                  xq (blocks); last: row n - 1 only, into row 0
 *   llm_qkv        q, kcache, vcache, xf, xq, wq, wk, wv, rope, info[, kraw[, bq, bk, bv]] (10, 11
 *                  or 14 buffers: kraw unless QKV_FUSED and no biases, the biases with QKV_BIAS):
 *                  q, k rotated at p0 + i; k, v into the caches at p0 + i (not fused: q raw, k raw
 *                  into kraw [token][KV_DIM]; biases added)
 *   llm_rope_heads q, kcache, kraw, rope, info[, q norm, k norm]; grid (NH + NKV, n): a head normed
 *                  (QK_NORM), rotated; q in place, k into the cache
 *   llm_attn       out, q, kcache, vcache, info: token i attends 0..p0 + i
 *   llm_quantize   out blocks, in: rows of DIM into blocks
 *   llm_matmul_add x, in floats, in blocks, w, info; vals k: x[i] += w . in[i] (MATMUL_SET: =)
 *   llm_norm_add   x, out, weights: x[i] += RMS norm of out[i] x w
 *   llm_gate_up    hf, hq, xf, xq, wgate, wup, info: gate(g.x) (u.x) into hf, hq
 *   llm_classify   logits, best, xf, xq, classifier; vals first: logits of row 0; per group g:
 *                  best[2g] = the top logit's bits, best[2g + 1] its lowest index
 *   llm_select     tokens, scratch, best, logits, sampler, info; vals groups: tokens[p0 + n]
 * BATCH (a batch decoder, #define BATCH 1 and BATCH_ROWS, its rows a step): p0 is the step's
 * parity; info goes on from word 4 with two regions of 4 + 5 BATCH_ROWS words, the parity's written
 * by the host: {choosing rows S, 3 pad}, BATCH_ROWS rows {position, cache position (slot x CTX +
 * position), token (< 0: tokens[-1 - token], an earlier step's choice), pad} and the S choosing
 * rows' indices; llm_embed reads its row's token there (the parity from its value) and writes it
 * into the history (its 5th buffer: slots x CTX token ids) at the row's cache position, llm_qkv /
 * llm_rope_heads rotate at the row's position and write the caches at its cache position, llm_attn
 * attends to its slot's positions 0..position, llm_norm with last normalises choosing row j into
 * row j, llm_classify (info as a 6th buffer) writes row j's logits at j VOCAB and its best at j 2
 * groups (Vulkan: grid y = S), llm_select (grid S) chooses row j's token with sampler p0 BATCH_ROWS
 * + j (packed, 5 words each), its own scratch and logits, into tokens[p0 BATCH_ROWS + j], its draw
 * at position + 1; its 7th buffer is the history (row j's sequence: from its cache position -
 * position, position + 1 ids). Each kind decides how many classifier rows a group takes
 * (cls_rows(): one best entry per group, `groups` of them); the sampler's parameters are {float
 * temperature, top_p; int32 top_k; uint32 seed_lo, seed_hi; float min_p, repeat_penalty,
 * frequency_penalty, presence_penalty; int32 penalty_last_n} (penalties apply when penalty_last_n >
 * 0 and repeat_penalty != 1, or a frequency or presence penalty != 0; the history is tokens[at -
 * penalty_last_n .. at), at = p0 + n); scratch holds VOCAB x 16 bytes. The choice must be
 * kernels.c's: greedy without penalties, the highest logit and the lowest id on ties (the groups'
 * bests); otherwise kernels.c's sample(), llama.cpp's chain: penalties, top-k, top-p, min-p (at
 * temperature 1), temperature, the draw (kernels.glsl's llm_select does it without a sort, with
 * exact integer sums).
 *
 * Memory. x, xf (and xb, post-norms' projection output): max_batch rows of DIM floats; q, att: of
 * QD; kraw: of KV_DIM; hf: rows of FFN floats; xq, attq, hq: rows of NBLK(k) activation blocks
 * (llm_act_block_t, 48 bytes: float d, float s d, int32 s, int32 s16, int8 q[32]; d = max|x| / 127,
 * q rounded to nearest even, s the sum of the q, s16 that of the first 16: the K layouts' mins take
 * each half's); the caches: CTX x KV_DIM floats each, laid out as the kind likes (Vulkan:
 * [position][kv head][element]); the rotary table: per position RD floats, (cos, sin) per pair.
 * Weights: the GPU layout of quant.h (llm_gpu_pack): rows in order; Q4: 16 bytes of nibbles per
 * block (ggml's order) for all blocks, then (float d, float m) per block; Q8: 32 int8 per block,
 * then float d per block; K4/K8/K8_1: the blocks' quants (16 bytes of nibbles in Q4's order, or 32
 * int8), then per block a word of int8 {sc_0, sc_1, m_0, m_1}, then per superblock (8 blocks, K8_1
 * 1) floats {d, dmin}: element j of a block is d sc_h q_j - dmin m_h (h = j / 16); a block's
 * product is kept in integers up to sc_0 sA + sc_1 sB and m_0 s16 + m_1 (s - s16) (sA, sB the
 * halves' sums of q_w q_x), then d d_x isum - dmin d_x msum; F32/F16 as in the file (BF16 widened
 * to F32); norms and biases as floats. Buffers start 64-byte aligned. The rotary table is the
 * sliding-window one (its own base) on a window layer; llama 3's rope_freqs are in the table
 * already.
 *
 * Vulkan's geometry (vulkan_shape): groups of 8 (one lavapipe vector), a token per group along y,
 * products of ROWS = 16 rows a group in rounds of 8 (subgroupAdd finishes a row), attention a group
 * per (head, token), the sampler one group of SEL = 256.
 *
 * CUDA's and Metal's geometry (warp_shape, the same for both, so one set of host twins,
 * tests/llm_twins.h, serves both stand-ins): groups of one warp / SIMD group of 32, a token per
 * group along y, products of 32 rows a group (a row a lane; the classifier CLS_ROWS = 64 in rounds
 * of 32), sums across a group as butterflies of xor shuffles (every lane the same bits), attention
 * a group per (head, token), the sampler one group of SEL = 256. Not yet on any GPU kind: several
 * tokens per group for the prompt pass (the weights read once for them) and attention split over
 * chunks of positions when contexts are long. */
#ifndef HCQ_LLM_GPU_ABI_H
#define HCQ_LLM_GPU_ABI_H
#endif
