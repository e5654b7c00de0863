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

#include "cli/chat.h"
#include "cli/cli.h"
#include "cli/host_load.h"
#include "fetch.h"
#include "llm_api.h"
#include "model_status.h"
#include "model_time.h"
#include "tokenizer.h"

enum { GEN_MAX_STOPS = 16 };

typedef struct gen_args {
  const char *model, *prompt, *chat, *prompt_ids, *system, *chat_template;
  unsigned long long steps, devices, ranks, ctx, reps, top_k, seed, logprobs, threads;
  double temperature, top_p, min_p, repeat_penalty, frequency_penalty, presence_penalty,
      repeat_last_n;
  const char *stops[GEN_MAX_STOPS];
  size_t nstop;
  hcq_device_kind_t kind;
  bool ignore_eos, eager, bench, json, fetch, top_k_given, logprobs_given, interactive;
} gen_args_t;

static const char k_usage[] =
    "usage: hcq generate [--model FILE|NAME] (--prompt TEXT | --chat TEXT [--chat-template NAME] | "
    "--prompt-ids 1,2,3) "
    "[--steps N] "
    "[--ignore-eos] [--temperature T] [--top-k K] [--top-p P] [--min-p P] [--repeat-penalty R] "
    "[--repeat-last-n N] "
    "[--frequency-penalty F] [--presence-penalty F] [--seed S] [--stop S]... [--logprobs N] "
    "[--threads N] "
    "[--device KIND] [--devices 1|2] [--ranks 1|2] [--eager] [--bench] [--json] [--interactive]";

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

/* The sampling chain's options (llama.cpp's names and ranges): 1 when o is one and v parsed, 0 when
 * it is not one of them, else the usage error's exit status. */
static int parse_sampling(const char *o, const char *v, gen_args_t *a) {
  if (!strcmp(o, "--min-p")) {
    if (!parse_double(v, 0, 1, &a->min_p))
      return cli_usage_error("generate: --min-p \"%s\": expected 0 to 1 (0: off)", v);
  } else if (!strcmp(o, "--repeat-penalty")) {
    if (!parse_double(v, 0, 100, &a->repeat_penalty))
      return cli_usage_error("generate: --repeat-penalty \"%s\": expected 0 to 100 (1: off)", v);
  } else if (!strcmp(o, "--repeat-last-n")) {
    if (!parse_double(v, -1, 1 << 20, &a->repeat_last_n) ||
        a->repeat_last_n != (long)a->repeat_last_n)
      return cli_usage_error(
          "generate: --repeat-last-n \"%s\": expected -1 (the context), 0 (off) or a count", v);
  } else if (!strcmp(o, "--frequency-penalty") || !strcmp(o, "--presence-penalty")) {
    if (!parse_double(
            v, -100, 100,
            !strcmp(o, "--frequency-penalty") ? &a->frequency_penalty : &a->presence_penalty))
      return cli_usage_error("generate: %s \"%s\": expected -100 to 100 (0: off)", o, v);
  } else if (!strcmp(o, "--stop")) {
    if (!*v) return cli_usage_error("generate: --stop \"\": a stop string is not empty");
    if (a->nstop == GEN_MAX_STOPS)
      return cli_usage_error("generate: at most %d --stop strings", GEN_MAX_STOPS);
    a->stops[a->nstop++] = v;
  } else if (!strcmp(o, "--logprobs")) {
    if (!(a->logprobs_given = cli_parse_uint(v, 0, HCQ_LLM_MAX_LOGPROBS, &a->logprobs)))
      return cli_usage_error("generate: --logprobs \"%s\": expected 0 to %d alternatives", v,
                             HCQ_LLM_MAX_LOGPROBS);
  } else if (!strcmp(o, "--threads")) {
    if (!cli_parse_uint(v, 1, 256, &a->threads))
      return cli_usage_error("generate: --threads \"%s\": expected 1 to 256", v);
  } else {
    return 0;
  }
  return 1;
}

/* What goes with what: one prompt (none with --interactive), and the options that need another. */
static int check_args(const gen_args_t *a) {
  int prompts = !!a->prompt + !!a->chat + !!a->prompt_ids;
  if (a->fetch) {
    if (prompts || a->bench || a->interactive)
      return cli_usage_error("generate: --fetch-model takes no prompt");
    return -1;
  }
  if (a->interactive && (prompts || a->json || a->bench || a->ranks > 1 || a->logprobs_given))
    return cli_usage_error(
        "generate: --interactive (hcq chat) reads the conversation from standard input: it takes "
        "no "
        "--prompt, --chat, --prompt-ids, --json, --bench, --logprobs or --ranks 2");
  if (!a->interactive && prompts != 1)
    return cli_usage_error("generate: give one of --prompt, --chat or --prompt-ids (%s)", k_usage);
  if (a->system && !a->chat && !a->interactive)
    return cli_usage_error("generate: --system goes with --chat");
  if (a->chat_template && !a->chat && !a->interactive)
    return cli_usage_error("generate: --chat-template goes with --chat");
  if (a->logprobs_given && !a->json)
    return cli_usage_error("generate: --logprobs adds to --json's object: give --json");
  if (a->logprobs_given && a->ranks > 1)
    return cli_usage_error("generate: --logprobs runs on one rank");
  if (a->ranks == 2 && cli_mpi_size() != 2)
    return cli_usage_error("generate: --ranks 2 runs under mpirun -np 2 (this job has %d rank%s)",
                           cli_mpi_size(), cli_mpi_size() == 1 ? "" : "s");
  if (a->ranks == 2 && a->devices == 2)
    return cli_usage_error("generate: --ranks 2 already splits the layers in two");
  return -1;
}

/* The options that take no value: true when o is one (and set). */
static bool parse_flag(const char *o, gen_args_t *a) {
  const struct {
    const char *name;
    bool *field;
  } flags[] = {{"--ignore-eos", &a->ignore_eos}, {"--eager", &a->eager},
               {"--bench", &a->bench},           {"--json", &a->json},
               {"--fetch-model", &a->fetch},     {"--interactive", &a->interactive}};
  for (size_t f = 0; f < sizeof(flags) / sizeof(flags[0]); f++)
    if (!strcmp(o, flags[f].name)) return *flags[f].field = true;
  return false;
}

/* The model and the prompt's texts: 1 when o is one of them and v taken, 0 when it is not one of
 * them, else the usage error's exit status. */
static int parse_text(const char *o, const char *v, gen_args_t *a) {
  const struct {
    const char *name;
    const char **field;
  } texts[] = {{"--model", &a->model},
               {"--prompt", &a->prompt},
               {"--chat", &a->chat},
               {"--prompt-ids", &a->prompt_ids},
               {"--system", &a->system}};
  for (size_t t = 0; t < sizeof(texts) / sizeof(texts[0]); t++)
    if (!strcmp(o, texts[t].name)) return *texts[t].field = v, 1;
  if (strcmp(o, "--chat-template")) return 0;
  if (!known_template(v))
    return cli_usage_error(
        "generate: --chat-template \"%s\": expected chatml, llama3, gemma, llama2 (or "
        "llama2-sys, "
        "llama2-sys-bos, llama2-sys-strip, mistral-v1, mistral-v3, mistral-v3-tekken, "
        "mistral-v7)",
        v);
  a->chat_template = v;
  return 1;
}

/* The run's numbers, the device and the temperature, top-k, top-p and seed: 1 when o is one of
 * them and v parsed, 0 when it is not one of them, else the usage error's exit status. */
static int parse_run(const char *o, const char *v, gen_args_t *a) {
  if (!strcmp(o, "--steps") && !cli_parse_uint(v, 0, 1u << 20, &a->steps))
    return cli_usage_error("generate: --steps \"%s\": expected 0 to 1048576", v);
  if (!strcmp(o, "--temperature") && !parse_double(v, 0, 100, &a->temperature))
    return cli_usage_error("generate: --temperature \"%s\": expected 0 to 100 (0: greedy)", v);
  if (!strcmp(o, "--top-k") && !(a->top_k_given = cli_parse_uint(v, 0, 1u << 24, &a->top_k)))
    return cli_usage_error("generate: --top-k \"%s\": expected 0 (all) or more", v);
  if (!strcmp(o, "--top-p") && !(parse_double(v, 0, 1, &a->top_p) && a->top_p > 0))
    return cli_usage_error("generate: --top-p \"%s\": expected more than 0, at most 1", v);
  if (!strcmp(o, "--seed") && !cli_parse_uint(v, 0, UINT64_MAX, &a->seed))
    return cli_usage_error("generate: --seed \"%s\": expected a non-negative integer", v);
  if (!strcmp(o, "--device") && !cli_parse_device_kind(v, &a->kind))
    return cli_usage_error("generate: --device \"%s\": expected CPU, VULKAN, CUDA or METAL", v);
  if (!strcmp(o, "--devices") && !cli_parse_uint(v, 1, 2, &a->devices))
    return cli_usage_error("generate: --devices \"%s\": expected 1 or 2", v);
  if (!strcmp(o, "--ranks") && !cli_parse_uint(v, 1, 2, &a->ranks))
    return cli_usage_error("generate: --ranks \"%s\": expected 1 or 2", v);
  if (!strcmp(o, "--ctx") && !cli_parse_uint(v, 1, 1u << 20, &a->ctx))
    return cli_usage_error("generate: --ctx \"%s\": expected 1 to 1048576 positions", v);
  if (!strcmp(o, "--repeat") && !cli_parse_uint(v, 1, 50, &a->reps))
    return cli_usage_error("generate: --repeat \"%s\": expected 1 to 50", v);
  return 1;
}

/* The options that take a value. */
static const char *const k_with_value[] = {"--model",
                                           "--prompt",
                                           "--chat",
                                           "--prompt-ids",
                                           "--system",
                                           "--chat-template",
                                           "--steps",
                                           "--temperature",
                                           "--top-k",
                                           "--top-p",
                                           "--seed",
                                           "--device",
                                           "--devices",
                                           "--ranks",
                                           "--ctx",
                                           "--repeat",
                                           "--min-p",
                                           "--repeat-penalty",
                                           "--repeat-last-n",
                                           "--frequency-penalty",
                                           "--presence-penalty",
                                           "--stop",
                                           "--logprobs",
                                           "--threads"};

static bool takes_value(const char *o) {
  for (size_t w = 0; w < sizeof(k_with_value) / sizeof(k_with_value[0]); w++)
    if (!strcmp(o, k_with_value[w])) return true;
  return false;
}

static int parse_args(int argc, char **argv, gen_args_t *a) {
  /* sampling: llama.cpp's defaults (llama-cli, llama-server) once a temperature is given */
  *a = (gen_args_t){.steps = 256,
                    .devices = 1,
                    .ranks = 1,
                    .reps = 3,
                    .top_k = 40,
                    .top_p = 0.95,
                    .min_p = 0.05,
                    .repeat_penalty = 1,
                    .repeat_last_n = 64,
                    .seed = 42};
  a->kind = CLI_DEFAULT_KIND;
  /* each option with a value in one group; parse_run takes the ones the first two do not */
  static int (*const groups[])(const char *, const char *, gen_args_t *) = {parse_sampling,
                                                                            parse_text, parse_run};
  for (int i = 0; i < argc; i++) {
    const char *o = argv[i];
    if (parse_flag(o, a)) continue;
    if (strncmp(o, "--", 2))
      return cli_usage_error("generate: unexpected argument \"%s\" (%s)", o, k_usage);
    if (!takes_value(o)) return cli_usage_error("generate: unknown option \"%s\" (%s)", o, k_usage);
    if (i + 1 >= argc) return cli_usage_error("generate: %s needs a value", o);
    const char *v = argv[++i];
    for (size_t g = 0; g < sizeof(groups) / sizeof(groups[0]); g++) {
      int taken = groups[g](o, v, a);
      if (taken > 1) return taken;
      if (taken) break;
    }
  }
  return check_args(a);
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
      return hcq_status_make(HCQ_INVALID_ARGUMENT,
                             "token ids \"%s\": expected non-negative integers separated by commas",
                             s);
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
    if (c == '"' || c == '\\')
      printf("\\%c", c);
    else if (c == '\n')
      printf("\\n");
    else if (c == '\t')
      printf("\\t");
    else if (c < 0x20 || c == 0x7f)
      printf("\\u%04x", c);
    else
      putchar(c);
  }
  putchar('"');
}

/* A token's own text (control tokens' too) as a JSON string: bytes that are not UTF-8 become
 * U+FFFD. */
static void json_token(const llm_tokenizer_t *tok, int32_t id) {
  char *text = NULL;
  hcq_status_t st = llm_detokenize(tok, &id, 1, true, &text);
  json_string(st ? "" : text, st ? 0 : strlen(text));
  hcq_status_destroy(st);
  free(text);
}

static void json_ids(const char *name, const int32_t *ids, size_t n) {
  printf("\"%s\": [", name);
  for (size_t i = 0; i < n; i++) printf("%s%d", i ? ", " : "", ids[i]);
  printf("]");
}

/* "logprobs": per new token its id, text, log-probability and the top alternatives (OpenAI's
 * shape). */
static void json_logprobs(const llm_tokenizer_t *tok, const hcq_llm_result_t *res) {
  printf(", \"logprobs\": [");
  for (size_t i = 0; res->logprobs && i < res->n; i++) {
    const hcq_llm_logprob_t *lp = &res->logprobs[i];
    printf("%s{\"id\": %d, \"token\": ", i ? ", " : "", lp->id);
    json_token(tok, lp->id);
    printf(", \"logprob\": %.6g, \"top_logprobs\": [", (double)lp->logprob);
    for (int k = 0; k < lp->n_top; k++) {
      printf("%s{\"id\": %d, \"token\": ", k ? ", " : "", lp->top_ids[k]);
      json_token(tok, lp->top_ids[k]);
      printf(", \"logprob\": %.6g}", (double)lp->top_logprobs[k]);
    }
    printf("]}");
  }
  printf("]");
}

/* ---- streaming ---- */

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

static bool print_piece(void *ctx, int32_t id, const char *text, size_t len) {
  (void)ctx, (void)id;
  fwrite(text, 1, len, stdout);
  fflush(stdout);
  return true;
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
static hcq_status_t time_mode(llm_decoder_t *dec, const int32_t *prompt, int n, int steps, int reps,
                              bool graph, timing_t *out) {
  double pre[51], dec_rate[51], host[32];
  *out = (timing_t){0};
  for (int r = 0; r <= reps; r++) {
    llm_generate_result_t g;
    TRY(llm_generate(dec, prompt, n,
                     &(llm_generate_options_t){.steps = steps, .graph = graph, .ignore_eos = true},
                     &g));
    if (r > 0) {
      pre[r - 1] = n / (g.prefill_ms / 1e3);
      dec_rate[r - 1] = g.n > 1 ? (g.n - 1) / (g.decode_ms / 1e3) : 0;
    }
    free(out->ids);
    out->ids = g.ids, out->n = g.n;
  }
  int hsteps = 0;
  for (int p = n; p < n + 32 && p < llm_decoder_ctx(dec); p++) {
    TRY(llm_decoder_sync(dec));
    double t0 = now_us();
    TRY(llm_decoder_step(dec, p, graph));
    host[hsteps++] = now_us() - t0;
  }
  TRY(llm_decoder_sync(dec));
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

/* What one run holds from set-up to teardown. */
typedef struct gen {
  hcq_llm_t *llm;
  int32_t *prompt;
  size_t nprompt;
  hcq_llm_result_t res;
  timing_t eager, graph;
  bool identical;
} gen_t;

/* --fetch-model: the model's path (--model NAME, else the default), downloaded first when it is not
 * there. */
static int fetch_model(const char *model) {
  char path[PATH_MAX];
  hcq_status_t st = llm_resolve_model(model, stderr, path, sizeof(path));
  if (st) return cli_fail(st);
  printf("%s\n", path);
  return HCQ_EXIT_OK;
}

/* An absent kind: the reason hcq info gives. (Not asked for a kind whose kernels run on the host,
 * which is always there: a query loads every driver.) */
static hcq_status_t kind_available(hcq_device_kind_t kind) {
  hcq_device_info_t infos[HCQ_DEVICE_KIND_COUNT];
  bool on_host = hcq_device_kind_kernel_caps(kind) & HCQ_CAP_HOST_CALLABLE;
  size_t ninfo = on_host ? 0 : hcq_device_query(infos, HCQ_DEVICE_KIND_COUNT);
  for (size_t i = 0; i < ninfo && i < HCQ_DEVICE_KIND_COUNT; i++)
    if (infos[i].kind == kind && !infos[i].available)
      return hcq_status_make(HCQ_UNAVAILABLE, "generate: no %s device: %s",
                             hcq_device_kind_name(kind), infos[i].description);
  return NULL;
}

/* --chat's text in the model's template (or --chat-template's), malloc'd. */
static hcq_status_t chat_text(const gen_t *g, const gen_args_t *a, char **out) {
  hcq_llm_message_t msgs[2];
  size_t n = 0;
  if (a->system) msgs[n++] = (hcq_llm_message_t){"system", a->system};
  msgs[n++] = (hcq_llm_message_t){"user", a->chat};
  hcq_status_t st = llm_api_chat_text(g->llm, msgs, n, a->chat_template, out);
  if (st && !a->chat_template && hcq_status_code(st) == HCQ_INVALID_ARGUMENT)
    st = hcq_status_annotate(
        st, "generate (--chat-template NAME chooses a template, --prompt takes plain text)");
  return st;
}

/* The prompt's token ids: --prompt-ids as given, else --prompt or the --chat template tokenized;
 * every id in the vocabulary. */
static hcq_status_t prompt_ids(gen_t *g, const gen_args_t *a) {
  if (a->prompt_ids) return parse_ids(a->prompt_ids, &g->prompt, &g->nprompt);
  char *chat = NULL;
  hcq_status_t st = NULL;
  if (a->chat && (st = chat_text(g, a, &chat))) goto done;
  const char *text = chat ? chat : a->prompt;
  st = llm_tokenize(llm_api_tokenizer(g->llm), text, strlen(text), true, true, &g->prompt,
                    &g->nprompt);
done:
  free(chat);
  return st;
}

/* The model, its tokenizer, the prompt, then the decoder (captured unless --eager) with a context
 * that holds the prompt and the steps asked for. */
static hcq_status_t set_up(gen_t *g, const gen_args_t *a) {
  hcq_llm_options_t o = {.eager = a->eager, .log = stderr};
  TRY(llm_api_load(a->model, &o, &g->llm));
  if (a->interactive) /* the conversation grows: the context asked for, else the model's (at most
                         4096) */
    return llm_api_start(
        g->llm,
        &(llm_decoder_options_t){.devices = (int)a->devices, .kind = a->kind, .ctx = (int)a->ctx});
  TRY(prompt_ids(g, a));
  if (g->nprompt == 0)
    return hcq_status_make(HCQ_INVALID_ARGUMENT, "generate: the prompt has no tokens");
  const llm_config_t *c = llm_api_config(g->llm);
  for (size_t i = 0; i < g->nprompt; i++)
    if (g->prompt[i] >= c->vocab)
      return hcq_status_make(HCQ_INVALID_ARGUMENT,
                             "generate: prompt token %d is outside the vocabulary (%d ids)",
                             g->prompt[i], c->vocab);
  llm_decoder_options_t opts = {.devices = (int)a->devices,
                                .ranks = (int)a->ranks,
                                .rank = cli_mpi_rank(),
                                .kind = a->kind,
                                .ctx = (int)a->ctx};
  if (!opts.ctx) {
    /* the prompt and the steps asked for, rounded up; at most the model's context */
    unsigned long long want = g->nprompt + a->steps + 1, ctx = 512;
    while (ctx < want && ctx < (unsigned long long)c->ctx_train) ctx *= 2;
    opts.ctx =
        (int)(ctx < (unsigned long long)c->ctx_train ? ctx : (unsigned long long)c->ctx_train);
  }
  if (a->ctx > (unsigned long long)c->ctx_train)
    fprintf(stderr,
            "hcq: warning: --ctx %llu is beyond the %d positions the model was trained on: past "
            "them its output "
            "may be poor\n",
            a->ctx, c->ctx_train);
  if (g->nprompt + 1 > (size_t)opts.ctx)
    return hcq_status_make(HCQ_OUT_OF_RANGE,
                           "generate: the prompt has %zu tokens; the context holds %d positions",
                           g->nprompt, opts.ctx);
  return llm_api_start(g->llm, &opts);
}

/* The library's options from the command line's: the sampling chain (penalties with --repeat-last-n
 * 0 off, as llama.cpp's), stop strings, log-probabilities. */
static hcq_llm_generate_options_t generate_options(const gen_args_t *a) {
  hcq_llm_generate_options_t o = {.max_tokens = (int)a->steps,
                                  .ignore_eos = a->ignore_eos,
                                  .stop = a->stops,
                                  .nstop = a->nstop,
                                  .logprobs = a->logprobs_given,
                                  .top_logprobs = (int)a->logprobs};
  if (a->temperature > 0)
    o.sampling = (hcq_llm_sampling_t){(float)a->temperature, (float)a->top_p, (int)a->top_k,
                                      a->seed, .min_p = (float)a->min_p};
  if (a->repeat_last_n != 0) {
    o.sampling.repeat_penalty = (float)a->repeat_penalty;
    o.sampling.frequency_penalty = (float)a->frequency_penalty;
    o.sampling.presence_penalty = (float)a->presence_penalty;
    o.sampling.penalty_last_n = (int)a->repeat_last_n;
  }
  return o;
}

/* The generation itself, streamed to standard output by rank 0 (unless --json). */
static hcq_status_t run(gen_t *g, const gen_args_t *a) {
  bool print = !a->json && cli_mpi_rank() == 0;
  hcq_llm_generate_options_t o = generate_options(a);
  o.on_token = print ? print_piece : NULL;
  if (print && !a->bench) fflush(stdout);
  hcq_status_t st = a->steps ? llm_api_generate(g->llm, g->prompt, g->nprompt, &o,
                                                a->ranks > 1 ? agree_end : NULL, &g->res)
                             : NULL;
  if (!st && print) {
    printf("\n");
    fflush(stdout); /* before the summary on standard error */
  }
  /* generation stops at the context's last position, never past it: said, not silent */
  if (!st && g->res.stop == HCQ_LLM_STOP_CONTEXT && cli_mpi_rank() == 0) {
    hcq_llm_info_t i;
    hcq_llm_get_info(g->llm, &i);
    fprintf(stderr,
            "hcq: stopped after %zu tokens: the context holds %d positions (the model was trained "
            "on %d; "
            "--ctx sets it)\n",
            g->res.n, i.ctx, i.ctx_train);
  }
  return st;
}

/* --bench: eager launches against replays, and whether they chose the same tokens. */
static hcq_status_t bench(gen_t *g, const gen_args_t *a) {
  int steps = a->steps ? (int)a->steps : 1;
  llm_decoder_t *dec = llm_api_decoder(g->llm);
  g->identical = false;
  TRY(time_mode(dec, g->prompt, (int)g->nprompt, steps, (int)a->reps, false, &g->eager));
  TRY(time_mode(dec, g->prompt, (int)g->nprompt, steps, (int)a->reps, true, &g->graph));
  g->identical = cli_mpi_rank() != 0 ||
                 (g->eager.n == g->graph.n &&
                  !memcmp(g->eager.ids, g->graph.ids, (size_t)g->eager.n * sizeof(int32_t)));
  return NULL;
}

static hcq_status_t print_json(const gen_t *g, const gen_args_t *a, double prefill_tok_s,
                               double decode_tok_s) {
  const hcq_llm_result_t *res = &g->res;
  const llm_config_t *c = llm_api_config(g->llm);
  llm_decoder_t *dec = llm_api_decoder(g->llm);
  hcq_llm_info_t info;
  hcq_llm_get_info(g->llm, &info);
  char *text = NULL;
  bool ended = res->stop == HCQ_LLM_STOP_END && res->n;
  size_t n_text = res->n - (ended ? 1 : 0);
  hcq_status_t st = llm_detokenize(llm_api_tokenizer(g->llm), res->ids, n_text, false, &text);
  if (!st && res->stop == HCQ_LLM_STOP_STRING) { /* the text before the stop string, as streamed */
    char *at = strstr(text, a->stops[res->stop_index]);
    if (at) *at = 0;
  }
  if (!st) {
    printf("{\"model\": ");
    json_string(info.path, strlen(info.path));
    printf(", \"model_name\": ");
    json_string(info.name, strlen(info.name));
    printf(", ");
    json_ids("prompt_ids", g->prompt, g->nprompt);
    printf(", ");
    json_ids("token_ids", res->ids, res->n);
    printf(", \"text\": ");
    json_string(text, strlen(text));
    printf(
        ", \"ended\": %s, \"stop_reason\": \"%s\", \"prefill_tok_s\": %.1f, \"decode_tok_s\": %.1f",
        ended ? "true" : "false", hcq_llm_stop_name(res->stop), prefill_tok_s, decode_tok_s);
    if (a->logprobs_given) json_logprobs(llm_api_tokenizer(g->llm), res);
    printf(
        ", \"kernels_per_token\": %zu, \"device_kind\": \"%s\", \"graph_kind\": \"%s\", "
        "\"devices\": %llu, \"ranks\": %llu",
        info.kernels_per_token, hcq_device_kind_name(a->kind), a->eager ? "none" : graph_kind(dec),
        a->devices, a->ranks);
    printf(", \"mode\": \"%s\", \"host_us_per_token\": %.2f", a->eager ? "eager" : "graph",
           res->host_us_per_token);
    /* the caches: layers x (K, V) x positions x KV heads x head size, float32 */
    double kv = (double)c->n_layers * 2 * info.ctx * llm_kv_dim(c) * 4;
    printf(", \"ctx\": %d, \"kv_cache_bytes\": %.0f, \"model_bytes\": %llu", info.ctx, kv,
           (unsigned long long)llm_api_file_bytes(g->llm));
    printf(
        ", \"memory_mib\": {\"VmRSS\": %.1f, \"VmHWM\": %.1f, \"RssFile\": %.1f, \"RssAnon\": "
        "%.1f}",
        status_mib("VmRSS"), status_mib("VmHWM"), status_mib("RssFile"), status_mib("RssAnon"));
    if (a->bench)
      printf(
          ", \"eager_decode_tok_s\": %.1f, \"graph_decode_tok_s\": %.1f, \"eager_prefill_tok_s\": "
          "%.1f, "
          "\"graph_prefill_tok_s\": %.1f, \"host_us_per_token_eager\": %.2f, "
          "\"host_us_per_token_graph\": %.2f, "
          "\"identical\": %s, \"bench_steps\": %d, \"repetitions\": %llu",
          g->eager.decode_tok_s, g->graph.decode_tok_s, g->eager.prefill_tok_s,
          g->graph.prefill_tok_s, g->eager.host_us, g->graph.host_us,
          g->identical ? "true" : "false", g->graph.n, a->reps);
    if (a->bench) cli_host_load_print_json(stdout); /* what the timings ran beside */
    printf("}\n");
  }
  free(text);
  return st;
}

static void print_summary(const gen_t *g, const gen_args_t *a, double prefill_tok_s,
                          double decode_tok_s) {
  hcq_llm_info_t i;
  hcq_llm_get_info(g->llm, &i);
  fprintf(stderr,
          "\nhcq generate: %s (%s, %d layers, dim %d, vocab %d) on %s%s; %zu kernels per token\n",
          i.name, i.path, i.layers, i.dim, i.vocab, hcq_device_kind_name(a->kind),
          a->ranks == 2     ? " (two ranks)"
          : a->devices == 2 ? " (two devices)"
                            : "",
          i.kernels_per_token);
  fprintf(stderr, "  prompt %zu tokens at %.1f tok/s; %zu new tokens at %.1f tok/s (%s)%s\n",
          g->nprompt, prefill_tok_s, g->res.n, decode_tok_s,
          a->eager ? "eager launches" : "graph replays",
          g->res.stop == HCQ_LLM_STOP_END ? "" : ", no end token");
}

static void print_bench_table(const gen_t *g, const gen_args_t *a) {
  const timing_t *eager = &g->eager, *graph = &g->graph;
  printf("\n                      decode tok/s   prompt tok/s   host us/token\n");
  printf("  eager               %12.1f   %12.1f   %13.2f\n", eager->decode_tok_s,
         eager->prefill_tok_s, eager->host_us);
  printf("  graph replay        %12.1f   %12.1f   %13.2f\n", graph->decode_tok_s,
         graph->prefill_tok_s, graph->host_us);
  printf("  speed-up            %11.2fx   %11.2fx   %12.1fx\n",
         graph->decode_tok_s / eager->decode_tok_s, graph->prefill_tok_s / eager->prefill_tok_s,
         eager->host_us / graph->host_us);
  printf(
      "\n  %s tokens. decode: median of %llu runs of %d tokens after the %zu-token prompt, steps\n"
      "  queued back to back; prompt: the prompt as one pass; host us/token: median time to queue "
      "one\n"
      "  step with the devices idle (eager: %zu launches; graph: one replay).\n",
      g->identical ? "Eager and graph replay: identical"
                   : "MISMATCH: eager and graph replay differ in their",
      a->reps, graph->n, g->nprompt, llm_decoder_kernels_per_step(llm_api_decoder(g->llm)));
}

/* Rank 0's report: the JSON object, or the summary on standard error and --bench's table. */
static hcq_status_t report(const gen_t *g, const gen_args_t *a) {
  const hcq_llm_result_t *res = &g->res;
  double prefill_tok_s = res->prompt_ms > 0 ? g->nprompt / (res->prompt_ms / 1e3) : 0;
  double decode_tok_s =
      res->n > 1 && res->decode_ms > 0 ? (double)(res->n - 1) / (res->decode_ms / 1e3) : 0;
  hcq_status_t st = NULL;
  if (a->json)
    st = print_json(g, a, prefill_tok_s, decode_tok_s);
  else
    print_summary(g, a, prefill_tok_s, decode_tok_s);
  if (!st && a->bench && !a->json) print_bench_table(g, a);
  if (!st && a->bench && !a->json) cli_host_load_print(stdout); /* what the timings ran beside */
  return st;
}

int cli_generate(int argc, char **argv) {
  gen_args_t a;
  int rc = parse_args(argc, argv, &a);
  if (rc >= 0) return rc;
  if (a.fetch) return fetch_model(a.model);
  char threads[24];
  snprintf(threads, sizeof(threads), "%llu", a.threads);
  if (a.threads) setenv("HCQ_CPU_THREADS", threads, 1); /* read when the first device opens */
  hcq_status_t st = kind_available(a.kind);
  if (st) return cli_fail(st);
  gen_t g = {.identical = true};
  if ((st = set_up(&g, &a))) goto done;
  if (a.interactive) {
    hcq_llm_generate_options_t o = generate_options(&a);
    st = cli_chat_loop(g.llm, &o, a.system, a.chat_template, stdin, stdout);
    hcq_status_t dst = hcq_llm_close(g.llm);
    if (!st)
      st = dst;
    else
      hcq_status_destroy(dst);
    return st ? cli_fail(st) : HCQ_EXIT_OK;
  }
  if ((st = run(&g, &a))) goto done;
  if (a.bench && (st = bench(&g, &a))) goto done;
  if (cli_mpi_rank() == 0) st = report(&g, &a);
done:
  rc = st            ? cli_fail(st)
       : g.identical ? HCQ_EXIT_OK
                     : HCQ_EXIT_CHECK_MISMATCH; /* before the teardown waits */
  hcq_status_t dst = hcq_llm_close(g.llm);
  if (dst && rc == HCQ_EXIT_OK)
    rc = cli_fail(dst);
  else
    hcq_status_destroy(dst);
  hcq_llm_result_free(&g.res);
  free(g.eager.ids), free(g.graph.ids), free(g.prompt);
  return rc;
}

/* TEXT's token ids. */
static hcq_status_t print_ids(const llm_tokenizer_t *tok, const char *text, bool special,
                              bool json) {
  int32_t *ids = NULL;
  size_t n = 0;
  hcq_status_t st = llm_tokenize(tok, text, strlen(text), special, true, &ids, &n);
  if (!st && json) {
    printf("{");
    json_ids("ids", ids, n);
    printf("}\n");
  } else if (!st) {
    for (size_t i = 0; i < n; i++) printf("%s%d", i ? " " : "", ids[i]);
    printf("\n");
  }
  free(ids);
  return st;
}

/* --decode's ids as text. */
static hcq_status_t print_text(const llm_tokenizer_t *tok, const char *decode, bool special,
                               bool json) {
  int32_t *ids = NULL;
  size_t n = 0;
  char *out = NULL;
  hcq_status_t st;
  if ((st = parse_ids(decode, &ids, &n))) goto done;
  for (size_t i = 0; i < n; i++)
    if (ids[i] >= llm_tokenizer_vocab_size(tok)) {
      st = hcq_status_make(HCQ_INVALID_ARGUMENT,
                           "tokenize: id %d is outside the vocabulary (%d ids)", ids[i],
                           llm_tokenizer_vocab_size(tok));
      goto done;
    }
  if ((st = llm_detokenize(tok, ids, n, special, &out))) goto done;
  if (json) {
    printf("{\"text\": ");
    json_string(out, strlen(out));
    printf("}\n");
  } else {
    printf("%s\n", out);
  }
done:
  free(ids), free(out);
  return st;
}

/* The model's tokenizer, then TEXT's ids or --decode's text. */
static hcq_status_t tokenize(const char *model_given, const char *text, const char *decode,
                             bool special, bool json) {
  char path[PATH_MAX];
  gguf_file_t *g = NULL;
  llm_tokenizer_t *tok = NULL;
  hcq_status_t st;
  if ((st = model_path(model_given, path, sizeof(path)))) goto done;
  if ((st = gguf_open(path, &g))) goto done;
  if ((st = llm_tokenizer_from_gguf(g, &tok))) goto done;
  st = text ? print_ids(tok, text, special, json) : print_text(tok, decode, special, json);
done:
  llm_tokenizer_free(tok);
  gguf_close(g);
  return st;
}

int cli_tokenize(int argc, char **argv) {
  const char *model_given = NULL, *decode = NULL, *text = NULL;
  bool json = false, special = true;
  for (int i = 0; i < argc; i++) {
    const char *o = argv[i];
    if (!strcmp(o, "--json"))
      json = true;
    else if (!strcmp(o, "--no-special"))
      special = false;
    else if (!strcmp(o, "--model") || !strcmp(o, "--decode")) {
      if (i + 1 >= argc) return cli_usage_error("tokenize: %s needs a value", o);
      *(!strcmp(o, "--model") ? &model_given : &decode) = argv[++i];
    } else if (!strcmp(o, "--")) {
      if (i + 1 < argc) text = argv[++i];
      if (i + 1 < argc) return cli_usage_error("tokenize: one TEXT");
    } else if (!strncmp(o, "--", 2)) {
      return cli_usage_error(
          "tokenize: unknown option \"%s\" (usage: hcq tokenize [--model FILE|NAME] [--json] "
          "[--no-special] TEXT | --decode 1,2,3)",
          o);
    } else if (text) {
      return cli_usage_error("tokenize: one TEXT (quote it)");
    } else {
      text = o;
    }
  }
  if (!!text == !!decode) return cli_usage_error("tokenize: give a TEXT or --decode IDS");
  hcq_status_t st = tokenize(model_given, text, decode, special, json);
  return st ? cli_fail(st) : HCQ_EXIT_OK;
}
