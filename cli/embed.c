/* hcq embed: all-MiniLM-L6-v2 sentence embeddings of the texts given, through one captured query
 * replayed for every text whatever its length; --bench times queries of mixed lengths eagerly and
 * replayed. See models/minilm/ for the model, the tokenizer and the encoder. */
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli/cli.h"
#include "minilm.h"
#include "model_status.h"
#include "model_time.h"

/* A text's echo stops after this many characters; the n x n similarity matrix is printed for this
 * many texts at most unless --similarity asks for it (10,000 texts made 546 MB of it). */
enum { ECHO_CHARS = 60, SIMILARITY_TEXTS = 8 };

typedef struct embed_args {
  const char *model_dir;
  hcq_device_kind_t kind;
  bool json, bench, fetch, similarity;
  char **texts;
  int ntexts;
} embed_args_t;

static int parse_args(int argc, char **argv, embed_args_t *a) {
  *a = (embed_args_t){0};
  a->kind = CLI_DEFAULT_KIND;
  a->texts = calloc((size_t)argc + 1, sizeof(char *));
  if (!a->texts) return cli_usage_error("out of memory");
  bool options = true;
  for (int i = 0; i < argc; i++) {
    const char *o = argv[i];
    if (options && !strcmp(o, "--")) {
      options = false;
    } else if (options && (!strcmp(o, "--model-dir") || !strcmp(o, "--device"))) {
      if (i + 1 >= argc) return cli_usage_error("embed: %s needs a value", o);
      const char *v = argv[++i];
      if (!strcmp(o, "--model-dir"))
        a->model_dir = v;
      else if (!cli_parse_device_kind(v, &a->kind))
        return cli_usage_error("embed: --device \"%s\": expected CPU, VULKAN or CUDA", v);
      else {
        /* a kind whose language it has no kernels in */
        hcq_status_t none = minilm_encoder_kernels_for(a->kind);
        if (none) {
          int rc = cli_usage_error("embed: --device \"%s\": %s", v, hcq_status_message(none));
          hcq_status_destroy(none);
          return rc;
        }
      }
    } else if (options && !strcmp(o, "--json")) {
      a->json = true;
    } else if (options && !strcmp(o, "--similarity")) {
      a->similarity = true;
    } else if (options && !strcmp(o, "--bench")) {
      a->bench = true;
    } else if (options && !strcmp(o, "--fetch-model")) {
      a->fetch = true;
    } else if (options && o[0] == '-' && o[1] == '-') {
      return cli_usage_error("embed: unknown option \"%s\" (see hcq embed --help)", o);
    } else {
      a->texts[a->ntexts++] = argv[i];
    }
  }
  if (a->fetch && (a->bench || a->ntexts))
    return cli_usage_error("embed: --fetch-model takes no texts and no --bench");
  if (a->bench && a->ntexts)
    return cli_usage_error("embed: --bench times its own queries and takes no texts");
  if (a->similarity && (a->bench || a->json || a->fetch))
    return cli_usage_error(
        "embed: --similarity goes with texts, without --json, --bench or --fetch-model");
  if (!a->fetch && !a->bench && !a->ntexts)
    return cli_usage_error("embed: no texts (hcq embed [OPTIONS] TEXT...)");
  return -1;
}

/* The model directory: --model-dir, else the package in the default venv, installed on demand. */
static hcq_status_t model_dir(const embed_args_t *a, char *dir, size_t size) {
  if (a->model_dir) {
    snprintf(dir, size, "%s", a->model_dir);
    return NULL;
  }
  char venv[PATH_MAX];
  minilm_default_venv(venv, sizeof(venv));
  hcq_status_t st = minilm_find_model(venv, dir, size);
  if (!st || hcq_status_code(st) != HCQ_NOT_FOUND) return st;
  hcq_status_destroy(st);
  if ((st = minilm_install_model(venv, stderr))) return st;
  return minilm_find_model(venv, dir, size);
}

static const char *graph_kind(const minilm_encoder_t *enc) {
  hcq_jit_t *jit = minilm_encoder_jit(enc);
  const hcq_jit_report_t *rep = jit ? hcq_jit_report(jit) : NULL;
  return rep && rep->batches ? hcq_graph_kind(hcq_jit_graph(jit, 0)) : "none";
}

/* Queries of these lengths, [CLS] w... [SEP] with ids spread over the vocab, each run eagerly and
 * replayed; every replay must give the eager query's embedding bit for bit. */
/* the mix of make bench's MiniLM rows */
static const int k_lengths[] = {1, 4, 8, 16, 32, 64, 128, 256};
enum { NLEN = sizeof(k_lengths) / sizeof(k_lengths[0]), MAX_REPS = 41 };

/* One query: its ids in, run eagerly or replayed, its embedding out. */
static hcq_status_t run_query(minilm_encoder_t *enc, const int32_t *ids, int n, bool graph,
                              float *emb) {
  TRY(minilm_encoder_set_input(enc, ids, n));
  TRY(graph ? minilm_encoder_run_graph(enc) : minilm_encoder_run_eager(enc));
  return minilm_encoder_embedding(enc, emb);
}

static hcq_status_t timed(minilm_encoder_t *enc, const int32_t *ids, int n, bool graph, float *emb,
                          double *ms) {
  double t0 = hcq_model_now_ms();
  hcq_status_t st = run_query(enc, ids, n, graph, emb);
  *ms = hcq_model_now_ms() - t0;
  return st;
}

/* The benchmark's rows: each length's median ms eager and replayed. */
typedef struct bench_rows {
  double eager[NLEN], graph[NLEN];
  int lengths[NLEN], nl;
  bool identical; /* every replay gave the eager query's embedding */
} bench_rows_t;

/* The query ids[0..n) eagerly and replayed: a row's medians; e1 and e2 hold the embeddings. */
static hcq_status_t time_query(minilm_encoder_t *enc, const int32_t *ids, int n, float *e1,
                               float *e2, bench_rows_t *rows) {
  if (!minilm_encoder_jit(enc)) {
    TRY(minilm_encoder_set_input(enc, ids, n));
    TRY(minilm_encoder_capture(enc));
  }
  double te[MAX_REPS], tg[MAX_REPS], first;
  /* A warm-up of each, then as many repetitions as fit 0.25 s a mode (3 at least). */
  TRY(timed(enc, ids, n, false, e1, &first));
  TRY(timed(enc, ids, n, true, e2, &first));
  int reps = first > 0 ? (int)(250 / first) : MAX_REPS;
  reps = reps < 3 ? 3 : reps > MAX_REPS ? MAX_REPS : reps;
  size_t hidden = (size_t)minilm_encoder_config(enc)->hidden;
  for (int r = 0; r < reps; r++) {
    TRY(timed(enc, ids, n, false, e1, &te[r]));
    TRY(timed(enc, ids, n, true, e2, &tg[r]));
    if (memcmp(e1, e2, hidden * 4)) rows->identical = false;
  }
  qsort(te, (size_t)reps, sizeof(double), hcq_model_cmp_double);
  qsort(tg, (size_t)reps, sizeof(double), hcq_model_cmp_double);
  int nl = rows->nl++;
  rows->lengths[nl] = n, rows->eager[nl] = te[reps / 2], rows->graph[nl] = tg[reps / 2];
  return NULL;
}

static hcq_status_t time_queries(minilm_encoder_t *enc, const minilm_tokenizer_t *tok,
                                 bench_rows_t *rows) {
  const minilm_config_t *c = minilm_encoder_config(enc);
  int32_t *ids = malloc((size_t)c->max_seq_len * sizeof(*ids));
  float *e1 = malloc((size_t)c->hidden * 4), *e2 = malloc((size_t)c->hidden * 4);
  hcq_status_t st = NULL;
  *rows = (bench_rows_t){.identical = true};
  if (!ids || !e1 || !e2) {
    st = hcq_status_make(HCQ_OUT_OF_MEMORY, "out of memory");
    goto done;
  }
  int cls = 101, sep = 102, vocab = minilm_tokenizer_vocab_size(tok);
  for (int i = 0; i < vocab; i++) {
    const char *t = minilm_tokenizer_token(tok, i);
    if (!strcmp(t, "[CLS]")) cls = i;
    if (!strcmp(t, "[SEP]")) sep = i;
  }
  for (int li = 0; li < NLEN; li++) {
    int n = k_lengths[li] < c->max_seq_len ? k_lengths[li] : c->max_seq_len;
    if (rows->nl && rows->lengths[rows->nl - 1] == n) continue;
    ids[0] = cls;
    for (int i = 1; i < n; i++) ids[i] = 1000 + (int32_t)((i * 7919u) % (unsigned)(vocab - 1000));
    if (n > 1) ids[n - 1] = sep;
    if ((st = time_query(enc, ids, n, e1, e2, rows))) goto done;
  }
done:
  free(ids), free(e1), free(e2);
  return st;
}

static void print_bench(const embed_args_t *a, minilm_encoder_t *enc, const bench_rows_t *b) {
  const char *dk = hcq_device_kind_name(a->kind), *gk = graph_kind(enc);
  int nl = b->nl;
  if (a->json) {
    printf("{\"lengths\": [");
    for (int i = 0; i < nl; i++) printf("%s%d", i ? ", " : "", b->lengths[i]);
    printf("], \"eager_ms\": [");
    for (int i = 0; i < nl; i++) printf("%s%.4f", i ? ", " : "", b->eager[i]);
    printf("], \"graph_ms\": [");
    for (int i = 0; i < nl; i++) printf("%s%.4f", i ? ", " : "", b->graph[i]);
    printf(
        "], \"captures\": %d, \"kernels_per_query\": %zu, \"identical\": %s, \"device_kind\": "
        "\"%s\", "
        "\"graph_kind\": \"%s\"}\n",
        minilm_encoder_captures(enc), minilm_encoder_kernels(enc), b->identical ? "true" : "false",
        dk, gk);
    return;
  }
  printf(
      "all-MiniLM-L6-v2 on %s:0, one query at a time (%zu kernels a query), median ms per "
      "query\n",
      dk, minilm_encoder_kernels(enc));
  printf("%8s %10s %10s %8s\n", "tokens", "eager", "graph", "speedup");
  for (int i = 0; i < nl; i++)
    printf("%8d %10.3f %10.3f %7.2fx\n", b->lengths[i], b->eager[i], b->graph[i],
           b->eager[i] / b->graph[i]);
  printf(
      "captures: %d for all %d lengths (graph kind %s); replays %s the eager queries bit for "
      "bit\n",
      minilm_encoder_captures(enc), nl, gk, b->identical ? "match" : "DO NOT match");
}

static int bench(const embed_args_t *a, minilm_encoder_t *enc, const minilm_tokenizer_t *tok) {
  bench_rows_t rows;
  hcq_status_t st = time_queries(enc, tok, &rows);
  if (st) return cli_fail(st);
  print_bench(a, enc, &rows);
  return rows.identical ? HCQ_EXIT_OK : HCQ_EXIT_CHECK_MISMATCH;
}

/* The texts' token ids (max_seq_len apart), counts and embeddings (hidden apart). */
typedef struct embedded {
  int32_t *ids;
  int *len;
  float *emb;
} embedded_t;

static hcq_status_t embed_all(const embed_args_t *a, minilm_encoder_t *enc,
                              const minilm_tokenizer_t *tok, const embedded_t *e) {
  const minilm_config_t *c = minilm_encoder_config(enc);
  for (int i = 0; i < a->ntexts; i++) {
    int32_t *t = e->ids + (size_t)i * (size_t)c->max_seq_len;
    hcq_status_t st = minilm_tokenize(tok, a->texts[i], c->max_seq_len, t, &e->len[i]);
    if (st) return hcq_status_annotate(st, "text %d", i + 1);
    /* The first text is run under the capture; every other one replays it with its own n. */
    TRY(minilm_encoder_set_input(enc, t, e->len[i]));
    TRY(i == 0 ? minilm_encoder_capture(enc) : minilm_encoder_run_graph(enc));
    TRY(minilm_encoder_embedding(enc, e->emb + (size_t)i * (size_t)c->hidden));
  }
  return NULL;
}

static void print_json(const embed_args_t *a, minilm_encoder_t *enc, const embedded_t *e) {
  const minilm_config_t *c = minilm_encoder_config(enc);
  int n = a->ntexts, h = c->hidden;
  printf("{\"model\": \"all-MiniLM-L6-v2\", \"texts\": [");
  for (int i = 0; i < n; i++) {
    if (i) printf(", ");
    cli_print_text(stdout, a->texts[i], 0, true);
  }
  printf("], \"token_ids\": [");
  for (int i = 0; i < n; i++) {
    printf("%s[", i ? ", " : "");
    for (int j = 0; j < e->len[i]; j++)
      printf("%s%d", j ? ", " : "", (int)e->ids[(size_t)i * (size_t)c->max_seq_len + (size_t)j]);
    printf("]");
  }
  printf("], \"embeddings\": [");
  for (int i = 0; i < n; i++) {
    printf("%s[", i ? ", " : "");
    for (int j = 0; j < h; j++)
      printf("%s%.9g", j ? ", " : "", (double)e->emb[(size_t)i * (size_t)h + (size_t)j]);
    printf("]");
  }
  printf("], \"captures\": %d, \"device_kind\": \"%s\", \"graph_kind\": \"%s\"}\n",
         minilm_encoder_captures(enc), hcq_device_kind_name(a->kind), graph_kind(enc));
}

/* The n x n matrix of the embeddings' dot products (they are normalized: cosines). */
static void print_similarity(const float *emb, int n, int h) {
  printf("cosine similarity:\n%6s", "");
  for (int j = 0; j < n; j++) {
    char label[16];
    snprintf(label, sizeof(label), "[%d]", j + 1);
    printf(" %6s", label);
  }
  printf("\n");
  for (int i = 0; i < n; i++) {
    char label[16];
    snprintf(label, sizeof(label), "[%d]", i + 1);
    printf("%6s", label);
    for (int j = 0; j < n; j++) {
      double d = 0;
      for (int k = 0; k < h; k++)
        d +=
            (double)emb[(size_t)i * (size_t)h + (size_t)k] * emb[(size_t)j * (size_t)h + (size_t)k];
      printf(" %6.3f", d);
    }
    printf("\n");
  }
}

static void print_text(const embed_args_t *a, minilm_encoder_t *enc, const embedded_t *e) {
  int n = a->ntexts, h = minilm_encoder_config(enc)->hidden;
  for (int i = 0; i < n; i++) {
    const float *v = e->emb + (size_t)i * (size_t)h;
    printf("[%d] %3d tokens  embedding %+.4f %+.4f %+.4f %+.4f ...  ", i + 1, e->len[i],
           (double)v[0], (double)v[1], (double)v[2], (double)v[3]);
    cli_print_text(stdout, a->texts[i], ECHO_CHARS, false);
    putchar('\n');
  }
  if (n > SIMILARITY_TEXTS && !a->similarity)
    printf(
        "cosine similarity: left out for %d texts (more than %d; --similarity prints the %dx%d "
        "matrix)\n",
        n, SIMILARITY_TEXTS, n, n);
  else if (n > 1)
    print_similarity(e->emb, n, h);
  printf("%s:0, %d capture for %d texts (graph kind %s)\n", hcq_device_kind_name(a->kind),
         minilm_encoder_captures(enc), n, graph_kind(enc));
}

static int embed_texts(const embed_args_t *a, minilm_encoder_t *enc,
                       const minilm_tokenizer_t *tok) {
  const minilm_config_t *c = minilm_encoder_config(enc);
  size_t n = (size_t)a->ntexts;
  embedded_t e = {malloc(n * (size_t)c->max_seq_len * sizeof(*e.ids)), calloc(n, sizeof(int)),
                  malloc(n * (size_t)c->hidden * sizeof(float))};
  hcq_status_t st = e.ids && e.len && e.emb ? embed_all(a, enc, tok, &e)
                                            : hcq_status_make(HCQ_OUT_OF_MEMORY, "out of memory");
  int rc = HCQ_EXIT_OK;
  if (st)
    rc = cli_fail(st);
  else if (a->json)
    print_json(a, enc, &e);
  else
    print_text(a, enc, &e);
  free(e.ids), free(e.len), free(e.emb);
  return rc;
}

/* The tokenizer and an encoder of the model in dir on a device of the kind. */
static hcq_status_t open_encoder(const char *dir, hcq_device_kind_t kind, minilm_tokenizer_t **tok,
                                 minilm_encoder_t **enc) {
  TRY(minilm_tokenizer_load(dir, tok));
  minilm_model_t model;
  TRY(minilm_model_load(dir, &model));
  minilm_encoder_options_t opt = {kind};
  hcq_status_t st = minilm_encoder_create(&model, &opt, enc);
  minilm_model_free(&model);
  return st;
}

int cli_embed(int argc, char **argv) {
  embed_args_t a;
  int rc = parse_args(argc, argv, &a);
  if (rc >= 0) {
    free(a.texts);
    return rc;
  }
  char dir[PATH_MAX];
  hcq_status_t st = model_dir(&a, dir, sizeof(dir));
  if (st) {
    free(a.texts);
    return cli_fail(st);
  }
  if (a.fetch) {
    printf("%s\n", dir);
    free(a.texts);
    return HCQ_EXIT_OK;
  }
  minilm_tokenizer_t *tok = NULL;
  minilm_encoder_t *enc = NULL;
  if ((st = open_encoder(dir, a.kind, &tok, &enc)))
    rc = cli_fail(st);
  else
    rc = a.bench ? bench(&a, enc, tok) : embed_texts(&a, enc, tok);
  hcq_status_t dst = minilm_encoder_destroy(enc);
  if (dst && rc == HCQ_EXIT_OK)
    rc = cli_fail(dst);
  else
    hcq_status_destroy(dst);
  minilm_tokenizer_free(tok);
  free(a.texts);
  return rc;
}
