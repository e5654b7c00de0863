/* hcq serve's engine: the one thread that owns the model (hcq_llm_t is one thread at a time),
 * taking jobs from a bounded queue. It runs --parallel jobs at once on the batch API
 * (hcq_llm_batch_*: one replay a step gives every active sequence its next token, a new prompt
 * entering in chunks beside them), or one job at a time on hcq_llm_generate where the device has no
 * batched decoding. Either way the prompt is rendered, tokenized and checked against the context
 * here, because only this thread may touch the model, and each token's text is appended to its job
 * by the on_token callback. The library applies the stop strings (hcq_llm_generate_options_t.stop):
 * the text it passes holds none, nor what could still become one. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli/serve.h"

struct serve_engine {
  serve_engine_options_t o;
  pthread_t thread;
  bool thread_started;
  pthread_mutex_t mu;
  pthread_cond_t wake;
  serve_state_t state;
  char load_error[1024];
  hcq_status_code_t load_code;
  serve_job_t **queue; /* a ring of o.queue jobs */
  size_t head, count;
  size_t busy;
  hcq_llm_t *llm;
  hcq_llm_batch_t *batch; /* NULL: one slot on hcq_llm_generate */
  int slots;
  hcq_llm_info_t info;
  char id[256], file[256];
  unsigned long long jobs, prompt_tokens, completion_tokens;
  double decode_seconds;
};

double serve_now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

bool serve_fail(serve_error_t *err, serve_http_status_t http, const char *type, const char *code,
                const char *param, const char *fmt, ...) {
  err->http = http, err->type = type, err->code = code, err->param = param;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(err->message, sizeof(err->message), fmt, ap);
  va_end(ap);
  return false;
}

/* ---- jobs ---- */

serve_job_t *serve_job_new(serve_kind_t kind) {
  serve_job_t *job = calloc(1, sizeof(*job));
  if (!job) return NULL;
  job->kind = kind;
  job->refs = 1;
  job->queued_s = serve_now_s();
  pthread_mutex_init(&job->mu, NULL);
  pthread_cond_init(&job->changed, NULL);
  return job;
}

void serve_job_release(serve_job_t *job) {
  if (!job) return;
  pthread_mutex_lock(&job->mu);
  bool last = --job->refs == 0;
  pthread_mutex_unlock(&job->mu);
  if (!last) return;
  pthread_mutex_destroy(&job->mu);
  pthread_cond_destroy(&job->changed);
  free(job->messages), free(job->prompt_ids), free(job->text), free(job->lps), free(job->lp_text);
  json_decref(job->body);
  free(job);
}

void serve_job_cancel(serve_job_t *job) {
  pthread_mutex_lock(&job->mu);
  job->cancelled = true;
  pthread_mutex_unlock(&job->mu);
}

/* Ends a job that never started with err (the caller holds no lock). */
static void job_fail(serve_job_t *job, const serve_error_t *err) {
  pthread_mutex_lock(&job->mu);
  job->error = *err;
  job->phase = SERVE_DONE;
  job->done_s = serve_now_s();
  pthread_cond_broadcast(&job->changed);
  pthread_mutex_unlock(&job->mu);
}

/* ---- the prompt ---- */

/* The chat's prompt text in the model's template, malloc'd. */
static bool chat_text(serve_engine_t *e, const serve_job_t *job, char **out, serve_error_t *err) {
  size_t len = 0, cap = 4096;
  for (int attempt = 0; attempt < 2; attempt++) {
    char *text = malloc(cap);
    if (!text)
      return serve_fail(err, SERVE_HTTP_SERVER_ERROR, "server_error", NULL, NULL, "out of memory");
    hcq_status_t st =
        hcq_llm_chat_prompt(e->llm, job->messages, job->n_messages, NULL, text, cap, &len);
    if (!st) {
      *out = text;
      return true;
    }
    free(text);
    bool retry = hcq_status_code(st) == HCQ_OUT_OF_RANGE && len + 1 > cap;
    if (!retry) {
      serve_fail(err, SERVE_HTTP_BAD_REQUEST, "invalid_request_error", NULL, "messages",
                 "messages: %s", hcq_status_message(st));
      hcq_status_destroy(st);
      return false;
    }
    hcq_status_destroy(st);
    cap = len + 1;
  }
  return serve_fail(err, SERVE_HTTP_SERVER_ERROR, "server_error", NULL, NULL,
                    "the chat prompt did not fit the length it measured");
}

static bool tokenize(serve_engine_t *e, const char *text, int32_t **ids, size_t *n,
                     serve_error_t *err) {
  size_t len = strlen(text), count = 0;
  hcq_status_t st = hcq_llm_tokenize(e->llm, text, len, true, true, NULL, 0, &count);
  if (st && hcq_status_code(st) != HCQ_OUT_OF_RANGE) {
    serve_fail(err, SERVE_HTTP_BAD_REQUEST, "invalid_request_error", NULL, "prompt",
               "the prompt: %s", hcq_status_message(st));
    hcq_status_destroy(st);
    return false;
  }
  hcq_status_destroy(st);
  *ids = malloc((count ? count : 1) * sizeof(int32_t));
  if (!*ids)
    return serve_fail(err, SERVE_HTTP_SERVER_ERROR, "server_error", NULL, NULL, "out of memory");
  st = hcq_llm_tokenize(e->llm, text, len, true, true, *ids, count, n);
  if (st) {
    serve_fail(err, SERVE_HTTP_SERVER_ERROR, "server_error", NULL, NULL,
               "tokenizing the prompt: %s", hcq_status_message(st));
    hcq_status_destroy(st);
    return false;
  }
  return true;
}

/* The job's prompt ids, checked against the vocabulary and the context (the prompt and max_tokens
 * new tokens must fit; OpenAI's context_length_exceeded otherwise). */
static bool prompt_ids(serve_engine_t *e, serve_job_t *job, int32_t **ids, size_t *n,
                       serve_error_t *err) {
  *ids = NULL, *n = 0;
  if (job->kind == SERVE_CHAT || job->prompt_text) {
    char *chat = NULL;
    if (job->kind == SERVE_CHAT && !chat_text(e, job, &chat, err)) return false;
    bool ok = tokenize(e, chat ? chat : job->prompt_text, ids, n, err);
    free(chat);
    if (!ok) return false;
  } else {
    for (size_t i = 0; i < job->n_prompt_ids; i++)
      if (job->prompt_ids[i] < 0 || job->prompt_ids[i] >= e->info.vocab)
        return serve_fail(err, SERVE_HTTP_BAD_REQUEST, "invalid_request_error", NULL, "prompt",
                          "prompt: token %d is outside the vocabulary (0 to %d)",
                          job->prompt_ids[i], e->info.vocab - 1);
    *ids = job->prompt_ids, *n = job->n_prompt_ids;
    job->prompt_ids = NULL, job->n_prompt_ids = 0;
  }
  const char *field = job->kind == SERVE_CHAT ? "messages" : "prompt";
  size_t ctx = (size_t)e->info.ctx;
  if (*n == 0)
    return serve_fail(err, SERVE_HTTP_BAD_REQUEST, "invalid_request_error", NULL, field,
                      "%s: the prompt has no tokens", field);
  if (*n + 1 > ctx)
    return serve_fail(err, SERVE_HTTP_BAD_REQUEST, "invalid_request_error",
                      "context_length_exceeded", field,
                      "This model's context holds %zu tokens; the prompt has %zu tokens and needs "
                      "room for one more",
                      ctx, *n);
  if (job->max_tokens > 0 && *n + (size_t)job->max_tokens > ctx)
    return serve_fail(err, SERVE_HTTP_BAD_REQUEST, "invalid_request_error",
                      "context_length_exceeded", "max_tokens",
                      "This model's context holds %zu tokens; you requested %zu (%zu in the "
                      "prompt, %d in max_tokens)",
                      ctx, *n + (size_t)job->max_tokens, *n, job->max_tokens);
  return true;
}

/* ---- generation ---- */

typedef struct run_state {
  serve_engine_t *e;
  serve_job_t *job;
} run_state_t;

static bool append(serve_job_t *job, const char *text, size_t len) {
  if (job->len + len + 1 > job->cap) {
    size_t cap = job->cap ? job->cap * 2 : 256;
    while (cap < job->len + len + 1) cap *= 2;
    char *grown = realloc(job->text, cap);
    if (!grown) return false;
    job->text = grown, job->cap = cap;
  }
  if (len) memcpy(job->text + job->len, text, len);
  job->len += len;
  job->text[job->len] = '\0';
  return true;
}

/* id's text (control tokens' too) appended to job->lp_text: its place there (false: no memory). */
static bool token_text(hcq_llm_t *llm, serve_job_t *job, int32_t id, size_t *off, size_t *len) {
  char piece[256];
  size_t n = 0;
  hcq_status_t st = hcq_llm_detokenize(llm, &id, 1, true, piece, sizeof(piece), &n);
  if (st || n >= sizeof(piece)) n = 0; /* a token longer than 255 bytes: shown empty (none is) */
  hcq_status_destroy(st);
  if (job->lp_text_len + n > job->lp_text_cap) {
    size_t cap = (job->lp_text_len + n) * 2 + 256;
    char *grown = realloc(job->lp_text, cap);
    if (!grown) return false;
    job->lp_text = grown, job->lp_text_cap = cap;
  }
  memcpy(job->lp_text + job->lp_text_len, piece, n);
  *off = job->lp_text_len, *len = n;
  job->lp_text_len += n;
  return true;
}

/* Before on_token, with the request's logprobs: the token's log-probabilities and texts kept. */
static void on_logprob(void *user, const hcq_llm_logprob_t *lp) {
  run_state_t *rs = user;
  serve_job_t *job = rs->job;
  if (!job->ignore_eos && hcq_llm_is_end_token(rs->e->llm, lp->id))
    return; /* not in the text: not listed */
  pthread_mutex_lock(&job->mu);
  if (job->n_lps == job->lps_cap) {
    size_t cap = job->lps_cap ? job->lps_cap * 2 : 64;
    serve_logprob_t *grown = realloc(job->lps, cap * sizeof(*grown));
    if (grown) job->lps = grown, job->lps_cap = cap;
  }
  if (job->n_lps < job->lps_cap) {
    serve_logprob_t *out = &job->lps[job->n_lps];
    *out = (serve_logprob_t){.logprob = lp->logprob, .n_top = lp->n_top};
    bool ok = token_text(rs->e->llm, job, lp->id, &out->off, &out->len);
    for (int k = 0; k < lp->n_top && ok; k++) {
      out->top[k] = lp->top_logprobs[k];
      ok = token_text(rs->e->llm, job, lp->top_ids[k], &out->top_off[k], &out->top_len[k]);
    }
    job->n_lps += ok;
  }
  pthread_mutex_unlock(&job->mu);
}

static bool on_token(void *user, int32_t id, const char *text, size_t len) {
  run_state_t *rs = user;
  serve_job_t *job = rs->job;
  pthread_mutex_lock(&job->mu);
  bool end = id != HCQ_LLM_NO_TOKEN && hcq_llm_is_end_token(rs->e->llm, id);
  if (id != HCQ_LLM_NO_TOKEN && !end) job->completion_tokens++;
  if (!job->first_token_s) job->first_token_s = serve_now_s();
  /* the text comes without stop strings, and without what could still become one (the library
   * holds it back: hcq_llm_generate_options_t.stop) */
  size_t visible = job->visible;
  bool ok = append(job, text, len);
  job->visible = job->len;
  bool go_on = ok && !job->cancelled;
  /* only a stream's thread wants each token: a whole answer's waits for the end (job_finish) */
  if (job->stream && job->visible != visible) pthread_cond_broadcast(&job->changed);
  pthread_mutex_unlock(&job->mu);
  pthread_mutex_lock(&rs->e->mu);
  go_on = go_on && rs->e->state != SERVE_STOPPING;
  pthread_mutex_unlock(&rs->e->mu);
  return go_on;
}

/* A job's prompt checked and its generation begun (a stream may send its headers): false when the
 * job failed instead. */
static bool job_start(serve_engine_t *e, serve_job_t *job, int32_t **ids, size_t *n) {
  serve_error_t err = {0};
  if (!prompt_ids(e, job, ids, n, &err)) {
    free(*ids);
    *ids = NULL;
    job_fail(job, &err);
    return false;
  }
  pthread_mutex_lock(&job->mu);
  job->phase = SERVE_RUNNING;
  job->started = true;
  job->prompt_tokens = *n;
  pthread_cond_broadcast(&job->changed);
  pthread_mutex_unlock(&job->mu);
  return true;
}

/* A started job's end: its finish reason, the held-back text let go, the counters. */
static void job_finish(serve_engine_t *e, serve_job_t *job, hcq_llm_stop_t stop, hcq_status_t st) {
  pthread_mutex_lock(&job->mu);
  if (st) {
    serve_fail(&job->error, SERVE_HTTP_SERVER_ERROR, "server_error", NULL, NULL,
               "generation failed: %s", hcq_status_message(st));
    hcq_status_destroy(st);
  }
  job->finish_reason = stop == HCQ_LLM_STOP_STRING || stop == HCQ_LLM_STOP_END ? "stop" : "length";
  job->phase = SERVE_DONE;
  job->done_s = serve_now_s();
  size_t prompt = job->prompt_tokens, completion = job->completion_tokens;
  pthread_cond_broadcast(&job->changed);
  pthread_mutex_unlock(&job->mu);
  pthread_mutex_lock(&e->mu);
  e->jobs++, e->prompt_tokens += prompt, e->completion_tokens += completion;
  pthread_mutex_unlock(&e->mu);
}

/* The next queued job (NULL: none), taken off the queue; a job whose client left meanwhile ends
 * here. */
static serve_job_t *take_job(serve_engine_t *e) {
  for (;;) {
    pthread_mutex_lock(&e->mu);
    serve_job_t *job = NULL;
    if (e->count && e->state == SERVE_READY) {
      job = e->queue[e->head];
      e->head = (e->head + 1) % (size_t)e->o.queue;
      e->count--;
    }
    pthread_mutex_unlock(&e->mu);
    if (!job) return NULL;
    pthread_mutex_lock(&job->mu);
    bool cancelled = job->cancelled;
    pthread_mutex_unlock(&job->mu);
    if (!cancelled) return job;
    serve_error_t gone;
    serve_fail(&gone, SERVE_HTTP_CLIENT_CLOSED, "invalid_request_error", NULL, NULL,
               "the client closed the connection");
    job_fail(job, &gone);
    serve_job_release(job);
  }
}

static void add_busy_seconds(serve_engine_t *e, double seconds) {
  pthread_mutex_lock(&e->mu);
  e->decode_seconds += seconds;
  pthread_mutex_unlock(&e->mu);
}

/* The library's options for a job: its sampling and stop strings, its text to on_token. */
static hcq_llm_generate_options_t job_options(serve_job_t *job, run_state_t *rs) {
  return (hcq_llm_generate_options_t){.max_tokens = job->max_tokens,
                                      .sampling = job->sampling,
                                      .ignore_eos = job->ignore_eos,
                                      .on_token = on_token,
                                      .user = rs,
                                      .stop = job->stops,
                                      .nstop = job->n_stops,
                                      .logprobs = job->logprobs,
                                      .top_logprobs = job->top_logprobs,
                                      .on_logprob = on_logprob};
}

/* One job on hcq_llm_generate (one slot): its prompt checked, then generated to its end. */
static void run_job(serve_engine_t *e, serve_job_t *job) {
  int32_t *ids = NULL;
  size_t n = 0;
  if (!job_start(e, job, &ids, &n)) return;
  run_state_t rs = {.e = e, .job = job};
  hcq_llm_generate_options_t o = job_options(job, &rs);
  hcq_llm_result_t res;
  double t0 = serve_now_s();
  hcq_status_t st = hcq_llm_generate(e->llm, ids, n, &o, &res);
  add_busy_seconds(e, serve_now_s() - t0);
  free(ids);
  job_finish(e, job, res.stop, st);
  hcq_llm_result_free(&res);
}

/* ---- many jobs at once: the batch ---- */

typedef struct slot {
  serve_job_t *job; /* NULL: free */
  int seq;
  run_state_t rs;
} slot_t;

/* Queued jobs into free slots: each prompt checked, then added to the batch (it enters at the next
 * step, in chunks beside the others' tokens). */
static void admit(serve_engine_t *e, slot_t *slots) {
  for (int i = 0; i < e->slots; i++) {
    if (slots[i].job) continue;
    serve_job_t *job = take_job(e);
    if (!job) return;
    int32_t *ids = NULL;
    size_t n = 0;
    if (!job_start(e, job, &ids, &n)) {
      serve_job_release(job);
      continue;
    }
    slots[i] = (slot_t){.job = job, .rs = {.e = e, .job = job}};
    hcq_llm_generate_options_t o = job_options(job, &slots[i].rs);
    hcq_status_t st = hcq_llm_batch_add(e->batch, ids, n, &o, &slots[i].seq);
    free(ids);
    if (st) {
      job_finish(e, job, HCQ_LLM_STOP_LENGTH, st);
      serve_job_release(job);
      slots[i].job = NULL;
    }
  }
}

static void end_slot(serve_engine_t *e, slot_t *s, hcq_llm_stop_t stop, hcq_status_t st) {
  job_finish(e, s->job, stop, st);
  serve_job_release(s->job);
  s->job = NULL;
}

/* Sequences whose client left, or all of them when the server stops: cancelled now, so their
 * slots are free before the next step. */
static void cut(serve_engine_t *e, slot_t *slots, bool all) {
  for (int i = 0; i < e->slots; i++) {
    if (!slots[i].job) continue;
    pthread_mutex_lock(&slots[i].job->mu);
    bool gone = slots[i].job->cancelled;
    pthread_mutex_unlock(&slots[i].job->mu);
    if (!gone && !all) continue;
    hcq_status_destroy(hcq_llm_batch_cancel(e->batch, slots[i].seq));
    end_slot(e, &slots[i], HCQ_LLM_STOP_CALLBACK, NULL);
  }
}

/* After a failed step the batch's state is undefined (hcq_llm_batch_step): a new batch, or, when
 * that fails too, none (the engine goes on with one slot on hcq_llm_generate). */
static void renew_batch(serve_engine_t *e) {
  hcq_status_t st = hcq_llm_batch_destroy(e->batch);
  hcq_status_destroy(st);
  e->batch = NULL;
  hcq_llm_batch_options_t bo = {.max_seqs = e->o.parallel, .ctx = e->o.ctx};
  st = hcq_llm_batch_create(e->llm, &bo, &e->batch);
  if (st) {
    fprintf(stderr, "hcq serve: a new batch failed too (%s): one sequence at a time from now on\n",
            hcq_status_message(st));
    hcq_status_destroy(st);
    e->batch = NULL;
    pthread_mutex_lock(&e->mu);
    e->slots = 1;
    pthread_mutex_unlock(&e->mu);
  }
}

/* One step of the batch and its finished sequences ended; a failed step fails every sequence. */
static void step(serve_engine_t *e, slot_t *slots, hcq_llm_batch_event_t *events) {
  size_t n = 0;
  double t0 = serve_now_s();
  hcq_status_t st = hcq_llm_batch_step(e->batch, events, (size_t)e->slots, &n);
  add_busy_seconds(e, serve_now_s() - t0);
  if (st) {
    fprintf(stderr, "hcq serve: a batch step failed: %s\n", hcq_status_message(st));
    for (int i = 0; i < e->slots; i++)
      if (slots[i].job)
        end_slot(e, &slots[i], HCQ_LLM_STOP_CALLBACK,
                 hcq_status_make(hcq_status_code(st), "%s", hcq_status_message(st)));
    hcq_status_destroy(st);
    renew_batch(e);
    return;
  }
  for (size_t k = 0; k < n; k++)
    for (int i = 0; i < e->slots && events[k].finished; i++)
      if (slots[i].job && slots[i].seq == events[k].seq)
        end_slot(e, &slots[i], events[k].stop, NULL);
}

static size_t active(serve_engine_t *e, const slot_t *slots) {
  size_t busy = 0;
  for (int i = 0; i < e->slots; i++) busy += slots[i].job != NULL;
  pthread_mutex_lock(&e->mu);
  e->busy = busy;
  pthread_mutex_unlock(&e->mu);
  return busy;
}

static void run_batch(serve_engine_t *e) {
  slot_t *slots = calloc((size_t)e->slots, sizeof(*slots));
  hcq_llm_batch_event_t *events = calloc((size_t)e->slots, sizeof(*events));
  for (bool stopping = false; slots && events && e->batch && !stopping;) {
    admit(e, slots);
    pthread_mutex_lock(&e->mu);
    stopping = e->state == SERVE_STOPPING;
    pthread_mutex_unlock(&e->mu);
    cut(e, slots, stopping);
    if (active(e, slots)) {
      step(e, slots, events);
      continue;
    }
    pthread_mutex_lock(&e->mu);
    while (!e->count && e->state != SERVE_STOPPING) pthread_cond_wait(&e->wake, &e->mu);
    pthread_mutex_unlock(&e->mu);
  }
  if (!slots || !events) fprintf(stderr, "hcq serve: out of memory for %d slots\n", e->slots);
  free(slots), free(events);
}

/* ---- the thread ---- */

/* The model, then the batch of --parallel sequences (one slot on hcq_llm_generate where the device
 * has no batched decoding). */
static bool load(serve_engine_t *e) {
  hcq_llm_options_t lo = {.device = e->o.device, .ctx = e->o.ctx, .log = stderr};
  hcq_status_t st = hcq_llm_open(e->o.model, &lo, &e->llm);
  e->slots = 1;
  if (!st && !e->o.one_at_a_time) {
    hcq_llm_batch_options_t bo = {.max_seqs = e->o.parallel, .ctx = e->o.ctx};
    hcq_status_t bst = hcq_llm_batch_create(e->llm, &bo, &e->batch);
    if (!bst)
      e->slots = e->o.parallel;
    else if (hcq_status_code(bst) == HCQ_UNIMPLEMENTED)
      fprintf(stderr, "hcq serve: one sequence at a time: %s\n", hcq_status_message(bst));
    else
      st = bst, bst = NULL;
    hcq_status_destroy(bst);
  }
  pthread_mutex_lock(&e->mu);
  if (st) {
    snprintf(e->load_error, sizeof(e->load_error), "%s", hcq_status_message(st));
    e->load_code = hcq_status_code(st);
    hcq_status_destroy(st);
    e->state = SERVE_LOAD_FAILED;
  } else {
    hcq_llm_get_info(e->llm, &e->info);
    const char *base = strrchr(e->info.path, '/');
    snprintf(e->file, sizeof(e->file), "%s", base ? base + 1 : e->info.path);
    snprintf(e->id, sizeof(e->id), "%s", e->o.alias ? e->o.alias : e->file);
    char *dot = e->o.alias ? NULL : strstr(e->id, ".gguf");
    if (dot && !dot[5]) *dot = '\0';
    if (e->state == SERVE_LOADING) e->state = SERVE_READY;
  }
  pthread_cond_broadcast(&e->wake);
  pthread_mutex_unlock(&e->mu);
  return !st;
}

static void *engine_main(void *arg) {
  serve_engine_t *e = arg;
  if (!load(e)) return NULL;
  if (e->batch) run_batch(e);
  if (e->batch) return NULL; /* stopped; else the batch failed for good: on with one slot */
  for (;;) {
    pthread_mutex_lock(&e->mu);
    while (!e->count && e->state != SERVE_STOPPING) pthread_cond_wait(&e->wake, &e->mu);
    bool stopping = e->state == SERVE_STOPPING;
    pthread_mutex_unlock(&e->mu);
    serve_job_t *job = stopping ? NULL : take_job(e);
    if (stopping) break;
    if (!job) continue;
    pthread_mutex_lock(&e->mu);
    e->busy = 1;
    pthread_mutex_unlock(&e->mu);
    run_job(e, job);
    serve_job_release(job);
    pthread_mutex_lock(&e->mu);
    e->busy = 0;
    pthread_mutex_unlock(&e->mu);
  }
  return NULL;
}

int serve_engine_start(const serve_engine_options_t *o, serve_engine_t **out) {
  serve_engine_t *e = calloc(1, sizeof(*e));
  if (!e) return -1;
  e->o = *o;
  if (e->o.queue < 1) e->o.queue = 1;
  e->queue = calloc((size_t)e->o.queue, sizeof(*e->queue));
  pthread_mutex_init(&e->mu, NULL);
  pthread_cond_init(&e->wake, NULL);
  e->state = SERVE_LOADING;
  if (!e->queue || pthread_create(&e->thread, NULL, engine_main, e)) {
    free(e->queue);
    free(e);
    return -1;
  }
  e->thread_started = true;
  *out = e;
  return 0;
}

bool serve_engine_submit(serve_engine_t *e, serve_job_t *job, serve_error_t *err) {
  pthread_mutex_lock(&e->mu);
  bool ok = false;
  if (e->state == SERVE_LOADING)
    serve_fail(err, SERVE_HTTP_UNAVAILABLE, "server_error", "model_loading", NULL,
               "the model is still loading: try again shortly");
  else if (e->state != SERVE_READY)
    serve_fail(err, SERVE_HTTP_UNAVAILABLE, "server_error", "shutting_down", NULL,
               "the server is shutting down");
  else if (e->count == (size_t)e->o.queue)
    serve_fail(err, SERVE_HTTP_UNAVAILABLE, "server_error", "queue_full", NULL,
               "all %d slots are busy and %d requests wait: try again later", e->slots, e->o.queue);
  else {
    pthread_mutex_lock(&job->mu);
    job->refs++;
    pthread_mutex_unlock(&job->mu);
    e->queue[(e->head + e->count) % (size_t)e->o.queue] = job;
    e->count++;
    pthread_cond_signal(&e->wake);
    ok = true;
  }
  pthread_mutex_unlock(&e->mu);
  return ok;
}

void serve_engine_withdraw(serve_engine_t *e, serve_job_t *job) {
  serve_job_cancel(job);
  pthread_mutex_lock(&e->mu);
  size_t q = (size_t)e->o.queue, found = e->count;
  for (size_t i = 0; i < e->count && found == e->count; i++)
    if (e->queue[(e->head + i) % q] == job) found = i;
  bool removed = found < e->count;
  if (removed) { /* close the gap: the jobs behind it move up one place */
    for (size_t i = found; i + 1 < e->count; i++)
      e->queue[(e->head + i) % q] = e->queue[(e->head + i + 1) % q];
    e->count--;
  }
  pthread_mutex_unlock(&e->mu);
  if (removed) serve_job_release(job); /* the queue's reference */
}

void serve_engine_stop(serve_engine_t *e) {
  if (!e) return;
  pthread_mutex_lock(&e->mu);
  e->state = SERVE_STOPPING;
  pthread_cond_broadcast(&e->wake);
  pthread_mutex_unlock(&e->mu);
  if (e->thread_started) pthread_join(e->thread, NULL);
  serve_error_t err;
  serve_fail(&err, SERVE_HTTP_UNAVAILABLE, "server_error", "shutting_down", NULL,
             "the server is shutting down");
  for (; e->count; e->count--, e->head = (e->head + 1) % (size_t)e->o.queue) {
    job_fail(e->queue[e->head], &err);
    serve_job_release(e->queue[e->head]);
  }
}

void serve_engine_destroy(serve_engine_t *e) {
  if (!e) return;
  hcq_status_t st = hcq_llm_batch_destroy(e->batch);
  if (st) fprintf(stderr, "hcq serve: closing the batch: %s\n", hcq_status_message(st));
  hcq_status_destroy(st);
  st = hcq_llm_close(e->llm);
  if (st) fprintf(stderr, "hcq serve: closing the model: %s\n", hcq_status_message(st));
  hcq_status_destroy(st);
  pthread_mutex_destroy(&e->mu);
  pthread_cond_destroy(&e->wake);
  free(e->queue);
  free(e);
}

serve_state_t serve_engine_state(serve_engine_t *e) {
  pthread_mutex_lock(&e->mu);
  serve_state_t s = e->state;
  pthread_mutex_unlock(&e->mu);
  return s;
}

const char *serve_engine_load_error(serve_engine_t *e) { return e->load_error; }
hcq_status_code_t serve_engine_load_code(serve_engine_t *e) { return e->load_code; }
const char *serve_engine_model_id(serve_engine_t *e) { return e->id; }
int serve_engine_ctx(serve_engine_t *e) { return e->info.ctx; }

bool serve_engine_knows_model(serve_engine_t *e, const char *name) {
  return !strcmp(name, e->id) || !strcmp(name, e->file) ||
         (e->info.name && !strcmp(name, e->info.name)) || (e->o.model && !strcmp(name, e->o.model));
}

void serve_engine_metrics(serve_engine_t *e, serve_metrics_t *out) {
  pthread_mutex_lock(&e->mu);
  *out = (serve_metrics_t){.state = e->state,
                           .jobs = e->jobs,
                           .prompt_tokens = e->prompt_tokens,
                           .completion_tokens = e->completion_tokens,
                           .decode_seconds = e->decode_seconds,
                           .queued = e->count,
                           .busy = e->busy,
                           .slots = (size_t)e->slots,
                           .queue_cap = (size_t)e->o.queue};
  pthread_mutex_unlock(&e->mu);
}
