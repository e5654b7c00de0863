/* The public library (include/hcq/llm.h) over the model, tokenizer, chat templates and decoder of
 * this folder. What it adds: names resolved to files, checked arguments, the sampler set only when
 * it changes (setting it waits for the device), stop reasons, and the token stream turned into
 * whole UTF-8 pieces for the callback. */
#include <ctype.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fetch.h"
#include "llm_api.h"
#include "model_status.h"
#include "stop.h"

struct hcq_llm {
  char path[PATH_MAX];
  char name[sizeof(((llm_model_t *)0)->name)];
  char weight_types[256];
  char device[32];
  char *chat_template; /* the file's template text (NULL: none) */
  size_t chat_template_len;
  const char *chat_family; /* its family's name, NULL when none or not recognised */
  hcq_llm_options_t options;
  hcq_device_kind_t kind;
  llm_config_t config;
  uint64_t file_bytes;
  llm_model_t *model; /* until the decoder holds the weights */
  llm_tokenizer_t *tok;
  llm_decoder_t *dec;
  llm_sampler_t sampler; /* what the decoder samples with now */
};

static hcq_status_t bad(const char *what) {
  return hcq_status_make(HCQ_INVALID_ARGUMENT, "%s", what);
}

static hcq_status_t parse_kind(const char *name, hcq_device_kind_t *out) {
  *out = HCQ_DEVICE_CPU;
  if (!name) return NULL;
  for (int k = 0; k < HCQ_DEVICE_KIND_COUNT; k++) {
    const char *kn = hcq_device_kind_name((hcq_device_kind_t)k);
    size_t i = 0;
    while (kn[i] && name[i] && toupper((unsigned char)name[i]) == kn[i]) i++;
    if (!kn[i] && !name[i]) {
      *out = (hcq_device_kind_t)k;
      return NULL;
    }
  }
  return hcq_status_make(HCQ_INVALID_ARGUMENT,
                         "hcq_llm_open: device \"%s\": expected CPU, VULKAN, CUDA or METAL", name);
}

/* The file model names: a path, a known name (downloaded unless no_download), or NULL: the default.
 */
static hcq_status_t resolve(const char *model, const hcq_llm_options_t *o, char *out, size_t size) {
  const llm_known_model_t *known = model ? llm_known_model(model) : llm_known_models(&(size_t){0});
  if (known && o->no_download && (!model || access(model, F_OK) != 0))
    return llm_known_model_path(known, out, size);
  if (!known && access(model, F_OK) != 0)
    return hcq_status_make(HCQ_NOT_FOUND, "%s: no such file, and not a model name hcq knows (%s)",
                           model, "hcq_llm_known_model lists them");
  return llm_resolve_model(model, o->log, out, size);
}

/* The template text, kept for chat_prompt once the file is closed. */
static hcq_status_t keep_template(hcq_llm_t *llm) {
  const gguf_file_t *g = llm->model->file;
  gguf_str_t t = {NULL, 0};
  if (!gguf_find_kv(g, "tokenizer.chat_template")) return NULL;
  hcq_status_t st = gguf_get_str(g, "tokenizer.chat_template", &t);
  if (st || !t.len) return st;
  if (!(llm->chat_template = malloc((size_t)t.len + 1)))
    return hcq_status_make(HCQ_OUT_OF_MEMORY, "out of memory");
  memcpy(llm->chat_template, t.ptr, (size_t)t.len);
  llm->chat_template[t.len] = 0;
  llm->chat_template_len = (size_t)t.len;
  llm_chat_kind_t kind;
  hcq_status_t unknown = llm_chat_detect(t.ptr, (size_t)t.len, &kind);
  if (!unknown) llm->chat_family = llm_chat_kind_name(kind);
  hcq_status_destroy(unknown);
  return NULL;
}

/* The device kind, the model's file, its tokenizer and chat template. */
static hcq_status_t open_model(hcq_llm_t *llm, const char *model, const hcq_llm_options_t *o,
                               const char *device) {
  TRY(parse_kind(device, &llm->kind));
  TRY(resolve(model, o, llm->path, sizeof(llm->path)));
  TRY(llm_model_open(llm->path, &llm->model));
  TRY(llm_tokenizer_from_gguf(llm->model->file, &llm->tok));
  return keep_template(llm);
}

hcq_status_t llm_api_load(const char *model, const hcq_llm_options_t *options, hcq_llm_t **out) {
  if (!out) return bad("hcq_llm_open: out is NULL");
  *out = NULL;
  hcq_llm_options_t o = options ? *options : (hcq_llm_options_t){0};
  if (o.ctx < 0 || o.ctx > (1 << 20))
    return hcq_status_make(HCQ_INVALID_ARGUMENT,
                           "hcq_llm_open: ctx %d (expected 0 to 1048576 positions)", o.ctx);
  if (o.max_batch < 0 || o.max_batch > 4096)
    return hcq_status_make(HCQ_INVALID_ARGUMENT, "hcq_llm_open: max_batch %d (expected 0 to 4096)",
                           o.max_batch);
  hcq_llm_t *llm = calloc(1, sizeof(*llm));
  if (!llm) return hcq_status_make(HCQ_OUT_OF_MEMORY, "out of memory");
  o.device = NULL; /* the caller's string need not outlive the call */
  llm->options = o;
  hcq_status_t st = open_model(llm, model, &o, options ? options->device : NULL);
  if (st) {
    hcq_status_destroy(hcq_llm_close(llm));
    return st;
  }
  llm->config = llm->model->config;
  llm->file_bytes = gguf_file_size(llm->model->file);
  snprintf(llm->name, sizeof(llm->name), "%s", llm->model->name);
  llm_model_weight_types(llm->model, llm->weight_types, sizeof(llm->weight_types));
  *out = llm;
  return NULL;
}

hcq_status_t llm_api_start(hcq_llm_t *llm, const llm_decoder_options_t *decoder) {
  if (!llm || !llm->model || llm->dec) return bad("llm_api_start: not a loaded, unstarted model");
  llm_decoder_options_t d = decoder ? *decoder
                                    : (llm_decoder_options_t){.kind = llm->kind,
                                                              .ctx = llm->options.ctx,
                                                              .max_batch = llm->options.max_batch};
  TRY(llm_decoder_create(llm->model, &d, &llm->dec));
  if (!llm->options.eager) TRY(llm_decoder_capture(llm->dec));
  llm->kind = d.kind;
  llm->sampler = (llm_sampler_t){.top_p = 1};
  snprintf(llm->device, sizeof(llm->device), "%s:0", hcq_device_kind_name(d.kind));
  /* the weights are on the devices: the file's mapping goes (resident memory is the weights once)
   */
  llm_model_close(llm->model);
  llm->model = NULL;
  return NULL;
}

hcq_status_t hcq_llm_open(const char *model, const hcq_llm_options_t *options, hcq_llm_t **out) {
  TRY(llm_api_load(model, options, out));
  hcq_status_t st = llm_api_start(*out, NULL);
  if (st) {
    hcq_status_destroy(hcq_llm_close(*out));
    *out = NULL;
  }
  return st;
}

hcq_status_t hcq_llm_close(hcq_llm_t *llm) {
  if (!llm) return NULL;
  hcq_status_t st = llm_decoder_destroy(llm->dec);
  llm_tokenizer_free(llm->tok);
  llm_model_close(llm->model);
  free(llm->chat_template);
  free(llm);
  return st;
}

size_t hcq_llm_known_model_count(void) {
  size_t n;
  llm_known_models(&n);
  return n;
}

const char *hcq_llm_known_model(size_t i) {
  size_t n;
  const llm_known_model_t *m = llm_known_models(&n);
  return i < n ? m[i].name : NULL;
}

void hcq_llm_get_info(const hcq_llm_t *llm, hcq_llm_info_t *out) {
  if (!out) return;
  *out = (hcq_llm_info_t){0};
  if (!llm) return;
  const llm_config_t *c = &llm->config;
  *out = (hcq_llm_info_t){.path = llm->path,
                          .name = llm->name,
                          .architecture = llm_arch_name(c->arch),
                          .weight_types = llm->weight_types,
                          .chat_template = llm->chat_family,
                          .device = llm->dec ? llm->device : NULL,
                          .vocab = c->vocab,
                          .ctx_train = c->ctx_train,
                          .layers = c->n_layers,
                          .dim = c->dim,
                          .heads = c->n_heads,
                          .kv_heads = c->n_kv_heads};
  if (llm->dec) {
    out->ctx = llm_decoder_ctx(llm->dec);
    out->max_batch = llm_decoder_max_batch(llm->dec);
    out->kernels_per_token = llm_decoder_kernels_per_step(llm->dec);
  }
}

llm_decoder_t *llm_api_decoder(hcq_llm_t *llm) { return llm ? llm->dec : NULL; }
const llm_tokenizer_t *llm_api_tokenizer(const hcq_llm_t *llm) { return llm ? llm->tok : NULL; }
const llm_config_t *llm_api_config(const hcq_llm_t *llm) { return llm ? &llm->config : NULL; }
uint64_t llm_api_file_bytes(const hcq_llm_t *llm) { return llm ? llm->file_bytes : 0; }

/* ---- tokens and text ---- */

hcq_status_t hcq_llm_tokenize(const hcq_llm_t *llm, const char *text, size_t len, bool add_special,
                              bool parse_special, int32_t *ids, size_t cap, size_t *n) {
  if (!llm || !n || (!text && len) || (!ids && cap))
    return bad("hcq_llm_tokenize: llm, n, text or ids is NULL");
  *n = 0;
  int32_t *all = NULL;
  hcq_status_t st;
  if ((st = llm_tokenize(llm->tok, text ? text : "", len, parse_special, add_special, &all, n)))
    goto done;
  if (*n > cap && (ids || cap)) {
    st = hcq_status_make(HCQ_OUT_OF_RANGE, "hcq_llm_tokenize: the text is %zu tokens; room for %zu",
                         *n, cap);
    goto done;
  }
  if (ids && *n) memcpy(ids, all, *n * sizeof(int32_t)); /* no tokens: all is NULL */
done:
  free(all);
  return st;
}

/* A malloc'd string copied to the caller's buffer (with its NUL), or measured. */
static hcq_status_t give_text(const char *what, char *text, size_t text_len, char *out, size_t cap,
                              size_t *len) {
  *len = text_len;
  hcq_status_t st = NULL;
  if (text_len + 1 > cap && (out || cap))
    st = hcq_status_make(HCQ_OUT_OF_RANGE, "%s: the text is %zu bytes and its NUL; room for %zu",
                         what, text_len, cap);
  else if (out)
    memcpy(out, text, text_len + 1);
  free(text);
  return st;
}

hcq_status_t hcq_llm_detokenize(const hcq_llm_t *llm, const int32_t *ids, size_t n, bool special,
                                char *out, size_t cap, size_t *len) {
  if (!llm || !len || (!ids && n) || (!out && cap))
    return bad("hcq_llm_detokenize: llm, len, ids or out is NULL");
  *len = 0;
  for (size_t i = 0; i < n; i++)
    if (ids[i] < 0 || ids[i] >= llm->config.vocab)
      return hcq_status_make(
          HCQ_INVALID_ARGUMENT,
          "hcq_llm_detokenize: id %d (ids[%zu]) is outside the vocabulary (%d ids)", ids[i], i,
          llm->config.vocab);
  char *text = NULL;
  size_t text_len = 0;
  hcq_status_t st = llm_detokenize_len(llm->tok, ids, n, special, &text, &text_len);
  if (st) return st;
  return give_text("hcq_llm_detokenize", text, text_len, out, cap, len);
}

bool hcq_llm_is_end_token(const hcq_llm_t *llm, int32_t id) {
  return llm && llm_tokenizer_is_eog(llm->tok, id);
}

/* The conversation rendered, malloc'd (llm_api.h). */
hcq_status_t llm_api_chat_text(const hcq_llm_t *llm, const hcq_llm_message_t *messages, size_t n,
                               const char *template_name, char **out) {
  /* hcq_llm_message_t and llm_chat_message_t are the same two pointers */
  _Static_assert(sizeof(hcq_llm_message_t) == sizeof(llm_chat_message_t), "message layouts");
  hcq_status_t st = llm_chat_render(llm->chat_template, llm->chat_template_len, template_name,
                                    (const llm_chat_message_t *)messages, n, true, out);
  if (st && !template_name && hcq_status_code(st) == HCQ_INVALID_ARGUMENT) {
    hcq_status_t hint = hcq_status_make(HCQ_INVALID_ARGUMENT,
                                        "%s: %s; give a template name (chatml, llama3, gemma, "
                                        "llama2, ...) or generate from plain text",
                                        llm->name, hcq_status_message(st));
    hcq_status_destroy(st);
    st = hint;
  }
  return st;
}

hcq_status_t hcq_llm_chat_prompt(const hcq_llm_t *llm, const hcq_llm_message_t *messages, size_t n,
                                 const char *template_name, char *out, size_t cap, size_t *len) {
  if (!llm || !len || (!messages && n) || (!out && cap))
    return bad("hcq_llm_chat_prompt: llm, len, messages or out is NULL");
  *len = 0;
  char *text = NULL;
  hcq_status_t st = llm_api_chat_text(llm, messages, n, template_name, &text);
  return st ? st : give_text("hcq_llm_chat_prompt", text, strlen(text), out, cap, len);
}

/* ---- generation ---- */

static hcq_status_t check_sampling(const char *who, const hcq_llm_sampling_t *s) {
  if (!isfinite(s->temperature) || s->temperature < 0 || s->temperature > 100)
    return hcq_status_make(HCQ_INVALID_ARGUMENT,
                           "%s: temperature %g (expected 0 to 100; 0: greedy)", who,
                           (double)s->temperature);
  if (!isfinite(s->top_p) || s->top_p < 0 || s->top_p > 1)
    return hcq_status_make(HCQ_INVALID_ARGUMENT, "%s: top_p %g (expected 0 to 1)", who,
                           (double)s->top_p);
  if (s->top_k < 0) return hcq_status_make(HCQ_INVALID_ARGUMENT, "%s: top_k %d < 0", who, s->top_k);
  if (!(s->min_p >= 0 && s->min_p <= 1))
    return hcq_status_make(HCQ_INVALID_ARGUMENT, "%s: min_p %g (expected 0 to 1)", who,
                           (double)s->min_p);
  if (!(s->repeat_penalty >= 0 && s->repeat_penalty <= 100))
    return hcq_status_make(HCQ_INVALID_ARGUMENT,
                           "%s: repeat_penalty %g (expected 0 to 100; 0 or 1: "
                           "none)",
                           who, (double)s->repeat_penalty);
  if (!(fabsf(s->frequency_penalty) <= 100))
    return hcq_status_make(HCQ_INVALID_ARGUMENT, "%s: frequency_penalty %g (expected -100 to 100)",
                           who, (double)s->frequency_penalty);
  if (!(fabsf(s->presence_penalty) <= 100))
    return hcq_status_make(HCQ_INVALID_ARGUMENT, "%s: presence_penalty %g (expected -100 to 100)",
                           who, (double)s->presence_penalty);
  if (s->penalty_last_n < -1)
    return hcq_status_make(HCQ_INVALID_ARGUMENT,
                           "%s: penalty_last_n %d (expected -1: the context, "
                           "0: 64, or more)",
                           who, s->penalty_last_n);
  return NULL;
}

hcq_status_t llm_api_check_options(const char *who, const hcq_llm_generate_options_t *o) {
  if (o->max_tokens < 0)
    return hcq_status_make(HCQ_INVALID_ARGUMENT, "%s: max_tokens %d < 0", who, o->max_tokens);
  hcq_status_t st = check_sampling(who, &o->sampling);
  if (st) return st;
  if (o->nstop && !o->stop)
    return hcq_status_make(HCQ_INVALID_ARGUMENT, "%s: stop is NULL with nstop > 0", who);
  for (size_t i = 0; i < o->nstop; i++)
    if (!o->stop[i] || !o->stop[i][0])
      return hcq_status_make(HCQ_INVALID_ARGUMENT,
                             "%s: stop[%zu] is %s (a stop string is non-empty)", who, i,
                             o->stop[i] ? "empty" : "NULL");
  if (o->top_logprobs < 0 || o->top_logprobs > HCQ_LLM_MAX_LOGPROBS)
    return hcq_status_make(HCQ_INVALID_ARGUMENT, "%s: top_logprobs %d (expected 0 to %d)", who,
                           o->top_logprobs, HCQ_LLM_MAX_LOGPROBS);
  return NULL;
}

static bool same_sampler(const llm_sampler_t *a, const llm_sampler_t *b) {
  return a->temperature == b->temperature && a->top_p == b->top_p && a->top_k == b->top_k &&
         a->seed == b->seed && a->min_p == b->min_p && a->repeat_penalty == b->repeat_penalty &&
         a->frequency_penalty == b->frequency_penalty &&
         a->presence_penalty == b->presence_penalty && a->penalty_last_n == b->penalty_last_n;
}

llm_sampler_t llm_api_sampler(const hcq_llm_sampling_t *s, int ctx) {
  llm_sampler_t want = {.top_p = 1}; /* greedy */
  if (s->temperature > 0)
    want = (llm_sampler_t){s->temperature, s->top_p > 0 ? s->top_p : 1, s->top_k, s->seed,
                           .min_p = s->min_p};
  bool penalties = (s->repeat_penalty > 0 && s->repeat_penalty != 1) || s->frequency_penalty ||
                   s->presence_penalty;
  if (penalties) {
    want.repeat_penalty = s->repeat_penalty > 0 ? s->repeat_penalty : 1;
    want.frequency_penalty = s->frequency_penalty, want.presence_penalty = s->presence_penalty;
    int last_n = s->penalty_last_n ? s->penalty_last_n : 64; /* -1: the whole context */
    want.penalty_last_n = last_n > 0 ? last_n : ctx;
  }
  return want;
}

/* The decoder's sampler, set when it differs (setting it waits for the device). */
static hcq_status_t use_sampling(hcq_llm_t *llm, const hcq_llm_sampling_t *s) {
  llm_sampler_t want = llm_api_sampler(s, llm_decoder_ctx(llm->dec));
  if (same_sampler(&want, &llm->sampler)) return NULL;
  hcq_status_t st = llm_decoder_set_sampler(llm->dec, &want);
  if (!st) llm->sampler = want;
  return st;
}

typedef struct stream {
  hcq_llm_t *llm;
  const hcq_llm_generate_options_t *o;
  llm_detok_t detok;
  bool stopped; /* on_token returned false */
  llm_stop_t
      stop; /* the stop strings (stop.found: the one found) and the text held back for them */
  hcq_llm_logprob_t *logprobs; /* with options.logprobs: one per token so far */
  size_t nlogprobs;
  float *logits;
  hcq_status_t error; /* what failed inside the decoder's callback (it ends the generation) */
} stream_t;

void llm_logprob_of(const float *l, int vocab, int32_t id, int ntop, hcq_llm_logprob_t *out) {
  float top = l[0];
  for (int i = 1; i < vocab; i++) top = l[i] > top ? l[i] : top;
  double sum = 0;
  for (int i = 0; i < vocab; i++) sum += exp((double)l[i] - top);
  double lse = top + log(sum);
  *out = (hcq_llm_logprob_t){.id = id, .logprob = (float)(l[id] - lse)};
  for (int i = 0; i < vocab;
       i++) { /* insertion into the n_top best so far: higher first, lower id on ties */
    int at = out->n_top;
    while (at > 0 && l[i] > l[out->top_ids[at - 1]]) at--;
    if (at >= ntop) continue;
    int last = out->n_top < ntop ? out->n_top : ntop - 1;
    memmove(&out->top_ids[at + 1], &out->top_ids[at], (size_t)(last - at) * sizeof(int32_t));
    out->top_ids[at] = i;
    if (out->n_top < ntop) out->n_top++;
  }
  for (int k = 0; k < out->n_top; k++) out->top_logprobs[k] = (float)(l[out->top_ids[k]] - lse);
}

/* The log-probabilities of id from the logits it was chosen from (the decoder ran no step past it).
 */
static hcq_status_t token_logprob(stream_t *s, int32_t id, hcq_llm_logprob_t *out) {
  hcq_status_t st = llm_decoder_logits(s->llm->dec, s->logits);
  if (st) return st;
  llm_logprob_of(s->logits, s->llm->config.vocab, id, s->o->top_logprobs, out);
  return NULL;
}

/* The first n held bytes to on_token (with id); they go (after a stop string, all of it). */
static void pass_held(stream_t *s, int32_t id, size_t n) {
  if (s->o->on_token && !s->stopped) {
    char keep = s->stop.held[n];
    s->stop.held[n] = 0;
    s->stopped = !s->o->on_token(s->o->user, id, s->stop.held, n);
    s->stop.held[n] = keep;
  }
  llm_stop_consume(&s->stop, n);
}

static void on_token(void *ctx, int32_t id) {
  stream_t *s = ctx;
  const hcq_llm_generate_options_t *o = s->o;
  if (s->stopped || s->stop.found >= 0 || s->error) return;
  if (o->logprobs) {
    hcq_llm_logprob_t *lp = &s->logprobs[s->nlogprobs];
    if ((s->error = token_logprob(s, id, lp))) return;
    s->nlogprobs++;
    if (o->on_logprob) o->on_logprob(o->user, lp);
  }
  if (!o->on_token && !o->nstop) return;
  char piece[LLM_DETOK_MAX_OUT];
  size_t n = llm_detok_push(s->llm->tok, &s->detok, id, o->special, piece, sizeof(piece));
  n = n < sizeof(piece) ? n : sizeof(piece) - 1;
  piece[n] = 0;
  if (!o->nstop) {
    s->stopped = !o->on_token(o->user, id, piece, n);
    return;
  }
  bool end = !o->ignore_eos &&
             llm_tokenizer_is_eog(s->llm->tok, id); /* after an end token nothing more comes */
  size_t pass;
  if ((s->error = llm_stop_push(&s->stop, piece, n, end, &pass))) return;
  pass_held(s, id, pass);
}

static bool is_end(void *ctx, int32_t id) {
  stream_t *s = ctx;
  return s->stopped || s->stop.found >= 0 || s->error ||
         (!s->o->ignore_eos && llm_tokenizer_is_eog(s->llm->tok, id));
}

/* Once generation ends: text no token completed (as U+FFFD), and what was held back, to on_token.
 */
static void flush_stream(stream_t *s) {
  char rest[8];
  size_t nrest =
      s->error || s->stop.found >= 0 ? 0 : llm_detok_flush(&s->detok, rest, sizeof(rest) - 1);
  rest[nrest] = 0;
  if (!s->o->nstop) {
    if (nrest && s->o->on_token && !s->stopped)
      s->o->on_token(s->o->user, HCQ_LLM_NO_TOKEN, rest, nrest);
    return;
  }
  size_t pass = 0;
  if (s->error || s->stop.found >= 0) return;
  if ((s->error = llm_stop_push(&s->stop, rest, nrest, true, &pass))) return;
  if (pass) pass_held(s, HCQ_LLM_NO_TOKEN, pass);
}

/* The stream's buffers for steps tokens. */
static hcq_status_t stream_init(stream_t *s, hcq_llm_t *llm, const hcq_llm_generate_options_t *o,
                                int steps) {
  *s = (stream_t){.llm = llm, .o = o};
  llm_stop_init(&s->stop, o->stop, o->nstop);
  llm_detok_init(&s->detok);
  if (!o->logprobs) return NULL;
  s->logprobs = calloc((size_t)steps + 1, sizeof(hcq_llm_logprob_t));
  s->logits = malloc((size_t)llm->config.vocab * sizeof(float));
  return s->logprobs && s->logits
             ? NULL
             : hcq_status_make(HCQ_OUT_OF_MEMORY, "hcq_llm_generate: out of memory");
}

static void stream_free(stream_t *s) {
  llm_stop_free(&s->stop);
  free(s->logprobs), free(s->logits);
  hcq_status_destroy(s->error);
}

static hcq_status_t check_prompt(const hcq_llm_t *llm, const int32_t *prompt, size_t n) {
  int ctx = llm_decoder_ctx(llm->dec);
  if (n == 0 || n >= (size_t)ctx)
    return hcq_status_make(
        HCQ_OUT_OF_RANGE,
        "hcq_llm_generate: a prompt of %zu tokens (expected 1 to %d: the context "
        "holds %d positions and the new tokens)",
        n, ctx - 1, ctx);
  for (size_t i = 0; i < n; i++)
    if (prompt[i] < 0 || prompt[i] >= llm->config.vocab)
      return hcq_status_make(HCQ_INVALID_ARGUMENT,
                             "hcq_llm_generate: prompt id %d (at %zu) is outside the vocabulary "
                             "(%d ids)",
                             prompt[i], i, llm->config.vocab);
  return NULL;
}

hcq_status_t llm_api_generate(hcq_llm_t *llm, const int32_t *prompt, size_t n,
                              const hcq_llm_generate_options_t *options,
                              bool (*agree_end)(void *ctx, bool ended), hcq_llm_result_t *out) {
  if (!out) return bad("hcq_llm_generate: out is NULL");
  *out = (hcq_llm_result_t){0};
  if (!llm || (!prompt && n)) return bad("hcq_llm_generate: llm or prompt is NULL");
  if (!llm->dec) return bad("hcq_llm_generate: the model has no decoder yet (llm_api_start)");
  hcq_llm_generate_options_t o = options ? *options : (hcq_llm_generate_options_t){0};
  TRY(llm_api_check_options("hcq_llm_generate", &o));
  TRY(check_prompt(llm, prompt, n));
  TRY(use_sampling(llm, &o.sampling));
  int room = llm_decoder_ctx(llm->dec) - (int)n;
  int steps = o.max_tokens && o.max_tokens < room ? o.max_tokens : room;
  stream_t s;
  llm_generate_result_t r = {0};
  llm_generate_options_t g = {.steps = steps,
                              .graph = !llm->options.eager,
                              .is_end = is_end,
                              .on_token = on_token,
                              .ctx = &s,
                              .agree_end = agree_end,
                              .logits_in_step = o.logprobs};
  hcq_status_t st;
  if ((st = stream_init(&s, llm, &o, steps))) goto fail;
  if ((st = llm_generate(llm->dec, prompt, (int)n, &g, &r))) goto fail;
  if ((st = s.error)) {
    s.error = NULL;
    goto fail;
  }
  flush_stream(&s);
  *out = (hcq_llm_result_t){.ids = r.ids,
                            .n = (size_t)r.n,
                            .prompt_tokens = n,
                            .prompt_ms = r.prefill_ms,
                            .decode_ms = r.decode_ms,
                            .host_us_per_token = r.host_us_per_step,
                            .logprobs = s.logprobs,
                            .stop_index = s.stop.found >= 0 ? s.stop.found : 0};
  s.logprobs = NULL;
  out->stop = s.stop.found >= 0                     ? HCQ_LLM_STOP_STRING
              : s.stopped                           ? HCQ_LLM_STOP_CALLBACK
              : r.ended                             ? HCQ_LLM_STOP_END
              : o.max_tokens && r.n >= o.max_tokens ? HCQ_LLM_STOP_LENGTH
                                                    : HCQ_LLM_STOP_CONTEXT;
  stream_free(&s);
  return NULL;
fail:
  free(r.ids);
  stream_free(&s);
  return st;
}

hcq_status_t hcq_llm_generate(hcq_llm_t *llm, const int32_t *prompt, size_t n,
                              const hcq_llm_generate_options_t *options, hcq_llm_result_t *out) {
  return llm_api_generate(llm, prompt, n, options, NULL, out);
}

hcq_status_t hcq_llm_generate_text(hcq_llm_t *llm, const char *prompt,
                                   const hcq_llm_generate_options_t *options,
                                   hcq_llm_result_t *out) {
  if (out) *out = (hcq_llm_result_t){0};
  if (!llm || !prompt || !out) return bad("hcq_llm_generate_text: llm, prompt or out is NULL");
  int32_t *ids = NULL;
  size_t n = 0;
  hcq_status_t st;
  if ((st = llm_tokenize(llm->tok, prompt, strlen(prompt), true, true, &ids, &n))) goto done;
  st = hcq_llm_generate(llm, ids, n, options, out);
done:
  free(ids);
  return st;
}

hcq_status_t hcq_llm_chat(hcq_llm_t *llm, const hcq_llm_message_t *messages, size_t n,
                          const hcq_llm_generate_options_t *options, hcq_llm_result_t *out) {
  if (out) *out = (hcq_llm_result_t){0};
  if (!llm || !out) return bad("hcq_llm_chat: llm or out is NULL");
  if (!messages && n) return bad("hcq_llm_chat: messages is NULL");
  char *text = NULL;
  hcq_status_t st;
  if ((st = llm_api_chat_text(llm, messages, n, NULL, &text))) goto done;
  st = hcq_llm_generate_text(llm, text, options, out);
done:
  free(text);
  return st;
}

void hcq_llm_result_free(hcq_llm_result_t *result) {
  if (!result) return;
  free(result->ids);
  free(result->logprobs);
  *result = (hcq_llm_result_t){0};
}

const char *hcq_llm_stop_name(hcq_llm_stop_t stop) {
  static const char *const names[] = {"end", "length", "context", "callback", "stop"};
  return (unsigned)stop < sizeof(names) / sizeof(names[0]) ? names[stop] : "unknown";
}
