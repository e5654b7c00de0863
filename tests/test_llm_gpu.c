/* The llama GGUF decoder (models/llm) on GPU device kinds (Vulkan: lavapipe in CI), against the CPU
 * path and the plain C reference:
 *  - tiny models (llm_tiny.h) against the reference (llm_reference.h): float weights within 1e-4 of
 *    it and its greedy tokens; weights in blocks within 0.05 (the reference rounds the inputs of
 *    those matrices to 8 bits as the kernels do; what is left is float sums in another order, as on
 *    the CPU); the sampler draws the CPU path's tokens from the same seeds; a prompt pass gives the
 *    bits of token-by-token steps, eager launches those of graph replays, two devices those of one;
 *  - the real model (SmolLM2-135M-Instruct) teacher-forced on the CPU path's greedy tokens of two
 *    prompts, prompt pass and decoding steps: at every position the CPU path's token, or a near
 *    tie (the CPU path's two best logits within 0.25); eager and graph the same tokens.
 * lavapipe runs the shaders on the CPU: the real model runs a few tokens only. The same suites run
 * on the CUDA and Metal stand-ins (host twins of kernels.cu / kernels.metal), every architecture
 * and Gemma 3 270M included. */
#include <limits.h>
#include <math.h>
#include <sys/stat.h>

#include "cuda/nvrtc.h"
#include "llm.h"
#include "llm_gemma.h"
/* the GPU kernels round every input in blocks of 32 (no Q8_K-style inputs) */
#define LLM_REF_Q8K 0
#include "llm_reference.h"
#include "llm_test_util.h"
#include "llm_tiny.h"
#include "test_util.h"
#include "tokenizer.h"

static hcq_device_kind_t g_kind = HCQ_DEVICE_VULKAN;

/* Skips the test, saying why, unless `devices` devices of the kind can be opened. */
static void require(int devices) {
  hcq_device_info_t infos[HCQ_DEVICE_KIND_COUNT];
  size_t n = hcq_device_query(infos, HCQ_DEVICE_KIND_COUNT);
  for (size_t i = 0; i < n && i < HCQ_DEVICE_KIND_COUNT; i++) {
    if (infos[i].kind != g_kind) continue;
    if (!infos[i].available)
      cr_skip_test("no %s device: %s", hcq_device_kind_name(g_kind), infos[i].description);
    const char *virt_name = g_kind == HCQ_DEVICE_METAL ? "HCQ_METAL_VIRTUAL" : "HCQ_VULKAN_VIRTUAL",
               *virt = getenv(virt_name);
    bool can_virt = g_kind == HCQ_DEVICE_VULKAN || g_kind == HCQ_DEVICE_METAL;
    if (infos[i].count < devices && !(can_virt && virt && atoi(virt) > 0))
      cr_skip_test("%d %s devices wanted, %d present%s", devices, hcq_device_kind_name(g_kind),
                   infos[i].count, can_virt ? " (HCQ_*_VIRTUAL=1 opens more)" : "");
    return;
  }
  cr_skip_test("no %s row in hcq info", hcq_device_kind_name(g_kind));
}

/* ---- tiny models ---- */

/* Odd shapes (as test_llm.c's float path): rows not a multiple of 16, 5 heads of 8, one KV head,
 * an untied classifier, 40 positions. */
static void float_path(ggml_type_t type, const char *name) {
  require(1);
  tiny_spec_t s = tiny_uniform_spec(40, 72, 2, 5, 1, 50, type, false, 11);
  llm_model_t *m = tiny_model(&s, name);
  llm_decoder_t *d = decoder_on(m, g_kind, 1, 64, 16);
  enum { N = 40 };
  int32_t toks[N];
  random_tokens(toks, N, 50, 3);
  forced_matches_reference(d, m, toks, N, false, 1e-4f, 0, name);
  greedy_matches_reference(d, m, toks, 3, 20, name);
  OK(llm_decoder_destroy(d));
  llm_model_close(m);
}

static void f32_weights(void) { float_path(GGML_TYPE_F32, "f32"); }
static void f16_weights(void) { float_path(GGML_TYPE_F16, "f16"); }

static void block_path(const tiny_spec_t *s, const char *name) {
  require(1);
  llm_model_t *m = tiny_model(s, name);
  llm_decoder_t *d = decoder_on(m, g_kind, 1, 64, 16);
  enum { N = 40 };
  int32_t toks[N];
  random_tokens(toks, N, s->vocab, 5);
  forced_matches_reference(d, m, toks, N, true, 0.05f, 0.1f, name);
  OK(llm_decoder_destroy(d));
  llm_model_close(m);
}

static void q4_0_weights(void) {
  tiny_spec_t s = tiny_uniform_spec(64, 96, 2, 4, 2, 97, GGML_TYPE_Q4_0, true, 21);
  block_path(&s, "q4_0");
}
static void q4_1_weights(void) {
  tiny_spec_t s = tiny_uniform_spec(64, 96, 2, 4, 2, 97, GGML_TYPE_Q4_1, true, 22);
  block_path(&s, "q4_1");
}
static void q8_0_weights(void) {
  tiny_spec_t s = tiny_uniform_spec(64, 96, 2, 4, 2, 97, GGML_TYPE_Q8_0, false, 23);
  block_path(&s, "q8_0");
}

static void mixed_weights(void) {
  tiny_spec_t s = mixed_spec();
  block_path(&s, "mixed");
}

/* Every other ggml weight type (quant.h's GPU layouts): a tiny model whose matrices are all of the
 * type against the reference that rounds the same inputs to 8 bits, within the bounds of the other
 * block types (test_llm_types.c's shapes: the K-quants' superblocks of 256 need widths of 256). */
static void type_weights(ggml_type_t type, uint64_t seed) {
  tiny_spec_t s = ggml_block_elems(type) == 256
                      ? tiny_uniform_spec(256, 512, 2, 4, 2, 97, type, false, seed)
                      : tiny_uniform_spec(160, 96, 2, 5, 1, 97, type, false, seed);
  block_path(&s, ggml_type_name(type));
}

/* Every K layout with the others in one model, a K-quant classifier and embedding included. */
static void mixed_k_weights(void) {
  tiny_spec_t s = tiny_uniform_spec(256, 512, 2, 4, 2, 97, GGML_TYPE_Q4_K, false, 141);
  s.types[TINY_EMB] = GGML_TYPE_Q6_K;
  s.types[TINY_K] = GGML_TYPE_Q5_K;
  s.types[TINY_V] = GGML_TYPE_Q3_K;
  s.types[TINY_O] = GGML_TYPE_Q2_K;
  s.types[TINY_GATE] = GGML_TYPE_IQ4_XS;
  s.types[TINY_UP] = GGML_TYPE_Q5_1;
  s.types[TINY_DOWN] = GGML_TYPE_Q8_0;
  s.types[TINY_OUT] = GGML_TYPE_Q6_K;
  block_path(&s, "mixed K");
}

/* ---- the architectures (llm_config_t's flags; test_llm_arch.c runs the same models on the CPU)
 * ---- */

/* Float weights: within 1e-4 of the reference (llm_test_util.h's arch_matches_reference). */
static void arch_on_kind(const char *arch) {
  require(1);
  arch_matches_reference(g_kind, arch);
}

/* Blocks (Q8_0 and an F16 embedding) against the reference that rounds inputs to 8 bits; eager =
 * graph and a prompt pass = steps, bit for bit. */
static void arch_same_bits(const char *arch) {
  require(1);
  tiny_spec_t s = arch_spec(arch, GGML_TYPE_Q8_0, 5);
  s.types[TINY_EMB] = GGML_TYPE_F16;
  llm_model_t *m = tiny_model(&s, arch);
  enum { N = 20, V = 60 };
  int32_t toks[N];
  random_tokens(toks, N, s.vocab, 13);
  float *eager = malloc(N * V * 4), *graph = malloc(N * V * 4), *want = malloc(N * V * 4), pass[V];
  eager_graph_pass(m, g_kind, 1, toks, N, eager, graph, pass);
  ref_forced(m, toks, N, true, want);
  compare_logits(graph, want, N, V, 0.05f, 0.1f, arch);
  cr_assert(!memcmp(eager, graph, N * V * 4), "%s: eager launches and graph replays differ", arch);
  cr_assert(!memcmp(graph + (N - 1) * V, pass, sizeof(pass)),
            "%s: a prompt pass differs from steps", arch);
  free(eager), free(graph), free(want);
  llm_model_close(m);
}

/* Each group computes a token's outputs in one fixed order whatever the grid: a pass of 20 tokens,
 * passes of 8 + 8 + 4, and 20 steps give the same bits; eager and graph too. */
static void pass_equals_steps(void) {
  require(1);
  tiny_spec_t s = mixed_spec();
  llm_model_t *m = tiny_model(&s, "pass");
  enum { N = 20 };
  int32_t toks[N], next[4];
  random_tokens(toks, N, 97, 17);
  float by_step[N * 97], eager[N * 97], one_pass[97], chunked[97];
  llm_decoder_t *d = decoder_on(m, g_kind, 1, 64, 32);
  forced(d, toks, N, true, by_step);
  OK(llm_decoder_tokens(d, N, &next[0], 1));
  forced(d, toks, N, false, eager);
  OK(llm_decoder_tokens(d, N, &next[3], 1));
  OK(llm_decoder_set_tokens(d, 0, toks, N));
  OK(llm_decoder_prefill(d, 0, N, true));
  OK(llm_decoder_logits(d, one_pass));
  OK(llm_decoder_tokens(d, N, &next[1], 1));
  OK(llm_decoder_destroy(d));
  d = decoder_on(m, g_kind, 1, 64, 8);
  OK(llm_decoder_set_tokens(d, 0, toks, N));
  OK(llm_decoder_prefill(d, 0, N, false));
  OK(llm_decoder_logits(d, chunked));
  OK(llm_decoder_tokens(d, N, &next[2], 1));
  OK(llm_decoder_destroy(d));
  cr_assert(!memcmp(by_step, eager, sizeof(eager)), "eager steps differ from graph replays");
  cr_assert(!memcmp(by_step + (N - 1) * 97, one_pass, sizeof(one_pass)),
            "one pass differs from steps");
  cr_assert(!memcmp(one_pass, chunked, sizeof(one_pass)), "passes of 8 differ from one pass");
  cr_assert(next[0] == next[1] && next[1] == next[2] && next[2] == next[3],
            "chosen tokens %d %d %d %d", next[0], next[1], next[2], next[3]);
  cr_assert_eq(next[0], llm_ref_argmax(one_pass, 97));
  llm_model_close(m);
}

static void two_devices(void) {
  require(2);
  two_devices_match_one(g_kind, 20);
}

/* The sampler: the CPU path's draws for the same seeds. The float model's logits agree within
 * 1e-4, and a draw differs only when it falls that close to a boundary between two candidates
 * (kernels.glsl, llm_select): with these seeds none does (a different draw would show as a
 * different token at once, and the streams would part). Greedy, top-k 1, top-k 5, every
 * candidate, top-p, min-p, the penalties (greedy too) and all of them at once. */
static void sampled(llm_decoder_t *d, const llm_sampler_t *s, int32_t *out, int steps) {
  int32_t prompt[3] = {1, 2, 3};
  OK(llm_decoder_set_sampler(d, s));
  llm_generate_result_t r;
  OK(llm_generate(d, prompt, 3, &(llm_generate_options_t){.steps = steps, .graph = true}, &r));
  cr_assert_eq(r.n, steps);
  memcpy(out, r.ids, (size_t)steps * 4);
  free(r.ids);
}

static void sampler(void) {
  require(1);
  tiny_spec_t s = tiny_uniform_spec(40, 72, 2, 5, 1, 97, GGML_TYPE_F32, true, 51);
  llm_model_t *m = tiny_model(&s, "sampler");
  llm_decoder_t *cpu = decoder_on(m, HCQ_DEVICE_CPU, 1, 64, 16),
                *gpu = decoder_on(m, g_kind, 1, 64, 16);
  /* top-p and min-p weigh the candidates at temperature 1 (llama.cpp's order): values that keep
   * several */
  /* greedy over penalised logits */
  const llm_sampler_t cases[] = {{0, 1, 0, 0},
                                 {4.0f, 1, 1, 9},
                                 {4.0f, 1, 5, 7},
                                 {4.0f, 1, 0, 8},
                                 {4.0f, 0.999f, 0, 5},
                                 {2.0f, 0.99f, 40, 3},
                                 {8.0f, 1, 40, 11},
                                 {0, 1, 0, 0, 0, 1.5f, 0, 0, 16},
                                 {4.0f, 1, 0, 12, 0.001f},
                                 {4.0f, 1, 0, 13, 0, 0, 0.5f, 0.5f, 64},
                                 {2.0f, 0.999f, 20, 14, 0.0001f, 1.3f, 0.2f, 0.1f, 8}};
  enum { STEPS = 30 };
  int differ_from_greedy = 0;
  int32_t greedy[STEPS];
  for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
    int32_t a[STEPS], b[STEPS];
    sampled(cpu, &cases[i], a, STEPS);
    sampled(gpu, &cases[i], b, STEPS);
    for (int t = 0; t < STEPS; t++)
      cr_assert_eq(
          b[t], a[t],
          "sampler case %zu (T %g, top-p %g, top-k %d, seed %llu): token %d is %d, the CPU's %d", i,
          (double)cases[i].temperature, (double)cases[i].top_p, cases[i].top_k,
          (unsigned long long)cases[i].seed, t, b[t], a[t]);
    if (i == 0)
      memcpy(greedy, a, sizeof(a));
    else
      differ_from_greedy += memcmp(a, greedy, sizeof(a)) != 0;
  }
  cr_assert_geq(differ_from_greedy, 4,
                "the sampled streams should mostly differ from the greedy one");
  OK(llm_decoder_destroy(cpu));
  OK(llm_decoder_destroy(gpu));
  llm_model_close(m);
}

/* ---- the real model ---- */

enum { REAL_STEPS = 4, REAL_CTX = 64 };

/* The CPU path's greedy tokens after the prompt, and its logits where each was chosen (the prompt
 * pass's, then each step's). */
static void cpu_run(const llm_model_t *m, const int32_t *prompt, int n, int32_t *toks,
                    float *logits) {
  int vocab = m->config.vocab;
  llm_decoder_t *d = decoder_on(m, HCQ_DEVICE_CPU, 1, REAL_CTX, 16);
  OK(llm_decoder_set_tokens(d, 0, prompt, n));
  OK(llm_decoder_prefill(d, 0, n, true));
  OK(llm_decoder_logits(d, logits));
  OK(llm_decoder_tokens(d, n, &toks[0], 1));
  for (int i = 1; i < REAL_STEPS; i++) {
    OK(llm_decoder_step(d, n + i - 1, true));
    OK(llm_decoder_logits(d, logits + (size_t)i * vocab));
    OK(llm_decoder_tokens(d, n + i, &toks[i], 1));
  }
  OK(llm_decoder_destroy(d));
}

/* Teacher-forced: each step gets the CPU path's token; its choice is the CPU path's, or the CPU
 * path's top two logits are within 0.25. */
static void gpu_forced(llm_decoder_t *d, const int32_t *prompt, int n, const int32_t *want,
                       const float *cpu_logits, int vocab, bool graph, int32_t *got, float near,
                       const char *what) {
  OK(llm_decoder_set_tokens(d, 0, prompt, n));
  OK(llm_decoder_prefill(d, 0, n, graph));
  for (int i = 0; i < REAL_STEPS; i++) {
    if (i > 0) {
      OK(llm_decoder_set_tokens(d, n + i - 1, &want[i - 1], 1));
      OK(llm_decoder_step(d, n + i - 1, graph));
    }
    OK(llm_decoder_tokens(d, n + i, &got[i], 1));
    const float *c = cpu_logits + (size_t)i * vocab;
    float top = -INFINITY, second = -INFINITY;
    for (int v = 0; v < vocab; v++)
      if (c[v] > top)
        second = top, top = c[v];
      else if (c[v] > second)
        second = c[v];
    cr_assert(got[i] == want[i] || top - second <= near,
              "%s (%s): position %d: token %d, the CPU path's %d (its top two logits %.3f apart)",
              what, graph ? "graph" : "eager", n + i, got[i], want[i], (double)(top - second));
  }
}

static void teacher_forced(void) {
  require(1);
  llm_model_t *m = real_model();
  int vocab = m->config.vocab;
  /* "<|im_start|>user\nWhat is the capital of France?<|im_end|>\n" and "The quick brown fox" */
  static const int32_t p1[] = {1, 4093, 198, 1780, 314, 260, 3575, 282, 4649, 47, 2, 198};
  static const int32_t p2[] = {504, 2365, 6354, 16438};
  const struct {
    const int32_t *ids;
    int n;
  } prompts[2] = {{p1, (int)(sizeof(p1) / 4)}, {p2, (int)(sizeof(p2) / 4)}};
  float *cpu_logits = malloc((size_t)REAL_STEPS * vocab * 4);
  llm_decoder_t *d = decoder_on(m, g_kind, 1, REAL_CTX, 16);
  for (int k = 0; k < 2; k++) {
    int32_t want[REAL_STEPS], eager[REAL_STEPS], graph[REAL_STEPS];
    cpu_run(m, prompts[k].ids, prompts[k].n, want, cpu_logits);
    char what[32];
    snprintf(what, sizeof(what), "prompt %d", k + 1);
    gpu_forced(d, prompts[k].ids, prompts[k].n, want, cpu_logits, vocab, false, eager, 0.25f, what);
    gpu_forced(d, prompts[k].ids, prompts[k].n, want, cpu_logits, vocab, true, graph, 0.25f, what);
    cr_assert(!memcmp(eager, graph, sizeof(eager)), "%s: eager and graph tokens differ", what);
  }
  free(cpu_logits);
  OK(llm_decoder_destroy(d));
  llm_model_close(m);
}

/* Gemma 3 270M (Q4_K_M: Q8_0, Q5_0, Q4_K, Q6_K; NEOX rope, per-head norms, post-norms, GELU,
 * sliding windows, a 262,144-token classifier): $HCQ_GEMMA_GGUF, else the data folder's; skipped
 * when absent. A short prompt, then decoding steps teacher-forced on the CPU path's tokens: its
 * token, or its top two within 0.5 (Gemma's logits run to ~25, as test_llm_arch.c's bar); eager =
 * graph. */
static void gemma_forced(void) {
  require(1);
  char path[4096];
  llm_gemma_path(path, sizeof(path));
  llm_model_t *m;
  OK(llm_model_open(path, &m));
  int vocab = m->config.vocab;
  llm_tokenizer_t *tok;
  OK(llm_tokenizer_from_gguf(m->file, &tok));
  static const char text[] = "The capital of France is";
  int32_t *prompt;
  size_t n;
  OK(llm_tokenize(tok, text, sizeof(text) - 1, false, true, &prompt, &n));
  llm_tokenizer_free(tok);
  int32_t want[REAL_STEPS], eager[REAL_STEPS], graph[REAL_STEPS];
  float *cpu_logits = malloc((size_t)REAL_STEPS * vocab * 4);
  cpu_run(m, prompt, (int)n, want, cpu_logits);
  llm_decoder_t *d = decoder_on(m, g_kind, 1, REAL_CTX, 16);
  gpu_forced(d, prompt, (int)n, want, cpu_logits, vocab, false, eager, 0.5f, "gemma");
  gpu_forced(d, prompt, (int)n, want, cpu_logits, vocab, true, graph, 0.5f, "gemma");
  cr_assert(!memcmp(eager, graph, sizeof(eager)), "gemma: eager and graph tokens differ");
  cr_log_info("gemma on %s: %zu prompt tokens, then %d %d %d %d (the CPU path's %d %d %d %d)",
              hcq_device_kind_name(g_kind), n, graph[0], graph[1], graph[2], graph[3], want[0],
              want[1], want[2], want[3]);
  free(cpu_logits), free(prompt);
  OK(llm_decoder_destroy(d));
  llm_model_close(m);
}

/* ---- kernels.cu compiled by the real NVRTC (no GPU needed) ---- */

extern const char llm_kernels_cuda_source[];

TestSuite(llm_cuda_nvrtc, .timeout = 280);

/* Every entry of kernels.cu, with every weight layout its products take (the seven of quant.h),
 * compiles for sm_90 with SmolLM2-135M's shape (the #defines decoder_items.c's program() writes): a
 * CUDA C error fails here on a machine without a GPU. Skips, saying why, where NVRTC does not load.
 */
Test(llm_cuda_nvrtc, every_entry_and_layout_compiles_for_sm_90) {
  const char *why;
  if (!hcq__cuda_nvrtc_available(&why)) cr_skip_test("NVRTC is not available here: %s", why);
  const char *shape =
      "#define DIM 576\n#define FFN 1536\n#define NH 9\n#define NKV 3\n#define HD 64\n#define RD "
      "64\n"
      "#define VOCAB 49152\n#define CTX 4096\n#define NORM_EPS 9.99999975e-06f\n#define "
      "LLM_ISA_CAP 3\n"
      "#define ROWS 32\n#define CLS_ROWS 64\n#define SEL 256\n#define ID_BITS 16\n#define "
      "NORM_EPS_BITS 925353388\n";
  struct {
    const char *entry, *fmt; /* fmt: the entry's layout #defines, %d the layout */
  } cases[] = {
      {"llm_embed", "#define W_LAYOUT %d\n"},
      {"llm_begin", ""},
      {"llm_norm", ""},
      {"llm_quantize", ""},
      {"llm_qkv", "#define WQ_LAYOUT %1$d\n#define WK_LAYOUT %1$d\n#define WV_LAYOUT %1$d\n"},
      {"llm_attn", ""},
      {"llm_matmul_add", "#define W_LAYOUT %d\n#define K_IN DIM\n"},
      {"llm_matmul_add", "#define W_LAYOUT %d\n#define K_IN FFN\n"},
      {"llm_gate_up", "#define WG_LAYOUT %1$d\n#define WU_LAYOUT %1$d\n"},
      {"llm_classify", "#define W_LAYOUT %d\n"},
      {"llm_select", ""},
  };
  size_t body = strlen(llm_kernels_cuda_source);
  char *src = malloc(body + 2048);
  cr_assert(src);
  for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
    for (int lay = 0; lay < (*cases[i].fmt ? 7 : 1); lay++) {
      int n = snprintf(src, 2048, "%s#define KERNEL_%s\n", shape, cases[i].entry);
      n += snprintf(src + n, 2048 - (size_t)n, cases[i].fmt, lay);
      memcpy(src + n, llm_kernels_cuda_source, body + 1);
      hcq__cuda_image_t img;
      OK(hcq__cuda_nvrtc_compile(cases[i].entry, src, 90, &img));
      char want[64];
      snprintf(want, sizeof(want), ".entry %s(", cases[i].entry);
      cr_assert(strstr(img.ptx, want), "%s (layout %d): no %s in the PTX", cases[i].entry, lay,
                want);
      cr_assert(strstr(img.ptx, ".entry llm_shape_576_1536_9_3_64_64_49152_4096_925353388_"),
                "%s: the PTX names no shape for the stand-in", cases[i].entry);
      hcq__cuda_image_free(&img);
    }
  free(src);
}

/* The architectures' variants of kernels.cu (gpu_abi.h's defines: NEOX rope, biases, unfused rope
 * with per-head norms, sliding windows, post-norms, GELU, scales) compile for sm_90 too, and the
 * PTX names what the stand-in's twins read: the architecture's integers in the shape entry, the
 * scales in llm_scales. */
Test(llm_cuda_nvrtc, every_architecture_variant_compiles_for_sm_90) {
  const char *why;
  if (!hcq__cuda_nvrtc_available(&why)) cr_skip_test("NVRTC is not available here: %s", why);
  const char *shape =
      "#define DIM 640\n#define FFN 2048\n#define NH 4\n#define NKV 1\n#define HD 256\n#define RD "
      "256\n"
      "#define VOCAB 262144\n#define CTX 4096\n#define NORM_EPS 9.99999997e-07f\n#define "
      "LLM_ISA_CAP 3\n"
      "#define ROWS 32\n#define CLS_ROWS 64\n#define SEL 256\n#define ID_BITS 18\n#define "
      "NORM_EPS_BITS 897988541\n"
      "#define QD 1024\n#define ROPE_NEOX 1\n#define EMB_SCALE 2.529822159e+01f\n#define "
      "ATTN_SCALE 6.250000000e-02f\n"
      "#define FFN_GELU 1\n";
  struct {
    const char *entry, *defs;
  } cases[] = {
      {"llm_embed", "#define W_LAYOUT 5\n"},
      {"llm_quantize", ""},
      {"llm_qkv",
       "#define WQ_LAYOUT 4\n#define WK_LAYOUT 4\n#define WV_LAYOUT 5\n#define QKV_FUSED 0\n"},
      {"llm_qkv",
       "#define WQ_LAYOUT 3\n#define WK_LAYOUT 3\n#define WV_LAYOUT 3\n#define QKV_FUSED "
       "0\n#define QKV_BIAS 1\n"},
      {"llm_qkv",
       "#define WQ_LAYOUT 3\n#define WK_LAYOUT 3\n#define WV_LAYOUT 3\n#define QKV_BIAS 1\n"},
      {"llm_rope_heads", "#define QK_NORM 1\n"},
      {"llm_rope_heads", ""},
      {"llm_attn", "#define WINDOW 512\n"},
      {"llm_matmul_add", "#define W_LAYOUT 4\n#define K_IN 1024\n#define MATMUL_SET 1\n"},
      {"llm_norm_add", ""},
      {"llm_gate_up", "#define WG_LAYOUT 4\n#define WU_LAYOUT 4\n"},
  };
  size_t body = strlen(llm_kernels_cuda_source);
  char *src = malloc(body + 2048);
  cr_assert(src);
  for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
    int n = snprintf(src, 2048, "%s#define KERNEL_%s\n%s", shape, cases[i].entry, cases[i].defs);
    memcpy(src + n, llm_kernels_cuda_source, body + 1);
    hcq__cuda_image_t img;
    OK(hcq__cuda_nvrtc_compile(cases[i].entry, src, 90, &img));
    char want[64];
    snprintf(want, sizeof(want), ".entry %s(", cases[i].entry);
    cr_assert(strstr(img.ptx, want), "%s (%s): no %s in the PTX", cases[i].entry, cases[i].defs,
              want);
    /* ..._SEL, then QD 1024, ROPE_NEOX 1, FFN_GELU 1, QKV_FUSED, ... */
    cr_assert(strstr(img.ptx, "_18_32_64_256_1024_1_1_"), "%s: the PTX names no architecture shape",
              cases[i].entry);
    cr_assert(strstr(img.ptx, "llm_scales["), "%s: the PTX has no llm_scales for the stand-in",
              cases[i].entry);
    hcq__cuda_image_free(&img);
  }
  free(src);
}

/* ---- the suites: one per kind ---- */

#define TINY_SUITE(suite, kind)                                                                   \
  TestSuite(suite, .timeout = 280);                                                               \
  Test(suite, f32_weights_match_the_float_reference) { g_kind = kind, f32_weights(); }            \
  Test(suite, f16_weights_match_the_float_reference) { g_kind = kind, f16_weights(); }            \
  Test(suite, q4_0_weights_match_the_reference) { g_kind = kind, q4_0_weights(); }                \
  Test(suite, q4_1_weights_match_the_reference) { g_kind = kind, q4_1_weights(); }                \
  Test(suite, q8_0_weights_match_the_reference) { g_kind = kind, q8_0_weights(); }                \
  Test(suite, mixed_weight_types_match_the_reference) { g_kind = kind, mixed_weights(); }         \
  Test(suite, a_pass_equals_steps_and_eager_equals_graph) { g_kind = kind, pass_equals_steps(); } \
  Test(suite, two_devices_give_the_bits_of_one) { g_kind = kind, two_devices(); }                 \
  Test(suite, the_sampler_draws_the_cpu_paths_tokens) { g_kind = kind, sampler(); }
/* The weight types beyond F32, F16, Q4_0, Q4_1 and Q8_0, in the tiny suite (its ctest entries and
 * the validation layer's run them). */
#define TYPES_TESTS(suite, kind)                        \
  Test(suite, bf16_weights_match_the_float_reference) { \
    g_kind = kind, float_path(GGML_TYPE_BF16, "bf16");  \
  }                                                     \
  Test(suite, q5_0_weights_match_the_reference) {       \
    g_kind = kind, type_weights(GGML_TYPE_Q5_0, 102);   \
  }                                                     \
  Test(suite, q5_1_weights_match_the_reference) {       \
    g_kind = kind, type_weights(GGML_TYPE_Q5_1, 103);   \
  }                                                     \
  Test(suite, iq4_nl_weights_match_the_reference) {     \
    g_kind = kind, type_weights(GGML_TYPE_IQ4_NL, 104); \
  }                                                     \
  Test(suite, q2_k_weights_match_the_reference) {       \
    g_kind = kind, type_weights(GGML_TYPE_Q2_K, 105);   \
  }                                                     \
  Test(suite, q3_k_weights_match_the_reference) {       \
    g_kind = kind, type_weights(GGML_TYPE_Q3_K, 106);   \
  }                                                     \
  Test(suite, q4_k_weights_match_the_reference) {       \
    g_kind = kind, type_weights(GGML_TYPE_Q4_K, 107);   \
  }                                                     \
  Test(suite, q5_k_weights_match_the_reference) {       \
    g_kind = kind, type_weights(GGML_TYPE_Q5_K, 108);   \
  }                                                     \
  Test(suite, q6_k_weights_match_the_reference) {       \
    g_kind = kind, type_weights(GGML_TYPE_Q6_K, 109);   \
  }                                                     \
  Test(suite, iq4_xs_weights_match_the_reference) {     \
    g_kind = kind, type_weights(GGML_TYPE_IQ4_XS, 110); \
  }                                                     \
  Test(suite, every_k_layout_mixed_matches_the_reference) { g_kind = kind, mixed_k_weights(); }
/* The architectures beyond llama 2's, in the tiny suite. */
#define ARCH_TESTS(suite, kind)                                                                  \
  Test(suite, llama3_rope_freqs_matches_the_reference) { g_kind = kind, arch_on_kind("llama"); } \
  Test(suite, qwen2_matches_the_reference) { g_kind = kind, arch_on_kind("qwen2"); }             \
  Test(suite, qwen3_matches_the_reference) { g_kind = kind, arch_on_kind("qwen3"); }             \
  Test(suite, gemma3_matches_the_reference) { g_kind = kind, arch_on_kind("gemma3"); }           \
  Test(suite, every_architecture_in_blocks_eager_graph_and_a_pass_agree) {                       \
    g_kind = kind;                                                                               \
    const char *archs[] = {"llama", "qwen2", "qwen3", "gemma3"};                                 \
    for (int i = 0; i < 4; i++) arch_same_bits(archs[i]);                                        \
  }
#define REAL_SUITE(suite, kind)     \
  TestSuite(suite, .timeout = 280); \
  Test(suite, teacher_forced_on_the_cpu_paths_tokens) { g_kind = kind, teacher_forced(); }

TINY_SUITE(llm_vulkan_tiny, HCQ_DEVICE_VULKAN)
TYPES_TESTS(llm_vulkan_tiny, HCQ_DEVICE_VULKAN)
ARCH_TESTS(llm_vulkan_tiny, HCQ_DEVICE_VULKAN)
REAL_SUITE(llm_vulkan_real, HCQ_DEVICE_VULKAN)
Test(llm_vulkan_real, gemma3_teacher_forced_on_the_cpu_paths_tokens) {
  g_kind = HCQ_DEVICE_VULKAN, gemma_forced();
}
/* CUDA: the stand-in driver's twins (tests/llm_twins.h) of kernels.cu, which the real NVRTC
 * compiles first; a real GPU where one is. Every architecture, and Gemma 3 270M where the file is.
 */
TINY_SUITE(llm_cuda_tiny, HCQ_DEVICE_CUDA)
TYPES_TESTS(llm_cuda_tiny, HCQ_DEVICE_CUDA)
ARCH_TESTS(llm_cuda_tiny, HCQ_DEVICE_CUDA)
REAL_SUITE(llm_cuda_real, HCQ_DEVICE_CUDA)
Test(llm_cuda_real, gemma3_teacher_forced_on_the_cpu_paths_tokens) {
  g_kind = HCQ_DEVICE_CUDA, gemma_forced();
}
/* Metal: the stand-in Objective-C runtime and Metal's twins (the same as CUDA's) of kernels.metal,
 * which cannot be compiled here; a Mac where one is. Every architecture, and Gemma as on CUDA. */
TINY_SUITE(llm_metal_tiny, HCQ_DEVICE_METAL)
TYPES_TESTS(llm_metal_tiny, HCQ_DEVICE_METAL)
ARCH_TESTS(llm_metal_tiny, HCQ_DEVICE_METAL)
REAL_SUITE(llm_metal_real, HCQ_DEVICE_METAL)
Test(llm_metal_real, gemma3_teacher_forced_on_the_cpu_paths_tokens) {
  g_kind = HCQ_DEVICE_METAL, gemma_forced();
}
