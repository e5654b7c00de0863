/* The tokenizer of a GGUF language model as llama.cpp runs it: byte-level BPE (tokenizer.ggml.model
 * "gpt2") and SentencePiece ("llama", tokenizer_spm.c), the streaming detokenizer `hcq generate`
 * prints with, and the chat templates.
 *
 * Text -> ids, in llama.cpp's order:
 *  1. special tokens: the text is cut at every occurrence of a control, user-defined or unknown
 *     token's text, longest token first (ties: lower id first), each occurrence leftmost first in
 *     what is still plain text. Control and unknown tokens are only cut out when parse_special is
 *     true (llama.cpp's special=True); user-defined ones always.
 *  BPE:
 *  2. each piece of plain text is decoded as UTF-8 as llama.cpp decodes it: a byte that does not
 *     start a sequence whose continuation bytes are all present becomes U+FFFD (so its token is
 *     that of "\xEF\xBF\xBD"); over-long forms and surrogates are accepted as the code point they
 *     spell and re-encoded in shortest form. A 4-byte form above U+10FFFF is also U+FFFD here
 *     (llama.cpp aborts on it).
 *  3. pre-tokenization into words by the model's tokenizer.ggml.pre:
 *       smollm (also starcoder, refact, codeshell): every \p{N} character alone, then the GPT-2
 *         split on the text between;
 *       gpt-2 (also phi-2): the GPT-2 split:
 *         's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
 *       llama-bpe (also llama3, llama-v3): llama 3's split, and a word that is a whole token is
 *         that token (no merges):
 *         (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|
 *         ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
 *       qwen2 (also deepseek-r1-qwen, megrez, stablelm2): llama 3's split with \p{N} for
 *         \p{N}{1,3} (each digit alone), merges as usual;
 *       default (also a file without tokenizer.ggml.pre, as llama.cpp): four splits one after the
 *         other, each keeping what it does not match as pieces of their own:
 *         [\p{P}\$\+<=>\^~\|]+ , the GPT-2 split, \p{N}+ , [0-9][0-9][0-9]
 *     \p{L}, \p{N} and \p{P} are the general categories L*, N* and P* (unicode_llm.c, generated
 *     from Python's unicodedata), \s is Unicode's White_Space. Other pre-tokenizers are
 *     UNIMPLEMENTED.
 *  4. each word's bytes, mapped to GPT-2's byte characters, are merged pair by pair, lowest
 *     tokenizer.ggml.merges rank first (leftmost first among equal ranks), and each resulting piece
 *     is its vocab id (a piece that is not in the vocab: the ids of its single bytes that are).
 *  SentencePiece (llama.cpp's llm_tokenizer_spm):
 *  2. each piece of plain text has its spaces replaced by U+2581, with one U+2581 in front when
 *     tokenizer.ggml.add_space_prefix (default true) says so and the piece starts the text or
 *     follows a special token; its bytes are not decoded (invalid UTF-8 goes through as bytes);
 *  3. the symbols are its characters as llama.cpp counts them (a lead byte's length, cut at the
 *     end); repeatedly the adjacent pair whose concatenation is a vocab token with the highest
 *     tokenizer.ggml.scores value merges (leftmost first on ties);
 *  4. each final symbol is its token, else each of its bytes is its byte token <0xXX> (else the
 *     one-byte token; a byte with neither is left out, where llama.cpp throws).
 *  5. BOS in front and EOS at the end when the model says so (tokenizer.ggml.add_bos_token: default
 *     true for SentencePiece and llama-bpe, else false; add_eos_token: default false) and the
 *     caller asks for it. SentencePiece's default ids are llama.cpp's: bos 1, eos 2, unk 0.
 *
 * Ids -> bytes: BPE: a normal token's text with GPT-2's byte<->character map undone (a character
 * outside that map, which no byte-level vocab has, is kept as its UTF-8); SentencePiece: a normal
 * token's text with U+2581 as a space, a byte token <0xXX> its byte. Control and unknown tokens
 * give their text only when asked for special tokens; user-defined tokens always give their text;
 * unused and undefined tokens give nothing. No clean-up of spaces is done, so
 * detokenize(tokenize(s)) == s for valid UTF-8 s, but for llama.cpp's one rule: with
 * add_space_prefix, llm_detokenize drops one leading space of the first token's bytes (the
 * streaming detokenizer does not).
 *
 * The tokens spelled <|endoftext|>, <|im_end|>, <|eot_id|>, <|end|>, <end_of_turn>,
 * <|end_of_text|>, <|eom_id|>, </s>, <EOT> and <end_of_utterance> are made control tokens that end
 * a generation, as llama.cpp does.
 *
 * Threads: a tokenizer is read-only after llm_tokenizer_from_gguf; any number of threads may call
 * the functions below on it at once (each with its own llm_detok_t). It does not refer to the GGUF
 * file after it is built. Building it hashes the vocab once (Gemma 3's 262,144 tokens: ~40 ms).
 */
#ifndef HCQ_LLM_TOKENIZER_H
#define HCQ_LLM_TOKENIZER_H

#include <hcq/hcq.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "gguf.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The longest token, in bytes (its text, and its bytes once decoded): a vocab with a longer one is
 * refused (INVALID_ARGUMENT naming the token). */
#define LLM_TOKEN_MAX_BYTES 1024
/* The most bytes one llm_detok_push writes: up to 3 held bytes and one token, each byte at worst a
 * U+FFFD (3 bytes). */
#define LLM_DETOK_MAX_OUT (3 * (LLM_TOKEN_MAX_BYTES + 3))
/* The longest text llm_tokenize accepts (longer: INVALID_ARGUMENT). */
#define LLM_TOKENIZE_MAX_BYTES ((size_t)256 << 20)

/* tokenizer.ggml.token_type values (llama.cpp's numbering). */
typedef enum llm_token_type {
  LLM_TOKEN_UNDEFINED = 0,
  LLM_TOKEN_NORMAL = 1,
  LLM_TOKEN_UNKNOWN = 2,
  LLM_TOKEN_CONTROL = 3,
  LLM_TOKEN_USER_DEFINED = 4,
  LLM_TOKEN_UNUSED = 5,
  LLM_TOKEN_BYTE = 6,
} llm_token_type_t;

typedef struct llm_tokenizer llm_tokenizer_t;

/* Builds the tokenizer of a GGUF model from its tokenizer.ggml.* metadata: model ("gpt2" or
 * "llama"), pre (BPE; optional: default), tokens, token_type (optional: all normal), merges (BPE),
 * scores (SentencePiece; float32 or int32, optional: all 0), bos/eos/eot/unknown_token_id,
 * add_bos_token, add_eos_token, add_space_prefix (optional). A missing or ill-typed required key,
 * an id out of the vocab, a token_type or scores array shorter than the vocab or a token longer
 * than LLM_TOKEN_MAX_BYTES is INVALID_ARGUMENT naming the file and the key; another model or
 * pre-tokenizer is UNIMPLEMENTED naming it. */
HCQ_MUST_USE hcq_status_t llm_tokenizer_from_gguf(const gguf_file_t *g, llm_tokenizer_t **out);
void llm_tokenizer_free(llm_tokenizer_t *t); /* NULL is accepted */

int32_t llm_tokenizer_vocab_size(const llm_tokenizer_t *t);
/* -1 when the model names none. */
int32_t llm_tokenizer_bos(const llm_tokenizer_t *t);
int32_t llm_tokenizer_eos(const llm_tokenizer_t *t);
int32_t llm_tokenizer_eot(const llm_tokenizer_t *t);
int32_t llm_tokenizer_unk(const llm_tokenizer_t *t);
/* Whether llm_tokenize puts BOS in front / EOS at the end (when with_bos is true). */
bool llm_tokenizer_add_bos(const llm_tokenizer_t *t);
bool llm_tokenizer_add_eos(const llm_tokenizer_t *t);
/* Whether it is a SentencePiece tokenizer (tokenizer.ggml.model "llama"). */
bool llm_tokenizer_is_spm(const llm_tokenizer_t *t);
/* End of generation: eos, eot, and the tokens spelled as listed at the top of this file. */
bool llm_tokenizer_is_eog(const llm_tokenizer_t *t, int32_t id);
/* tokenizer.ggml.pre as the file spells it ("smollm"). */
const char *llm_tokenizer_pre_name(const llm_tokenizer_t *t);
/* The token's type; LLM_TOKEN_UNDEFINED for an id out of range. */
llm_token_type_t llm_token_type(const llm_tokenizer_t *t, int32_t id);
/* The token's text as the vocab spells it (byte characters not undone; not NUL-terminated), its
 * length in *out_len; NULL for an id out of range. */
const char *llm_token_text(const llm_tokenizer_t *t, int32_t id, size_t *out_len);
/* The id of the token whose vocab text is text[0..len), or -1. */
int32_t llm_token_find(const llm_tokenizer_t *t, const char *text, size_t len);

/* Tokenizes len bytes of text (any bytes: NULs and invalid UTF-8 are fine; see the top of this
 * file). parse_special: control tokens spelled in the text are single ids. with_bos: BOS in front
 * and EOS at the end when llm_tokenizer_add_bos / add_eos say so (llama.cpp's add_special).
 * *out_ids is malloc'd (free it; NULL when *out_n is 0). Text longer than LLM_TOKENIZE_MAX_BYTES is
 * INVALID_ARGUMENT. */
HCQ_MUST_USE hcq_status_t llm_tokenize(const llm_tokenizer_t *t, const char *text, size_t len,
                                       bool parse_special, bool with_bos, int32_t **out_ids,
                                       size_t *out_n);

/* The raw bytes of one token (see the top of this file): *out points into the tokenizer, valid
 * until llm_tokenizer_free; the length is returned. Control and unknown tokens give their text only
 * when special is true, else nothing. An id out of range gives 0 bytes (*out = ""). The bytes need
 * not be valid UTF-8 (a token may hold part of a character). */
size_t llm_token_bytes(const llm_tokenizer_t *t, int32_t id, bool special, const char **out);

/* Streaming detokenizer: caller storage, set up by llm_detok_init (no free needed).
 *
 * The tokens' bytes are one stream. Each push writes the part of the stream that is complete
 * UTF-8 and holds back a final incomplete sequence (at most 3 bytes) until the next push completes
 * it. Bytes that cannot be part of a well-formed sequence (Unicode's table 3-7: no over-long forms,
 * no surrogates, nothing above U+10FFFF) are written as U+FFFD, one U+FFFD per maximal ill-formed
 * subpart (as Python's errors="replace" and WHATWG's decoder do): a lone continuation byte is one
 * U+FFFD, so is a truncated sequence "\xE4\xB8" followed by "a". So every push writes whole,
 * valid UTF-8 characters only, and the concatenated output of valid input is the input.
 * flush writes a held incomplete sequence as one U+FFFD and resets the state. */
typedef struct llm_detok {
  uint8_t held[4]; /* an incomplete sequence's first bytes */
  uint8_t nheld;   /* 0..3 */
} llm_detok_t;

void llm_detok_init(llm_detok_t *d);
/* Feeds id (special as for llm_token_bytes); writes at most cap bytes to out and returns how many.
 * cap >= LLM_DETOK_MAX_OUT always suffices; with less, output that does not fit is dropped. */
size_t llm_detok_push(const llm_tokenizer_t *t, llm_detok_t *d, int32_t id, bool special, char *out,
                      size_t cap);
/* Writes what is held (as U+FFFD: at most 3 bytes; cap >= 3 suffices) and resets d. */
size_t llm_detok_flush(llm_detok_t *d, char *out, size_t cap);

/* The whole text of n ids (the streaming detokenizer's output, flushed) as a malloc'd
 * NUL-terminated string: always valid UTF-8; embedded NULs are possible (a NUL byte token). */
HCQ_MUST_USE hcq_status_t llm_detokenize(const llm_tokenizer_t *t, const int32_t *ids, size_t n,
                                         bool special, char **out);
/* The same, with the text's length (embedded NULs included) in *out_len. */
HCQ_MUST_USE hcq_status_t llm_detokenize_len(const llm_tokenizer_t *t, const int32_t *ids, size_t n,
                                             bool special, char **out, size_t *out_len);

/* ---- chat templates (chat.c) ----
 *
 * A conversation rendered as llama.cpp's built-in templates render it (llm_chat_apply_template); no
 * Jinja is run. The families, with the conversation system S, user U1, assistant A, user U2 and the
 * generation prompt:
 *   chatml  <|im_start|>system\nS<|im_end|>\n<|im_start|>user\nU1<|im_end|>\n
 *           <|im_start|>assistant\nA<|im_end|>\n<|im_start|>user\nU2<|im_end|>\n
 *           <|im_start|>assistant\n
 *   llama3  <|start_header_id|>system<|end_header_id|>\n\nS<|eot_id|> ... (user, assistant alike)
 *           <|start_header_id|>assistant<|end_header_id|>\n\n   (contents trimmed)
 *   gemma   <start_of_turn>user\nS\n\nU1<end_of_turn>\n<start_of_turn>model\nA<end_of_turn>\n
 *           <start_of_turn>user\nU2<end_of_turn>\n<start_of_turn>model\n
 *           (no system role: the system text opens the next user turn; contents trimmed)
 *   llama2  [INST] S\nU1 [/INST]A</s>[INST] U2 [/INST]      (llama2-sys: "<<SYS>>\nS\n<</SYS>>\n\n"
 *           for the system text; llama2-sys-bos: "<s>[INST] " from the second turn on;
 *           llama2-sys-strip: contents trimmed; no generation prompt)
 *   mistral-v1, -v3, -v3-tekken, -v7: Mistral's official [INST] layouts (llama-chat.cpp).
 * A template is recognised from tokenizer.chat_template by llama.cpp's substring tests, in its
 * order: "<|im_start|>" is chatml (unless "<|im_sep|>": phi4, or "<end_of_utterance>": smolvlm), a
 * template starting "mistral" or holding "[INST]" is mistral-v7 ("[SYSTEM_PROMPT]"), v1/v3/
 * v3-tekken (Mistral's official markers) or a llama2 variant ("content.strip()", "bos_token +
 * '[INST]", "<<SYS>>"), "<start_of_turn>" is gemma, "<|start_header_id|>" with "<|end_header_id|>"
 * llama3; a template that is a family's name is that family. Other families (phi3, zephyr,
 * command-r, ...) are UNIMPLEMENTED naming the family found; an unrecognised template is
 * UNIMPLEMENTED quoting its start. */
typedef enum llm_chat_kind {
  LLM_CHAT_CHATML,
  LLM_CHAT_LLAMA3,
  LLM_CHAT_GEMMA,
  LLM_CHAT_LLAMA2,
  LLM_CHAT_LLAMA2_SYS,
  LLM_CHAT_LLAMA2_SYS_BOS,
  LLM_CHAT_LLAMA2_SYS_STRIP,
  LLM_CHAT_MISTRAL_V1,
  LLM_CHAT_MISTRAL_V3,
  LLM_CHAT_MISTRAL_V3_TEKKEN,
  LLM_CHAT_MISTRAL_V7,
  LLM_CHAT_KIND_COUNT
} llm_chat_kind_t;

typedef struct llm_chat_message {
  const char *role; /* "system", "user", "assistant" */
  const char *content;
} llm_chat_message_t;

/* The family's name ("chatml", "llama2-sys", ...), and back (an unknown name: INVALID_ARGUMENT
 * listing the names). */
const char *llm_chat_kind_name(llm_chat_kind_t kind);
HCQ_MUST_USE hcq_status_t llm_chat_kind_from_name(const char *name, llm_chat_kind_t *out);
/* The family of a template's text (see above). */
HCQ_MUST_USE hcq_status_t llm_chat_detect(const char *tmpl, size_t tmpl_len, llm_chat_kind_t *out);
/* n messages rendered; add_generation_prompt: the assistant's opening after them. *out malloc'd. */
HCQ_MUST_USE hcq_status_t llm_chat_apply(llm_chat_kind_t kind, const llm_chat_message_t *msgs,
                                         size_t n, bool add_generation_prompt, char **out);

/* n messages in the template tmpl (NULL: none) or the family named by forced (not NULL: tmpl is
 * not read); without a system message first, a ChatML template's default system prompt (below) is
 * put first. A model without a template and no forced family is INVALID_ARGUMENT. *out malloc'd. */
HCQ_MUST_USE hcq_status_t llm_chat_render(const char *tmpl, size_t tmpl_len, const char *forced,
                                          const llm_chat_message_t *msgs, size_t n,
                                          bool add_generation_prompt, char **out);
/* The prompt for one user message with the generation prompt, in the model's template, or in the
 * family named by forced (when not NULL: the template is then not read). system NULL: for chatml,
 * the template's default system prompt, if it has one: the first string literal of the template
 * that holds a whole "<|im_start|>system\n...<|im_end|>" (SmolLM2's and Qwen2.5's templates insert
 * theirs so when the first message is not a system one); else no system message. system "" is an
 * empty system message. A model without a template (or with an empty one) and no forced family is
 * INVALID_ARGUMENT ("has no chat template"). *out is malloc'd. */
HCQ_MUST_USE hcq_status_t llm_chat_format_as(const gguf_file_t *g, const char *forced,
                                             const char *system, const char *user, char **out);
HCQ_MUST_USE hcq_status_t llm_chat_format(const gguf_file_t *g, const char *system,
                                          const char *user, char **out);
/* The same from the template text itself (tmpl NULL: no template). */
HCQ_MUST_USE hcq_status_t llm_chat_format_template(const char *tmpl, size_t tmpl_len,
                                                   const char *forced, const char *system,
                                                   const char *user, char **out);

#ifdef __cplusplus
}
#endif
#endif
