/* The llama2 decoder on GPU device kinds (Vulkan: lavapipe in CI; CUDA: the stand-in driver, or a
 * real GPU) against the plain C forward pass (llama2_reference.h). Float sums run in another order
 * than the reference's, so the check is teacher-forced: every step gets the reference's input
 * token, and then its argmax equals the reference's (except where the reference's two best logits
 * are closer than 1e-4 of the largest logit's magnitude, a near tie either order may break) and
 * every logit is within 1e-3 of the largest logit's magnitude. Free-running eager steps and graph
 * replays of one captured step give identical tokens. One and two devices of the kind (Metal: one);
 * the small shape for 32 steps, the 15m shape for 8 (lavapipe's float math is slow). */
#include <math.h>

#include "llama2.h"
#include "llama2_reference.h"
#include "test_util.h"

enum { MAX_STEPS = 72 };

typedef struct model {
  llama2_checkpoint_t ck;
  int steps;
  float *ref_logits; /* steps x vocab */
  int32_t ref_tokens[MAX_STEPS];
} model_t;

/* The reference's logits and tokens for m->ck (set), steps from BOS. */
static void reference_run(model_t *m, int steps) {
  int vocab = m->ck.config.vocab_size;
  m->steps = steps;
  m->ref_logits = malloc((size_t)steps * (size_t)vocab * sizeof(float));
  cr_assert(m->ref_logits);
  llama2_reference_t ref;
  cr_assert_eq(ref_init(&ref, &m->ck), 0);
  int token = 1;
  for (int p = 0; p < steps; p++) {
    const float *logits = ref_forward(&ref, token, p);
    memcpy(m->ref_logits + (size_t)p * (size_t)vocab, logits, (size_t)vocab * sizeof(float));
    token = m->ref_tokens[p] = ref_argmax(logits, vocab);
  }
  ref_free(&ref);
}

static void load_model(model_t *m, llama2_shape_t shape, int steps) {
  OK(llama2_checkpoint_generate(shape, 42, &m->ck));
  reference_run(m, steps);
}

static void free_model(model_t *m) {
  llama2_checkpoint_free(&m->ck);
  free(m->ref_logits);
}

/* Skips the test, saying why, unless `devices` devices of the kind can be opened. */
static void require(hcq_device_kind_t kind, int devices) {
  hcq_device_info_t infos[8];
  size_t n = hcq_device_query(infos, 8);
  for (size_t i = 0; i < n && i < 8; i++) {
    if (infos[i].kind != kind) continue;
    if (!infos[i].available)
      cr_skip_test("no %s device: %s", hcq_device_kind_name(kind), infos[i].description);
    const char *virt =
        getenv(kind == HCQ_DEVICE_METAL ? "HCQ_METAL_VIRTUAL" : "HCQ_VULKAN_VIRTUAL");
    bool virtual_ok =
        (kind == HCQ_DEVICE_VULKAN || kind == HCQ_DEVICE_METAL) && virt && atoi(virt) > 0;
    if (infos[i].count < devices && !virtual_ok)
      cr_skip_test("%d %s device(s), the test needs %d", infos[i].count, hcq_device_kind_name(kind),
                   devices);
    return;
  }
  cr_skip_test("hcq does not list %s devices", hcq_device_kind_name(kind));
}

/* The step's logits against the reference's: within 1e-3 of the largest magnitude, and the argmax
 * (the token the device wrote) the reference's unless its two best are a near tie. */
static void check_step(const model_t *m, const float *got, int32_t token, int step,
                       const char *mode) {
  int vocab = m->ck.config.vocab_size;
  const float *want = m->ref_logits + (size_t)step * (size_t)vocab;
  float scale = 0, first = -INFINITY, second = -INFINITY;
  for (int i = 0; i < vocab; i++) {
    scale = fmaxf(scale, fabsf(want[i]));
    if (want[i] > first)
      second = first, first = want[i];
    else if (want[i] > second)
      second = want[i];
  }
  cr_assert_gt(scale, 1.0f, "degenerate reference logits at step %d", step);
  for (int i = 0; i < vocab; i++) {
    float err = fabsf(got[i] - want[i]) / scale;
    cr_assert(err <= 1e-3f,
              "%s step %d: logit %d is %.9g, reference %.9g (error %.3g of the largest)", mode,
              step, i, (double)got[i], (double)want[i], (double)err);
  }
  if (first - second >= 1e-4f * scale)
    cr_assert_eq(token, m->ref_tokens[step],
                 "%s step %d: argmax %d, reference %d (best logits %.9g, %.9g)", mode, step, token,
                 m->ref_tokens[step], (double)first, (double)second);
  cr_assert_eq(token, ref_argmax(got, vocab),
               "%s step %d: the device's argmax %d is not the largest of its logits", mode, step,
               token);
}

/* Teacher-forced steps 0..steps-1, eager or replays of the capture (of step 0). */
static void forced_run(const model_t *m, llama2_decoder_t *dec, bool graph, float *logits) {
  const char *mode = graph ? "graph" : "eager";
  for (int p = 0; p < m->steps; p++) {
    OK(llama2_decoder_set_token(dec, p, p ? m->ref_tokens[p - 1] : 1));
    if (graph && p == 0)
      OK(llama2_decoder_capture(dec, 0));
    else if (graph)
      OK(llama2_decoder_step_graph(dec, p));
    else
      OK(llama2_decoder_step_eager(dec, p));
    OK(llama2_decoder_logits(dec, logits));
    int32_t out[MAX_STEPS + 1];
    OK(llama2_decoder_tokens(dec, out, p + 1));
    check_step(m, logits, out[p], p, mode);
  }
}

static void check_model(hcq_device_kind_t kind, model_t m, int devices) {
  int steps = m.steps;
  llama2_decoder_options_t opts = {devices, 0, false, kind};
  llama2_decoder_t *dec;
  OK(llama2_decoder_create(&m.ck, &opts, &dec));
  float *logits = malloc((size_t)m.ck.config.vocab_size * sizeof(float));
  cr_assert(logits);
  forced_run(&m, dec, false, logits);
  forced_run(&m, dec, true, logits);
  const hcq_jit_report_t *rep = llama2_decoder_report(dec);
  cr_assert(rep);
  if (kind == HCQ_DEVICE_METAL && devices == 2) {
    /* A Metal graph holds one device's kernels: the JIT graphs the kernels in three batches (device
     * 0, device 1, device 0) and runs the two cross-device transfers eagerly between them. */
    cr_assert_eq(rep->graphed_items, llama2_decoder_items_per_step(dec) - 2, "%s", rep->text);
    cr_assert_eq(rep->batches, 3, "%s", rep->text);
  } else {
    cr_assert_eq(rep->graphed_items, llama2_decoder_items_per_step(dec), "%s", rep->text);
  }

  /* Free-running: eager steps, then replays queued back to back, from BOS: identical tokens. */
  int32_t eager[MAX_STEPS], graph[MAX_STEPS];
  OK(llama2_decoder_reset(dec));
  for (int p = 0; p < steps; p++) OK(llama2_decoder_step_eager(dec, p));
  OK(llama2_decoder_tokens(dec, eager, steps));
  OK(llama2_decoder_reset(dec));
  for (int p = 0; p < steps; p++) OK(llama2_decoder_step_graph(dec, p));
  OK(llama2_decoder_tokens(dec, graph, steps));
  for (int p = 0; p < steps; p++)
    cr_assert_eq(graph[p], eager[p], "%s: step %d: graph replay token %d, eager %d",
                 hcq_device_kind_name(kind), p, graph[p], eager[p]);
  free(logits);
  OK(llama2_decoder_destroy(dec));
}

static void check_decoder(hcq_device_kind_t kind, llama2_shape_t shape, int steps, int devices) {
  require(kind, devices);
  model_t m;
  load_model(&m, shape, steps);
  check_model(kind, m, devices);
  free_model(&m);
}

/* A checkpoint of any shape, written to a file and read back (the reader validates it): uniform
 * weights at the generator's scales (checkpoint.c), so that the logits are spread out. */
static void odd_model(model_t *m, llama2_config_t c, int steps) {
  int hs = c.dim / c.n_heads, kv = hs * c.n_kv_heads;
  uint64_t d = (uint64_t)c.dim, h = (uint64_t)c.hidden_dim, l = (uint64_t)c.n_layers,
           v = (uint64_t)c.vocab_size;
  uint64_t n[14] = {v * d,
                    l * d,
                    l * d * d,
                    l * d * (uint64_t)kv,
                    l * d * (uint64_t)kv,
                    l * d * d,
                    l * d,
                    l * h * d,
                    l * d * h,
                    l * h * d,
                    d,
                    (uint64_t)c.seq_len * (uint64_t)hs / 2,
                    (uint64_t)c.seq_len * (uint64_t)hs / 2,
                    v * d};
  float in_d = 1.0f / sqrtf((float)c.dim), in_h = 1.0f / sqrtf((float)c.hidden_dim);
  const float scale[14] = {1.0f,        0,    4.0f * in_d, 4.0f * in_d, 1.7f * in_d,
                           0.5f * in_d, 0,    1.7f * in_d, 0.5f * in_h, 1.7f * in_d,
                           0,           0.0f, 0.0f,        5.0f * in_d};
  char path[] = "/tmp/hcq_llama2_odd_XXXXXX";
  int fd = mkstemp(path);
  cr_assert(fd >= 0);
  FILE *f = fdopen(fd, "wb");
  cr_assert(f);
  int32_t header[7] = {c.dim,        c.hidden_dim,  c.n_layers, c.n_heads,
                       c.n_kv_heads, -c.vocab_size, c.seq_len};
  cr_assert_eq(fwrite(header, sizeof(header), 1, f), 1);
  uint64_t s = 7;
  for (int t = 0; t < 14; t++)
    for (uint64_t i = 0; i < n[t]; i++) {
      s = s * 6364136223846793005ull + 1442695040888963407ull;
      float u = (float)(s >> 40) / (float)(1 << 24); /* [0, 1) */
      float x = t == 1 || t == 6 || t == 10 ? 0.6f + 0.8f * u : (2 * u - 1) * scale[t];
      cr_assert_eq(fwrite(&x, sizeof(x), 1, f), 1);
    }
  cr_assert_eq(fclose(f), 0);
  OK(llama2_checkpoint_load(path, &m->ck));
  remove(path);
  cr_assert_eq(m->ck.config.dim, c.dim);
  reference_run(m, steps);
}

/* Shapes off the kernels' fast paths: rows that are not multiples of 8 floats (dim 36 and head size
 * 12: 16-byte loads; dim 18, head size 6, hidden 54: 8-byte loads; hidden 45: single floats),
 * vocabularies that leave the classifier's last group part empty, grouped-query attention, and 70
 * steps, so attention combines three chunks of 32 positions. */
static void check_odd(hcq_device_kind_t kind, llama2_config_t c, int devices) {
  require(kind, devices);
  model_t m;
  odd_model(&m, c, 70);
  check_model(kind, m, devices);
  free_model(&m);
}

Test(llama2_vulkan, small_one_device) {
  check_decoder(HCQ_DEVICE_VULKAN, LLAMA2_SHAPE_SMALL, 32, 1);
}
Test(llama2_vulkan, small_two_devices) {
  check_decoder(HCQ_DEVICE_VULKAN, LLAMA2_SHAPE_SMALL, 32, 2);
}
Test(llama2_vulkan, shape_15m_one_device) {
  check_decoder(HCQ_DEVICE_VULKAN, LLAMA2_SHAPE_15M, 8, 1);
}
Test(llama2_vulkan, shape_15m_two_devices) {
  check_decoder(HCQ_DEVICE_VULKAN, LLAMA2_SHAPE_15M, 8, 2);
}
Test(llama2_vulkan, small_odd_shape_a) {
  check_odd(HCQ_DEVICE_VULKAN, (llama2_config_t){36, 45, 2, 3, 1, 100, 72, false}, 1);
}
Test(llama2_vulkan, small_odd_shape_b) {
  check_odd(HCQ_DEVICE_VULKAN, (llama2_config_t){18, 54, 3, 3, 3, 77, 72, false}, 2);
}
/* The CPU kernels on the same shapes: head sizes of 12 and 6 and 72 positions leave part of the
 * attention's vectors of positions and of its last chunk unused. */
Test(llama2_cpu_odd, shape_a) {
  check_odd(HCQ_DEVICE_CPU, (llama2_config_t){36, 45, 2, 3, 1, 100, 72, false}, 1);
}
Test(llama2_cpu_odd, shape_b) {
  check_odd(HCQ_DEVICE_CPU, (llama2_config_t){18, 54, 3, 3, 3, 77, 72, false}, 2);
}
Test(llama2_cuda, small_one_device) { check_decoder(HCQ_DEVICE_CUDA, LLAMA2_SHAPE_SMALL, 32, 1); }
Test(llama2_cuda, small_two_devices) { check_decoder(HCQ_DEVICE_CUDA, LLAMA2_SHAPE_SMALL, 32, 2); }
Test(llama2_cuda, shape_15m_one_device) { check_decoder(HCQ_DEVICE_CUDA, LLAMA2_SHAPE_15M, 8, 1); }
Test(llama2_cuda, shape_15m_two_devices) { check_decoder(HCQ_DEVICE_CUDA, LLAMA2_SHAPE_15M, 8, 2); }

/* Metal (the stand-in in CI, tools/metal-check.sh on a Mac). Two devices are logical ones on one
 * GPU (HCQ_METAL_VIRTUAL=1); a Metal graph spans one device, so the step is three graphs. */
Test(llama2_metal, small_one_device) { check_decoder(HCQ_DEVICE_METAL, LLAMA2_SHAPE_SMALL, 32, 1); }
Test(llama2_metal, shape_15m_one_device) {
  check_decoder(HCQ_DEVICE_METAL, LLAMA2_SHAPE_15M, 8, 1);
}
Test(llama2_metal, small_two_devices) {
  check_decoder(HCQ_DEVICE_METAL, LLAMA2_SHAPE_SMALL, 32, 2);
}
Test(llama2_metal, shape_15m_two_devices) {
  check_decoder(HCQ_DEVICE_METAL, LLAMA2_SHAPE_15M, 8, 2);
}

/* Every kind has decoder kernels; one without (out of range here) is refused by name. */
Test(llama2_kinds, unknown_kind_unimplemented) {
  llama2_checkpoint_t ck;
  OK(llama2_checkpoint_generate(LLAMA2_SHAPE_SMALL, 42, &ck));
  llama2_decoder_options_t opts = {1, 0, false, HCQ_DEVICE_KIND_COUNT};
  llama2_decoder_t *dec = NULL;
  FAILS(llama2_decoder_create(&ck, &opts, &dec), HCQ_UNIMPLEMENTED, "no kernels for");
  cr_assert_null(dec);
  llama2_checkpoint_free(&ck);
}

/* Without Metal (this test runs without the stand-in), the decoder says the device is unavailable.
 */
Test(llama2_kinds, metal_absent_unavailable) {
  hcq_device_info_t infos[8];
  size_t n = hcq_device_query(infos, 8);
  for (size_t i = 0; i < n && i < 8; i++)
    if (infos[i].kind == HCQ_DEVICE_METAL && infos[i].available)
      cr_skip_test("Metal is available here");
  llama2_checkpoint_t ck;
  OK(llama2_checkpoint_generate(LLAMA2_SHAPE_SMALL, 42, &ck));
  llama2_decoder_options_t opts = {1, 0, false, HCQ_DEVICE_METAL};
  llama2_decoder_t *dec = NULL;
  FAILS(llama2_decoder_create(&ck, &opts, &dec), HCQ_UNAVAILABLE, "METAL:0");
  cr_assert_null(dec);
  llama2_checkpoint_free(&ck);
}
