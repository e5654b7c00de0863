/* The decoder's architectures (models/llm/model.c, llm_config_t's flags) against the plain C
 * reference (llm_reference.h) on tiny models the tests write (llm_tiny.h):
 *  - llama with llama 3's rope_freqs divisors, qwen2 (q/k/v biases, NEOX rope), qwen3 (per-head q/k
 *    norms), gemma3 (embedding scale, per-head norms, post-norms, GELU, a head size other than
 *    width / heads, sliding-window layers with their own rotary base and a global one): float
 *    weights, teacher-forced logits within 1e-4 of the reference over positions past the window,
 *    the same greedy tokens;
 *  - eager launches and graph replays, one prompt pass and token-by-token steps, one device and
 *    two: the same bits;
 *  - what an architecture says that the decoder does not implement is refused by name (exit 3),
 *    what contradicts itself is bad input (exit 2); GPU kinds refuse what their kernels lack. */
#include <string.h>
#include <unistd.h>

#include "llm.h"
#include "llm_gemma.h"
#include "llm_reference.h"
#include "llm_streams.h"
#include "llm_test_util.h"
#include "llm_tiny.h"
#include "test_util.h"

TestSuite(llm_arch, .timeout = 240);

static void matches_reference(const char *arch) { arch_matches_reference(HCQ_DEVICE_CPU, arch); }

Test(llm_arch, llama3_rope_freqs_matches_the_reference) { matches_reference("llama"); }
Test(llm_arch, qwen2_matches_the_reference) { matches_reference("qwen2"); }
Test(llm_arch, qwen3_matches_the_reference) { matches_reference("qwen3"); }
Test(llm_arch, gemma3_matches_the_reference) { matches_reference("gemma3"); }

Test(llm_arch, the_config_says_what_the_architecture_is) {
  tiny_spec_t s = arch_spec("gemma3", GGML_TYPE_F32, 1);
  llm_model_t *m = tiny_model(&s, "cfg");
  const llm_config_t *c = &m->config;
  cr_assert_eq(c->arch, LLM_ARCH_GEMMA3);
  cr_assert(c->rope_neox && c->qk_norm && c->post_norms && c->gelu && !c->qkv_bias &&
            c->tied_classifier);
  cr_assert_eq(c->head_dim, 24);
  cr_assert_eq(llm_q_dim(c), 96);
  cr_assert(c->emb_scale == 8.0f);
  cr_assert(c->attn_scale == 1.0f / sqrtf(24.0f));
  cr_assert_eq(c->swa_window, 8);
  cr_assert(c->rope_base_swa == 10000.0f);
  for (int l = 0; l < 7; l++) cr_assert_eq(llm_layer_swa(c, l), l != 5, "layer %d", l);
  llm_model_close(m);
  s = arch_spec("llama", GGML_TYPE_F32, 1);
  m = tiny_model(&s, "cfg");
  cr_assert(!m->config.rope_neox && m->rope_freqs);
  cr_assert_eq(m->config.swa_window, 0);
  llm_model_close(m);
}

/* Eager = graph, a prompt pass = steps, two devices = one, for every architecture's kernels. */
static void same_bits(const char *arch) {
  tiny_spec_t s = arch_spec(arch, GGML_TYPE_Q8_0, 5);
  s.types[TINY_EMB] = GGML_TYPE_F16;
  llm_model_t *m = tiny_model(&s, arch);
  enum { N = 20 };
  int32_t toks[N];
  random_tokens(toks, N, s.vocab, 13);
  float *eager = malloc(N * 60 * 4), *graph = malloc(N * 60 * 4), pass[60], two[60];
  eager_graph_pass(m, HCQ_DEVICE_CPU, 1, toks, N, eager, graph, pass);
  eager_graph_pass(m, HCQ_DEVICE_CPU, 2, toks, N, NULL, NULL, two);
  cr_assert(!memcmp(eager, graph, N * 60 * 4), "%s: eager launches and graph replays differ", arch);
  cr_assert(!memcmp(graph + (N - 1) * 60, pass, sizeof(pass)),
            "%s: a prompt pass differs from steps", arch);
  cr_assert(!memcmp(pass, two, sizeof(pass)), "%s: two devices differ from one", arch);
  free(eager), free(graph);
  llm_model_close(m);
}

Test(llm_arch, eager_graph_pass_and_two_devices_agree_on_every_architecture) {
  const char *archs[] = {"llama", "qwen2", "qwen3", "gemma3"};
  for (int i = 0; i < 4; i++) same_bits(archs[i]);
}

/* ---- refusals ---- */

/* The tiny model of arch with one extra metadata entry, written and opened. */
static hcq_status_t open_with(const char *arch, const char *key, uint32_t type, const void *value,
                              size_t bytes, llm_model_t **out) {
  tiny_spec_t s = arch_spec(arch, GGML_TYPE_F32, 3);
  char path[PATH_MAX];
  tmp_path(path, sizeof(path), "extra");
  gguf_writer_t *w;
  OK(tiny_build(&s, &w));
  OK(gguf_writer_add_raw(w, key, type, value, bytes));
  OK(gguf_writer_write(w, path));
  gguf_writer_free(w);
  hcq_status_t st = llm_model_open(path, out);
  unlink(path);
  return st;
}

Test(llm_arch, what_changes_the_math_is_refused_by_name) {
  llm_model_t *m;
  FAILS(open_with("qwen2", "qwen2.expert_count", GGUF_UINT32, &(uint32_t){8}, 4, &m),
        HCQ_UNIMPLEMENTED, "qwen2.expert_count", "experts");
  FAILS(open_with("gemma3", "gemma3.final_logit_softcapping", GGUF_FLOAT32, &(float){30.0f}, 4, &m),
        HCQ_UNIMPLEMENTED, "gemma3.final_logit_softcapping", "30");
  FAILS(open_with("gemma3", "gemma3.attention.logit_softcapping", GGUF_FLOAT32, &(float){50.0f}, 4,
                  &m),
        HCQ_UNIMPLEMENTED, "gemma3.attention.logit_softcapping");
  FAILS(open_with("qwen3", "qwen3.attention.causal", GGUF_BOOL, &(uint8_t){0}, 1, &m),
        HCQ_UNIMPLEMENTED, "qwen3.attention.causal");
  FAILS(open_with("gemma3", "gemma3.rope.scaling.factor", GGUF_FLOAT32, &(float){8.0f}, 4, &m),
        HCQ_UNIMPLEMENTED, "gemma3.rope.scaling.factor");
  /* a soft-capping of 0 is none, as llama.cpp reads it */
  OK(open_with("gemma3", "gemma3.final_logit_softcapping", GGUF_FLOAT32, &(float){0.0f}, 4, &m));
  llm_model_close(m);
  /* a value length other than the key length */
  FAILS(open_with("qwen3", "qwen3.attention.value_length", GGUF_UINT32, &(uint32_t){12}, 4, &m),
        HCQ_UNIMPLEMENTED, "qwen3.attention.value_length");
}

Test(llm_arch, a_tensor_the_architecture_needs_is_required) {
  const char *cases[][2] = {{"qwen3", "blk.0.attn_q_norm.weight"},
                            {"qwen2", "blk.3.attn_v.bias"},
                            {"gemma3", "blk.6.post_ffw_norm.weight"},
                            {"gemma3", "blk.2.attn_k_norm.weight"}};
  for (int i = 0; i < 4; i++) {
    tiny_spec_t s = arch_spec(cases[i][0], GGML_TYPE_F32, 3);
    s.omit = cases[i][1];
    char path[PATH_MAX], quoted[96];
    tmp_path(path, sizeof(path), "req");
    OK(tiny_write(&s, path));
    llm_model_t *m;
    snprintf(quoted, sizeof(quoted), "\"%s\"", cases[i][1]);
    FAILS(llm_model_open(path, &m), HCQ_INVALID_ARGUMENT, quoted);
    unlink(path);
  }
}

/* Every kind runs every architecture (test_llm_gpu.c: VULKAN, and CUDA and METAL on their
 * stand-ins); what the GPU kinds still refuse, by name and before opening a device, is a head size
 * their kernels cannot read in 4-float vectors (heads of 6 here), which the CPU runs. */
Test(llm_arch, gpu_kinds_refuse_what_their_kernels_lack) {
  const char *archs[] = {"gemma3", "qwen2", "qwen3", "llama"};
  const hcq_device_kind_t kinds[] = {HCQ_DEVICE_VULKAN, HCQ_DEVICE_CUDA, HCQ_DEVICE_METAL};
  for (int i = 0; i < 4; i++) {
    tiny_spec_t s = tiny_uniform_spec(24, 48, 2, 4, 2, 60, GGML_TYPE_F32, false, 3);
    s.arch = archs[i];
    llm_model_t *m = tiny_model(&s, archs[i]);
    cr_assert_eq(m->config.head_dim, 6, "%s", archs[i]);
    llm_decoder_t *d;
    OK(llm_decoder_create(m, &(llm_decoder_options_t){.kind = HCQ_DEVICE_CPU, .ctx = 16}, &d));
    OK(llm_decoder_destroy(d));
    for (int k = 0; k < 3; k++)
      FAILS(llm_decoder_create(m, &(llm_decoder_options_t){.kind = kinds[k]}, &d),
            HCQ_UNIMPLEMENTED, hcq_device_kind_name(kinds[k]), "head size of 6");
    llm_model_close(m);
  }
}

/* ---- Gemma 3 270M (Q4_K_M: Q8_0, Q5_0, Q4_K and Q6_K matrices) against llama.cpp ---- */

static llm_model_t *gemma_model(void) {
  char path[4096];
  llm_model_t *m;
  OK(llm_model_open(llm_gemma_path(path, sizeof(path)), &m));
  return m;
}

TestSuite(llm_gemma, .timeout = 280);

/* llama.cpp's token at >= 95% of positions; every other a near tie (Gemma's logits run to ~25, so
 * the bar is 0.5). */
Test(llm_gemma, teacher_forced_on_llamacpp_streams) {
  llm_model_t *m = gemma_model();
  llm_decoder_t *d = decoder_on(m, HCQ_DEVICE_CPU, 1, 512, 128);
  follows_llamacpp(d, HCQ_GEMMA_STREAMS, 0.5f, "gemma");
  OK(llm_decoder_destroy(d));
  llm_model_close(m);
}

/* Eager launches and graph replays, a prompt pass and steps: the same bits on the real file. */
Test(llm_gemma, eager_graph_and_a_pass_agree) {
  llm_model_t *m = gemma_model();
  static stream_t streams[8];
  load_streams(HCQ_GEMMA_STREAMS, streams, 8);
  const stream_t *st = &streams[0];
  int vocab = m->config.vocab, n = st->nprompt + 8;
  int32_t toks[64];
  cr_assert(n <= 64, "%s: a prompt of %d tokens", st->name, st->nprompt);
  memcpy(toks, st->prompt, (size_t)st->nprompt * 4);
  memcpy(toks + st->nprompt, st->gen, 8 * 4);
  float *eager = malloc((size_t)vocab * 4), *graph = malloc((size_t)vocab * 4),
        *pass = malloc((size_t)vocab * 4);
  llm_decoder_t *d = decoder_on(m, HCQ_DEVICE_CPU, 1, 64, 32);
  float *all = malloc((size_t)n * vocab * 4);
  forced(d, toks, n, false, all);
  memcpy(eager, all + (size_t)(n - 1) * vocab, (size_t)vocab * 4);
  forced(d, toks, n, true, all);
  memcpy(graph, all + (size_t)(n - 1) * vocab, (size_t)vocab * 4);
  OK(llm_decoder_set_tokens(d, 0, toks, n));
  OK(llm_decoder_prefill(d, 0, n, true));
  OK(llm_decoder_logits(d, pass));
  cr_assert(!memcmp(eager, graph, (size_t)vocab * 4), "eager and graph differ");
  cr_assert(!memcmp(graph, pass, (size_t)vocab * 4), "a prompt pass differs from steps");
  free(all), free(eager), free(graph), free(pass);
  OK(llm_decoder_destroy(d));
  llm_model_close(m);
}
