/* hcq generate: text generation with a llama GGUF model (SmolLM2-135M-Instruct by default), the
 * prompt as one captured pass and every new token as a replay of one captured step, streamed as
 * it is chosen; --bench times eager launches against replays. hcq tokenize: the model's token ids
 * of a text, or the text of ids. See models/llm/ for the model, tokenizer and decoder. */
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli/cli.h"
#include "cli/host_load.h"
#include "fetch.h"
#include "llm.h"
#include "model_time.h"
#include "tokenizer.h"

typedef struct gen_args {
  const char *model, *prompt, *chat, *prompt_ids, *system, *chat_template;
  unsigned long long steps, devices, ranks, ctx, reps, top_k, seed;
  double temperature, top_p;
  hcq_device_kind_t kind;
  bool ignore_eos, eager, bench, json, fetch, top_k_given;
} gen_args_t;

static const char k_usage[] =
    "usage: hcq generate [--model FILE|NAME] (--prompt TEXT | --chat TEXT [--chat-template NAME] | --prompt-ids 1,2,3) "
    "[--steps N] "
    "[--ignore-eos] [--temperature T] [--top-k K] [--top-p P] [--seed S] [--device KIND] [--devices 1|2] "
    "[--ranks 1|2] [--eager] [--bench] [--json]";

static bool parse_double(const char *s, double lo, double hi, double *out) {
  if (!s || !*s) return false;
  char *end;
  double v = strtod(s, &end);
  if (*end || !isfinite(v) || v < lo || v > hi) return false;
  *out = v;
  return true;
}

/* A --chat-template name llm_chat_kind_from_name knows. */
static bool known_template(const char *name) {
  llm_chat_kind_t kind;
  hcq_status_t st = llm_chat_kind_from_name(name, &kind);
  hcq_status_destroy(st);
  return !st;
}

static int parse_args(int argc, char **argv, gen_args_t *a) {
  *a = (gen_args_t){.steps = 256, .devices = 1, .ranks = 1, .reps = 3, .top_k = 40, .top_p = 1.0, .seed = 42};
  a->kind = HCQ_DEVICE_CPU;
  for (int i = 0; i < argc; i++) {
    const char *o = argv[i];
    if (!strcmp(o, "--ignore-eos")) a->ignore_eos = true;
    else if (!strcmp(o, "--eager")) a->eager = true;
    else if (!strcmp(o, "--bench")) a->bench = true;
    else if (!strcmp(o, "--json")) a->json = true;
    else if (!strcmp(o, "--fetch-model")) a->fetch = true;
    else if (!strncmp(o, "--", 2)) {
      static const char *const with_value[] = {"--model", "--prompt", "--chat", "--prompt-ids", "--system", "--chat-template", "--steps",
                                               "--temperature", "--top-k", "--top-p", "--seed", "--device", "--devices",
                                               "--ranks", "--ctx", "--repeat", NULL};
      bool known = false;
      for (const char *const *w = with_value; *w; w++) known |= !strcmp(o, *w);
      if (!known) return cli_usage_error("generate: unknown option \"%s\" (%s)", o, k_usage);
      if (i + 1 >= argc) return cli_usage_error("generate: %s needs a value", o);
      const char *v = argv[++i];
      if (!strcmp(o, "--model")) a->model = v;
      else if (!strcmp(o, "--prompt")) a->prompt = v;
      else if (!strcmp(o, "--chat")) a->chat = v;
      else if (!strcmp(o, "--prompt-ids")) a->prompt_ids = v;
      else if (!strcmp(o, "--system")) a->system = v;
      else if (!strcmp(o, "--chat-template") && !known_template(v))
        return cli_usage_error("generate: --chat-template \"%s\": expected chatml, llama3, gemma, llama2 (or llama2-sys, "
                               "llama2-sys-bos, llama2-sys-strip, mistral-v1, mistral-v3, mistral-v3-tekken, mistral-v7)", v);
      else if (!strcmp(o, "--chat-template")) a->chat_template = v;
      else if (!strcmp(o, "--steps") && !cli_parse_uint(v, 0, 1u << 20, &a->steps))
        return cli_usage_error("generate: --steps \"%s\": expected 0 to 1048576", v);
      else if (!strcmp(o, "--temperature") && !parse_double(v, 0, 100, &a->temperature))
        return cli_usage_error("generate: --temperature \"%s\": expected 0 to 100 (0: greedy)", v);
      else if (!strcmp(o, "--top-k") && !(a->top_k_given = cli_parse_uint(v, 0, 1u << 24, &a->top_k)))
        return cli_usage_error("generate: --top-k \"%s\": expected 0 (all) or more", v);
      else if (!strcmp(o, "--top-p") && !(parse_double(v, 0, 1, &a->top_p) && a->top_p > 0))
        return cli_usage_error("generate: --top-p \"%s\": expected more than 0, at most 1", v);
      else if (!strcmp(o, "--seed") && !cli_parse_uint(v, 0, UINT64_MAX, &a->seed))
        return cli_usage_error("generate: --seed \"%s\": expected a non-negative integer", v);
      else if (!strcmp(o, "--device") && !cli_parse_device_kind(v, &a->kind))
        return cli_usage_error("generate: --device \"%s\": expected CPU, VULKAN, CUDA or METAL", v);
      else if (!strcmp(o, "--devices") && !cli_parse_uint(v, 1, 2, &a->devices))
        return cli_usage_error("generate: --devices \"%s\": expected 1 or 2", v);
      else if (!strcmp(o, "--ranks") && !cli_parse_uint(v, 1, 2, &a->ranks))
        return cli_usage_error("generate: --ranks \"%s\": expected 1 or 2", v);
      else if (!strcmp(o, "--ctx") && !cli_parse_uint(v, 1, 1u << 20, &a->ctx))
        return cli_usage_error("generate: --ctx \"%s\": expected 1 to 1048576 positions", v);
      else if (!strcmp(o, "--repeat") && !cli_parse_uint(v, 1, 50, &a->reps))
        return cli_usage_error("generate: --repeat \"%s\": expected 1 to 50", v);
    } else {
      return cli_usage_error("generate: unexpected argument \"%s\" (%s)", o, k_usage);
    }
  }
  int prompts = !!a->prompt + !!a->chat + !!a->prompt_ids;
  if (a->fetch) {
    if (prompts || a->bench) return cli_usage_error("generate: --fetch-model takes no prompt");
    return -1;
  }
  if (prompts != 1) return cli_usage_error("generate: give one of --prompt, --chat or --prompt-ids (%s)", k_usage);
  if (a->system && !a->chat) return cli_usage_error("generate: --system goes with --chat");
  if (a->chat_template && !a->chat) return cli_usage_error("generate: --chat-template goes with --chat");
  if (a->ranks == 2 && cli_mpi_size() != 2)
    return cli_usage_error("generate: --ranks 2 runs under mpirun -np 2 (this job has %d rank%s)", cli_mpi_size(),
                           cli_mpi_size() == 1 ? "" : "s");
  if (a->ranks == 2 && a->devices == 2) return cli_usage_error("generate: --ranks 2 already splits the layers in two");
  return -1;
}

/* The model file: --model's path or known name (fetch.h), else the default one; a known model is
 * downloaded on first use. */
static hcq_status_t model_path(const char *given, char *out, size_t size) {
  return llm_resolve_model(given, stderr, out, size);
}

static hcq_status_t parse_ids(const char *s, int32_t **out, size_t *n) {
  *out = NULL;
  *n = 0;
  size_t cap = 1;
  for (const char *p = s; *p; p++) cap += *p == ',';
  int32_t *ids = malloc(cap * sizeof(int32_t));
  if (!ids) return hcq_status_make(HCQ_OUT_OF_MEMORY, "out of memory");
  const char *p = s;
  for (;;) {
    char *end;
    long v = strtol(p, &end, 10);
    if (end == p || v < 0 || v > INT32_MAX || (*end && *end != ',')) {
      free(ids);
      return hcq_status_make(HCQ_INVALID_ARGUMENT, "token ids \"%s\": expected non-negative integers separated by commas", s);
    }
    ids[(*n)++] = (int32_t)v;
    if (!*end) break;
    p = end + 1;
  }
  *out = ids;
  return NULL;
}

static void json_string(const char *s, size_t len) {
  putchar('"');
  for (size_t i = 0; i < len; i++) {
    unsigned char c = (unsigned char)s[i];
    if (c == '"' || c == '\\') printf("\\%c", c);
    else if (c == '\n') printf("\\n");
    else if (c == '\t') printf("\\t");
    else if (c < 0x20 || c == 0x7f) printf("\\u%04x", c);
    else putchar(c);
  }
  putchar('"');
}

static void json_ids(const char *name, const int32_t *ids, size_t n) {
  printf("\"%s\": [", name);
  for (size_t i = 0; i < n; i++) printf("%s%d", i ? ", " : "", ids[i]);
  printf("]");
}

/* ---- streaming ---- */

typedef struct stream {
  const llm_tokenizer_t *tok;
  llm_detok_t detok;
  bool print;
} stream_t;

static bool is_end(void *ctx, int32_t id) { return llm_tokenizer_is_eog(((stream_t *)ctx)->tok, id); }

/* Under two ranks: rank 0 saw the end (or not); every rank learns it at the same step. */
static bool agree_end(void *ctx, bool ended) {
  (void)ctx;
  int any = 0;
  hcq_status_t st = cli_mpi_max(ended, &any);
  if (st) { /* a failed collective: stop here on this rank; the exit status says the rest */
    fprintf(stderr, "hcq (rank %d): %s\n", cli_mpi_rank(), hcq_status_message(st));
    hcq_status_destroy(st);
    return true;
  }
  return any != 0;
}

static void on_token(void *ctx, int32_t id) {
  stream_t *s = ctx;
  if (!s->print || llm_tokenizer_is_eog(s->tok, id)) return;
  char buf[LLM_DETOK_MAX_OUT];
  size_t n = llm_detok_push(s->tok, &s->detok, id, false, buf, sizeof(buf));
  fwrite(buf, 1, n, stdout);
  fflush(stdout);
}

/* ---- timing (--bench) ---- */

typedef struct timing {
  double prefill_tok_s, decode_tok_s, host_us;
  int32_t *ids;
  int n;
} timing_t;

static double now_us(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec / 1e3;
}

/* reps + 1 generations of steps tokens (the first warms caches and is not counted), medians; then
 * the host's time to queue one step with the devices idle, over 32 steps. */
static hcq_status_t time_mode(llm_decoder_t *dec, const int32_t *prompt, int n, int steps, int reps, bool graph,
                              timing_t *out) {
  double pre[51], dec_rate[51], host[32];
  hcq_status_t st = NULL;
  *out = (timing_t){0};
  for (int r = 0; r <= reps && !st; r++) {
    llm_generate_result_t g;
    st = llm_generate(dec, prompt, n, &(llm_generate_options_t){.steps = steps, .graph = graph, .ignore_eos = true}, &g);
    if (st) break;
    if (r > 0) {
      pre[r - 1] = n / (g.prefill_ms / 1e3);
      dec_rate[r - 1] = g.n > 1 ? (g.n - 1) / (g.decode_ms / 1e3) : 0;
    }
    free(out->ids);
    out->ids = g.ids, out->n = g.n;
  }
  int hsteps = 0;
  for (int p = n; p < n + 32 && p < llm_decoder_ctx(dec) && !st; p++) {
    if ((st = llm_decoder_sync(dec))) break;
    double t0 = now_us();
    st = llm_decoder_step(dec, p, graph);
    host[hsteps++] = now_us() - t0;
  }
  if (!st) st = llm_decoder_sync(dec);
  if (st) return st;
  qsort(pre, (size_t)reps, sizeof(double), hcq_model_cmp_double);
  qsort(dec_rate, (size_t)reps, sizeof(double), hcq_model_cmp_double);
  qsort(host, (size_t)hsteps, sizeof(double), hcq_model_cmp_double);
  out->prefill_tok_s = pre[reps / 2];
  out->decode_tok_s = dec_rate[reps / 2];
  out->host_us = hsteps ? host[hsteps / 2] : 0;
  return NULL;
}

/* A line of /proc/self/status in MiB ("VmRSS"), or -1. */
static double status_mib(const char *key) {
  FILE *f = fopen("/proc/self/status", "r");
  if (!f) return -1;
  char line[256];
  double v = -1;
  size_t len = strlen(key);
  while (fgets(line, sizeof(line), f))
    if (!strncmp(line, key, len) && line[len] == ':') {
      v = strtod(line + len + 1, NULL) / 1024; /* kB */
      break;
    }
  fclose(f);
  return v;
}

static const char *graph_kind(const llm_decoder_t *dec) {
  hcq_jit_t *jit = llm_decoder_step_jit(dec);
  return jit && hcq_jit_graph_count(jit) ? hcq_graph_kind(hcq_jit_graph(jit, 0)) : "none";
}

/* ---- the command ---- */

/* What one run holds from set-up to teardown. The model itself goes once the weights are on the
 * devices; what the report needs of it is kept here. */
typedef struct gen {
  char path[PATH_MAX];
  llm_model_t *model;
  llm_tokenizer_t *tok;
  llm_decoder_t *dec;
  int32_t *prompt;
  size_t nprompt;
  char *chat;
  llm_config_t config;
  char name[sizeof(((llm_model_t *)0)->name)];
  uint64_t file_bytes;
  llm_generate_result_t res;
  timing_t eager, graph;
  bool identical;
} gen_t;

/* --fetch-model: the model's path (--model NAME, else the default), downloaded first when it is not there. */
static int fetch_model(const char *model) {
  char path[PATH_MAX];
  hcq_status_t st = llm_resolve_model(model, stderr, path, sizeof(path));
  if (st) return cli_fail(st);
  printf("%s\n", path);
  return HCQ_EXIT_OK;
}

/* An absent kind: the reason hcq info gives. (Not asked for CPU: a query loads every driver.) */
static hcq_status_t kind_available(hcq_device_kind_t kind) {
  hcq_device_info_t infos[HCQ_DEVICE_KIND_COUNT];
  size_t ninfo = kind == HCQ_DEVICE_CPU ? 0 : hcq_device_query(infos, HCQ_DEVICE_KIND_COUNT);
  for (size_t i = 0; i < ninfo && i < HCQ_DEVICE_KIND_COUNT; i++)
    if (infos[i].kind == kind && !infos[i].available)
      return hcq_status_make(HCQ_UNAVAILABLE, "generate: no %s device: %s", hcq_device_kind_name(kind),
                             infos[i].description);
  return NULL;
}

/* The prompt's token ids: --prompt-ids as given, else --prompt or the --chat template tokenized;
 * every id in the vocabulary. */
static hcq_status_t prompt_ids(gen_t *g, const gen_args_t *a) {
  hcq_status_t st = NULL;
  if (a->chat) st = llm_chat_format_as(g->model->file, a->chat_template, a->system, a->chat, &g->chat);
  if (st && a->chat && !a->chat_template && hcq_status_code(st) == HCQ_INVALID_ARGUMENT) {
    hcq_status_t hint = hcq_status_make(HCQ_INVALID_ARGUMENT,
                                        "generate: %s; give --chat-template chatml, llama3, gemma or llama2 to choose one, "
                                        "or --prompt for plain text",
                                        hcq_status_message(st));
    hcq_status_destroy(st);
    st = hint;
  }
  if (!st) {
    if (a->prompt_ids) st = parse_ids(a->prompt_ids, &g->prompt, &g->nprompt);
    else {
      const char *text = g->chat ? g->chat : a->prompt;
      st = llm_tokenize(g->tok, text, strlen(text), true, true, &g->prompt, &g->nprompt);
    }
  }
  if (!st && g->nprompt == 0) st = hcq_status_make(HCQ_INVALID_ARGUMENT, "generate: the prompt has no tokens");
  for (size_t i = 0; !st && i < g->nprompt; i++)
    if (g->prompt[i] >= g->model->config.vocab)
      st = hcq_status_make(HCQ_INVALID_ARGUMENT, "generate: prompt token %d is outside the vocabulary (%d ids)", g->prompt[i],
                           g->model->config.vocab);
  return st;
}

/* The model, its tokenizer, the prompt and the decoder (captured unless --eager). */
static hcq_status_t set_up(gen_t *g, const gen_args_t *a) {
  hcq_status_t st = model_path(a->model, g->path, sizeof(g->path));
  if (!st) st = llm_model_open(g->path, &g->model);
  if (!st) st = llm_tokenizer_from_gguf(g->model->file, &g->tok);
  if (!st) st = prompt_ids(g, a);
  if (st) return st;
  const llm_config_t *c = &g->model->config;
  llm_decoder_options_t opts = {.devices = (int)a->devices, .ranks = (int)a->ranks, .rank = cli_mpi_rank(),
                                .kind = a->kind, .ctx = (int)a->ctx};
  if (!opts.ctx) {
    /* the prompt and the steps asked for, rounded up; at most the model's context */
    unsigned long long want = g->nprompt + a->steps + 1, ctx = 512;
    while (ctx < want && ctx < (unsigned long long)c->ctx_train) ctx *= 2;
    opts.ctx = (int)(ctx < (unsigned long long)c->ctx_train ? ctx : (unsigned long long)c->ctx_train);
  }
  if (g->nprompt + 1 > (size_t)opts.ctx)
    st = hcq_status_make(HCQ_OUT_OF_RANGE, "generate: the prompt has %zu tokens; the context holds %d positions", g->nprompt, opts.ctx);
  if (!st) st = llm_decoder_create(g->model, &opts, &g->dec);
  /* captured before the prompt: the streamed run's rates are replays' */
  if (!st && !a->eager) st = llm_decoder_capture(g->dec);
  return st;
}

/* The weights are in the devices' memory now: the file's mapping goes (resident memory is the
 * weights once, not twice). */
static void close_model(gen_t *g) {
  g->config = g->model ? g->model->config : (llm_config_t){0};
  if (g->model) {
    snprintf(g->name, sizeof(g->name), "%s", g->model->name);
    g->file_bytes = gguf_file_size(g->model->file);
    llm_model_close(g->model);
    g->model = NULL;
  }
}

/* The generation itself, streamed to standard output by rank 0 (unless --json). */
static hcq_status_t run(gen_t *g, const gen_args_t *a) {
  hcq_status_t st = NULL;
  if (a->temperature > 0) {
    llm_sampler_t s = {(float)a->temperature, (float)a->top_p, (int)a->top_k, a->seed};
    st = llm_decoder_set_sampler(g->dec, &s);
  }
  stream_t stream = {.tok = g->tok, .print = !a->json && cli_mpi_rank() == 0};
  llm_detok_init(&stream.detok);
  if (!st) {
    if (stream.print && !a->bench) fflush(stdout);
    llm_generate_options_t o = {(int)a->steps, !a->eager, a->ignore_eos, is_end, on_token, &stream, agree_end};
    st = llm_generate(g->dec, g->prompt, (int)g->nprompt, &o, &g->res);
    if (!st && stream.print) {
      char buf[16];
      fwrite(buf, 1, llm_detok_flush(&stream.detok, buf, sizeof(buf)), stdout);
      printf("\n");
      fflush(stdout); /* before the summary on standard error */
    }
  }
  return st;
}

/* --bench: eager launches against replays, and whether they chose the same tokens. */
static hcq_status_t bench(gen_t *g, const gen_args_t *a) {
  int steps = a->steps ? (int)a->steps : 1;
  hcq_status_t st = time_mode(g->dec, g->prompt, (int)g->nprompt, steps, (int)a->reps, false, &g->eager);
  if (!st) st = time_mode(g->dec, g->prompt, (int)g->nprompt, steps, (int)a->reps, true, &g->graph);
  g->identical = !st && (cli_mpi_rank() != 0 || (g->eager.n == g->graph.n &&
                                                  !memcmp(g->eager.ids, g->graph.ids, (size_t)g->eager.n * sizeof(int32_t))));
  return st;
}

static hcq_status_t print_json(const gen_t *g, const gen_args_t *a, double prefill_tok_s, double decode_tok_s) {
  const llm_generate_result_t *res = &g->res;
  const llm_config_t *c = &g->config;
  char *text = NULL;
  int n_text = res->n - (res->ended ? 1 : 0);
  hcq_status_t st = llm_detokenize(g->tok, res->ids, (size_t)n_text, false, &text);
  if (!st) {
    printf("{\"model\": ");
    json_string(g->path, strlen(g->path));
    printf(", \"model_name\": ");
    json_string(g->name, strlen(g->name));
    printf(", ");
    json_ids("prompt_ids", g->prompt, g->nprompt);
    printf(", ");
    json_ids("token_ids", res->ids, (size_t)res->n);
    printf(", \"text\": ");
    json_string(text, strlen(text));
    printf(", \"ended\": %s, \"prefill_tok_s\": %.1f, \"decode_tok_s\": %.1f", res->ended ? "true" : "false",
           prefill_tok_s, decode_tok_s);
    printf(", \"kernels_per_token\": %zu, \"device_kind\": \"%s\", \"graph_kind\": \"%s\", \"devices\": %llu, \"ranks\": %llu",
           llm_decoder_kernels_per_step(g->dec), hcq_device_kind_name(a->kind), a->eager ? "none" : graph_kind(g->dec),
           a->devices, a->ranks);
    printf(", \"mode\": \"%s\", \"host_us_per_token\": %.2f", a->eager ? "eager" : "graph", res->host_us_per_step);
    /* the caches: layers x (K, V) x positions x KV heads x head size, float32 */
    double kv = (double)c->n_layers * 2 * llm_decoder_ctx(g->dec) * llm_kv_dim(c) * 4;
    printf(", \"ctx\": %d, \"kv_cache_bytes\": %.0f, \"model_bytes\": %llu", llm_decoder_ctx(g->dec), kv,
           (unsigned long long)g->file_bytes);
    printf(", \"memory_mib\": {\"VmRSS\": %.1f, \"VmHWM\": %.1f, \"RssFile\": %.1f, \"RssAnon\": %.1f}",
           status_mib("VmRSS"), status_mib("VmHWM"), status_mib("RssFile"), status_mib("RssAnon"));
    if (a->bench)
      printf(", \"eager_decode_tok_s\": %.1f, \"graph_decode_tok_s\": %.1f, \"eager_prefill_tok_s\": %.1f, "
             "\"graph_prefill_tok_s\": %.1f, \"host_us_per_token_eager\": %.2f, \"host_us_per_token_graph\": %.2f, "
             "\"identical\": %s, \"bench_steps\": %d, \"repetitions\": %llu",
             g->eager.decode_tok_s, g->graph.decode_tok_s, g->eager.prefill_tok_s, g->graph.prefill_tok_s,
             g->eager.host_us, g->graph.host_us, g->identical ? "true" : "false", g->graph.n, a->reps);
    printf("}\n");
  }
  free(text);
  return st;
}

static void print_summary(const gen_t *g, const gen_args_t *a, double prefill_tok_s, double decode_tok_s) {
  const llm_config_t *c = &g->config;
  fprintf(stderr, "\nhcq generate: %s (%s, %d layers, dim %d, vocab %d) on %s%s; %zu kernels per token\n", g->name,
          g->path, c->n_layers, c->dim, c->vocab, hcq_device_kind_name(a->kind),
          a->ranks == 2 ? " (two ranks)" : a->devices == 2 ? " (two devices)" : "", llm_decoder_kernels_per_step(g->dec));
  fprintf(stderr, "  prompt %zu tokens at %.1f tok/s; %d new tokens at %.1f tok/s (%s)%s\n", g->nprompt, prefill_tok_s,
          g->res.n, decode_tok_s, a->eager ? "eager launches" : "graph replays", g->res.ended ? "" : ", no end token");
}

static void print_bench_table(const gen_t *g, const gen_args_t *a) {
  const timing_t *eager = &g->eager, *graph = &g->graph;
  printf("\n                      decode tok/s   prompt tok/s   host us/token\n");
  printf("  eager               %12.1f   %12.1f   %13.2f\n", eager->decode_tok_s, eager->prefill_tok_s, eager->host_us);
  printf("  graph replay        %12.1f   %12.1f   %13.2f\n", graph->decode_tok_s, graph->prefill_tok_s, graph->host_us);
  printf("  speed-up            %11.2fx   %11.2fx   %12.1fx\n", graph->decode_tok_s / eager->decode_tok_s,
         graph->prefill_tok_s / eager->prefill_tok_s, eager->host_us / graph->host_us);
  printf("\n  %s tokens. decode: median of %llu runs of %d tokens after the %zu-token prompt, steps\n"
         "  queued back to back; prompt: the prompt as one pass; host us/token: median time to queue one\n"
         "  step with the devices idle (eager: %zu launches; graph: one replay).\n",
         g->identical ? "Eager and graph replay: identical" : "MISMATCH: eager and graph replay differ in their",
         a->reps, graph->n, g->nprompt, llm_decoder_kernels_per_step(g->dec));
}

/* Rank 0's report: the JSON object, or the summary on standard error and --bench's table. */
static hcq_status_t report(const gen_t *g, const gen_args_t *a) {
  const llm_generate_result_t *res = &g->res;
  double prefill_tok_s = res->prefill_ms > 0 ? g->nprompt / (res->prefill_ms / 1e3) : 0;
  double decode_tok_s = res->n > 1 && res->decode_ms > 0 ? (res->n - 1) / (res->decode_ms / 1e3) : 0;
  hcq_status_t st = NULL;
  if (a->json)
    st = print_json(g, a, prefill_tok_s, decode_tok_s);
  else
    print_summary(g, a, prefill_tok_s, decode_tok_s);
  if (!st && a->bench && !a->json) print_bench_table(g, a);
  if (!st && a->bench) cli_host_load_print(a->json ? stderr : stdout); /* what the timings ran beside */
  return st;
}

int cli_generate(int argc, char **argv) {
  gen_args_t a;
  int rc = parse_args(argc, argv, &a);
  if (rc >= 0) return rc;
  if (a.fetch) return fetch_model(a.model);
  hcq_status_t st = kind_available(a.kind);
  if (st) return cli_fail(st);
  gen_t g = {.identical = true};
  st = set_up(&g, &a);
  close_model(&g);
  if (!st) st = run(&g, &a);
  if (!st && a.bench) st = bench(&g, &a);
  if (!st && cli_mpi_rank() == 0) st = report(&g, &a);
  rc = st ? cli_fail(st) : g.identical ? HCQ_EXIT_OK : HCQ_EXIT_CHECK_MISMATCH; /* before the teardown waits */
  hcq_status_t dst = llm_decoder_destroy(g.dec);
  if (dst && rc == HCQ_EXIT_OK) rc = cli_fail(dst);
  else hcq_status_destroy(dst);
  free(g.res.ids), free(g.eager.ids), free(g.graph.ids), free(g.prompt), free(g.chat);
  llm_tokenizer_free(g.tok);
  llm_model_close(g.model);
  return rc;
}

int cli_tokenize(int argc, char **argv) {
  const char *model_given = NULL, *decode = NULL, *text = NULL;
  bool json = false, special = true;
  for (int i = 0; i < argc; i++) {
    const char *o = argv[i];
    if (!strcmp(o, "--json")) json = true;
    else if (!strcmp(o, "--no-special")) special = false;
    else if (!strcmp(o, "--model") || !strcmp(o, "--decode")) {
      if (i + 1 >= argc) return cli_usage_error("tokenize: %s needs a value", o);
      *(!strcmp(o, "--model") ? &model_given : &decode) = argv[++i];
    } else if (!strcmp(o, "--")) {
      if (i + 1 < argc) text = argv[++i];
      if (i + 1 < argc) return cli_usage_error("tokenize: one TEXT");
    } else if (!strncmp(o, "--", 2)) {
      return cli_usage_error("tokenize: unknown option \"%s\" (usage: hcq tokenize [--model FILE|NAME] [--json] "
                             "[--no-special] TEXT | --decode 1,2,3)", o);
    } else if (text) {
      return cli_usage_error("tokenize: one TEXT (quote it)");
    } else {
      text = o;
    }
  }
  if (!!text == !!decode) return cli_usage_error("tokenize: give a TEXT or --decode IDS");
  char path[PATH_MAX];
  gguf_file_t *g = NULL;
  llm_tokenizer_t *tok = NULL;
  hcq_status_t st = model_path(model_given, path, sizeof(path));
  if (!st) st = gguf_open(path, &g);
  if (!st) st = llm_tokenizer_from_gguf(g, &tok);
  int32_t *ids = NULL;
  size_t n = 0;
  char *out = NULL;
  if (!st && text) {
    st = llm_tokenize(tok, text, strlen(text), special, true, &ids, &n);
    if (!st && json) {
      printf("{");
      json_ids("ids", ids, n);
      printf("}\n");
    } else if (!st) {
      for (size_t i = 0; i < n; i++) printf("%s%d", i ? " " : "", ids[i]);
      printf("\n");
    }
  } else if (!st) {
    st = parse_ids(decode, &ids, &n);
    for (size_t i = 0; !st && i < n; i++)
      if (ids[i] >= llm_tokenizer_vocab_size(tok))
        st = hcq_status_make(HCQ_INVALID_ARGUMENT, "tokenize: id %d is outside the vocabulary (%d ids)", ids[i],
                             llm_tokenizer_vocab_size(tok));
    if (!st) st = llm_detokenize(tok, ids, n, special, &out);
    if (!st && json) {
      printf("{\"text\": ");
      json_string(out, strlen(out));
      printf("}\n");
    } else if (!st) {
      printf("%s\n", out);
    }
  }
  free(ids), free(out);
  llm_tokenizer_free(tok);
  gguf_close(g);
  return st ? cli_fail(st) : HCQ_EXIT_OK;
}
