/* The chat template: ChatML, with the template's default system prompt (contract: tokenizer.h).
 *
 * No Jinja is run. ChatML templates differ in little but the default system prompt, which the
 * ones that have one (SmolLM2, Qwen2.5) hold as a string literal
 *     '<|im_start|>system\nYou are ...<|im_end|>\n'
 * inserted when the first message is not a system one; that literal is read out of the template
 * text. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tokenizer.h"

static const char *find_in(const char *s, size_t n, const char *needle) {
  size_t m = strlen(needle);
  return m <= n ? memmem(s, n, needle, m) : NULL;
}

/* Families of other templates, by a marker (llama.cpp's detection, roughly in its order). */
static const struct {
  const char *marker, *family;
} families[] = {
    {"<|im_sep|>", "phi4"},
    {"<end_of_utterance>", "smolvlm"},
    {"[INST]", "mistral / llama2"},
    {"<|start_header_id|>", "llama3"},
    {"<start_of_turn>", "gemma"},
    {"<|assistant|>", "phi3 / zephyr / glm"},
    {"<|START_OF_TURN_TOKEN|>", "command-r"},
    {"<\xEF\xBD\x9C" "User\xEF\xBD\x9C>", "deepseek"},
    {"### Instruction:", "alpaca / deepseek-coder"},
    {"USER: ", "vicuna"},
};

/* The default system prompt: the text of the first string literal that holds a whole
 * "<|im_start|>system\n...<|im_end|>", Jinja escapes undone; NULL when there is none. *len is its
 * length. The result is malloc'd; *nomem is set when that fails. */
static char *default_system(const char *tmpl, size_t n, size_t *len, bool *nomem) {
  static const char head[] = "<|im_start|>system", tail[] = "<|im_end|>";
  for (const char *p = tmpl, *end = tmpl + n; (p = find_in(p, (size_t)(end - p), head)); p++) {
    /* The quote that opens the literal: the nearest one before. */
    const char *q = p;
    while (q > tmpl && q[-1] != '\'' && q[-1] != '"') q--;
    if (q == tmpl) continue;
    char quote = q[-1];
    const char *c = p + sizeof(head) - 1;
    if (c < end && *c == '\n') c++;
    else if (end - c >= 2 && c[0] == '\\' && c[1] == 'n') c += 2;
    else continue;
    char *out = malloc((size_t)(end - c) + 1);
    if (!out) {
      *nomem = true;
      return NULL;
    }
    size_t o = 0;
    bool ok = false;
    while (c < end) {
      if ((size_t)(end - c) >= sizeof(tail) - 1 && !memcmp(c, tail, sizeof(tail) - 1)) {
        ok = true;
        break;
      }
      if (*c == quote) break; /* the literal ends first: the prompt is not all in it */
      if (*c == '\\' && c + 1 < end) {
        char e = c[1];
        out[o++] = e == 'n' ? '\n' : e == 't' ? '\t' : e == 'r' ? '\r' : e;
        c += 2;
        continue;
      }
      out[o++] = *c++;
    }
    if (ok) {
      out[o] = 0;
      *len = o;
      return out;
    }
    free(out);
  }
  return NULL;
}

hcq_status_t llm_chat_format_template(const char *tmpl, size_t tmpl_len, const char *system, const char *user,
                                      char **out) {
  if (!out) return hcq_status_make(HCQ_INVALID_ARGUMENT, "llm_chat_format: out is NULL");
  *out = NULL;
  if (!user) return hcq_status_make(HCQ_INVALID_ARGUMENT, "llm_chat_format: user is NULL");
  char *dflt = NULL;
  size_t sys_len = 0;
  if (tmpl) {
    bool chatml = find_in(tmpl, tmpl_len, "<|im_start|>") && !find_in(tmpl, tmpl_len, "<|im_sep|>") &&
                  !find_in(tmpl, tmpl_len, "<end_of_utterance>");
    if (!chatml) {
      for (size_t i = 0; i < sizeof(families) / sizeof(families[0]); i++)
        if (find_in(tmpl, tmpl_len, families[i].marker))
          return hcq_status_make(HCQ_UNIMPLEMENTED,
                                 "a chat template of the %s family (it has %s) is not supported: only ChatML "
                                 "(<|im_start|>) templates are",
                                 families[i].family, families[i].marker);
      char start[64];
      size_t k = 0;
      for (size_t i = 0; i < tmpl_len && k + 5 < sizeof(start); i++) {
        unsigned char ch = (unsigned char)tmpl[i];
        if (ch >= 0x20 && ch < 0x7F && ch != '"') start[k++] = (char)ch;
        else k += (size_t)snprintf(start + k, sizeof(start) - k, "\\x%02x", ch);
      }
      start[k < sizeof(start) ? k : sizeof(start) - 1] = 0;
      return hcq_status_make(HCQ_UNIMPLEMENTED,
                             "an unrecognised chat template (it starts \"%s\"%s) is not supported: only ChatML "
                             "(<|im_start|>) templates are",
                             start, tmpl_len > 40 ? "..." : "");
    }
    bool nomem = false;
    if (!system) dflt = default_system(tmpl, tmpl_len, &sys_len, &nomem);
    if (nomem) return hcq_status_make(HCQ_OUT_OF_MEMORY, "llm_chat_format: out of memory");
  }
  if (system) sys_len = strlen(system);
  const char *sys = system ? system : dflt;
  size_t user_len = strlen(user), cap = sys_len + user_len + 128;
  char *s = malloc(cap);
  if (!s) {
    free(dflt);
    return hcq_status_make(HCQ_OUT_OF_MEMORY, "llm_chat_format: out of memory");
  }
  size_t o = 0;
  if (sys) {
    o += (size_t)snprintf(s, cap, "<|im_start|>system\n");
    memcpy(s + o, sys, sys_len), o += sys_len;
    o += (size_t)snprintf(s + o, cap - o, "<|im_end|>\n");
  }
  o += (size_t)snprintf(s + o, cap - o, "<|im_start|>user\n");
  memcpy(s + o, user, user_len), o += user_len;
  snprintf(s + o, cap - o, "<|im_end|>\n<|im_start|>assistant\n");
  free(dflt);
  *out = s;
  return NULL;
}

hcq_status_t llm_chat_format(const gguf_file_t *g, const char *system, const char *user, char **out) {
  if (!out) return hcq_status_make(HCQ_INVALID_ARGUMENT, "llm_chat_format: out is NULL");
  *out = NULL;
  if (!g) return hcq_status_make(HCQ_INVALID_ARGUMENT, "llm_chat_format: g is NULL");
  gguf_str_t tmpl = {NULL, 0};
  if (gguf_find_kv(g, "tokenizer.chat_template")) {
    hcq_status_t s = gguf_get_str(g, "tokenizer.chat_template", &tmpl);
    if (s) return s;
  }
  /* An empty template is no template (as llama.cpp's fallback treats it). */
  hcq_status_t s = llm_chat_format_template(tmpl.len ? tmpl.ptr : NULL, (size_t)tmpl.len, system, user, out);
  if (hcq_status_code(s) == HCQ_UNIMPLEMENTED) s = hcq_status_annotate(s, "%s: tokenizer.chat_template", gguf_path(g));
  return s;
}
