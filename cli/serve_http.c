/* hcq serve's HTTP side, on libmicrohttpd with one thread per connection: a connection's thread
 * may block on its job (waiting for the engine) and a stream's reader blocks until the engine has
 * more text, which libmicrohttpd allows in this mode. While it waits, the thread looks at the
 * socket every 100 ms: a client that hung up cancels its job, so its slot frees at once. */
#include <arpa/inet.h>
#include <errno.h>
#include <microhttpd.h>
#include <netdb.h>
#include <poll.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "cli/serve.h"

struct serve_http {
  serve_engine_t *engine;
  serve_http_options_t o;
  struct MHD_Daemon *daemon;
  atomic_ullong requests, errors, next_id;
  atomic_int in_flight; /* completions between their body and their last byte */
};

typedef enum route {
  ROUTE_NONE,
  ROUTE_CHAT,
  ROUTE_COMPLETIONS,
  ROUTE_MODELS,
  ROUTE_HEALTH,
  ROUTE_METRICS
} route_t;

/* What a connection's request accumulates between the access handler's calls. */
typedef struct request {
  route_t route;
  char *body;
  size_t len, cap;
  bool too_big, answered;
  bool in_flight; /* a whole (not streamed) completion counted in in_flight until it is sent */
} request_t;

/* ---- responses ---- */

static enum MHD_Result send_text(serve_http_t *h, struct MHD_Connection *c,
                                 serve_http_status_t status, char *text, const char *type) {
  if (!text)
    text = strdup("{\"error\": {\"message\": \"out of memory\", \"type\": \"server_error\"}}");
  if (status >= 400) atomic_fetch_add(&h->errors, 1);
  struct MHD_Response *r =
      MHD_create_response_from_buffer(text ? strlen(text) : 0, text, MHD_RESPMEM_MUST_FREE);
  if (!r) return free(text), MHD_NO;
  MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, type);
  if (status == MHD_HTTP_SERVICE_UNAVAILABLE)
    MHD_add_response_header(r, MHD_HTTP_HEADER_RETRY_AFTER, "1");
  if (status == MHD_HTTP_UNAUTHORIZED)
    MHD_add_response_header(r, MHD_HTTP_HEADER_WWW_AUTHENTICATE, "Bearer");
  enum MHD_Result ret = MHD_queue_response(c, status, r);
  MHD_destroy_response(r);
  return ret;
}

static enum MHD_Result send_json(serve_http_t *h, struct MHD_Connection *c,
                                 serve_http_status_t status, char *json) {
  return send_text(h, c, status, json, "application/json");
}

static enum MHD_Result send_error(serve_http_t *h, struct MHD_Connection *c,
                                  const serve_error_t *err) {
  return send_json(h, c, err->http, serve_error_json(err));
}

static enum MHD_Result fail(serve_http_t *h, struct MHD_Connection *c, serve_http_status_t http,
                            const char *type, const char *code, const char *message) {
  serve_error_t err;
  serve_fail(&err, http, type, code, NULL, "%s", message);
  return send_error(h, c, &err);
}

/* ---- waiting on the engine ---- */

/* Whether the client closed its end (a pipelined next request is data, not a close). */
static bool peer_closed(struct MHD_Connection *c) {
  const union MHD_ConnectionInfo *ci =
      MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
  if (!ci) return false;
  struct pollfd p = {.fd = ci->connect_fd, .events = POLLIN | POLLRDHUP};
  if (poll(&p, 1, 0) <= 0) return false;
  if (p.revents & (POLLRDHUP | POLLHUP | POLLERR)) return true;
  char byte;
  return recv(ci->connect_fd, &byte, 1, MSG_PEEK | MSG_DONTWAIT) == 0;
}

/* Waits (job->mu held) until pred holds, the client hangs up (false: the job is cancelled) or 100
 * ms pass without news. */
static bool wait_step(serve_job_t *job, struct MHD_Connection *c) {
  struct timespec until;
  clock_gettime(CLOCK_REALTIME, &until);
  until.tv_nsec += 100 * 1000 * 1000;
  if (until.tv_nsec >= 1000000000) until.tv_sec++, until.tv_nsec -= 1000000000;
  if (pthread_cond_timedwait(&job->changed, &job->mu, &until) != ETIMEDOUT) return true;
  pthread_mutex_unlock(&job->mu);
  bool gone = peer_closed(c);
  pthread_mutex_lock(&job->mu);
  if (gone) job->cancelled = true;
  return !gone;
}

/* ---- streaming ---- */

typedef struct stream {
  serve_http_t *h;
  serve_job_t *job;
  struct MHD_Connection *c;
  char id[48];
  long created;
  char *pending; /* an event built and not yet all handed to libmicrohttpd */
  size_t pending_len, pending_at, sent, sent_lps; /* bytes of text and log-probabilities sent */
  bool finished;
} stream_t;

/* The next event: new text, else the end (finish chunk, usage, [DONE]); NULL at the end of the
 * stream or when the client is gone. */
static char *next_event(stream_t *s) {
  serve_job_t *job = s->job;
  pthread_mutex_lock(&job->mu);
  while (job->visible <= s->sent && job->phase != SERVE_DONE && !job->cancelled)
    if (!wait_step(job, s->c)) break;
  char *ev = NULL;
  if (job->cancelled) {
    ev = NULL;
  } else if (job->visible > s->sent) {
    ev = serve_chunk_sse(s->h->engine, job, s->id, s->created, job->text + s->sent,
                         job->visible - s->sent, false, NULL, s->sent_lps, job->n_lps);
    s->sent = job->visible, s->sent_lps = job->n_lps;
  } else if (job->error
                 .http) { /* failed after the headers went: the error as an event, then the end */
    char *body = serve_error_json(&job->error);
    size_t n = body ? strlen(body) + 32 : 0;
    ev = body ? malloc(n) : NULL;
    if (ev) snprintf(ev, n, "data: %s\n\ndata: [DONE]\n\n", body);
    free(body);
    s->finished = true;
  } else {
    /* the tokens whose text was held back and never sent (a stop string's) go with the finish */
    char *fin = serve_chunk_sse(s->h->engine, job, s->id, s->created, "", 0, false,
                                job->finish_reason, s->sent_lps, job->n_lps);
    char *use =
        job->include_usage ? serve_usage_sse(s->h->engine, job, s->id, s->created) : strdup("");
    size_t n = fin && use ? strlen(fin) + strlen(use) + 16 : 0;
    ev = n ? malloc(n) : NULL;
    if (ev) snprintf(ev, n, "%s%sdata: [DONE]\n\n", fin, use);
    free(fin), free(use);
    s->finished = true;
  }
  pthread_mutex_unlock(&job->mu);
  return ev;
}

static ssize_t stream_read(void *cls, uint64_t pos, char *buf, size_t max) {
  (void)pos;
  stream_t *s = cls;
  if (s->pending_at == s->pending_len) {
    free(s->pending);
    s->pending = NULL, s->pending_at = s->pending_len = 0;
    if (s->finished) return MHD_CONTENT_READER_END_OF_STREAM;
    s->pending = next_event(s);
    if (!s->pending) return MHD_CONTENT_READER_END_WITH_ERROR;
    s->pending_len = strlen(s->pending);
  }
  size_t n = s->pending_len - s->pending_at < max ? s->pending_len - s->pending_at : max;
  memcpy(buf, s->pending + s->pending_at, n);
  s->pending_at += n;
  return (ssize_t)n;
}

/* The connection's end, however it came: a client gone mid-stream cancels the job. */
static void stream_free(void *cls) {
  stream_t *s = cls;
  if (!s->finished) serve_job_cancel(s->job);
  serve_job_release(s->job);
  atomic_fetch_sub(&s->h->in_flight, 1);
  free(s->pending);
  free(s);
}

static enum MHD_Result start_stream(serve_http_t *h, struct MHD_Connection *c, serve_job_t *job,
                                    const char *id, long created) {
  stream_t *s = calloc(1, sizeof(*s));
  if (!s) {
    serve_job_release(job);
    atomic_fetch_sub(&h->in_flight, 1);
    return MHD_NO;
  }
  *s = (stream_t){.h = h, .job = job, .c = c, .created = created};
  snprintf(s->id, sizeof(s->id), "%s", id);
  /* the first event: the chat's role with empty content, as OpenAI starts its streams */
  pthread_mutex_lock(&job->mu);
  s->pending = job->kind == SERVE_CHAT
                   ? serve_chunk_sse(h->engine, job, id, created, "", 0, true, NULL, 0, 0)
                   : NULL;
  pthread_mutex_unlock(&job->mu);
  s->pending_len = s->pending ? strlen(s->pending) : 0;
  struct MHD_Response *r =
      MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 4096, stream_read, s, stream_free);
  if (!r) {
    stream_free(s);
    return MHD_NO;
  }
  MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, "text/event-stream");
  MHD_add_response_header(r, MHD_HTTP_HEADER_CACHE_CONTROL, "no-cache");
  enum MHD_Result ret = MHD_queue_response(c, MHD_HTTP_OK, r);
  MHD_destroy_response(r);
  return ret;
}

/* ---- the routes ---- */

static enum MHD_Result completions(serve_http_t *h, struct MHD_Connection *c, request_t *req) {
  serve_kind_t kind = req->route == ROUTE_CHAT ? SERVE_CHAT : SERVE_COMPLETION;
  if (serve_engine_state(h->engine) == SERVE_LOADING)
    return fail(h, c, SERVE_HTTP_UNAVAILABLE, "server_error", "model_loading",
                "the model is still loading: try again shortly");
  serve_job_t *job = serve_job_new(kind);
  if (!job) return fail(h, c, SERVE_HTTP_SERVER_ERROR, "server_error", NULL, "out of memory");
  serve_error_t err = {0};
  if (!serve_parse_request(h->engine, kind, req->body ? req->body : "", req->len, job, &err) ||
      !serve_engine_submit(h->engine, job, &err)) {
    serve_job_release(job);
    return send_error(h, c, &err);
  }
  char id[48];
  snprintf(id, sizeof(id), "%s-hcq%llx", kind == SERVE_CHAT ? "chatcmpl" : "cmpl",
           atomic_fetch_add(&h->next_id, 1));
  long created = (long)time(NULL);
  atomic_fetch_add(&h->in_flight, 1);
  pthread_mutex_lock(&job->mu);
  while (job->phase != SERVE_DONE && !(job->stream && job->started))
    if (!wait_step(job, c)) break;
  bool gone = job->cancelled, stream = job->stream && job->started && !job->error.http;
  err = job->error;
  char *body =
      !gone && !stream && !err.http ? serve_response_json(h->engine, job, id, created) : NULL;
  pthread_mutex_unlock(&job->mu);
  if (gone) serve_engine_withdraw(h->engine, job);
  if (stream) return start_stream(h, c, job, id, created); /* takes the reference and in_flight */
  serve_job_release(job);
  req->in_flight = true;   /* on_completed drops it once the answer is sent */
  if (gone) return MHD_NO; /* nobody to answer */
  if (err.http) return send_error(h, c, &err);
  return send_json(h, c, SERVE_HTTP_OK, body);
}

static char *metrics_text(serve_http_t *h) {
  serve_metrics_t m;
  serve_engine_metrics(h->engine, &m);
  size_t cap = 4096;
  char *t = malloc(cap);
  if (!t) return NULL;
  snprintf(t, cap,
           "# HELP hcq_requests_total HTTP requests answered, every route.\n# TYPE "
           "hcq_requests_total counter\n"
           "hcq_requests_total %llu\n"
           "# HELP hcq_requests_errors_total Requests answered with an error status (4xx, 5xx).\n"
           "# TYPE hcq_requests_errors_total counter\nhcq_requests_errors_total %llu\n"
           "# HELP hcq_completions_total Completions the engine finished.\n# TYPE "
           "hcq_completions_total counter\n"
           "hcq_completions_total %llu\n"
           "# HELP hcq_prompt_tokens_total Prompt tokens processed.\n# TYPE "
           "hcq_prompt_tokens_total counter\n"
           "hcq_prompt_tokens_total %llu\n"
           "# HELP hcq_tokens_generated_total Tokens generated.\n# TYPE hcq_tokens_generated_total "
           "counter\n"
           "hcq_tokens_generated_total %llu\n"
           "# HELP hcq_tokens_per_second Tokens generated per second of generation, over the "
           "server's life.\n"
           "# TYPE hcq_tokens_per_second gauge\nhcq_tokens_per_second %.2f\n"
           "# HELP hcq_queue_length Requests waiting for a slot.\n# TYPE hcq_queue_length "
           "gauge\nhcq_queue_length %zu\n"
           "# HELP hcq_queue_capacity Requests that may wait before 503.\n# TYPE "
           "hcq_queue_capacity gauge\n"
           "hcq_queue_capacity %zu\n"
           "# HELP hcq_slots_busy Slots generating now.\n# TYPE hcq_slots_busy "
           "gauge\nhcq_slots_busy %zu\n"
           "# HELP hcq_slots Slots (sequences generated at once).\n# TYPE hcq_slots "
           "gauge\nhcq_slots %zu\n"
           "# HELP hcq_model_loaded 1 once the model is loaded.\n# TYPE hcq_model_loaded "
           "gauge\nhcq_model_loaded %d\n",
           (unsigned long long)atomic_load(&h->requests),
           (unsigned long long)atomic_load(&h->errors), m.jobs, m.prompt_tokens,
           m.completion_tokens,
           m.decode_seconds > 0 ? (double)m.completion_tokens / m.decode_seconds : 0.0, m.queued,
           m.queue_cap, m.busy, m.slots, m.state == SERVE_READY || m.state == SERVE_STOPPING);
  return t;
}

static enum MHD_Result answer(serve_http_t *h, struct MHD_Connection *c, request_t *req) {
  switch (req->route) {
    case ROUTE_HEALTH:
      if (serve_engine_state(h->engine) == SERVE_LOADING)
        return fail(h, c, SERVE_HTTP_UNAVAILABLE, "unavailable_error", "model_loading",
                    "Loading model");
      return send_json(h, c, SERVE_HTTP_OK, strdup("{\"status\":\"ok\"}"));
    case ROUTE_MODELS:
      if (serve_engine_state(h->engine) == SERVE_LOADING)
        return fail(h, c, SERVE_HTTP_UNAVAILABLE, "unavailable_error", "model_loading",
                    "Loading model");
      return send_json(h, c, SERVE_HTTP_OK, serve_models_json(h->engine, (long)time(NULL)));
    case ROUTE_METRICS:
      return send_text(h, c, SERVE_HTTP_OK, metrics_text(h), "text/plain; version=0.0.4");
    default: return completions(h, c, req);
  }
}

/* ---- the access handler ---- */

static route_t route_of(const char *url, bool *post) {
  static const struct {
    const char *path;
    route_t route;
    bool post;
  } routes[] = {{"/v1/chat/completions", ROUTE_CHAT, true},
                {"/chat/completions", ROUTE_CHAT, true},
                {"/v1/completions", ROUTE_COMPLETIONS, true},
                {"/completions", ROUTE_COMPLETIONS, true},
                {"/v1/models", ROUTE_MODELS, false},
                {"/models", ROUTE_MODELS, false},
                {"/health", ROUTE_HEALTH, false},
                {"/v1/health", ROUTE_HEALTH, false},
                {"/metrics", ROUTE_METRICS, false}};
  for (size_t i = 0; i < sizeof(routes) / sizeof(routes[0]); i++)
    if (!strcmp(url, routes[i].path)) return *post = routes[i].post, routes[i].route;
  return ROUTE_NONE;
}

/* Compares every byte whatever differs first, so the time taken says nothing about the key. */
static bool authorized(serve_http_t *h, struct MHD_Connection *c) {
  if (!h->o.api_key) return true;
  const char *got = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_AUTHORIZATION);
  if (!got || strncmp(got, "Bearer ", 7)) return false;
  got += 7;
  size_t a = strlen(got), b = strlen(h->o.api_key);
  unsigned char diff = a != b;
  for (size_t i = 0; i < b; i++) diff |= (unsigned char)(got[i < a ? i : 0] ^ h->o.api_key[i]);
  return !diff;
}

/* The first call for a request: its headers only. Answers at once what needs no body. */
static enum MHD_Result first_call(serve_http_t *h, struct MHD_Connection *c, const char *url,
                                  const char *method, request_t *req) {
  atomic_fetch_add(&h->requests, 1);
  bool post = false;
  req->route = route_of(url, &post);
  bool is_post = !strcmp(method, "POST"),
       is_get = !strcmp(method, "GET") || !strcmp(method, "HEAD");
  if (req->route == ROUTE_NONE) {
    char msg[512];
    snprintf(msg, sizeof(msg),
             "Unknown route %.16s %.160s (POST /v1/chat/completions, POST /v1/completions, "
             "GET /v1/models, GET /health, GET /metrics)",
             method, url);
    return req->answered = true,
           fail(h, c, SERVE_HTTP_NOT_FOUND, "invalid_request_error", "unknown_url", msg);
  }
  if (post ? !is_post : !is_get) {
    char msg[512];
    snprintf(msg, sizeof(msg), "%.16s %.160s: this route takes %s", method, url,
             post ? "POST" : "GET");
    req->answered = true;
    serve_error_t err;
    serve_fail(&err, SERVE_HTTP_METHOD_NOT_ALLOWED, "invalid_request_error", "method_not_allowed",
               NULL, "%s", msg);
    char *json = serve_error_json(&err);
    atomic_fetch_add(&h->errors, 1);
    struct MHD_Response *r =
        MHD_create_response_from_buffer(json ? strlen(json) : 0, json, MHD_RESPMEM_MUST_FREE);
    if (!r) return free(json), MHD_NO;
    MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, "application/json");
    MHD_add_response_header(r, MHD_HTTP_HEADER_ALLOW, post ? "POST" : "GET, HEAD");
    enum MHD_Result ret = MHD_queue_response(c, SERVE_HTTP_METHOD_NOT_ALLOWED, r);
    MHD_destroy_response(r);
    return ret;
  }
  if (req->route != ROUTE_HEALTH && !authorized(h, c))
    return req->answered = true,
           fail(h, c, SERVE_HTTP_UNAUTHORIZED, "invalid_request_error", "invalid_api_key",
                "Incorrect or missing API key: send Authorization: Bearer KEY");
  const char *length =
      MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_LENGTH);
  if (length && strtoull(length, NULL, 10) > h->o.max_body) {
    char msg[160];
    snprintf(msg, sizeof(msg),
             "the body has %.30s bytes; this server takes at most %zu (--max-body)", length,
             h->o.max_body);
    return req->answered = true,
           fail(h, c, SERVE_HTTP_TOO_LARGE, "invalid_request_error", "request_too_large", msg);
  }
  return MHD_YES;
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *c, const char *url,
                                  const char *method, const char *version, const char *upload,
                                  size_t *upload_size, void **con_cls) {
  (void)version;
  serve_http_t *h = cls;
  request_t *req = *con_cls;
  if (!req) {
    req = calloc(1, sizeof(*req));
    if (!req) return MHD_NO;
    *con_cls = req;
    return first_call(h, c, url, method, req);
  }
  if (req->answered) { /* a body after an early answer: dropped */
    *upload_size = 0;
    return MHD_YES;
  }
  if (*upload_size) {
    size_t n = *upload_size;
    *upload_size = 0;
    if (req->too_big || req->len + n > h->o.max_body) return req->too_big = true, MHD_YES;
    if (req->len + n + 1 > req->cap) {
      size_t cap = req->cap ? req->cap : 4096;
      while (cap < req->len + n + 1) cap *= 2;
      char *grown = realloc(req->body, cap);
      if (!grown) return MHD_NO;
      req->body = grown, req->cap = cap;
    }
    memcpy(req->body + req->len, upload, n);
    req->len += n;
    req->body[req->len] = '\0';
    return MHD_YES;
  }
  req->answered = true;
  if (req->too_big) {
    char msg[128];
    snprintf(msg, sizeof(msg),
             "the body is longer than the %zu bytes this server takes (--max-body)", h->o.max_body);
    return fail(h, c, SERVE_HTTP_TOO_LARGE, "invalid_request_error", "request_too_large", msg);
  }
  return answer(h, c, req);
}

static void on_completed(void *cls, struct MHD_Connection *c, void **con_cls,
                         enum MHD_RequestTerminationCode why) {
  (void)c, (void)why;
  request_t *req = *con_cls;
  if (!req) return;
  if (req->in_flight) atomic_fetch_sub(&((serve_http_t *)cls)->in_flight, 1);
  free(req->body);
  free(req);
  *con_cls = NULL;
}

/* ---- the daemon ---- */

bool serve_http_start(serve_engine_t *e, const serve_http_options_t *o, serve_http_t **out,
                      char *why, size_t why_size) {
  struct addrinfo hints = {
      .ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM, .ai_flags = AI_PASSIVE | AI_NUMERICSERV};
  struct addrinfo *ai = NULL;
  char port[16];
  snprintf(port, sizeof(port), "%d", o->port);
  int gai = getaddrinfo(o->host, port, &hints, &ai);
  if (gai) {
    snprintf(why, why_size, "--host %s: %s", o->host, gai_strerror(gai));
    return false;
  }
  serve_http_t *h = calloc(1, sizeof(*h));
  if (!h) {
    freeaddrinfo(ai);
    snprintf(why, why_size, "out of memory");
    return false;
  }
  h->engine = e, h->o = *o;
  unsigned flags =
      MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_POLL | MHD_USE_ITC;
  if (ai->ai_family == AF_INET6) flags |= MHD_USE_IPv6;
  h->daemon = MHD_start_daemon(flags, (uint16_t)o->port, NULL, NULL, on_request, h,
                               MHD_OPTION_SOCK_ADDR, ai->ai_addr, MHD_OPTION_CONNECTION_TIMEOUT,
                               o->timeout_s, MHD_OPTION_CONNECTION_LIMIT, o->max_connections,
                               MHD_OPTION_NOTIFY_COMPLETED, on_completed, h, MHD_OPTION_END);
  freeaddrinfo(ai);
  if (!h->daemon) {
    snprintf(why, why_size, "cannot listen on %s port %d (%s)", o->host, o->port,
             errno ? strerror(errno) : "is the address in use?");
    free(h);
    return false;
  }
  *out = h;
  return true;
}

int serve_http_port(serve_http_t *h) {
  const union MHD_DaemonInfo *di = MHD_get_daemon_info(h->daemon, MHD_DAEMON_INFO_BIND_PORT);
  return di ? di->port : h->o.port;
}

void serve_http_quiesce(serve_http_t *h) {
  MHD_socket s = MHD_quiesce_daemon(h->daemon);
  if (s != MHD_INVALID_SOCKET) close(s);
}

void serve_http_drain(serve_http_t *h, double seconds) {
  double until = serve_now_s() + seconds;
  while (atomic_load(&h->in_flight) > 0 && serve_now_s() < until) {
    struct timespec tick = {0, 10 * 1000 * 1000};
    nanosleep(&tick, NULL);
  }
}

void serve_http_stop(serve_http_t *h) {
  if (!h) return;
  MHD_stop_daemon(h->daemon);
  free(h);
}
