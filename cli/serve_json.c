/* hcq serve's JSON: OpenAI requests checked field by field into a job (each wrong field named in an
 * OpenAI error object, as the API does), and the responses and stream chunks of
 * /v1/chat/completions and /v1/completions. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <hcq/hcq.h>

#include "cli/serve.h"

#define BAD(err, param, ...) serve_fail(err, 400, "invalid_request_error", NULL, param, __VA_ARGS__)

/* ---- request fields ---- */

/* A number field in [lo, hi] (absent or null: keep *out). */
static bool get_number(json_t *root, const char *key, double lo, double hi, double *out, serve_error_t *err) {
  json_t *v = json_object_get(root, key);
  if (!v || json_is_null(v)) return true;
  if (!json_is_number(v)) return BAD(err, key, "%s: expected a number", key);
  double d = json_number_value(v);
  if (!isfinite(d) || d < lo || d > hi) return BAD(err, key, "%s: %g is outside %g to %g", key, d, lo, hi);
  *out = d;
  return true;
}

static bool get_integer(json_t *root, const char *key, long long lo, long long hi, long long *out, serve_error_t *err) {
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
#ifdef HCQ_LLM_MAX_LOGPROBS /* the library has the penalties (penalties()) */
  static const char *const zero_numbers[] = {NULL};
#else
  static const char *const zero_numbers[] = {"presence_penalty", "frequency_penalty", "min_p", "repeat_penalty", NULL};
#endif
  for (const char *const *k = zero_numbers; *k; k++) {
    json_t *v = json_object_get(root, *k);
    if (v && !json_is_null(v) && !json_is_number(v)) return BAD(err, *k, "%s: expected a number", *k);
    if (v && json_is_number(v) && json_number_value(v) != 0)
      return BAD(err, *k, "%s: not supported by this server yet (only 0)", *k);
  }
  static const char *const false_flags[] = {"logprobs", "echo", NULL};
  for (const char *const *k = false_flags; *k; k++) {
    json_t *v = json_object_get(root, *k);
    bool on = v && !json_is_null(v) && !json_is_false(v) && !(json_is_integer(v) && json_integer_value(v) == 0);
    if (on) return BAD(err, *k, "%s: not supported by this server yet", *k);
  }
  static const char *const absent[] = {"tools",  "functions",    "tool_choice", "function_call",
                                       "suffix", "top_logprobs", NULL};
  for (const char *const *k = absent; *k; k++) {
    json_t *v = json_object_get(root, *k);
    if (v && !json_is_null(v)) return BAD(err, *k, "%s: not supported by this server", *k);
  }
  json_t *bias = json_object_get(root, "logit_bias");
  if (bias && !json_is_null(bias) && !(json_is_object(bias) && json_object_size(bias) == 0))
    return BAD(err, "logit_bias", "logit_bias: not supported by this server yet");
  json_t *format = json_object_get(root, "response_format");
  json_t *ftype = json_is_object(format) ? json_object_get(format, "type") : NULL;
  if (format && !json_is_null(format) && !(json_is_string(ftype) && !strcmp(json_string_value(ftype), "text")))
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
  if (json_array_size(v) > SERVE_MAX_STOPS) return BAD(err, "stop", "stop: at most %d strings", SERVE_MAX_STOPS);
  for (size_t i = 0; i < json_array_size(v); i++) {
    json_t *s = json_array_get(v, i);
    if (!json_is_string(s) || !json_string_length(s))
      return BAD(err, "stop", "stop[%zu]: expected a non-empty string", i);
    job->stops[job->n_stops++] = json_string_value(s);
  }
  return true;
}

#ifdef HCQ_LLM_MAX_LOGPROBS
/* llama.cpp's sampling chain where the library has it (hcq_llm_sampling_t's min_p and penalties):
 * OpenAI's presence and frequency penalties (-2 to 2), llama-server's min_p, repeat_penalty and
 * repeat_last_n. They apply at temperature 0 too (greedy over the penalised logits). */
static bool penalties(json_t *root, serve_job_t *job, int ctx, serve_error_t *err) {
  double min_p = 0, repeat = 1, frequency = 0, presence = 0;
  long long last_n = 64;
  bool ok = get_number(root, "min_p", 0, 1, &min_p, err) && get_number(root, "repeat_penalty", 0, 100, &repeat, err) &&
            get_number(root, "frequency_penalty", -2, 2, &frequency, err) &&
            get_number(root, "presence_penalty", -2, 2, &presence, err) &&
            get_integer(root, "repeat_last_n", -1, ctx, &last_n, err);
  if (!ok) return false;
  job->sampling.min_p = (float)min_p, job->sampling.repeat_penalty = (float)repeat;
  job->sampling.frequency_penalty = (float)frequency, job->sampling.presence_penalty = (float)presence;
  job->sampling.penalty_last_n = last_n ? (int)last_n : -1; /* llama.cpp's 0 is "none"; -1 "the context" */
  if (!last_n) job->sampling.repeat_penalty = 1, job->sampling.frequency_penalty = job->sampling.presence_penalty = 0;
  return true;
}
#endif

/* The fields both endpoints share: sampling, length, stop, stream. */
static bool common_fields(serve_engine_t *e, json_t *root, serve_job_t *job, serve_error_t *err) {
  json_t *model = json_object_get(root, "model");
  if (model && !json_is_string(model)) return BAD(err, "model", "model: expected a string");
  if (model && !serve_engine_knows_model(e, json_string_value(model)))
    return serve_fail(err, 404, "invalid_request_error", "model_not_found", "model",
                      "The model `%s` does not exist: this server has `%s` (GET /v1/models)", json_string_value(model),
                      serve_engine_model_id(e));
  long long max_tokens = 0, n = 1, top_k = 40, seed = -1;
  int ctx = serve_engine_ctx(e);
  const char *len_key = json_object_get(root, "max_completion_tokens") ? "max_completion_tokens" : "max_tokens";
  double temperature = 1, top_p = 1;
  json_t *mt = json_object_get(root, len_key);
  if (mt && json_is_integer(mt) && json_integer_value(mt) > ctx)
    return serve_fail(err, 400, "invalid_request_error", "context_length_exceeded", len_key,
                      "%s: %lld is more than the %d tokens the context holds", len_key, json_integer_value(mt), ctx);
  bool ok = get_integer(root, len_key, 1, ctx, &max_tokens, err) && get_integer(root, "n", 1, 1, &n, err) &&
            get_number(root, "temperature", 0, 2, &temperature, err) && get_number(root, "top_p", 0, 1, &top_p, err) &&
            get_integer(root, "top_k", 0, 1 << 24, &top_k, err) &&
            get_integer(root, "seed", INT64_MIN, INT64_MAX, &seed, err) &&
            get_bool(root, "stream", &job->stream, err) && get_bool(root, "ignore_eos", &job->ignore_eos, err) &&
            get_stops(root, job, err) && unsupported(root, job->kind, err);
  if (!ok) return false;
  json_t *so = json_object_get(root, "stream_options");
  if (so && !json_is_null(so)) {
    if (!json_is_object(so)) return BAD(err, "stream_options", "stream_options: expected an object");
    if (!job->stream) return BAD(err, "stream_options", "stream_options: only with \"stream\": true");
    if (!get_bool(so, "include_usage", &job->include_usage, err)) return false;
  }
  job->max_tokens = (int)max_tokens;
  if (temperature > 0) {
    /* OpenAI's top_p 0 keeps the single likeliest token; hcq's 0 means all of them */
    job->sampling = (hcq_llm_sampling_t){(float)temperature, top_p > 0 ? (float)top_p : 1e-6f, (int)top_k,
                                         seed >= 0 ? (uint64_t)seed : (uint64_t)serve_now_s() * 2654435761u};
  }
#ifdef HCQ_LLM_MAX_LOGPROBS
  if (!penalties(root, job, ctx, err)) return false;
#endif
  return true;
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
    json_t *part = json_array_get(c, p), *type = json_object_get(part, "type"), *text = json_object_get(part, "text");
    if (!json_is_string(type) || strcmp(json_string_value(type), "text") || !json_is_string(text)) {
      json_decref(joined);
      return BAD(err, "messages", "messages[%zu].content[%zu]: only {\"type\": \"text\", \"text\": ...} parts", i, p);
    }
    size_t a = json_string_length(joined), b = json_string_length(text);
    char *both = malloc(a + b + 1);
    if (both) memcpy(both, json_string_value(joined), a), memcpy(both + a, json_string_value(text), b + 1);
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
  if (!job->messages) return serve_fail(err, 500, "server_error", NULL, NULL, "out of memory");
  for (size_t i = 0; i < n; i++) {
    json_t *m = json_array_get(msgs, i), *role = json_object_get(m, "role");
    if (!json_is_object(m)) return BAD(err, "messages", "messages[%zu]: expected an object", i);
    if (!json_is_string(role)) return BAD(err, "messages", "messages[%zu].role: expected a string", i);
    const char *r = json_string_value(role);
    if (!strcmp(r, "developer")) r = "system";
    if (strcmp(r, "system") && strcmp(r, "user") && strcmp(r, "assistant"))
      return BAD(err, "messages", "messages[%zu].role: \"%s\" (expected system, developer, user or assistant)", i, r);
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
  if (json_is_array(p) && json_array_size(p) == 1 && !json_is_integer(json_array_get(p, 0))) p = json_array_get(p, 0);
  if (json_is_string(p)) return job->prompt_text = json_string_value(p), true;
  if (!json_is_array(p)) return BAD(err, "prompt", "prompt: expected a string or an array of token ids");
  size_t n = json_array_size(p);
  job->prompt_ids = malloc((n ? n : 1) * sizeof(int32_t));
  if (!job->prompt_ids) return serve_fail(err, 500, "server_error", NULL, NULL, "out of memory");
  for (size_t i = 0; i < n; i++) {
    json_t *v = json_array_get(p, i);
    if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) > INT32_MAX)
      return BAD(err, "prompt", "prompt[%zu]: expected a token id (one prompt per request)", i);
    job->prompt_ids[i] = (int32_t)json_integer_value(v);
  }
  job->n_prompt_ids = n;
  return true;
}

bool serve_parse_request(serve_engine_t *e, serve_kind_t kind, const char *body, size_t len, serve_job_t *job,
                         serve_error_t *err) {
  json_error_t je;
  json_t *root = json_loadb(body, len, JSON_REJECT_DUPLICATES, &je);
  if (!root)
    return BAD(err, NULL, "We could not parse the JSON body of your request: %s (line %d, column %d)", je.text, je.line,
               je.column);
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
  return dump(json_pack("{s:{s:s, s:s, s:s?, s:s?}}", "error", "message", err->message, "type", err->type, "param",
                        err->param, "code", err->code));
}

/* text as a JSON string; never NULL (token text is whole UTF-8, but an empty string beats a crash) */
static json_t *text_json(const char *text, size_t len) {
  json_t *s = json_stringn(text ? text : "", text ? len : 0);
  return s ? s : json_string("");
}

static json_t *usage(const serve_job_t *job) {
  return json_pack("{s:I, s:I, s:I}", "prompt_tokens", (json_int_t)job->prompt_tokens, "completion_tokens",
                   (json_int_t)job->completion_tokens, "total_tokens",
                   (json_int_t)(job->prompt_tokens + job->completion_tokens));
}

static json_t *envelope(serve_engine_t *e, const serve_job_t *job, const char *id, long created, bool chunk) {
  const char *object =
      job->kind == SERVE_CHAT ? (chunk ? "chat.completion.chunk" : "chat.completion") : "text_completion";
  char fingerprint[64];
  snprintf(fingerprint, sizeof(fingerprint), "hcq-%d.%d.%d", HCQ_VERSION_MAJOR, HCQ_VERSION_MINOR, HCQ_VERSION_PATCH);
  return json_pack("{s:s, s:s, s:I, s:s, s:s}", "id", id, "object", object, "created", (json_int_t)created, "model",
                   serve_engine_model_id(e), "system_fingerprint", fingerprint);
}

static json_t *choice(const serve_job_t *job, json_t *text, bool chunk, bool first, const char *finish) {
  json_t *c =
      json_pack("{s:i, s:n, s:o}", "index", 0, "logprobs", "finish_reason", finish ? json_string(finish) : json_null());
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
                                              job->finish_reason ? job->finish_reason : "length")));
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

char *serve_chunk_sse(serve_engine_t *e, const serve_job_t *job, const char *id, long created, const char *text,
                      size_t len, bool first, const char *finish) {
  json_t *r = envelope(e, job, id, created, true);
  json_object_set_new(r, "choices", json_pack("[o]", choice(job, text_json(text, len), true, first, finish)));
  return sse(r);
}

char *serve_usage_sse(serve_engine_t *e, const serve_job_t *job, const char *id, long created) {
  json_t *r = envelope(e, job, id, created, true);
  json_object_set_new(r, "choices", json_array());
  json_object_set_new(r, "usage", usage(job));
  return sse(r);
}

char *serve_models_json(serve_engine_t *e, long created) {
  return dump(json_pack("{s:s, s:[{s:s, s:s, s:I, s:s}]}", "object", "list", "data", "id", serve_engine_model_id(e),
                        "object", "model", "created", (json_int_t)created, "owned_by", "hcq"));
}
