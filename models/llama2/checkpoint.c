/* llama2.c "legacy" checkpoints: read with full validation, generate, write. */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "llama2.h"
#include "model_file.h"
#include "model_status.h"

#define HEADER_BYTES (7 * 4)

hcq_status_t llama2_config_from_header(const int32_t h[7], const char *what, llama2_config_t *out) {
  static const char *const names[7] = {"dim",        "hidden_dim", "n_layers", "n_heads",
                                       "n_kv_heads", "vocab_size", "seq_len"};
  /* Bounds keep every size computation far from overflow; real checkpoints are well inside. */
  static const int64_t limits[7] = {1 << 16, 1 << 18, 1 << 10, 1 << 12, 1 << 12, 1 << 22, 1 << 20};
  for (int i = 0; i < 7; i++) {
    int64_t v = i == 5 ? llabs((long long)h[i]) : h[i];
    if (v <= 0 || v > limits[i])
      return hcq_model_invalid(what, "bad header: %s is %" PRId32 " (expected 1..%" PRId64 "%s)",
                               names[i], h[i], limits[i],
                               i == 5 ? ", negative when the classifier is stored separately" : "");
  }
  llama2_config_t c = {h[0], h[1], h[2], h[3], h[4], h[5] < 0 ? -h[5] : h[5], h[6], h[5] > 0};
  if (c.dim % c.n_heads)
    return hcq_model_invalid(what, "bad header: dim %d is not a multiple of n_heads %d", c.dim,
                             c.n_heads);
  if (c.n_kv_heads > c.n_heads || c.n_heads % c.n_kv_heads)
    return hcq_model_invalid(what, "bad header: n_heads %d is not a multiple of n_kv_heads %d",
                             c.n_heads, c.n_kv_heads);
  if (llama2_head_size(&c) % 2)
    return hcq_model_invalid(
        what, "bad header: head size %d (dim / n_heads) is odd; rotary embedding needs pairs",
        llama2_head_size(&c));
  *out = c;
  return NULL;
}

/* Floats of each tensor, in file order; the index of the classifier is 13. */
static void tensor_floats(const llama2_config_t *c, uint64_t n[14]) {
  uint64_t d = (uint64_t)c->dim, hd = (uint64_t)c->hidden_dim, l = (uint64_t)c->n_layers,
           v = (uint64_t)c->vocab_size;
  uint64_t kv = (uint64_t)llama2_kv_dim(c), hs = (uint64_t)llama2_head_size(c),
           seq = (uint64_t)c->seq_len;
  uint64_t sizes[14] = {v * d,
                        l * d,
                        l * d * d,
                        l * d * kv,
                        l * d * kv,
                        l * d * d,
                        l * d,
                        l * hd * d,
                        l * d * hd,
                        l * hd * d,
                        d,
                        seq * hs / 2,
                        seq * hs / 2,
                        c->shared_classifier ? 0 : v * d};
  memcpy(n, sizes, sizeof(sizes));
}

static uint64_t total_floats(const llama2_config_t *c) {
  uint64_t n[14], sum = 0;
  tensor_floats(c, n);
  for (int i = 0; i < 14; i++) sum += n[i];
  return sum;
}

uint64_t llama2_checkpoint_bytes(const llama2_config_t *c) {
  return HEADER_BYTES + total_floats(c) * 4;
}

static void set_pointers(llama2_checkpoint_t *ck) {
  uint64_t n[14];
  tensor_floats(&ck->config, n);
  const float *at[14];
  const float *p = ck->data;
  for (int i = 0; i < 14; i++) {
    at[i] = p;
    p += n[i];
  }
  llama2_weights_t *w = &ck->weights;
  w->token_embedding = at[0], w->rms_att = at[1], w->wq = at[2], w->wk = at[3], w->wv = at[4],
  w->wo = at[5];
  w->rms_ffn = at[6], w->w1 = at[7], w->w2 = at[8], w->w3 = at[9], w->rms_final = at[10];
  w->classifier = ck->config.shared_classifier ? at[0] : at[13];
}

hcq_status_t llama2_checkpoint_load(const char *path, llama2_checkpoint_t *out) {
  memset(out, 0, sizeof(*out));
  FILE *f;
  uint64_t file_size;
  hcq_status_t st = hcq_model_fopen(path, "checkpoint", &f, &file_size);
  if (st) return st;
  struct stat sb = {.st_size = (off_t)file_size};
  int32_t header[7];
  if ((uint64_t)sb.st_size < HEADER_BYTES) {
    st = hcq_model_invalid(path, "short file: %lld bytes, less than the %d-byte header",
                           (long long)sb.st_size, HEADER_BYTES);
  } else if (fread(header, 4, 7, f) != 7) {
    st = hcq_model_invalid(path, "cannot read the header: %s", strerror(errno));
  } else if (!(st = llama2_config_from_header(header, path, &out->config))) {
    uint64_t want = llama2_checkpoint_bytes(&out->config);
    const llama2_config_t *c = &out->config;
    if ((uint64_t)sb.st_size != want) {
      st = hcq_model_invalid(
          path,
          "size does not match the header: the file has %lld bytes, but dim=%d hidden_dim=%d "
          "n_layers=%d n_heads=%d n_kv_heads=%d vocab_size=%d seq_len=%d with a %s classifier need "
          "%" PRIu64 " bytes",
          (long long)sb.st_size, c->dim, c->hidden_dim, c->n_layers, c->n_heads, c->n_kv_heads,
          c->vocab_size, c->seq_len, c->shared_classifier ? "shared" : "separate", want);
    } else {
      out->data_floats = (size_t)total_floats(c);
      out->data = malloc(out->data_floats * sizeof(float));
      if (!out->data)
        st = hcq_status_make(HCQ_OUT_OF_MEMORY, "%s: out of memory for %zu weights", path,
                             out->data_floats);
      else if (fread(out->data, sizeof(float), out->data_floats, f) != out->data_floats)
        st = hcq_model_invalid(path, "cannot read the weights: %s",
                               ferror(f) ? strerror(errno) : "unexpected end of file");
    }
  }
  fclose(f);
  if (st) {
    llama2_checkpoint_free(out);
    return st;
  }
  set_pointers(out);
  return NULL;
}

/* splitmix64: a fixed generator, so a seed gives the same model everywhere. */
static uint64_t next_u64(uint64_t *s) {
  uint64_t z = (*s += UINT64_C(0x9E3779B97F4A7C15));
  z = (z ^ (z >> 30)) * UINT64_C(0xBF58476D1CE4E5B9);
  z = (z ^ (z >> 27)) * UINT64_C(0x94D049BB133111EB);
  return z ^ (z >> 31);
}

/* Uniform in [lo, hi) from the top 24 bits: exact in float on every machine. */
static void fill_uniform(float *p, uint64_t n, float lo, float hi, uint64_t *s) {
  for (uint64_t i = 0; i < n; i++)
    p[i] = lo + (hi - lo) * (float)(next_u64(s) >> 40) * (1.0f / 16777216.0f);
}

hcq_status_t llama2_checkpoint_generate(llama2_shape_t shape, uint64_t seed,
                                        llama2_checkpoint_t *out) {
  memset(out, 0, sizeof(*out));
  if (shape == LLAMA2_SHAPE_SMALL)
    out->config = (llama2_config_t){64, 172, 5, 8, 4, 512, 512, false};
  else
    out->config = (llama2_config_t){288, 768, 6, 6, 6, 32000, 256, false};
  const llama2_config_t *c = &out->config;
  out->data_floats = (size_t)total_floats(c);
  out->data = malloc(out->data_floats * sizeof(float));
  if (!out->data) return hcq_status_make(HCQ_OUT_OF_MEMORY, "out of memory generating a model");
  set_pointers(out);
  uint64_t n[14], s = seed;
  tensor_floats(c, n);
  float *p = out->data;
  /* Scales. The classifier is stored separately (a shared one makes the current token's own logit
   * the largest, and greedy decoding repeats it): a random classifier over an embedding that
   * dominates the residual stream makes the next token a varied function of the current one, and
   * position-dependent attention (query and key projections at 4/sqrt(dim)) keeps it from settling
   * into a short cycle. Output projections are small (0.5/sqrt(inputs)) so the layers nudge the
   * stream rather than replace it; logits have a spread of a few units, with clear top-1 margins.
   */
  float in_d = 1.0f / sqrtf((float)c->dim), in_h = 1.0f / sqrtf((float)c->hidden_dim);
  const float scale[14] = {1.0f,        0, 4.0f * in_d, 4.0f * in_d, 1.7f * in_d,
                           0.5f * in_d, 0, 1.7f * in_d, 0.5f * in_h, 1.7f * in_d,
                           0,           0, 0,           5.0f * in_d};
  for (int t = 0; t < 11; t++) {
    if (scale[t] == 0)
      fill_uniform(p, n[t], 0.6f, 1.4f, &s); /* RMS norm weights */
    else
      fill_uniform(p, n[t], -scale[t], scale[t], &s);
    p += n[t];
  }
  /* The legacy layout's RoPE tables: nothing here reads them, but older readers did. */
  int hs = llama2_head_size(c);
  for (int part = 0; part < 2; part++)
    for (int t = 0; t < c->seq_len; t++)
      for (int i = 0; i < hs / 2; i++) {
        float angle = (float)t / powf(10000.0f, (float)(2 * i) / (float)hs);
        *p++ = part ? sinf(angle) : cosf(angle);
      }
  fill_uniform(p, n[13], -scale[13], scale[13], &s);
  return NULL;
}

hcq_status_t llama2_checkpoint_write(const llama2_checkpoint_t *ck, const char *path) {
  const llama2_config_t *c = &ck->config;
  int32_t header[7] = {c->dim,        c->hidden_dim,
                       c->n_layers,   c->n_heads,
                       c->n_kv_heads, c->shared_classifier ? c->vocab_size : -c->vocab_size,
                       c->seq_len};
  FILE *f = fopen(path, "wb");
  if (!f)
    return hcq_status_make(HCQ_INVALID_ARGUMENT, "%s: cannot create the checkpoint: %s", path,
                           strerror(errno));
  bool ok = fwrite(header, 4, 7, f) == 7 &&
            fwrite(ck->data, sizeof(float), ck->data_floats, f) == ck->data_floats;
  int err = errno;
  if (fclose(f)) ok = false;
  if (!ok)
    return hcq_status_make(HCQ_UNAVAILABLE, "%s: cannot write the checkpoint: %s", path,
                           strerror(err));
  return NULL;
}

void llama2_checkpoint_free(llama2_checkpoint_t *ck) {
  if (!ck) return;
  free(ck->data);
  memset(ck, 0, sizeof(*ck));
}

/* ---- tokenizer ---- */

/* The header and vocab_size tokens (a score, unused, and a piece each), and nothing after. */
static hcq_status_t read_tokens(FILE *f, const char *path, int vocab_size,
                                llama2_tokenizer_t *out) {
  int32_t max_len;
  out->pieces = calloc((size_t)vocab_size, sizeof(char *));
  if (!out->pieces) return hcq_status_make(HCQ_OUT_OF_MEMORY, "out of memory reading %s", path);
  if (fread(&max_len, 4, 1, f) != 1)
    return hcq_model_invalid(path, "short tokenizer file: no header");
  if (max_len <= 0 || max_len > (1 << 16))
    return hcq_model_invalid(path, "bad tokenizer header: max_token_length %" PRId32, max_len);
  for (int i = 0; i < vocab_size; i++) {
    float score;
    int32_t len;
    if (fread(&score, 4, 1, f) != 1 || fread(&len, 4, 1, f) != 1)
      return hcq_model_invalid(path, "holds %d tokens, fewer than the model's vocab_size %d", i,
                               vocab_size);
    if (len < 0 || len > max_len)
      return hcq_model_invalid(
          path, "token %d has length %" PRId32 ", outside 0..max_token_length %" PRId32, i, len,
          max_len);
    if (!(out->pieces[i] = malloc((size_t)len + 1)))
      return hcq_status_make(HCQ_OUT_OF_MEMORY, "out of memory reading %s", path);
    if (fread(out->pieces[i], 1, (size_t)len, f) != (size_t)len)
      return hcq_model_invalid(path, "token %d is cut short (%" PRId32 " bytes announced)", i, len);
    out->pieces[i][len] = '\0';
    out->vocab_size = i + 1;
  }
  if (fgetc(f) != EOF)
    return hcq_model_invalid(path, "holds more tokens than the model's vocab_size %d", vocab_size);
  return NULL;
}

hcq_status_t llama2_tokenizer_load(const char *path, int vocab_size, llama2_tokenizer_t *out) {
  memset(out, 0, sizeof(*out));
  FILE *f;
  uint64_t file_size;
  TRY(hcq_model_fopen(path, "tokenizer", &f, &file_size));
  hcq_status_t st = read_tokens(f, path, vocab_size, out);
  fclose(f);
  if (st) {
    out->vocab_size = vocab_size;
    llama2_tokenizer_free(out);
  }
  return st;
}

void llama2_tokenizer_free(llama2_tokenizer_t *tok) {
  if (!tok || !tok->pieces) return;
  for (int i = 0; i < tok->vocab_size; i++) free(tok->pieces[i]);
  free(tok->pieces);
  memset(tok, 0, sizeof(*tok));
}

static int hex_digit(char ch) {
  if (ch >= '0' && ch <= '9') return ch - '0';
  if (ch >= 'A' && ch <= 'F') return ch - 'A' + 10;
  if (ch >= 'a' && ch <= 'f') return ch - 'a' + 10;
  return -1;
}

const char *llama2_tokenizer_piece(const llama2_tokenizer_t *tok, int prev, int token,
                                   char scratch[2]) {
  if (token < 0 || token >= tok->vocab_size) return "";
  const char *p = tok->pieces[token];
  if (prev == 1 && p[0] == ' ') p++;
  /* "<0xAB>": one raw byte (the tokenizer's byte fallback). */
  if (strlen(p) == 6 && p[0] == '<' && p[1] == '0' && p[2] == 'x' && p[5] == '>' &&
      hex_digit(p[3]) >= 0 && hex_digit(p[4]) >= 0) {
    unsigned char byte = (unsigned char)(hex_digit(p[3]) * 16 + hex_digit(p[4]));
    bool printable = (byte >= 0x20 && byte < 0x7f) || byte == '\n' || byte == '\t' ||
                     byte == '\r' || byte >= 0x80;
    scratch[0] = printable ? (char)byte : '\0';
    scratch[1] = '\0';
    return scratch;
  }
  return p;
}
