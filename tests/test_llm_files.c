/* SmolLM2-135M-Instruct in every weight type, against llama.cpp: the test requantizes the real
 * model (tests/llm_requant.h: each recipe deterministic, its SHA-256 checked against the one
 * llama.cpp ran on) and teacher-forces the decoder on llama.cpp's greedy streams for that very file
 * (tests/data/llm/smollm2_types_llamacpp_streams.json, scripts/llm-llamacpp-reference.py --types):
 * llama.cpp's token at >= 95% of all positions and >= 85% per file (the files' streams are short:
 * 56 to 96 positions), every other one a near tie. These are test
 * files (the weights went through Q4_1 first), not better models: what they show is that each
 * type's kernels compute what llama.cpp's do on a real network. */
#include <jansson.h>
#include <limits.h>
#include <unistd.h>

#include "llm.h"
#include "llm_requant.h"
#include "llm_streams.h"
#include "llm_test_util.h"
#include "sha256.h"
#include "test_util.h"

TestSuite(llm_files, .timeout = 600);

typedef struct type_file {
  char recipe[16], sha256[65];
  int nstreams;
  stream_t streams[2];
} type_file_t;

static int load_type_files(type_file_t *out, int cap) {
  json_error_t err;
  json_t *root = json_load_file(HCQ_LLM_TYPE_STREAMS, 0, &err);
  cr_assert(root, "%s: %s", HCQ_LLM_TYPE_STREAMS, err.text);
  json_t *files = json_object_get(root, "files");
  cr_assert(json_is_array(files));
  int n = 0;
  for (size_t i = 0; i < json_array_size(files) && n < cap; i++, n++) {
    json_t *f = json_array_get(files, i), *streams = json_object_get(f, "streams");
    snprintf(out[n].recipe, sizeof(out[n].recipe), "%s",
             json_string_value(json_object_get(f, "recipe")));
    snprintf(out[n].sha256, sizeof(out[n].sha256), "%s",
             json_string_value(json_object_get(f, "sha256")));
    out[n].nstreams = 0;
    for (size_t s = 0; s < json_array_size(streams) && s < 2; s++, out[n].nstreams++) {
      stream_t *st = &out[n].streams[s];
      json_t *j = json_array_get(streams, s), *p = json_object_get(j, "prompt_ids"),
             *g = json_object_get(j, "generated_ids");
      snprintf(st->name, sizeof(st->name), "%s", json_string_value(json_object_get(j, "name")));
      st->nprompt = (int)json_array_size(p), st->ngen = (int)json_array_size(g);
      cr_assert(st->nprompt <= 512 && st->ngen <= 512);
      for (int k = 0; k < st->nprompt; k++)
        st->prompt[k] = (int32_t)json_integer_value(json_array_get(p, (size_t)k));
      for (int k = 0; k < st->ngen; k++)
        st->gen[k] = (int32_t)json_integer_value(json_array_get(g, (size_t)k));
    }
  }
  json_decref(root);
  return n;
}

static const char *smollm2_path(char *out, size_t size) {
  hcq_status_t st = llm_default_model_path(out, size);
  if (st) {
    hcq_status_destroy(st);
    cr_skip_test("SmolLM2 is absent (the llm_model test fetches it)");
  }
  return out;
}

Test(llm_files, smollm2_in_every_type_follows_llamacpp) {
  char src[PATH_MAX];
  smollm2_path(src, sizeof(src));
  static type_file_t files[16];
  int nf = load_type_files(files, 16);
  char report[2048] = "";
  int same = 0, total = 0;
  for (int f = 0; f < nf; f++) {
    char path[PATH_MAX], digest[65];
    tmp_path(path, sizeof(path), files[f].recipe);
    OK(llm_requant(src, path, files[f].recipe));
    cr_assert_eq(hcq_sha256_file(path, digest), 0);
    cr_assert_str_eq(
        digest, files[f].sha256,
        "%s: the requantized file is not the one llama.cpp ran on (tests/llm_requant.h or the "
        "quantizers changed: run scripts/llm-llamacpp-reference.py --types again)",
        files[f].recipe);
    llm_model_t *m;
    OK(llm_model_open(path, &m));
    unlink(path);
    llm_decoder_t *d = decoder_on(m, HCQ_DEVICE_CPU, 1, 256, 64);
    /* Q2_K's 2.6 bits (our plain quantizer) leave a network whose top two logits often sit within a
     * unit: its near-tie bar is wider */
    float near = !strcmp(files[f].recipe, "Q2_K") ? 2.0f : 0.6f;
    forced_result_t r = teacher_forced(d, files[f].streams, files[f].nstreams, near);
    same += r.same, total += r.total;
    cr_assert(r.same * 100 >= 85 * r.total, "%s: llama.cpp's token at only %d of %d positions (%s)",
              files[f].recipe, r.same, r.total, r.report);
    size_t len = strlen(report);
    snprintf(report + len, sizeof(report) - len, " %s %d/%d (gap %.3f);", files[f].recipe, r.same,
             r.total, (double)r.worst_gap);
    OK(llm_decoder_destroy(d));
    llm_model_close(m);
  }
  fprintf(stderr, "llama.cpp's token per file:%s all files %d/%d\n", report, same, total);
  cr_assert(same * 100 >= 95 * total,
            "llama.cpp's token at only %d of %d positions over the files:%s", same, total, report);
}
