/* Chat templates, recognised and rendered as llama.cpp's built-in ones (llama-chat.cpp's
 * llm_chat_detect_template and llm_chat_apply_template; contract: tokenizer.h).
 *
 * No Jinja is run: a template is recognised by the markers it contains, in llama.cpp's order, and
 * the conversation is written out by the family's fixed rules. ChatML templates differ in little
 * but the default system prompt, which the ones that have one (SmolLM2, Qwen2.5) hold as a string
 * literal
 *     '<|im_start|>system\nYou are ...<|im_end|>\n'
 * inserted when the first message is not a system one; that literal is read out of the template
 * text. */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tokenizer.h"

static const char *find_in(const char *s, size_t n, const char *needle) {
  size_t m = strlen(needle);
  return m <= n ? memmem(s, n, needle, m) : NULL;
}

static const char *const kind_names[LLM_CHAT_KIND_COUNT] = {
    [LLM_CHAT_CHATML] = "chatml",
    [LLM_CHAT_LLAMA3] = "llama3",
    [LLM_CHAT_GEMMA] = "gemma",
    [LLM_CHAT_LLAMA2] = "llama2",
    [LLM_CHAT_LLAMA2_SYS] = "llama2-sys",
    [LLM_CHAT_LLAMA2_SYS_BOS] = "llama2-sys-bos",
    [LLM_CHAT_LLAMA2_SYS_STRIP] = "llama2-sys-strip",
    [LLM_CHAT_MISTRAL_V1] = "mistral-v1",
    [LLM_CHAT_MISTRAL_V3] = "mistral-v3",
    [LLM_CHAT_MISTRAL_V3_TEKKEN] = "mistral-v3-tekken",
    [LLM_CHAT_MISTRAL_V7] = "mistral-v7",
};

const char *llm_chat_kind_name(llm_chat_kind_t kind) {
  return (unsigned)kind < LLM_CHAT_KIND_COUNT ? kind_names[kind] : "unknown";
}

hcq_status_t llm_chat_kind_from_name(const char *name, llm_chat_kind_t *out) {
  for (int k = 0; name && k < LLM_CHAT_KIND_COUNT; k++)
    if (!strcmp(name, kind_names[k])) {
      *out = (llm_chat_kind_t)k;
      return NULL;
    }
  return hcq_status_make(
      HCQ_INVALID_ARGUMENT,
      "chat template \"%s\" is not one hcq knows (chatml, llama3, gemma, llama2, llama2-sys, "
      "llama2-sys-bos, llama2-sys-strip, mistral-v1, mistral-v3, mistral-v3-tekken, mistral-v7)",
      name ? name : "(null)");
}

/* Families hcq does not render, by their markers, for the message (llama.cpp's detection order). */
static const struct {
  const char *marker, *also, *family;
} unsupported[] = {
    {"<|assistant|>", "<|end|>", "phi3"},
    {"[gMASK]<sop>", NULL, "chatglm4"},
    {"<|assistant|>", "<|user|>", "falcon3 / glmedge"},
    {"<|user|>", "<|endoftext|>", "zephyr"},
    {"bos_token + message['role']", NULL, "monarch"},
};
static const struct {
  const char *marker, *also, *family;
} unsupported_late[] = {
    {"GPT4 Correct ", NULL, "openchat"},
    {"USER: ", "ASSISTANT: ", "vicuna"},
    {"### Instruction:", "<|EOT|>", "deepseek-coder"},
    {"<|START_OF_TURN_TOKEN|>", "<|USER_TOKEN|>", "command-r"},
};

static hcq_status_t not_supported(const char *family, const char *marker) {
  return hcq_status_make(
      HCQ_UNIMPLEMENTED,
      "a chat template of the %s family (it has %s) is not supported: hcq renders chatml, llama3, "
      "gemma and the llama2 / mistral ones",
      family, marker);
}

/* llama.cpp's tests for the [INST] templates: mistral's official ones, then llama 2's variants. */
static llm_chat_kind_t inst_kind(const char *t, size_t n) {
  if (find_in(t, n, "[SYSTEM_PROMPT]")) return LLM_CHAT_MISTRAL_V7;
  if (find_in(t, n, "' [INST] ' + system_message") || find_in(t, n, "[AVAILABLE_TOOLS]")) {
    if (find_in(t, n, " [INST]")) return LLM_CHAT_MISTRAL_V1;
    if (find_in(t, n, "\"[INST]\"")) return LLM_CHAT_MISTRAL_V3_TEKKEN;
    return LLM_CHAT_MISTRAL_V3;
  }
  if (find_in(t, n, "content.strip()")) return LLM_CHAT_LLAMA2_SYS_STRIP;
  if (find_in(t, n, "bos_token + '[INST]")) return LLM_CHAT_LLAMA2_SYS_BOS;
  if (find_in(t, n, "<<SYS>>")) return LLM_CHAT_LLAMA2_SYS;
  return LLM_CHAT_LLAMA2;
}

/* An unrecognised template: UNIMPLEMENTED quoting its start. */
static hcq_status_t unrecognised(const char *tmpl, size_t tmpl_len) {
  char start[64];
  size_t k = 0;
  for (size_t i = 0; i < tmpl_len && k + 5 < sizeof(start); i++) {
    unsigned char ch = (unsigned char)tmpl[i];
    if (ch >= 0x20 && ch < 0x7F && ch != '"')
      start[k++] = (char)ch;
    else
      k += (size_t)snprintf(start + k, sizeof(start) - k, "\\x%02x", ch);
  }
  start[k < sizeof(start) ? k : sizeof(start) - 1] = 0;
  return hcq_status_make(
      HCQ_UNIMPLEMENTED,
      "an unrecognised chat template (it starts \"%s\"%s) is not supported: hcq renders chatml, "
      "llama3, gemma and the llama2 / mistral ones",
      start, tmpl_len > 40 ? "..." : "");
}

hcq_status_t llm_chat_detect(const char *t, size_t n, llm_chat_kind_t *out) {
  if (!t || !out)
    return hcq_status_make(HCQ_INVALID_ARGUMENT, "llm_chat_detect: template or out is NULL");
  for (int k = 0; k < LLM_CHAT_KIND_COUNT; k++) /* the template may be a name itself */
    if (n == strlen(kind_names[k]) && !memcmp(t, kind_names[k], n))
      return *out = (llm_chat_kind_t)k, NULL;
  if (find_in(t, n, "<|im_start|>")) {
    if (find_in(t, n, "<|im_sep|>")) return not_supported("phi4", "<|im_sep|>");
    if (find_in(t, n, "<end_of_utterance>")) return not_supported("smolvlm", "<end_of_utterance>");
    return *out = LLM_CHAT_CHATML, NULL;
  }
  if ((n >= 7 && !memcmp(t, "mistral", 7)) || find_in(t, n, "[INST]"))
    return *out = inst_kind(t, n), NULL;
  for (size_t i = 0; i < sizeof(unsupported) / sizeof(unsupported[0]); i++)
    if (find_in(t, n, unsupported[i].marker) &&
        (!unsupported[i].also || find_in(t, n, unsupported[i].also)))
      return not_supported(unsupported[i].family, unsupported[i].marker);
  if (find_in(t, n, "<start_of_turn>")) return *out = LLM_CHAT_GEMMA, NULL;
  for (size_t i = 0; i < sizeof(unsupported_late) / sizeof(unsupported_late[0]); i++)
    if (find_in(t, n, unsupported_late[i].marker) &&
        (!unsupported_late[i].also || find_in(t, n, unsupported_late[i].also)))
      return not_supported(unsupported_late[i].family, unsupported_late[i].marker);
  if (find_in(t, n, "<|start_header_id|>") && find_in(t, n, "<|end_header_id|>"))
    return *out = LLM_CHAT_LLAMA3, NULL;
  return unrecognised(t, n);
}

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
    if (c < end && *c == '\n')
      c++;
    else if (end - c >= 2 && c[0] == '\\' && c[1] == 'n')
      c += 2;
    else
      continue;
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

/* ---- rendering ---- */

typedef struct sbuf {
  char *p;
  size_t n, cap;
  bool nomem;
} sbuf_t;

static void put_n(sbuf_t *b, const char *s, size_t n) {
  if (b->nomem) return;
  if (b->n + n + 1 > b->cap) {
    size_t cap = 2 * b->cap + n + 256;
    char *p = realloc(b->p, cap);
    if (!p) {
      b->nomem = true;
      return;
    }
    b->p = p, b->cap = cap;
  }
  memcpy(b->p + b->n, s, n);
  b->n += n;
  b->p[b->n] = 0;
}

static void put(sbuf_t *b, const char *s) { put_n(b, s, strlen(s)); }

/* s without leading and trailing white space (C's isspace, as llama.cpp's trim). */
static void put_trimmed(sbuf_t *b, const char *s) {
  size_t a = 0, e = strlen(s);
  while (a < e && isspace((unsigned char)s[a])) a++;
  while (e > a && isspace((unsigned char)s[e - 1])) e--;
  put_n(b, s + a, e - a);
}

static void put_content(sbuf_t *b, const char *s, bool trim) {
  if (trim)
    put_trimmed(b, s);
  else
    put(b, s);
}

static bool is_role(const llm_chat_message_t *m, const char *role) {
  return !strcmp(m->role, role);
}

static void render_chatml(sbuf_t *b, const llm_chat_message_t *m, size_t n, bool add_gen) {
  for (size_t i = 0; i < n; i++)
    put(b, "<|im_start|>"), put(b, m[i].role), put(b, "\n"), put(b, m[i].content),
        put(b, "<|im_end|>\n");
  if (add_gen) put(b, "<|im_start|>assistant\n");
}

static void render_llama3(sbuf_t *b, const llm_chat_message_t *m, size_t n, bool add_gen) {
  for (size_t i = 0; i < n; i++) {
    put(b, "<|start_header_id|>"), put(b, m[i].role), put(b, "<|end_header_id|>\n\n");
    put_trimmed(b, m[i].content), put(b, "<|eot_id|>");
  }
  if (add_gen) put(b, "<|start_header_id|>assistant<|end_header_id|>\n\n");
}

/* Gemma has no system role: the system messages (trimmed, joined) open the next non-model turn;
 * "assistant" is "model". */
static void render_gemma(sbuf_t *b, const llm_chat_message_t *m, size_t n, bool add_gen) {
  sbuf_t sys = {0};
  for (size_t i = 0; i < n; i++) {
    if (is_role(&m[i], "system")) {
      put_trimmed(&sys, m[i].content);
      continue;
    }
    const char *role = is_role(&m[i], "assistant") ? "model" : m[i].role;
    put(b, "<start_of_turn>"), put(b, role), put(b, "\n");
    if (sys.n && strcmp(role, "model")) put_n(b, sys.p, sys.n), put(b, "\n\n"), sys.n = 0;
    put_trimmed(b, m[i].content), put(b, "<end_of_turn>\n");
  }
  if (sys.nomem) b->nomem = true;
  free(sys.p);
  if (add_gen) put(b, "<start_of_turn>model\n");
}

/* Llama 2's [INST] turns (no generation prompt: the prompt ends with [/INST]). */
static void render_llama2(sbuf_t *b, llm_chat_kind_t k, const llm_chat_message_t *m, size_t n) {
  bool sys_block = k != LLM_CHAT_LLAMA2, strip = k == LLM_CHAT_LLAMA2_SYS_STRIP, inside = true;
  put(b, "[INST] ");
  for (size_t i = 0; i < n; i++) {
    if (!inside) put(b, k == LLM_CHAT_LLAMA2_SYS_BOS ? "<s>[INST] " : "[INST] "), inside = true;
    if (is_role(&m[i], "system")) {
      put(b, sys_block ? "<<SYS>>\n" : ""), put_content(b, m[i].content, strip),
          put(b, sys_block ? "\n<</SYS>>\n\n" : "\n");
    } else if (is_role(&m[i], "user")) {
      put_content(b, m[i].content, strip), put(b, " [/INST]");
    } else {
      put_content(b, m[i].content, strip), put(b, "</s>"), inside = false;
    }
  }
}

/* Mistral's official v1 / v3 / v3-tekken (one [INST] block per exchange) and v7 templates. */
static void render_mistral(sbuf_t *b, llm_chat_kind_t k, const llm_chat_message_t *m, size_t n) {
  if (k == LLM_CHAT_MISTRAL_V7) {
    for (size_t i = 0; i < n; i++) {
      if (is_role(&m[i], "system"))
        put(b, "[SYSTEM_PROMPT] "), put(b, m[i].content), put(b, "[/SYSTEM_PROMPT]");
      else if (is_role(&m[i], "user"))
        put(b, "[INST] "), put(b, m[i].content), put(b, "[/INST]");
      else
        put(b, " "), put(b, m[i].content), put(b, "</s>");
    }
    return;
  }
  const char *lead = k == LLM_CHAT_MISTRAL_V1 ? " " : "",
             *trail = k == LLM_CHAT_MISTRAL_V3_TEKKEN ? "" : " ";
  bool inside = false;
  for (size_t i = 0; i < n; i++) {
    if (!inside) put(b, lead), put(b, "[INST]"), put(b, trail), inside = true;
    if (is_role(&m[i], "system"))
      put(b, m[i].content), put(b, "\n\n");
    else if (is_role(&m[i], "user"))
      put(b, m[i].content), put(b, lead), put(b, "[/INST]");
    else
      put(b, trail), put_content(b, m[i].content, k == LLM_CHAT_MISTRAL_V3), put(b, "</s>"),
          inside = false;
  }
}

hcq_status_t llm_chat_apply(llm_chat_kind_t kind, const llm_chat_message_t *msgs, size_t n,
                            bool add_generation_prompt, char **out) {
  if (!out) return hcq_status_make(HCQ_INVALID_ARGUMENT, "llm_chat_apply: out is NULL");
  *out = NULL;
  if ((unsigned)kind >= LLM_CHAT_KIND_COUNT)
    return hcq_status_make(HCQ_INVALID_ARGUMENT, "llm_chat_apply: kind %d", (int)kind);
  if (!msgs && n) return hcq_status_make(HCQ_INVALID_ARGUMENT, "llm_chat_apply: messages are NULL");
  for (size_t i = 0; i < n; i++)
    if (!msgs[i].role || !msgs[i].content)
      return hcq_status_make(HCQ_INVALID_ARGUMENT, "llm_chat_apply: message %zu has no %s", i,
                             msgs[i].role ? "content" : "role");
  sbuf_t b = {0};
  put(&b, "");
  if (kind == LLM_CHAT_CHATML)
    render_chatml(&b, msgs, n, add_generation_prompt);
  else if (kind == LLM_CHAT_LLAMA3)
    render_llama3(&b, msgs, n, add_generation_prompt);
  else if (kind == LLM_CHAT_GEMMA)
    render_gemma(&b, msgs, n, add_generation_prompt);
  else if (kind <= LLM_CHAT_LLAMA2_SYS_STRIP)
    render_llama2(&b, kind, msgs, n);
  else
    render_mistral(&b, kind, msgs, n);
  if (b.nomem) {
    free(b.p);
    return hcq_status_make(HCQ_OUT_OF_MEMORY, "llm_chat_apply: out of memory");
  }
  *out = b.p;
  return NULL;
}

/* ---- a conversation in a model's template ---- */

hcq_status_t llm_chat_render(const char *tmpl, size_t tmpl_len, const char *forced,
                             const llm_chat_message_t *msgs, size_t n, bool add_generation_prompt,
                             char **out) {
  if (!out) return hcq_status_make(HCQ_INVALID_ARGUMENT, "llm_chat_render: out is NULL");
  *out = NULL;
  if (!msgs && n)
    return hcq_status_make(HCQ_INVALID_ARGUMENT, "llm_chat_render: messages are NULL");
  llm_chat_kind_t kind = LLM_CHAT_CHATML;
  hcq_status_t s = NULL;
  if (forced)
    s = llm_chat_kind_from_name(forced, &kind);
  else if (!tmpl)
    s = hcq_status_make(HCQ_INVALID_ARGUMENT,
                        "the model has no chat template (tokenizer.chat_template)");
  else
    s = llm_chat_detect(tmpl, tmpl_len, &kind);
  if (s) return s;
  bool has_system = n && msgs[0].role && !strcmp(msgs[0].role, "system");
  char *dflt = NULL;
  size_t sys_len = 0;
  bool nomem = false;
  if (!has_system && tmpl && kind == LLM_CHAT_CHATML)
    dflt = default_system(tmpl, tmpl_len, &sys_len, &nomem);
  if (nomem) return hcq_status_make(HCQ_OUT_OF_MEMORY, "llm_chat_render: out of memory");
  if (!dflt) return llm_chat_apply(kind, msgs, n, add_generation_prompt, out);
  llm_chat_message_t *all = malloc((n + 1) * sizeof(*all));
  if (!all) s = hcq_status_make(HCQ_OUT_OF_MEMORY, "llm_chat_render: out of memory");
  if (all) {
    all[0] = (llm_chat_message_t){"system", dflt};
    if (n) memcpy(all + 1, msgs, n * sizeof(*all));
    s = llm_chat_apply(kind, all, n + 1, add_generation_prompt, out);
  }
  free(all), free(dflt);
  return s;
}

hcq_status_t llm_chat_format_template(const char *tmpl, size_t tmpl_len, const char *forced,
                                      const char *system, const char *user, char **out) {
  if (!out) return hcq_status_make(HCQ_INVALID_ARGUMENT, "llm_chat_format: out is NULL");
  *out = NULL;
  if (!user) return hcq_status_make(HCQ_INVALID_ARGUMENT, "llm_chat_format: user is NULL");
  llm_chat_message_t msgs[2];
  size_t n = 0;
  if (system) msgs[n++] = (llm_chat_message_t){"system", system};
  msgs[n++] = (llm_chat_message_t){"user", user};
  return llm_chat_render(tmpl, tmpl_len, forced, msgs, n, true, out);
}

hcq_status_t llm_chat_format_as(const gguf_file_t *g, const char *forced, const char *system,
                                const char *user, char **out) {
  if (!out) return hcq_status_make(HCQ_INVALID_ARGUMENT, "llm_chat_format: out is NULL");
  *out = NULL;
  if (!g) return hcq_status_make(HCQ_INVALID_ARGUMENT, "llm_chat_format: g is NULL");
  gguf_str_t tmpl = {NULL, 0};
  if (gguf_find_kv(g, "tokenizer.chat_template")) {
    hcq_status_t s = gguf_get_str(g, "tokenizer.chat_template", &tmpl);
    if (s) return s;
  }
  /* An empty template is no template. */
  hcq_status_t s = llm_chat_format_template(tmpl.len ? tmpl.ptr : NULL, (size_t)tmpl.len, forced,
                                            system, user, out);
  if (s && !forced && hcq_status_code(s) != HCQ_OUT_OF_MEMORY)
    s = hcq_status_annotate(s, "%s: tokenizer.chat_template", gguf_path(g));
  return s;
}

hcq_status_t llm_chat_format(const gguf_file_t *g, const char *system, const char *user,
                             char **out) {
  return llm_chat_format_as(g, NULL, system, user, out);
}
