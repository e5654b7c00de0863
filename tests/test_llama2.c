/* The llama2 decoder on hcq against a plain sequential C forward pass (llama2_reference.h): the
 * same greedy tokens over 64 steps and logits within 1e-4 (relative), for both generated shapes, on
 * one and two devices, eagerly and as graph replays of one captured step. Also the checkpoint and
 * tokenizer readers' validation. */
#include <math.h>

#include "llama2.h"
#include "llama2_reference.h"
#include "test_util.h"

enum { STEPS = 64 };

static llama2_checkpoint_t *g_ck;
static float *g_ref_logits; /* STEPS x vocab */
static int32_t g_ref_tokens[STEPS];

static void load_model(llama2_shape_t shape) {
  g_ck = calloc(1, sizeof(*g_ck));
  cr_assert(g_ck);
  OK(llama2_checkpoint_generate(shape, 42, g_ck));
  int vocab = g_ck->config.vocab_size;
  g_ref_logits = malloc((size_t)STEPS * (size_t)vocab * sizeof(float));
  cr_assert(g_ref_logits);
  llama2_reference_t ref;
  cr_assert_eq(ref_init(&ref, g_ck), 0);
  int token = 1;
  for (int p = 0; p < STEPS; p++) {
    const float *logits = ref_forward(&ref, token, p);
    memcpy(g_ref_logits + (size_t)p * (size_t)vocab, logits, (size_t)vocab * sizeof(float));
    token = g_ref_tokens[p] = ref_argmax(logits, vocab);
  }
  ref_free(&ref);
}

static void free_model(void) {
  llama2_checkpoint_free(g_ck);
  free(g_ck);
  free(g_ref_logits);
}

/* Every logit within 1e-4 of the reference, relative to the step's largest logit magnitude (a
 * logit near zero has no meaningful relative error of its own). */
static void check_logits(const float *got, int step, const char *mode) {
  int vocab = g_ck->config.vocab_size;
  const float *want = g_ref_logits + (size_t)step * (size_t)vocab;
  float scale = 0;
  for (int i = 0; i < vocab; i++) scale = fmaxf(scale, fabsf(want[i]));
  cr_assert_gt(scale, 1.0f, "degenerate reference logits at step %d", step);
  for (int i = 0; i < vocab; i++) {
    float err = fabsf(got[i] - want[i]) / scale;
    cr_assert(err <= 1e-4f, "%s step %d: logit %d is %.9g, reference %.9g (relative error %.3g)",
              mode, step, i, (double)got[i], (double)want[i], (double)err);
  }
}

static void check_decoder(int devices) {
  const llama2_config_t *c = &g_ck->config;
  llama2_decoder_options_t opts = {devices, 0, false};
  llama2_decoder_t *dec;
  OK(llama2_decoder_create(g_ck, &opts, &dec));
  float *eager = malloc((size_t)STEPS * (size_t)c->vocab_size * sizeof(float));
  float *graph = malloc((size_t)c->vocab_size * sizeof(float));
  cr_assert(eager && graph);
  int32_t tokens[STEPS];

  /* Eager, kernel by kernel. */
  OK(llama2_decoder_reset(dec));
  for (int p = 0; p < STEPS; p++) {
    OK(llama2_decoder_step_eager(dec, p));
    OK(llama2_decoder_logits(dec, eager + (size_t)p * (size_t)c->vocab_size));
    check_logits(eager + (size_t)p * (size_t)c->vocab_size, p, "eager");
  }
  OK(llama2_decoder_tokens(dec, tokens, STEPS));
  for (int p = 0; p < STEPS; p++)
    cr_assert_eq(tokens[p], g_ref_tokens[p], "eager step %d: token %d, reference %d", p, tokens[p],
                 g_ref_tokens[p]);

  /* Step 0 captured, every later step a replay of that one capture with pos changed. The same
   * kernels in the same order: the same bits as eager. */
  OK(llama2_decoder_reset(dec));
  OK(llama2_decoder_capture(dec, 0));
  const hcq_jit_report_t *rep = llama2_decoder_report(dec);
  cr_assert(rep);
  cr_assert_eq(rep->graphed_items, llama2_decoder_items_per_step(dec), "%s", rep->text);
  for (int p = 0; p < STEPS; p++) {
    if (p) OK(llama2_decoder_step_graph(dec, p));
    OK(llama2_decoder_logits(dec, graph));
    check_logits(graph, p, "graph");
    cr_assert_eq(memcmp(graph, eager + (size_t)p * (size_t)c->vocab_size,
                        (size_t)c->vocab_size * sizeof(float)),
                 0, "graph step %d: logits differ from the eager step's bits", p);
  }
  OK(llama2_decoder_tokens(dec, tokens, STEPS));
  for (int p = 0; p < STEPS; p++)
    cr_assert_eq(tokens[p], g_ref_tokens[p], "graph step %d: token %d, reference %d", p, tokens[p],
                 g_ref_tokens[p]);

  /* Replays queued back to back (no wait between steps) give the same tokens. */
  OK(llama2_decoder_reset(dec));
  for (int p = 0; p < STEPS; p++) OK(llama2_decoder_step_graph(dec, p));
  OK(llama2_decoder_tokens(dec, tokens, STEPS));
  for (int p = 0; p < STEPS; p++)
    cr_assert_eq(tokens[p], g_ref_tokens[p], "queued replay, step %d", p);

  free(eager);
  free(graph);
  OK(llama2_decoder_destroy(dec));
}

static void small_model(void) { load_model(LLAMA2_SHAPE_SMALL); }
static void model_15m(void) { load_model(LLAMA2_SHAPE_15M); }

Test(llama2, small_one_device, .init = small_model, .fini = free_model) { check_decoder(1); }
Test(llama2, small_two_devices, .init = small_model, .fini = free_model) { check_decoder(2); }
Test(llama2, shape_15m_one_device, .init = model_15m, .fini = free_model) { check_decoder(1); }
Test(llama2, shape_15m_two_devices, .init = model_15m, .fini = free_model) { check_decoder(2); }

/* The generated model is not degenerate: greedy decoding visits several tokens. */
Test(llama2, generated_model_moves, .init = small_model, .fini = free_model) {
  int distinct = 0;
  for (int p = 0; p < STEPS; p++) {
    bool seen = false;
    for (int q = 0; q < p; q++) seen |= g_ref_tokens[q] == g_ref_tokens[p];
    distinct += !seen;
  }
  cr_assert_geq(distinct, 16, "greedy decoding of the generated model visits only %d tokens",
                distinct);
}

/* ---- files ---- */

static char *tmp_path(const char *name) {
  const char *dir = getenv("HCQ_TEST_TMP");
  if (!dir) dir = "/tmp";
  char cmd[1100];
  snprintf(cmd, sizeof(cmd), "mkdir -p '%s'", dir);
  cr_assert_eq(system(cmd), 0);
  char *p = malloc(1200);
  snprintf(p, 1200, "%s/llama2-%d-%s", dir, (int)getpid(), name);
  return p;
}

static void write_bytes(const char *path, const void *data, size_t n) {
  FILE *f = fopen(path, "wb");
  cr_assert(f);
  cr_assert_eq(fwrite(data, 1, n, f), n);
  fclose(f);
}

Test(llama2, checkpoint_round_trip) {
  llama2_checkpoint_t a, b;
  OK(llama2_checkpoint_generate(LLAMA2_SHAPE_SMALL, 7, &a));
  char *path = tmp_path("model.bin");
  OK(llama2_checkpoint_write(&a, path));
  OK(llama2_checkpoint_load(path, &b));
  /* Field by field: the struct's padding bytes are not part of the model. */
  const llama2_config_t *x = &a.config, *y = &b.config;
  cr_assert(x->dim == y->dim && x->hidden_dim == y->hidden_dim && x->n_layers == y->n_layers &&
            x->n_heads == y->n_heads && x->n_kv_heads == y->n_kv_heads &&
            x->vocab_size == y->vocab_size && x->seq_len == y->seq_len &&
            x->shared_classifier == y->shared_classifier);
  cr_assert_eq(a.data_floats, b.data_floats);
  cr_assert_eq(memcmp(a.data, b.data, a.data_floats * sizeof(float)), 0);
  cr_assert(!b.config.shared_classifier, "generated models store their classifier");
  cr_assert_eq(b.weights.classifier,
               b.data + b.data_floats - (size_t)b.config.vocab_size * (size_t)b.config.dim);
  /* The same weights with a shared classifier: positive vocab_size, vocab x dim fewer floats. */
  llama2_checkpoint_t sep = b;
  sep.config.shared_classifier = true;
  sep.data_floats = b.data_floats - (size_t)b.config.vocab_size * (size_t)b.config.dim;
  sep.data = malloc(sep.data_floats * sizeof(float));
  cr_assert(sep.data);
  memcpy(sep.data, b.data, sep.data_floats * sizeof(float));
  OK(llama2_checkpoint_write(&sep, path));
  llama2_checkpoint_t c;
  OK(llama2_checkpoint_load(path, &c));
  cr_assert(c.config.shared_classifier);
  cr_assert_eq(c.weights.classifier, c.weights.token_embedding,
               "a shared classifier is the embedding");
  cr_assert_eq(c.data_floats, sep.data_floats);
  free(sep.data);
  llama2_checkpoint_free(&a);
  llama2_checkpoint_free(&b);
  llama2_checkpoint_free(&c);
  unlink(path);
  free(path);
}

Test(llama2, checkpoint_validation) {
  llama2_checkpoint_t ck;
  char *path = tmp_path("bad.bin");
  write_bytes(path, "\1\2\3", 3);
  FAILS(llama2_checkpoint_load(path, &ck), HCQ_INVALID_ARGUMENT, "short file", "3 bytes");
  int32_t h[7] = {64, 172, 5, 0, 4, 512, 512};
  write_bytes(path, h, sizeof(h));
  FAILS(llama2_checkpoint_load(path, &ck), HCQ_INVALID_ARGUMENT, "bad header", "n_heads is 0");
  int32_t odd[7] = {66, 172, 5, 4, 4, 512, 512};
  write_bytes(path, odd, sizeof(odd));
  FAILS(llama2_checkpoint_load(path, &ck), HCQ_INVALID_ARGUMENT,
        "dim 66 is not a multiple of n_heads 4");
  int32_t gqa[7] = {64, 172, 5, 8, 3, 512, 512};
  write_bytes(path, gqa, sizeof(gqa));
  FAILS(llama2_checkpoint_load(path, &ck), HCQ_INVALID_ARGUMENT,
        "n_heads 8 is not a multiple of n_kv_heads 3");
  int32_t good[7] = {64, 172, 5, 8, 4, 512, 512};
  write_bytes(path, good, sizeof(good));
  FAILS(llama2_checkpoint_load(path, &ck), HCQ_INVALID_ARGUMENT, "size does not match",
        "has 28 bytes");
  FAILS(llama2_checkpoint_load("/nonexistent/model.bin", &ck), HCQ_NOT_FOUND,
        "/nonexistent/model.bin");
  unlink(path);
  free(path);
}

Test(llama2, tokenizer) {
  char *path = tmp_path("tok.bin");
  FILE *f = fopen(path, "wb");
  cr_assert(f);
  int32_t max_len = 8;
  fwrite(&max_len, 4, 1, f);
  const char *pieces[4] = {"<unk>", " Hi", "<0x0A>", "<0x01>"};
  for (int i = 0; i < 4; i++) {
    float score = (float)i;
    int32_t len = (int32_t)strlen(pieces[i]);
    fwrite(&score, 4, 1, f);
    fwrite(&len, 4, 1, f);
    fwrite(pieces[i], 1, (size_t)len, f);
  }
  fclose(f);
  llama2_tokenizer_t tok;
  OK(llama2_tokenizer_load(path, 4, &tok));
  char scratch[2];
  cr_assert_str_eq(llama2_tokenizer_piece(&tok, 1, 1, scratch), "Hi",
                   "the space after BOS is dropped");
  cr_assert_str_eq(llama2_tokenizer_piece(&tok, 2, 1, scratch), " Hi");
  cr_assert_str_eq(llama2_tokenizer_piece(&tok, 1, 2, scratch), "\n", "byte fallback");
  cr_assert_str_eq(llama2_tokenizer_piece(&tok, 1, 3, scratch), "", "unprintable byte");
  cr_assert_str_eq(llama2_tokenizer_piece(&tok, 1, 99, scratch), "", "out of range id");
  llama2_tokenizer_free(&tok);
  FAILS(llama2_tokenizer_load(path, 5, &tok), HCQ_INVALID_ARGUMENT,
        "fewer than the model's vocab_size 5");
  FAILS(llama2_tokenizer_load(path, 3, &tok), HCQ_INVALID_ARGUMENT,
        "more tokens than the model's vocab_size 3");
  unlink(path);
  free(path);
}
