/* hcq demo: greedy decoding of a llama2.c-layout checkpoint (generated when none is given), eagerly
 * kernel by kernel, then with the captured step replayed as graphs; the two token streams must be
 * identical. See models/llama2/ for the decoder. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "cli/host_load.h"
#include "llama2.h"
#include "model_status.h"

typedef struct demo_args {
  llama2_shape_t shape;
  hcq_device_kind_t kind;
  const char *model, *tokenizer, *write_model;
  unsigned long long steps, devices, reps, ranks;
  bool steps_given, reps_given, json;
} demo_args_t;

typedef struct mode_result {
  llama2_timing_t t;
  int32_t *tokens;
} mode_result_t;

static int parse_args(int argc, char **argv, demo_args_t *a) {
  *a = (demo_args_t){
      LLAMA2_SHAPE_SMALL, CLI_DEFAULT_KIND, NULL, NULL, NULL, 256, 1, 5, 1, false, false, false};
  for (int i = 0; i < argc; i++) {
    const char *o = argv[i];
    bool has_value = i + 1 < argc;
    if (!strcmp(o, "--json")) {
      a->json = true;
    } else if (!strcmp(o, "--size") || !strcmp(o, "--model") || !strcmp(o, "--tokenizer") ||
               !strcmp(o, "--steps") || !strcmp(o, "--devices") || !strcmp(o, "--write-model") ||
               !strcmp(o, "--repeat") || !strcmp(o, "--device") || !strcmp(o, "--ranks")) {
      if (!has_value) return cli_usage_error("demo: %s needs a value", o);
      const char *v = argv[++i];
      if (!strcmp(o, "--size")) {
        if (!strcmp(v, "small"))
          a->shape = LLAMA2_SHAPE_SMALL;
        else if (!strcmp(v, "15m"))
          a->shape = LLAMA2_SHAPE_15M;
        else
          return cli_usage_error("demo: --size \"%s\": expected small or 15m", v);
      } else if (!strcmp(o, "--device")) {
        if (!cli_parse_device_kind(v, &a->kind))
          return cli_usage_error("demo: --device \"%s\": expected CPU, VULKAN, CUDA or METAL", v);
      } else if (!strcmp(o, "--model")) {
        a->model = v;
      } else if (!strcmp(o, "--tokenizer")) {
        a->tokenizer = v;
      } else if (!strcmp(o, "--write-model")) {
        a->write_model = v;
      } else if (!strcmp(o, "--steps")) {
        if (!cli_parse_uint(v, 1, 1u << 20, &a->steps))
          return cli_usage_error("demo: --steps \"%s\": expected a positive integer", v);
        a->steps_given = true;
      } else if (!strcmp(o, "--devices")) {
        if (!cli_parse_uint(v, 1, 2, &a->devices))
          return cli_usage_error("demo: --devices \"%s\": expected 1 or 2", v);
      } else if (!strcmp(o, "--ranks")) {
        if (!cli_parse_uint(v, 1, 2, &a->ranks))
          return cli_usage_error("demo: --ranks \"%s\": expected 1 or 2", v);
        if (a->ranks == 2 && cli_mpi_size() != 2)
          return cli_usage_error("demo: --ranks 2 runs under mpirun -np 2 (this job has %d rank%s)",
                                 cli_mpi_size(), cli_mpi_size() == 1 ? "" : "s");
      } else {
        if (!cli_parse_uint(v, 1, LLAMA2_MAX_REPS, &a->reps))
          return cli_usage_error("demo: --repeat \"%s\": expected 1..%d", v, LLAMA2_MAX_REPS);
        a->reps_given = true;
      }
    } else {
      return cli_usage_error(
          "demo: unknown argument \"%s\" (usage: hcq demo [--size small|15m] [--model FILE] "
          "[--tokenizer FILE] [--steps N] [--device CPU|VULKAN|CUDA|METAL] [--devices 1|2] "
          "[--ranks 1|2] "
          "[--repeat N] [--write-model FILE] [--json])",
          o);
    }
  }
  return HCQ_EXIT_OK;
}

static void print_tokens(const int32_t *t, int n, const llama2_tokenizer_t *tok) {
  if (tok) {
    printf("  text: ");
    char scratch[2];
    int prev = 1;
    for (int i = 0; i < n; i++) {
      fputs(llama2_tokenizer_piece(tok, prev, t[i], scratch), stdout);
      prev = t[i];
    }
    printf("\n");
    return;
  }
  enum { SHOWN = 48 };
  printf("  token ids:");
  for (int i = 0; i < n && i < SHOWN; i++)
    printf("%s%d", i % 16 == 0 && i ? "\n            " : " ", t[i]);
  if (n > SHOWN) printf(" ... (%d in all)", n);
  printf("\n");
}

static void print_json(const demo_args_t *a, const llama2_config_t *c, const llama2_decoder_t *dec,
                       const mode_result_t *e, const mode_result_t *g, int steps, bool identical) {
  printf("{\"model\": ");
  if (a->model) {
    putchar('"');
    for (const char *p = a->model; *p; p++) {
      if (*p == '"' || *p == '\\') putchar('\\');
      if ((unsigned char)*p < 0x20)
        printf("\\u%04x", *p);
      else
        putchar(*p);
    }
    putchar('"');
  } else {
    printf("\"generated %s\"", a->shape == LLAMA2_SHAPE_SMALL ? "small" : "15m");
  }
  printf(
      ", \"config\": {\"dim\": %d, \"hidden_dim\": %d, \"n_layers\": %d, \"n_heads\": %d, "
      "\"n_kv_heads\": %d, "
      "\"vocab_size\": %d, \"seq_len\": %d}",
      c->dim, c->hidden_dim, c->n_layers, c->n_heads, c->n_kv_heads, c->vocab_size, c->seq_len);
  const hcq_jit_report_t *rep = llama2_decoder_report(dec);
  const char *kind =
      rep && rep->batches ? hcq_graph_kind(hcq_jit_graph(llama2_decoder_jit(dec), 0)) : "none";
  printf(", \"device_kind\": \"%s\", \"graph_kind\": \"%s\"", hcq_device_kind_name(a->kind), kind);
  printf(", \"ranks\": %llu", a->ranks);
  printf(
      ", \"devices\": %llu, \"steps\": %d, \"repetitions\": %llu, \"kernels_per_token\": %zu, "
      "\"transfers_per_token\": %zu, \"graphs_per_token\": %zu",
      a->devices, steps, a->reps, llama2_decoder_kernels_per_step(dec),
      llama2_decoder_items_per_step(dec) - llama2_decoder_kernels_per_step(dec),
      rep ? rep->batches : 0);
  printf(", \"eager_tok_s\": %.1f, \"graph_tok_s\": %.1f, \"speedup\": %.3f", e->t.tok_s,
         g->t.tok_s, g->t.tok_s / e->t.tok_s);
  printf(", \"host_us_per_token_eager\": %.2f, \"host_us_per_token_graph\": %.2f", e->t.host_us,
         g->t.host_us);
  printf(", \"identical\": %s, \"tokens\": [", identical ? "true" : "false");
  for (int i = 0; i < steps; i++) printf("%s%d", i ? ", " : "", g->tokens[i]);
  printf("], \"eager_tokens\": [");
  for (int i = 0; i < steps; i++) printf("%s%d", i ? ", " : "", e->tokens[i]);
  printf("]");
  cli_host_load_print_json(stdout); /* what the timings ran beside */
  printf("}\n");
}

static void print_screen(const demo_args_t *a, const llama2_config_t *c,
                         const llama2_decoder_t *dec, const mode_result_t *e,
                         const mode_result_t *g, int steps, bool identical,
                         const llama2_tokenizer_t *tok) {
  if (a->model)
    printf("hcq demo: greedy decoding of %s\n", a->model);
  else
    printf("hcq demo: greedy decoding of a generated llama2 model (--size %s)\n",
           a->shape == LLAMA2_SHAPE_SMALL ? "small" : "15m");
  printf("  dim %d, hidden %d, %d layers, %d heads, %d KV heads, vocab %d, seq %d\n", c->dim,
         c->hidden_dim, c->n_layers, c->n_heads, c->n_kv_heads, c->vocab_size, c->seq_len);
  size_t kernels = llama2_decoder_kernels_per_step(dec),
         transfers = llama2_decoder_items_per_step(dec) - kernels;
  const hcq_jit_report_t *rep = llama2_decoder_report(dec);
  const char *kn = hcq_device_kind_name(a->kind);
  if (a->ranks == 2)
    printf("  %d steps from BOS on 0/%s:0 + 1/%s:0 (two MPI ranks); %zu kernels per token", steps,
           kn, kn, kernels);
  else if (a->devices == 2)
    printf("  %d steps from BOS on %s:0 + %s:1; %zu kernels per token", steps, kn, kn, kernels);
  else
    printf("  %d steps from BOS on %s:0; %zu kernels per token", steps, kn, kernels);
  if (transfers) printf(" + %zu transfers", transfers);
  printf(";\n  one captured step, replayed as %zu graph%s per token\n\n", rep ? rep->batches : 0,
         rep && rep->batches == 1 ? "" : "s");
  print_tokens(g->tokens, steps, tok);
  if (identical) {
    printf("  eager and graph replay: identical tokens\n\n");
  } else {
    int i = 0;
    while (i < steps && e->tokens[i] == g->tokens[i]) i++;
    printf("  MISMATCH: eager and graph replay differ first at step %d (eager %d, graph %d)\n\n", i,
           e->tokens[i], g->tokens[i]);
  }
  printf("                    tokens/s   host us/token\n");
  printf("  eager           %10.1f   %13.2f\n", e->t.tok_s, e->t.host_us);
  printf("  graph replay    %10.1f   %13.2f\n", g->t.tok_s, g->t.host_us);
  printf("  speed-up        %9.2fx   %12.1fx\n", g->t.tok_s / e->t.tok_s,
         e->t.host_us / g->t.host_us);
  printf(
      "\n  tokens/s: median of %llu decodes of %d tokens, steps queued back to back; host "
      "us/token: median\n"
      "  over steps of the time to submit one step with the devices idle (eager: %zu launches; "
      "graph: one\n"
      "  replay). Same kernels in both modes; `hcq demo --help` for options.\n",
      a->reps, steps, kernels);
  cli_host_load_print(stdout);
}

/* An absent kind: the reason `hcq info` gives, before any work. */
static hcq_status_t device_available(hcq_device_kind_t kind) {
  hcq_device_info_t infos[HCQ_DEVICE_KIND_COUNT];
  size_t ninfo = hcq_device_query(infos, HCQ_DEVICE_KIND_COUNT);
  for (size_t i = 0; i < ninfo && i < HCQ_DEVICE_KIND_COUNT; i++)
    if (infos[i].kind == kind && !infos[i].available)
      return hcq_status_make(HCQ_UNAVAILABLE, "demo: no %s device: %s", hcq_device_kind_name(kind),
                             infos[i].description);
  return NULL;
}

/* --write-model's file, --tokenizer's tokens, and the decoder of the checkpoint. */
static hcq_status_t open_decoder(const demo_args_t *a, llama2_checkpoint_t *ck,
                                 llama2_tokenizer_t *tok, llama2_decoder_t **dec) {
  if (a->write_model) TRY(llama2_checkpoint_write(ck, a->write_model));
  if (a->tokenizer) TRY(llama2_tokenizer_load(a->tokenizer, ck->config.vocab_size, tok));
  TRY(device_available(a->kind));
  llama2_decoder_options_t opts = {a->ranks == 2 ? 2 : (int)a->devices, 0, false, a->kind,
                                   (int)a->ranks};
  return llama2_decoder_create(ck, &opts, dec);
}

/* steps tokens eagerly, then replayed from one capture, each timed over --repeat runs. */
static hcq_status_t run_modes(llama2_decoder_t *dec, const demo_args_t *a, int steps,
                              mode_result_t *e, mode_result_t *g) {
  if (!e->tokens || !g->tokens) return hcq_status_make(HCQ_OUT_OF_MEMORY, "out of memory");
  /* Under MPI the tokens live on rank 0 (the first half's device): only it reads them. */
  bool rank0 = cli_mpi_rank() == 0;
  TRY(llama2_decoder_time(dec, false, steps, (int)a->reps, &e->t, rank0 ? e->tokens : NULL));
  /* One capture of step 0 serves every position: pos is a variable of the graph. */
  TRY(llama2_decoder_reset(dec));
  TRY(llama2_decoder_capture(dec, 0));
  return llama2_decoder_time(dec, true, steps, (int)a->reps, &g->t, rank0 ? g->tokens : NULL);
}

int cli_demo(int argc, char **argv) {
  demo_args_t a;
  int rc = parse_args(argc, argv, &a);
  if (rc) return rc;
  llama2_checkpoint_t ck;
  llama2_tokenizer_t tok = {0};
  llama2_decoder_t *dec = NULL;
  mode_result_t e = {0}, g = {0};
  hcq_status_t st =
      a.model ? llama2_checkpoint_load(a.model, &ck) : llama2_checkpoint_generate(a.shape, 42, &ck);
  if (st) return cli_fail(st);
  const llama2_config_t c = ck.config;
  if (!a.steps_given && a.steps > (unsigned long long)c.seq_len)
    a.steps = (unsigned long long)c.seq_len;
  if (a.steps > (unsigned long long)c.seq_len) {
    llama2_checkpoint_free(&ck);
    return cli_usage_error("demo: --steps %llu is more than the model's seq_len %d", a.steps,
                           c.seq_len);
  }
  int steps = (int)a.steps;
  bool identical = false;
  e.tokens = calloc((size_t)steps, sizeof(int32_t));
  g.tokens = calloc((size_t)steps, sizeof(int32_t));
  st = open_decoder(&a, &ck, &tok, &dec);
  llama2_checkpoint_free(&ck);
  if (st) goto done;
  if ((st = run_modes(dec, &a, steps, &e, &g))) goto done;
  identical = !memcmp(e.tokens, g.tokens, (size_t)steps * sizeof(int32_t));
  if (a.json)
    print_json(&a, &c, dec, &e, &g, steps, identical);
  else
    print_screen(&a, &c, dec, &e, &g, steps, identical, a.tokenizer ? &tok : NULL);
done:
  rc = st          ? cli_fail(st)
       : identical ? HCQ_EXIT_OK
                   : HCQ_EXIT_CHECK_MISMATCH; /* before the teardown waits */
  hcq_status_t dst = llama2_decoder_destroy(dec);
  if (dst && rc == HCQ_EXIT_OK)
    rc = cli_fail(dst);
  else
    hcq_status_destroy(dst);
  llama2_tokenizer_free(&tok);
  free(e.tokens);
  free(g.tokens);
  return rc;
}
