/* hcq serve's JSON: OpenAI requests checked field by field into a job (each wrong field named in an
 * OpenAI error object, as the API does), and the responses and stream chunks of
 * /v1/chat/completions and /v1/completions. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <hcq/hcq.h>

#include "cli/serve.h"

#define BAD(err, param, ...) \
  serve_fail(err, SERVE_HTTP_BAD_REQUEST, "invalid_request_error", NULL, param, __VA_ARGS__)

/* ---- request fields ---- */

/* A number field in [lo, hi] (absent or null: keep *out). */
static bool get_number(json_t *root, const char *key, double lo, double hi, double *out,
                       serve_error_t *err) {
  json_t *v = json_object_get(root, key);
  if (!v || json_is_null(v)) return true;
  if (!json_is_number(v)) return BAD(err, key, "%s: expected a number", key);
  double d = json_number_value(v);
  if (!isfinite(d) || d < lo || d > hi)
    return BAD(err, key, "%s: %g is outside %g to %g", key, d, lo, hi);
  *out = d;
  return true;
}

static bool get_integer(json_t *root, const char *key, long long lo, long long hi, long long *out,
                        serve_error_t *err) {
  json_t *v = json_object_get(root, key);
  if (!v || json_is_null(v)) return true;
  if (!json_is_integer(v)) return BAD(err, key, "%s: expected an integer", key);
  long long i = json_integer_value(v);
  if (i < lo || i > hi) return BAD(err, key, "%s: %lld is outside %lld to %lld", key, i, lo, hi);
  *out = i;
  return true;
}

static bool get_bool(json_t *root, const char *key, bool *out, serve_error_t *err) {
  json_t *v = json_object_get(root, key);
  if (!v || json_is_null(v)) return true;
  if (!json_is_boolean(v)) return BAD(err, key, "%s: expected true or false", key);
  *out = json_is_true(v);
  return true;
}

/* Fields this server does not carry out yet: accepted at the value that changes nothing, refused
 * otherwise (never silently ignored). */
static bool unsupported(json_t *root, serve_kind_t kind, serve_error_t *err) {
  json_t *echo = json_object_get(root, "echo");
  if (echo && !json_is_null(echo) && !json_is_false(echo))
    return BAD(err, "echo", "echo: not supported by this server yet");
  static const char *const absent[] = {"tools",         "functions", "tool_choice",
                                       "function_call", "suffix",    NULL};
  for (const char *const *k = absent; *k; k++) {
    json_t *v = json_object_get(root, *k);
    if (v && !json_is_null(v)) return BAD(err, *k, "%s: not supported by this server", *k);
  }
  json_t *bias = json_object_get(root, "logit_bias");
  if (bias && !json_is_null(bias) && !(json_is_object(bias) && json_object_size(bias) == 0))
    return BAD(err, "logit_bias", "logit_bias: not supported by this server yet");
  json_t *format = json_object_get(root, "response_format");
  json_t *ftype = json_is_object(format) ? json_object_get(format, "type") : NULL;
  if (format && !json_is_null(format) &&
      !(json_is_string(ftype) && !strcmp(json_string_value(ftype), "text")))
    return BAD(err, "response_format", "response_format: only {\"type\": \"text\"} is supported");
  long long best_of = 1;
  if (kind == SERVE_COMPLETION && !get_integer(root, "best_of", 1, 1, &best_of, err)) return false;
  return true;
}

static bool get_stops(json_t *root, serve_job_t *job, serve_error_t *err) {
  json_t *v = json_object_get(root, "stop");
  if (!v || json_is_null(v)) return true;
  if (json_is_string(v)) {
    if (!json_string_length(v)) return BAD(err, "stop", "stop: an empty string");
    job->stops[job->n_stops++] = json_string_value(v);
    return true;
  }
  if (!json_is_array(v)) return BAD(err, "stop", "stop: expected a string or an array of strings");
  if (json_array_size(v) > SERVE_MAX_STOPS)
    return BAD(err, "stop", "stop: at most %d strings", SERVE_MAX_STOPS);
  for (size_t i = 0; i < json_array_size(v); i++) {
    json_t *s = json_array_get(v, i);
    if (!json_is_string(s) || !json_string_length(s))
      return BAD(err, "stop", "stop[%zu]: expected a non-empty string", i);
    job->stops[job->n_stops++] = json_string_value(s);
  }
  return true;
}

/* llama.cpp's sampling chain where the library has it (hcq_llm_sampling_t's min_p and penalties):
 * OpenAI's presence and frequency penalties (-2 to 2), llama-server's min_p, repeat_penalty and
 * repeat_last_n. They apply at temperature 0 too (greedy over the penalised logits). */
static bool penalties(json_t *root, serve_job_t *job, int ctx, serve_error_t *err) {
  double min_p = 0, repeat = 1, frequency = 0, presence = 0;
  long long last_n = 64;
  bool ok = get_number(root, "min_p", 0, 1, &min_p, err) &&
            get_number(root, "repeat_penalty", 0, 100, &repeat, err) &&
            get_number(root, "frequency_penalty", -2, 2, &frequency, err) &&
            get_number(root, "presence_penalty", -2, 2, &presence, err) &&
            get_integer(root, "repeat_last_n", -1, ctx, &last_n, err);
  if (!ok) return false;
  job->sampling.min_p = (float)min_p, job->sampling.repeat_penalty = (float)repeat;
  job->sampling.frequency_penalty = (float)frequency,
  job->sampling.presence_penalty = (float)presence;
  /* llama.cpp's 0 is "none"; -1 "the context" */
  job->sampling.penalty_last_n = last_n ? (int)last_n : -1;
  if (!last_n)
    job->sampling.repeat_penalty = 1,
    job->sampling.frequency_penalty = job->sampling.presence_penalty = 0;
  return true;
}

/* Log-probabilities, as each endpoint asks: chat's "logprobs": true with "top_logprobs" 0 to 20
 * alternatives; completions' (legacy) "logprobs": 0 to 20 alternatives. */
static bool logprob_fields(json_t *root, serve_job_t *job, serve_error_t *err) {
  json_t *lp = json_object_get(root, "logprobs"), *top = json_object_get(root, "top_logprobs");
  long long n = 0;
  if (job->kind == SERVE_COMPLETION) {
    if (top && !json_is_null(top))
      return BAD(err, "top_logprobs", "top_logprobs: chat completions only (here: logprobs N)");
    if (!get_integer(root, "logprobs", 0, HCQ_LLM_MAX_LOGPROBS, &n, err)) return false;
    job->logprobs = lp && !json_is_null(lp), job->top_logprobs = (int)n;
    return true;
  }
  if (!get_bool(root, "logprobs", &job->logprobs, err) ||
      !get_integer(root, "top_logprobs", 0, HCQ_LLM_MAX_LOGPROBS, &n, err))
    return false;
  if (top && !json_is_null(top) && !job->logprobs)
    return BAD(err, "top_logprobs", "top_logprobs: only with \"logprobs\": true");
  job->top_logprobs = (int)n;
  return true;
}

/* The fields both endpoints share: sampling, length, stop, stream. */
static bool common_fields(serve_engine_t *e, json_t *root, serve_job_t *job, serve_error_t *err) {
  json_t *model = json_object_get(root, "model");
  if (model && !json_is_string(model)) return BAD(err, "model", "model: expected a string");
  if (model && !serve_engine_knows_model(e, json_string_value(model)))
    return serve_fail(err, SERVE_HTTP_NOT_FOUND, "invalid_request_error", "model_not_found",
                      "model",
                      "The model `%s` does not exist: this server has `%s` (GET /v1/models)",
                      json_string_value(model), serve_engine_model_id(e));
  long long max_tokens = 0, n = 1, top_k = 40, seed = -1;
  int ctx = serve_engine_ctx(e);
  const char *len_key =
      json_object_get(root, "max_completion_tokens") ? "max_completion_tokens" : "max_tokens";
  double temperature = 1, top_p = 1;
  json_t *mt = json_object_get(root, len_key);
  if (mt && json_is_integer(mt) && json_integer_value(mt) > ctx)
    return serve_fail(err, SERVE_HTTP_BAD_REQUEST, "invalid_request_error",
                      "context_length_exceeded", len_key,
                      "%s: %lld is more than the %d tokens the context holds", len_key,
                      json_integer_value(mt), ctx);
  bool ok = get_integer(root, len_key, 1, ctx, &max_tokens, err) &&
            get_integer(root, "n", 1, 1, &n, err) &&
            get_number(root, "temperature", 0, 2, &temperature, err) &&
            get_number(root, "top_p", 0, 1, &top_p, err) &&
            get_integer(root, "top_k", 0, 1 << 24, &top_k, err) &&
            get_integer(root, "seed", INT64_MIN, INT64_MAX, &seed, err) &&
            get_bool(root, "stream", &job->stream, err) &&
            get_bool(root, "ignore_eos", &job->ignore_eos, err) && get_stops(root, job, err) &&
            unsupported(root, job->kind, err);
  if (!ok) return false;
  json_t *so = json_object_get(root, "stream_options");
  if (so && !json_is_null(so)) {
    if (!json_is_object(so))
      return BAD(err, "stream_options", "stream_options: expected an object");
    if (!job->stream)
      return BAD(err, "stream_options", "stream_options: only with \"stream\": true");
    if (!get_bool(so, "include_usage", &job->include_usage, err)) return false;
  }
  job->max_tokens = (int)max_tokens;
  if (temperature > 0) {
    /* OpenAI's top_p 0 keeps the single likeliest token; hcq's 0 means all of them */
    job->sampling =
        (hcq_llm_sampling_t){(float)temperature, top_p > 0 ? (float)top_p : 1e-6f, (int)top_k,
                             seed >= 0 ? (uint64_t)seed : (uint64_t)serve_now_s() * 2654435761u};
  }
  return penalties(root, job, ctx, err) && logprob_fields(root, job, err);
}

/* ---- the two endpoints ---- */

/* A message's content: a string, null, or an array of {"type": "text", "text": ...} parts (joined
 * into a string the body keeps). */
static bool message_content(json_t *msg, size_t i, const char **out, serve_error_t *err) {
  json_t *c = json_object_get(msg, "content");
  if (json_is_string(c)) return *out = json_string_value(c), true;
  if (!c || json_is_null(c)) return *out = "", true;
  if (!json_is_array(c))
    return BAD(err, "messages", "messages[%zu].content: expected a string or an array of parts", i);
  json_t *joined = json_string("");
  for (size_t p = 0; p < json_array_size(c); p++) {
    json_t *part = json_array_get(c, p), *type = json_object_get(part, "type"),
           *text = json_object_get(part, "text");
    if (!json_is_string(type) || strcmp(json_string_value(type), "text") || !json_is_string(text)) {
      json_decref(joined);
      return BAD(err, "messages",
                 "messages[%zu].content[%zu]: only {\"type\": \"text\", \"text\": ...} parts", i,
                 p);
    }
    size_t a = json_string_length(joined), b = json_string_length(text);
    char *both = malloc(a + b + 1);
    if (both)
      memcpy(both, json_string_value(joined), a), memcpy(both + a, json_string_value(text), b + 1);
    json_string_setn_nocheck(joined, both ? both : "", both ? a + b : 0);
    free(both);
  }
  json_object_set_new(msg, "hcq_joined_content", joined);
  *out = json_string_value(joined);
  return true;
}

static bool chat_messages(json_t *root, serve_job_t *job, serve_error_t *err) {
  json_t *msgs = json_object_get(root, "messages");
  if (!msgs) return BAD(err, "messages", "messages: missing (a list of {\"role\", \"content\"})");
  if (!json_is_array(msgs)) return BAD(err, "messages", "messages: expected an array");
  size_t n = json_array_size(msgs);
  if (!n) return BAD(err, "messages", "messages: empty");
  job->messages = calloc(n, sizeof(*job->messages));
  if (!job->messages)
    return serve_fail(err, SERVE_HTTP_SERVER_ERROR, "server_error", NULL, NULL, "out of memory");
  for (size_t i = 0; i < n; i++) {
    json_t *m = json_array_get(msgs, i), *role = json_object_get(m, "role");
    if (!json_is_object(m)) return BAD(err, "messages", "messages[%zu]: expected an object", i);
    if (!json_is_string(role))
      return BAD(err, "messages", "messages[%zu].role: expected a string", i);
    const char *r = json_string_value(role);
    if (!strcmp(r, "developer")) r = "system";
    if (strcmp(r, "system") && strcmp(r, "user") && strcmp(r, "assistant"))
      return BAD(err, "messages",
                 "messages[%zu].role: \"%s\" (expected system, developer, user or assistant)", i,
                 r);
    const char *content = "";
    if (!message_content(m, i, &content, err)) return false;
    job->messages[job->n_messages++] = (hcq_llm_message_t){r, content};
  }
  return true;
}

/* A completion's prompt: a string, an array of token ids, or a one-element array of either. */
static bool completion_prompt(json_t *root, serve_job_t *job, serve_error_t *err) {
  json_t *p = json_object_get(root, "prompt");
  if (!p) return BAD(err, "prompt", "prompt: missing");
  if (json_is_array(p) && json_array_size(p) == 1 && !json_is_integer(json_array_get(p, 0)))
    p = json_array_get(p, 0);
  if (json_is_string(p)) return job->prompt_text = json_string_value(p), true;
  if (!json_is_array(p))
    return BAD(err, "prompt", "prompt: expected a string or an array of token ids");
  size_t n = json_array_size(p);
  job->prompt_ids = malloc((n ? n : 1) * sizeof(int32_t));
  if (!job->prompt_ids)
    return serve_fail(err, SERVE_HTTP_SERVER_ERROR, "server_error", NULL, NULL, "out of memory");
  for (size_t i = 0; i < n; i++) {
    json_t *v = json_array_get(p, i);
    if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) > INT32_MAX)
      return BAD(err, "prompt", "prompt[%zu]: expected a token id (one prompt per request)", i);
    job->prompt_ids[i] = (int32_t)json_integer_value(v);
  }
  job->n_prompt_ids = n;
  return true;
}

bool serve_parse_request(serve_engine_t *e, serve_kind_t kind, const char *body, size_t len,
                         serve_job_t *job, serve_error_t *err) {
  json_error_t je;
  json_t *root = json_loadb(body, len, JSON_REJECT_DUPLICATES, &je);
  if (!root)
    return BAD(err, NULL,
               "We could not parse the JSON body of your request: %s (line %d, column %d)", je.text,
               je.line, je.column);
  job->body = root;
  if (!json_is_object(root)) return BAD(err, NULL, "the request body must be a JSON object");
  if (kind == SERVE_CHAT && !chat_messages(root, job, err)) return false;
  if (kind == SERVE_COMPLETION && !completion_prompt(root, job, err)) return false;
  return common_fields(e, root, job, err);
}

/* ---- responses ---- */

static char *dump(json_t *j) {
  char *s = j ? json_dumps(j, JSON_COMPACT) : NULL;
  json_decref(j);
  return s;
}

char *serve_error_json(const serve_error_t *err) {
  return dump(json_pack("{s:{s:s, s:s, s:s?, s:s?}}", "error", "message", err->message, "type",
                        err->type, "param", err->param, "code", err->code));
}

/* text as a JSON string; never NULL (token text is whole UTF-8, but an empty string beats a crash)
 */
static json_t *text_json(const char *text, size_t len) {
  json_t *s = json_stringn(text ? text : "", text ? len : 0);
  return s ? s : json_string("");
}

static json_t *usage(const serve_job_t *job) {
  return json_pack("{s:I, s:I, s:I}", "prompt_tokens", (json_int_t)job->prompt_tokens,
                   "completion_tokens", (json_int_t)job->completion_tokens, "total_tokens",
                   (json_int_t)(job->prompt_tokens + job->completion_tokens));
}

static json_t *envelope(serve_engine_t *e, const serve_job_t *job, const char *id, long created,
                        bool chunk) {
  const char *object = job->kind == SERVE_CHAT
                           ? (chunk ? "chat.completion.chunk" : "chat.completion")
                           : "text_completion";
  char fingerprint[64];
  snprintf(fingerprint, sizeof(fingerprint), "hcq-%d.%d.%d", HCQ_VERSION_MAJOR, HCQ_VERSION_MINOR,
           HCQ_VERSION_PATCH);
  return json_pack("{s:s, s:s, s:I, s:s, s:s}", "id", id, "object", object, "created",
                   (json_int_t)created, "model", serve_engine_model_id(e), "system_fingerprint",
                   fingerprint);
}

/* The length of the valid UTF-8 character at p (n bytes left), 0 when it is not one. */
static size_t utf8_char(const unsigned char *p, size_t n) {
  size_t len = p[0] < 0x80                             ? 1
               : (p[0] & 0xe0) == 0xc0 && p[0] >= 0xc2 ? 2
               : (p[0] & 0xf0) == 0xe0                 ? 3
               : (p[0] & 0xf8) == 0xf0 && p[0] <= 0xf4 ? 4
                                                       : 0;
  if (!len || len > n) return 0;
  for (size_t i = 1; i < len; i++)
    if ((p[i] & 0xc0) != 0x80) return 0;
  if (len == 3 && ((p[0] == 0xe0 && p[1] < 0xa0) || (p[0] == 0xed && p[1] >= 0xa0)))
    return 0; /* overlong, surrogate */
  if (len == 4 && ((p[0] == 0xf0 && p[1] < 0x90) || (p[0] == 0xf4 && p[1] >= 0x90))) return 0;
  return len;
}

/* A token's bytes as a JSON string: what is not whole UTF-8 (part of a character split over
 * tokens) as U+FFFD, as OpenAI shows it (the "bytes" array keeps them raw). */
static json_t *token_json(const char *text, size_t n) {
  char *out = malloc(3 * n + 1);
  size_t o = 0;
  for (size_t i = 0; out && i < n;) {
    size_t c = utf8_char((const unsigned char *)text + i, n - i);
    if (c)
      memcpy(out + o, text + i, c), o += c, i += c;
    else
      memcpy(out + o, "\xef\xbf\xbd", 3), o += 3, i++;
  }
  json_t *s = out ? json_stringn(out, o) : NULL;
  free(out);
  return s ? s : json_string("");
}

static json_t *bytes_json(const char *text, size_t n) {
  json_t *a = json_array();
  for (size_t i = 0; i < n; i++) json_array_append_new(a, json_integer((unsigned char)text[i]));
  return a;
}

/* Chat's logprobs object for tokens from .. to - 1: {"content": [{token, logprob, bytes,
 * top_logprobs: [{token, logprob, bytes}]}], "refusal": null}. */
static json_t *chat_logprobs(const serve_job_t *job, size_t from, size_t to) {
  json_t *content = json_array();
  for (size_t i = from; i < to; i++) {
    const serve_logprob_t *lp = &job->lps[i];
    const char *t = job->lp_text;
    json_t *top = json_array();
    for (int k = 0; k < lp->n_top; k++)
      json_array_append_new(
          top, json_pack("{s:o, s:f, s:o}", "token", token_json(t + lp->top_off[k], lp->top_len[k]),
                         "logprob", (double)lp->top[k], "bytes",
                         bytes_json(t + lp->top_off[k], lp->top_len[k])));
    json_array_append_new(
        content, json_pack("{s:o, s:f, s:o, s:o}", "token", token_json(t + lp->off, lp->len),
                           "logprob", (double)lp->logprob, "bytes",
                           bytes_json(t + lp->off, lp->len), "top_logprobs", top));
  }
  return json_pack("{s:o, s:n}", "content", content, "refusal");
}

/* Completions' (legacy) logprobs object for tokens from .. to - 1: tokens, token_logprobs,
 * top_logprobs ({token: logprob} each) and text_offset (each token's place in the text). */
static json_t *completion_logprobs(const serve_job_t *job, size_t from, size_t to) {
  size_t offset = 0;
  for (size_t i = 0; i < from; i++) offset += job->lps[i].len;
  json_t *tokens = json_array(), *lps = json_array(), *tops = json_array(), *offsets = json_array();
  for (size_t i = from; i < to; i++) {
    const serve_logprob_t *lp = &job->lps[i];
    json_t *top = json_object(), *tok = token_json(job->lp_text + lp->off, lp->len);
    for (int k = 0; k < lp->n_top; k++) {
      json_t *alt = token_json(job->lp_text + lp->top_off[k], lp->top_len[k]);
      if (!json_object_get(top, json_string_value(alt))) /* two tokens shown alike: the likelier */
        json_object_set_new(top, json_string_value(alt), json_real(lp->top[k]));
      json_decref(alt);
    }
    json_array_append_new(tokens, tok);
    json_array_append_new(lps, json_real(lp->logprob));
    json_array_append_new(tops, top);
    json_array_append_new(offsets, json_integer((json_int_t)offset));
    offset += lp->len;
  }
  return json_pack("{s:o, s:o, s:o, s:o}", "tokens", tokens, "token_logprobs", lps, "top_logprobs",
                   tops, "text_offset", offsets);
}

/* The choice's logprobs: null unless the request asked for them. */
static json_t *logprobs_json(const serve_job_t *job, size_t from, size_t to) {
  if (!job->logprobs) return json_null();
  if (to > job->n_lps) to = job->n_lps;
  if (from > to) from = to;
  return job->kind == SERVE_CHAT ? chat_logprobs(job, from, to)
                                 : completion_logprobs(job, from, to);
}

static json_t *choice(const serve_job_t *job, json_t *text, bool chunk, bool first,
                      const char *finish, json_t *logprobs) {
  json_t *c = json_pack("{s:i, s:o, s:o}", "index", 0, "logprobs", logprobs, "finish_reason",
                        finish ? json_string(finish) : json_null());
  if (job->kind == SERVE_COMPLETION) {
    json_object_set_new(c, "text", text);
    return c;
  }
  json_t *msg = json_object();
  if (!chunk || first) json_object_set_new(msg, "role", json_string("assistant"));
  if (!chunk || !finish)
    json_object_set_new(msg, "content", text);
  else
    json_decref(text);
  json_object_set_new(c, chunk ? "delta" : "message", msg);
  return c;
}

char *serve_response_json(serve_engine_t *e, const serve_job_t *job, const char *id, long created) {
  json_t *r = envelope(e, job, id, created, false);
  json_object_set_new(r, "choices",
                      json_pack("[o]", choice(job, text_json(job->text, job->len), false, false,
                                              job->finish_reason ? job->finish_reason : "length",
                                              logprobs_json(job, 0, job->n_lps))));
  json_object_set_new(r, "usage", usage(job));
  return dump(r);
}

static char *sse(json_t *j) {
  char *body = dump(j);
  if (!body) return NULL;
  size_t n = strlen(body) + 9;
  char *out = malloc(n);
  if (out) snprintf(out, n, "data: %s\n\n", body);
  free(body);
  return out;
}

char *serve_chunk_sse(serve_engine_t *e, const serve_job_t *job, const char *id, long created,
                      const char *text, size_t len, bool first, const char *finish, size_t lp_from,
                      size_t lp_to) {
  json_t *r = envelope(e, job, id, created, true);
  json_t *lp = lp_to > lp_from ? logprobs_json(job, lp_from, lp_to) : json_null();
  json_object_set_new(r, "choices",
                      json_pack("[o]", choice(job, text_json(text, len), true, first, finish, lp)));
  return sse(r);
}

char *serve_usage_sse(serve_engine_t *e, const serve_job_t *job, const char *id, long created) {
  json_t *r = envelope(e, job, id, created, true);
  json_object_set_new(r, "choices", json_array());
  json_object_set_new(r, "usage", usage(job));
  return sse(r);
}

char *serve_models_json(serve_engine_t *e, long created) {
  return dump(json_pack("{s:s, s:[{s:s, s:s, s:I, s:s}]}", "object", "list", "data", "id",
                        serve_engine_model_id(e), "object", "model", "created", (json_int_t)created,
                        "owned_by", "hcq"));
}
