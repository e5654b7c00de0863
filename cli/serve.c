/* hcq serve: the OpenAI HTTP API (docs/serve.md). The main thread parses the options, starts the
 * HTTP server at once (so /health answers 503 while the model loads) and the engine thread that
 * loads the model, then waits for SIGINT or SIGTERM: it stops accepting connections, fails the
 * queued requests, cuts the running streams at their next token (each still ends with its finish
 * chunk and data: [DONE]), waits for the connections and exits 0. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli/cli.h"
#include "cli/serve.h"

static const char k_usage[] =
    "usage: hcq serve [--model FILE|NAME] [--host 127.0.0.1] [--port 8080] [--parallel 8] [--ctx "
    "N] [--api-key KEY] "
    "[--alias NAME] [--device KIND] [--threads N] [--queue 64] [--max-body BYTES] [--timeout S] "
    "[--max-connections N] "
    "[--engine batch|generate]";

typedef struct serve_args {
  serve_engine_options_t engine;
  serve_http_options_t http;
  unsigned long long threads;
} serve_args_t;

/* An option's number in [lo, hi] into *out (an int or an unsigned of the caller's). */
static bool number(const char *o, const char *v, unsigned long long lo, unsigned long long hi,
                   unsigned long long *out) {
  if (cli_parse_uint(v, lo, hi, out)) return true;
  cli_usage_error("serve: %s \"%s\": expected %llu to %llu", o, v, lo, hi);
  return false;
}

static int parse_args(int argc, char **argv, serve_args_t *a) {
  *a = (serve_args_t){.engine = {.parallel = 8, .queue = 64},
                      .http = {.host = "127.0.0.1",
                               .port = 8080,
                               .max_body = 1 << 20,
                               .timeout_s = 600,
                               .max_connections = 256}};
  a->http.api_key = getenv("HCQ_API_KEY") && *getenv("HCQ_API_KEY") ? getenv("HCQ_API_KEY") : NULL;
  static const char *const with_value[] = {
      "--model",           "--host",   "--port",    "--parallel", "--ctx",      "--api-key",
      "--alias",           "--device", "--threads", "--queue",    "--max-body", "--timeout",
      "--max-connections", "--engine", NULL};
  for (int i = 0; i < argc; i++) {
    const char *o = argv[i];
    bool known = false;
    for (const char *const *w = with_value; *w; w++) known |= !strcmp(o, *w);
    if (!known) return cli_usage_error("serve: unknown option \"%s\" (%s)", o, k_usage);
    if (i + 1 >= argc) return cli_usage_error("serve: %s needs a value", o);
    const char *v = argv[++i];
    unsigned long long n = 0;
    hcq_device_kind_t kind;
    if (!strcmp(o, "--model"))
      a->engine.model = v;
    else if (!strcmp(o, "--host"))
      a->http.host = v;
    else if (!strcmp(o, "--alias"))
      a->engine.alias = v;
    else if (!strcmp(o, "--api-key"))
      a->http.api_key = *v ? v : NULL;
    else if (!strcmp(o, "--engine")) {
      if (strcmp(v, "batch") && strcmp(v, "generate"))
        return cli_usage_error("serve: --engine \"%s\": expected batch or generate", v);
      a->engine.one_at_a_time = !strcmp(v, "generate");
    } else if (!strcmp(o, "--device")) {
      if (!cli_parse_device_kind(v, &kind))
        return cli_usage_error("serve: --device \"%s\": expected CPU, VULKAN, CUDA or METAL", v);
      a->engine.device = hcq_device_kind_name(kind);
    } else if (!strcmp(o, "--port")) {
      if (!number(o, v, 0, 65535, &n)) return HCQ_EXIT_BAD_INPUT;
      a->http.port = (int)n;
    } else if (!strcmp(o, "--parallel") || !strcmp(o, "--queue") || !strcmp(o, "--ctx")) {
      /* 64: the batch API's most sequences (hcq_llm_batch_options_t.max_seqs) */
      unsigned long long hi = !strcmp(o, "--ctx") ? 4096 : !strcmp(o, "--queue") ? 4096 : 64;
      if (!number(o, v, 1, hi, &n)) return HCQ_EXIT_BAD_INPUT;
      *(!strcmp(o, "--parallel") ? &a->engine.parallel
        : !strcmp(o, "--queue")  ? &a->engine.queue
                                 : &a->engine.ctx) = (int)n;
    } else if (!strcmp(o, "--threads")) {
      if (!number(o, v, 1, 256, &a->threads)) return HCQ_EXIT_BAD_INPUT;
    } else if (!strcmp(o, "--max-body")) {
      if (!number(o, v, 1024, 1ull << 30, &n)) return HCQ_EXIT_BAD_INPUT;
      a->http.max_body = (size_t)n;
    } else if (!strcmp(o, "--timeout") || !strcmp(o, "--max-connections")) {
      if (!number(o, v, 1, 100000, &n)) return HCQ_EXIT_BAD_INPUT;
      *(!strcmp(o, "--timeout") ? &a->http.timeout_s : &a->http.max_connections) = (unsigned)n;
    }
  }
  return -1;
}

/* Waits for SIGINT or SIGTERM (blocked in every thread, taken here), watching the model load: a
 * load that fails ends the server (exit 2 for a missing or damaged file, else 3; the reason on
 * standard error). */
static int wait_for_signal(serve_engine_t *e, const sigset_t *signals) {
  bool said_ready = false;
  for (;;) {
    struct timespec tick = {0, 200 * 1000 * 1000};
    int sig = sigtimedwait(signals, NULL, &tick);
    if (sig == SIGINT || sig == SIGTERM) {
      fprintf(stderr, "hcq serve: %s: stopping\n", sig == SIGINT ? "SIGINT" : "SIGTERM");
      return HCQ_EXIT_OK;
    }
    serve_state_t state = serve_engine_state(e);
    if (state == SERVE_LOAD_FAILED) {
      fprintf(stderr, "hcq serve: %s\n", serve_engine_load_error(e));
      hcq_status_code_t code = serve_engine_load_code(e);
      bool bad_input =
          code == HCQ_NOT_FOUND || code == HCQ_INVALID_ARGUMENT || code == HCQ_OUT_OF_RANGE;
      return bad_input ? HCQ_EXIT_BAD_INPUT
                       : HCQ_EXIT_RUNTIME; /* as cli_fail: a bad file is bad input */
    }
    if (state == SERVE_READY && !said_ready) {
      fprintf(stderr, "hcq serve: model %s ready (context %d tokens)\n", serve_engine_model_id(e),
              serve_engine_ctx(e));
      said_ready = true;
    }
  }
}

int cli_serve(int argc, char **argv) {
  serve_args_t a;
  int rc = parse_args(argc, argv, &a);
  if (rc >= 0) return rc;
  if (a.threads) {
    char t[32];
    snprintf(t, sizeof(t), "%llu", a.threads);
    setenv("HCQ_CPU_THREADS", t, 1); /* read when the engine opens its device */
  }
  /* the signals go to this thread alone: every thread started from here on inherits the mask */
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &signals, NULL);
  signal(SIGPIPE, SIG_IGN); /* a client gone mid-write is an error return, not death */
  serve_engine_t *e = NULL;
  if (serve_engine_start(&a.engine, &e))
    return cli_usage_error("serve: cannot start the engine thread");
  serve_http_t *h = NULL;
  char why[512];
  if (!serve_http_start(e, &a.http, &h, why, sizeof(why))) {
    serve_engine_stop(e);
    serve_engine_destroy(e);
    fprintf(stderr, "hcq serve: %s\n", why);
    return HCQ_EXIT_RUNTIME;
  }
  fprintf(stderr, "hcq serve: listening on http://%s:%d (loading the model)%s\n", a.http.host,
          serve_http_port(h), a.http.api_key ? "; API key required" : "");
  rc = wait_for_signal(e, &signals);
  serve_http_quiesce(h);
  serve_engine_stop(e);
  serve_http_drain(h, 5);
  serve_http_stop(h);
  serve_engine_destroy(e);
  return rc;
}
