/* hcq serve (docs/serve.md): the OpenAI HTTP API in front of one language model. Three parts:
 * serve_http.c answers HTTP (libmicrohttpd, one thread per connection), serve_json.c turns OpenAI
 * requests into jobs and results into OpenAI responses, serve_engine.c owns the model on one thread
 * and takes jobs from a bounded queue. The HTTP side and the engine meet only in serve_job_t, under
 * the job's mutex: the engine appends text and sets the phase, the HTTP side waits on `changed`
 * and may set `cancelled` (a client gone). */
#ifndef HCQ_CLI_SERVE_H
#define HCQ_CLI_SERVE_H

#include <hcq/llm.h>
#include <jansson.h>
#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define SERVE_MAX_STOPS 4

/* The HTTP statuses hcq serve answers with; SERVE_HTTP_NONE in serve_error_t: no error. */
typedef enum serve_http_status {
  SERVE_HTTP_NONE = 0,
  SERVE_HTTP_OK = 200,
  SERVE_HTTP_BAD_REQUEST = 400,
  SERVE_HTTP_UNAUTHORIZED = 401,
  SERVE_HTTP_NOT_FOUND = 404,
  SERVE_HTTP_METHOD_NOT_ALLOWED = 405,
  SERVE_HTTP_TOO_LARGE = 413,
  SERVE_HTTP_CLIENT_CLOSED = 499, /* nginx's: the client went before the answer (never sent) */
  SERVE_HTTP_SERVER_ERROR = 500,
  SERVE_HTTP_UNAVAILABLE = 503,
} serve_http_status_t;

/* An OpenAI error object's parts and the HTTP status it goes with. */
typedef struct serve_error {
  serve_http_status_t http; /* SERVE_HTTP_NONE: no error */
  const char *type;         /* "invalid_request_error", "server_error", ... */
  const char *code;         /* "context_length_exceeded", ... or NULL */
  const char *param;        /* the request field at fault, or NULL */
  char message[512];
} serve_error_t;

/* Fills err and returns false, so that checks read `return serve_fail(...)`. */
bool serve_fail(serve_error_t *err, serve_http_status_t http, const char *type, const char *code,
                const char *param, const char *fmt, ...) __attribute__((format(printf, 6, 7)));

typedef enum serve_kind { SERVE_CHAT, SERVE_COMPLETION } serve_kind_t;

/* One generated token's log-probabilities for the response (the request's logprobs): its text and
 * its alternatives' as bytes in serve_job_t.lp_text (off, len), raw (a token may hold part of a
 * UTF-8 character). */
typedef struct serve_logprob {
  float logprob;
  size_t off, len;
  int n_top;
  float top[HCQ_LLM_MAX_LOGPROBS];
  size_t top_off[HCQ_LLM_MAX_LOGPROBS], top_len[HCQ_LLM_MAX_LOGPROBS];
} serve_logprob_t;
typedef enum serve_phase { SERVE_QUEUED, SERVE_RUNNING, SERVE_DONE } serve_phase_t;

typedef struct serve_job {
  /* The request, fixed before serve_engine_submit; its strings point into body. */
  serve_kind_t kind;
  json_t *body;
  hcq_llm_message_t *messages;
  size_t n_messages;
  const char *prompt_text; /* completions: a text prompt, or NULL for prompt_ids */
  int32_t *prompt_ids;
  size_t n_prompt_ids;
  int max_tokens; /* 0: until an end token or the context is full */
  hcq_llm_sampling_t sampling;
  const char *stops[SERVE_MAX_STOPS];
  size_t n_stops;
  bool stream, include_usage;
  bool ignore_eos; /* llama-server's extension: go on past end tokens (benchmarks) */
  bool logprobs;   /* each token's log-probability, with top_logprobs alternatives */
  int top_logprobs;

  /* Shared between the engine and the HTTP side, under mu. */
  pthread_mutex_t mu;
  pthread_cond_t changed;
  serve_phase_t phase;
  bool started;             /* the prompt was accepted: a stream may send its headers */
  serve_error_t error;      /* error.http set: the job failed before it started */
  char *text;               /* generated text (no stop string: the library holds those back) */
  size_t len, cap, visible; /* visible: the bytes a stream may send (all of text, once appended) */
  size_t prompt_tokens, completion_tokens;
  serve_logprob_t *lps; /* with logprobs: one per generated token, in order */
  size_t n_lps, lps_cap;
  char *lp_text; /* the tokens' bytes the lps point into */
  size_t lp_text_len, lp_text_cap;
  const char *finish_reason; /* "stop" or "length", once DONE */
  bool cancelled;            /* set by the HTTP side: nobody reads the rest */
  int refs;
  double queued_s, first_token_s, done_s; /* monotonic seconds */
} serve_job_t;

/* A job with one reference (the caller's); NULL when memory ran out. */
serve_job_t *serve_job_new(serve_kind_t kind);
/* Drops a reference; the last frees the job (thread-safe). */
void serve_job_release(serve_job_t *job);
/* Sets cancelled (the client went away): the engine stops its generation at the next token. */
void serve_job_cancel(serve_job_t *job);

typedef struct serve_engine_options {
  const char *model;  /* path or known name; NULL: the default model */
  const char *device; /* NULL: CPU */
  const char *alias;  /* the id /v1/models gives (NULL: the file's base name) */
  int ctx, parallel, queue;
  bool one_at_a_time; /* --engine generate: hcq_llm_generate, one slot, even where batches run */
} serve_engine_options_t;

typedef enum serve_state {
  SERVE_LOADING,
  SERVE_READY,
  SERVE_LOAD_FAILED,
  SERVE_STOPPING
} serve_state_t;

typedef struct serve_metrics {
  serve_state_t state;
  unsigned long long jobs, prompt_tokens, completion_tokens;
  double decode_seconds; /* time spent generating, for the tokens/s gauge */
  size_t queued, busy, slots, queue_cap;
} serve_metrics_t;

typedef struct serve_engine serve_engine_t;

/* Starts the engine thread, which loads the model: state LOADING until it is READY (or LOAD_FAILED,
 * with the reason in serve_engine_load_error). */
int serve_engine_start(const serve_engine_options_t *o, serve_engine_t **out);
/* Queues job (taking a reference); false with err set when it cannot: loading (503), the queue
 * full (503, Retry-After), shutting down (503). */
bool serve_engine_submit(serve_engine_t *e, serve_job_t *job, serve_error_t *err);
/* Stops taking jobs, fails the queued ones (503), cuts the running ones at their next token and
 * joins the thread; the HTTP side may still read the engine (its model id, metrics). */
void serve_engine_stop(serve_engine_t *e);
/* Closes the model and frees the engine (after serve_engine_stop and the HTTP side's end). */
void serve_engine_destroy(serve_engine_t *e);
/* A client gone: the job is cancelled and, when it still waits, leaves the queue at once (its
 * place free for the next request). */
void serve_engine_withdraw(serve_engine_t *e, serve_job_t *job);
serve_state_t serve_engine_state(serve_engine_t *e);
const char *serve_engine_load_error(serve_engine_t *e);
/* The failed load's status code (NOT_FOUND for a missing file, ...). */
hcq_status_code_t serve_engine_load_code(serve_engine_t *e);
/* The model's id (/v1/models) and whether name refers to it (its id, general.name, file name,
 * alias). */
const char *serve_engine_model_id(serve_engine_t *e);
bool serve_engine_knows_model(serve_engine_t *e, const char *name);
int serve_engine_ctx(serve_engine_t *e);
void serve_engine_metrics(serve_engine_t *e, serve_metrics_t *out);

/* serve_json.c: an OpenAI request body into job (false with err set), and responses. */
bool serve_parse_request(serve_engine_t *e, serve_kind_t kind, const char *body, size_t len,
                         serve_job_t *job, serve_error_t *err);
/* The error object {"error": {"message", "type", "param", "code"}}, malloc'd. */
char *serve_error_json(const serve_error_t *err);
/* A finished job's whole response, malloc'd. */
char *serve_response_json(serve_engine_t *e, const serve_job_t *job, const char *id, long created);
/* One server-sent event "data: {...}\n\n" with text as the delta (first: the chat role too; finish:
 * the finish reason) and the log-probabilities of tokens lp_from .. lp_to - 1 (with the request's
 * logprobs), malloc'd. */
char *serve_chunk_sse(serve_engine_t *e, const serve_job_t *job, const char *id, long created,
                      const char *text, size_t len, bool first, const char *finish, size_t lp_from,
                      size_t lp_to);
/* The usage chunk of stream_options.include_usage. */
char *serve_usage_sse(serve_engine_t *e, const serve_job_t *job, const char *id, long created);
char *serve_models_json(serve_engine_t *e, long created);

double serve_now_s(void);

/* serve_http.c: the HTTP server. */
typedef struct serve_http_options {
  const char *host, *api_key; /* api_key NULL: no authentication */
  int port;                   /* 0: any free port (serve_http_port says which) */
  size_t max_body;            /* bytes; a longer body is 413 */
  unsigned timeout_s;         /* an idle or slow connection is closed after this */
  unsigned max_connections;
} serve_http_options_t;
typedef struct serve_http serve_http_t;
/* Listens; false with why set (the address taken, a bad host). */
bool serve_http_start(serve_engine_t *e, const serve_http_options_t *o, serve_http_t **out,
                      char *why, size_t why_size);
int serve_http_port(serve_http_t *h);
/* Stops accepting connections (the open ones go on). */
void serve_http_quiesce(serve_http_t *h);
/* Waits up to seconds for the requests under way to send their last byte (after serve_engine_stop
 * ended their jobs). */
void serve_http_drain(serve_http_t *h, double seconds);
/* Closes every connection, waits for their threads, frees. */
void serve_http_stop(serve_http_t *h);

#endif
