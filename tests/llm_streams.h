/* llama.cpp's greedy token streams (tests/data/llm/NAME_llamacpp_streams.json, written by
 * scripts/llm-llamacpp-reference.py) and the teacher-forced comparison with them: the decoder is
 * fed llama.cpp's tokens and, at every generated position, its top token is compared with
 * llama.cpp's. Header-only, for the tests; needs Jansson. */
#ifndef HCQ_TESTS_LLM_STREAMS_H
#define HCQ_TESTS_LLM_STREAMS_H

#include <jansson.h>
#include <stdio.h>
#include <string.h>

#include "llm.h"
#include "test_util.h"

typedef struct stream {
  char name[64];
  int32_t prompt[512], gen[512];
  int nprompt, ngen;
} stream_t;

static inline int load_streams(const char *path, stream_t *out, int cap) {
  json_error_t err;
  json_t *root = json_load_file(path, 0, &err);
  cr_assert(root, "%s: %s", path, err.text);
  json_t *streams = json_object_get(root, "streams");
  cr_assert(json_is_array(streams) && json_array_size(streams) >= 1, "%s: no \"streams\" array",
            path);
  int n = 0;
  for (size_t i = 0; i < json_array_size(streams) && n < cap; i++, n++) {
    json_t *s = json_array_get(streams, i), *p = json_object_get(s, "prompt_ids"),
           *g = json_object_get(s, "generated_ids");
    cr_assert(json_is_array(p) && json_is_array(g) && json_array_size(p) <= 512 &&
              json_array_size(g) <= 512);
    snprintf(out[n].name, sizeof(out[n].name), "%s", json_string_value(json_object_get(s, "name")));
    out[n].nprompt = (int)json_array_size(p), out[n].ngen = (int)json_array_size(g);
    for (int j = 0; j < out[n].nprompt; j++)
      out[n].prompt[j] = (int32_t)json_integer_value(json_array_get(p, (size_t)j));
    for (int j = 0; j < out[n].ngen; j++)
      out[n].gen[j] = (int32_t)json_integer_value(json_array_get(g, (size_t)j));
  }
  json_decref(root);
  return n;
}

typedef struct forced_result {
  int same, total;
  float worst_gap; /* the largest (our top logit - llama.cpp's token's logit) where they differ */
  char report[1024];
} forced_result_t;

/* Teacher-forces d on the streams: prompt as one pass, then llama.cpp's tokens one step at a time.
 * A position where our top token is not llama.cpp's must be a near tie (llama.cpp's token within
 * near of our top logit). */
static inline forced_result_t teacher_forced(llm_decoder_t *d, const stream_t *streams, int ns,
                                             float near) {
  forced_result_t r = {0};
  int vocab = llm_decoder_config(d)->vocab;
  float *lg = malloc((size_t)vocab * 4);
  cr_assert(lg);
  for (int s = 0; s < ns; s++) {
    const stream_t *st = &streams[s];
    OK(llm_decoder_set_tokens(d, 0, st->prompt, st->nprompt));
    OK(llm_decoder_prefill(d, 0, st->nprompt, true));
    int agree = 0;
    for (int i = 0; i < st->ngen; i++) {
      /* the logits that predict generated token i: after the prompt, then after token i - 1 */
      if (i > 0) {
        OK(llm_decoder_set_tokens(d, st->nprompt + i - 1, &st->gen[i - 1], 1));
        OK(llm_decoder_step(d, st->nprompt + i - 1, true));
      }
      OK(llm_decoder_logits(d, lg));
      int top = 0;
      for (int v = 1; v < vocab; v++)
        if (lg[v] > lg[top]) top = v;
      if (top == st->gen[i]) {
        agree++;
        continue;
      }
      float gap = lg[top] - lg[st->gen[i]];
      if (gap > r.worst_gap) r.worst_gap = gap;
      cr_assert(gap <= near,
                "%s: generated token %d: ours %d (logit %.3f), llama.cpp's %d has %.3f here: not a "
                "near tie",
                st->name, i, top, lg[top], st->gen[i], lg[st->gen[i]]);
    }
    r.total += st->ngen, r.same += agree;
    size_t len = strlen(r.report);
    if (len < sizeof(r.report) - 64)
      snprintf(r.report + len, sizeof(r.report) - len, " %.40s %d/%d", st->name, agree, st->ngen);
  }
  free(lg);
  return r;
}

/* The streams in path, teacher-forced on d: llama.cpp's token at >= 95% of positions, every other a
 * near tie (within near); the counts go to standard error under label. */
static inline forced_result_t follows_llamacpp(llm_decoder_t *d, const char *path, float near,
                                               const char *label) {
  static stream_t streams[8];
  int ns = load_streams(path, streams, 8);
  forced_result_t r = teacher_forced(d, streams, ns, near);
  fprintf(stderr, "%s: llama.cpp's token at%s positions (%d/%d); largest gap where not %.3f\n",
          label, r.report, r.same, r.total, (double)r.worst_gap);
  cr_assert(r.same * 100 >= 95 * r.total, "%s: llama.cpp's token at only %d of %d positions (%s)",
            label, r.same, r.total, r.report);
  return r;
}

#endif
