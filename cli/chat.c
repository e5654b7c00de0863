/* hcq chat (hcq generate --interactive): multi-turn chat. Each turn renders the whole conversation
 * in the chat template and generates from it (the library keeps nothing between generations; the
 * prompt pass is one captured replay, so a long history costs one pass, not a step a token). */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/chat.h"
#include "cli/cli.h"
#include "llm_api.h"
#include "model_status.h"

typedef struct conversation {
  hcq_llm_message_t *msgs;
  size_t n, cap;
  size_t first_turn; /* 1 with a system message (never dropped), else 0 */
} conversation_t;

static hcq_status_t push(conversation_t *c, const char *role, const char *text, size_t len) {
  if (c->n == c->cap) {
    size_t cap = c->cap ? c->cap * 2 : 8;
    hcq_llm_message_t *grown = realloc(c->msgs, cap * sizeof(*grown));
    if (!grown) return hcq_status_make(HCQ_OUT_OF_MEMORY, "chat: out of memory");
    c->msgs = grown, c->cap = cap;
  }
  char *copy = malloc(len + 1);
  if (!copy) return hcq_status_make(HCQ_OUT_OF_MEMORY, "chat: out of memory");
  memcpy(copy, text, len);
  copy[len] = 0;
  c->msgs[c->n++] = (hcq_llm_message_t){role, copy};
  return NULL;
}

/* Drops messages [at, at + k). */
static void drop(conversation_t *c, size_t at, size_t k) {
  for (size_t i = at; i < at + k; i++) free((char *)c->msgs[i].content);
  memmove(&c->msgs[at], &c->msgs[at + k], (c->n - at - k) * sizeof(c->msgs[0]));
  c->n -= k;
}

typedef struct reply {
  FILE *out;
  char *text;
  size_t len, cap;
  bool failed; /* out of memory: the reply is not kept whole */
} reply_t;

static bool on_piece(void *user, int32_t id, const char *text, size_t len) {
  reply_t *r = user;
  (void)id;
  fwrite(text, 1, len, r->out);
  fflush(r->out);
  if (r->len + len + 1 > r->cap) {
    size_t cap = (r->len + len + 1) * 2;
    char *grown = realloc(r->text, cap);
    if (!grown) {
      r->failed = true;
      return true;
    }
    r->text = grown, r->cap = cap;
  }
  memcpy(r->text + r->len, text, len);
  r->len += len;
  return true;
}

/* The conversation's prompt through the chat template, as token ids. */
static hcq_status_t conversation_ids(const hcq_llm_t *llm, const conversation_t *c,
                                     const char *template_name, int32_t **ids, size_t *n) {
  char *text = NULL;
  *ids = NULL, *n = 0;
  hcq_status_t st;
  if ((st = llm_api_chat_text(llm, c->msgs, c->n, template_name, &text))) goto done;
  st = llm_tokenize(llm_api_tokenizer(llm), text, strlen(text), true, true, ids, n);
done:
  free(text);
  return st;
}

/* The conversation's prompt ids, dropping its oldest turns (never the last, nor the system message)
 * until they leave room positions for the reply; *ids NULL when the last turn alone leaves none. */
static hcq_status_t fit(const hcq_llm_t *llm, conversation_t *c, const char *template_name,
                        size_t room, int32_t **ids, size_t *n) {
  hcq_llm_info_t info;
  hcq_llm_get_info(llm, &info);
  for (;;) {
    TRY(conversation_ids(llm, c, template_name, ids, n));
    bool last_turn = c->n - c->first_turn <= 1;
    if (*n + room <= (size_t)info.ctx || (last_turn && *n + 1 < (size_t)info.ctx)) return NULL;
    free(*ids);
    *ids = NULL;
    if (last_turn) return NULL;
    /* the oldest user turn and the reply to it */
    size_t k = c->n - c->first_turn >= 3 ? 2 : 1;
    fprintf(stderr,
            "hcq chat: the conversation outgrew the context (%d positions): its oldest turn is "
            "dropped\n",
            info.ctx);
    drop(c, c->first_turn, k);
  }
}

/* One user turn: the reply streamed and kept. */
static hcq_status_t turn(hcq_llm_t *llm, conversation_t *c, const hcq_llm_generate_options_t *base,
                         const char *template_name, FILE *out) {
  int32_t *ids = NULL;
  size_t n = 0;
  hcq_llm_info_t info;
  hcq_llm_get_info(llm, &info);
  /* room for a whole reply (at most half the context): older turns go before a reply is cut short
   */
  size_t room = (size_t)(base->max_tokens > 0 && base->max_tokens < info.ctx / 2 ? base->max_tokens
                                                                                 : info.ctx / 2);
  hcq_status_t st = fit(llm, c, template_name, room, &ids, &n);
  if (st) return st;
  if (!ids) {
    fprintf(stderr,
            "hcq chat: that message is too long for the context (%d positions; --ctx sets it): not "
            "sent\n",
            info.ctx);
    drop(c, c->n - 1, 1);
    return NULL;
  }
  reply_t r = {.out = out};
  hcq_llm_generate_options_t o = *base;
  o.on_token = on_piece, o.user = &r, o.logprobs = false, o.on_logprob = NULL;
  hcq_llm_result_t res;
  st = hcq_llm_generate(llm, ids, n, &o, &res);
  free(ids);
  fputc('\n', out);
  fflush(out);
  if (st) goto done;
  if (r.failed) {
    st = hcq_status_make(HCQ_OUT_OF_MEMORY, "chat: out of memory");
    goto done;
  }
  st = push(c, "assistant", r.text ? r.text : "", r.len);
done:
  hcq_llm_result_free(&res);
  free(r.text);
  return st;
}

/* Lines from in, each a user turn, until its end, /exit or /quit. */
static hcq_status_t converse(hcq_llm_t *llm, conversation_t *c, const hcq_llm_generate_options_t *o,
                             const char *template_name, FILE *in, FILE *out) {
  bool tty = isatty(fileno(in));
  char *line = NULL;
  size_t cap = 0;
  hcq_status_t st = NULL;
  for (;;) {
    if (tty) fputs("> ", stderr);
    ssize_t len = getline(&line, &cap, in);
    if (len < 0) break;
    while (len > 0 && (line[len - 1] == '\n' || line[len - 1] == '\r')) line[--len] = 0;
    if (!strcmp(line, "/exit") || !strcmp(line, "/quit")) break;
    if (!len) continue;
    if ((st = push(c, "user", line, (size_t)len))) break;
    if ((st = turn(llm, c, o, template_name, out))) break;
  }
  free(line);
  return st;
}

hcq_status_t cli_chat_loop(hcq_llm_t *llm, const hcq_llm_generate_options_t *o, const char *system,
                           const char *template_name, FILE *in, FILE *out) {
  conversation_t c = {0};
  hcq_status_t st = NULL;
  if (system && (st = push(&c, "system", system, strlen(system)))) goto done;
  c.first_turn = c.n;
  st = converse(llm, &c, o, template_name, in, out);
done:
  drop(&c, 0, c.n);
  free(c.msgs);
  return st;
}

int cli_chat(int argc, char **argv) {
  char **args = malloc(((size_t)argc + 2) * sizeof(char *));
  if (!args) return cli_fail(hcq_status_make(HCQ_OUT_OF_MEMORY, "chat: out of memory"));
  memcpy(args, argv, (size_t)argc * sizeof(char *));
  args[argc] = "--interactive";
  args[argc + 1] = NULL;
  int rc = cli_generate(argc + 1, args);
  free(args);
  return rc;
}
