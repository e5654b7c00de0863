/* hcq_llm_batch_*: many sequences decoded together by a batch decoder (llm_decoder_batch), one
 * replay a step. What this file adds to the decoder: the sequences' slots, which rows a step runs
 * (every decoding sequence's last token, then chunks of the prompts still entering), the tokens
 * turned into events with whole UTF-8 text, and the lock that lets other threads add and cancel. */
#include <limits.h>
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "llm_api.h"
#include "llm_batch.h"
#include "model_status.h"
#include "stop.h"

/* A sequence's text for one event: a token's (LLM_DETOK_MAX_OUT) and the held-back flush (3). */
enum { TEXT_CAP = LLM_DETOK_MAX_OUT + 8 };

typedef struct seq_slot {
  int id;          /* -1: free */
  int32_t *ids;    /* the prompt, then the tokens chosen: ctx of them at most */
  int prompt, len; /* prompt ids; ids known */
  int planned;     /* positions given rows so far (run, or in a step queued) */
  int choices;     /* rows planned that choose a token */
  int32_t fed;     /* the token at position `planned` once chosen on the device
                      (llm_decoder_batch_chosen) */
  int max_new;     /* tokens to generate at most (the room in the context when max_tokens is 0) */
  hcq_llm_generate_options_t o;
  llm_sampler_t sampler;
  llm_detok_t detok;
  char **stops; /* the stop strings, copied (the caller's may go once hcq_llm_batch_add returns) */
  llm_stop_t stop; /* the text held back for them */
  char
      *text; /* the last event's text (grows: a stop string's prefix held back comes out at once) */
  size_t text_cap;
  hcq_llm_logprob_t logprob; /* the last event's token's, with o.logprobs */
} seq_slot_t;

struct hcq_llm_batch {
  hcq_llm_t *llm;
  const llm_tokenizer_t *tok;
  llm_decoder_t *dec;
  int max_seqs, ctx, max_rows, vocab, next_id;
  seq_slot_t *slots;
  pthread_mutex_t lock;
  /* each parity's step: its rows and the id of the sequence each belongs to; the choosing rows'
   * samplers and tokens */
  llm_batch_row_t *rows[2];
  int *row_id[2], nrows[2], nsample[2];
  llm_sampler_t *samplers;
  int32_t *chosen;
  float *logits; /* a choosing row's, read for log-probabilities (vocab floats) */
  int parity;    /* the next step's */
  bool inflight; /* a step of parity !parity is queued, its tokens not read yet */
};

static hcq_status_t bad(const char *fmt, int value) {
  return hcq_status_make(HCQ_INVALID_ARGUMENT, fmt, value);
}

/* Frees the slot (its id -1) and what its sequence's stop strings held. */
static void release_slot(seq_slot_t *s) {
  s->id = -1;
  for (size_t i = 0; s->stops && i < s->o.nstop; i++) free(s->stops[i]);
  free(s->stops);
  s->stops = NULL, s->o.stop = NULL, s->o.nstop = 0;
  llm_stop_free(&s->stop);
}

/* A copy of the options' stop strings for s (freed by release_slot). */
static hcq_status_t copy_stops(seq_slot_t *s, const hcq_llm_generate_options_t *o) {
  llm_stop_init(&s->stop, NULL, 0);
  if (!o->nstop) return NULL;
  if (!(s->stops = calloc(o->nstop, sizeof(char *))))
    return hcq_status_make(HCQ_OUT_OF_MEMORY, "out of memory");
  for (size_t i = 0; i < o->nstop; i++)
    if (!(s->stops[i] = strdup(o->stop[i]))) {
      for (size_t j = 0; j < i; j++) free(s->stops[j]);
      free(s->stops), s->stops = NULL;
      return hcq_status_make(HCQ_OUT_OF_MEMORY, "out of memory");
    }
  s->o.stop = (const char *const *)s->stops, s->o.nstop = o->nstop;
  llm_stop_init(&s->stop, s->o.stop, s->o.nstop);
  return NULL;
}

static hcq_status_t parse_kind(const char *device, hcq_device_kind_t *out) {
  for (int k = 0; k < HCQ_DEVICE_KIND_COUNT; k++) {
    const char *name = hcq_device_kind_name((hcq_device_kind_t)k);
    size_t n = strlen(name);
    if (!strncmp(device, name, n) && device[n] == ':') {
      *out = (hcq_device_kind_t)k;
      return NULL;
    }
  }
  return hcq_status_make(HCQ_INTERNAL, "hcq_llm_batch_create: device \"%s\" of no known kind",
                         device);
}

/* The options with their defaults filled in, checked. */
static hcq_status_t batch_options(const hcq_llm_info_t *info, const hcq_llm_batch_options_t *in,
                                  hcq_llm_batch_options_t *o) {
  *o = in ? *in : (hcq_llm_batch_options_t){0};
  if (!o->max_seqs) o->max_seqs = 8;
  if (o->max_seqs < 1 || o->max_seqs > LLM_MAX_SLOTS)
    return hcq_status_make(HCQ_INVALID_ARGUMENT,
                           "hcq_llm_batch_create: max_seqs %d (expected 1 to %d)", o->max_seqs,
                           LLM_MAX_SLOTS);
  if (o->ctx < 0 || o->ctx > (1 << 20))
    return bad("hcq_llm_batch_create: ctx %d (expected 0 to 1048576 positions)", o->ctx);
  if (!o->ctx) o->ctx = info->ctx;
  if (!o->max_rows) o->max_rows = info->max_batch > o->max_seqs ? info->max_batch : o->max_seqs;
  if (o->max_rows < o->max_seqs || o->max_rows > 4096)
    return hcq_status_make(HCQ_INVALID_ARGUMENT,
                           "hcq_llm_batch_create: max_rows %d (expected max_seqs %d to 4096)",
                           o->max_rows, o->max_seqs);
  return NULL;
}

static hcq_status_t allocate(hcq_llm_batch_t *b) {
  size_t seqs = (size_t)b->max_seqs, rows = (size_t)b->max_rows;
  b->slots = calloc(seqs, sizeof(*b->slots));
  for (int p = 0; p < 2; p++) {
    b->rows[p] = calloc(rows, sizeof(*b->rows[p]));
    b->row_id[p] = calloc(rows, sizeof(*b->row_id[p]));
  }
  b->samplers = calloc(seqs, sizeof(*b->samplers));
  b->chosen = calloc(seqs, sizeof(*b->chosen));
  b->logits = malloc((size_t)b->vocab * sizeof(float));
  if (!b->slots || !b->rows[0] || !b->rows[1] || !b->row_id[0] || !b->row_id[1] || !b->samplers ||
      !b->chosen || !b->logits)
    return hcq_status_make(HCQ_OUT_OF_MEMORY, "out of memory");
  for (size_t i = 0; i < seqs; i++) {
    b->slots[i].id = -1;
    if (!(b->slots[i].ids = malloc((size_t)b->ctx * sizeof(int32_t))))
      return hcq_status_make(HCQ_OUT_OF_MEMORY, "out of memory");
  }
  return NULL;
}

/* b's buffers, then its decoder from the file again (the single-sequence decoder closed it once its
 * weights were on the device), captured. */
static hcq_status_t make_decoder(hcq_llm_batch_t *b, const char *path, hcq_device_kind_t kind,
                                 const hcq_llm_batch_options_t *o) {
  TRY(allocate(b));
  llm_model_t *model = NULL;
  TRY(llm_model_open(path, &model));
  llm_decoder_options_t d = {
      .kind = kind, .ctx = o->ctx, .max_batch = o->max_rows, .slots = o->max_seqs};
  hcq_status_t st = llm_decoder_create(model, &d, &b->dec);
  llm_model_close(model);
  if (st) return st;
  return llm_decoder_batch_capture(b->dec);
}

hcq_status_t hcq_llm_batch_create(hcq_llm_t *llm, const hcq_llm_batch_options_t *options,
                                  hcq_llm_batch_t **out) {
  if (!out) return hcq_status_make(HCQ_INVALID_ARGUMENT, "hcq_llm_batch_create: out is NULL");
  *out = NULL;
  if (!llm || !llm_api_decoder(llm))
    return hcq_status_make(HCQ_INVALID_ARGUMENT, "hcq_llm_batch_create: llm is NULL or not open");
  hcq_llm_info_t info;
  hcq_llm_get_info(llm, &info);
  hcq_llm_batch_options_t o;
  hcq_device_kind_t kind = HCQ_DEVICE_CPU;
  TRY(batch_options(&info, options, &o));
  TRY(parse_kind(info.device, &kind));
  hcq_llm_batch_t *b = calloc(1, sizeof(*b));
  if (!b) return hcq_status_make(HCQ_OUT_OF_MEMORY, "out of memory");
  b->llm = llm, b->tok = llm_api_tokenizer(llm), b->max_seqs = o.max_seqs, b->ctx = o.ctx,
  b->max_rows = o.max_rows;
  b->vocab = info.vocab;
  /* recursive: on_token, called under the lock, may add and cancel */
  pthread_mutexattr_t attr;
  bool locked = !pthread_mutexattr_init(&attr) &&
                !pthread_mutexattr_settype(&attr, PTHREAD_MUTEX_RECURSIVE) &&
                !pthread_mutex_init(&b->lock, &attr);
  pthread_mutexattr_destroy(&attr);
  if (!locked) {
    free(b);
    return hcq_status_make(HCQ_INTERNAL, "hcq_llm_batch_create: no mutex");
  }
  hcq_status_t st = make_decoder(b, info.path, kind, &o);
  if (st) {
    hcq_status_destroy(hcq_llm_batch_destroy(b));
    return hcq_status_annotate(st, "hcq_llm_batch_create");
  }
  b->ctx = llm_decoder_ctx(b->dec); /* at most the model's trained context */
  *out = b;
  return NULL;
}

hcq_status_t hcq_llm_batch_destroy(hcq_llm_batch_t *b) {
  if (!b) return NULL;
  hcq_status_t st = llm_decoder_destroy(b->dec);
  if (st) return st; /* still running: keep everything alive */
  if (b->slots)
    for (int i = 0; i < b->max_seqs; i++) {
      release_slot(&b->slots[i]);
      free(b->slots[i].ids), free(b->slots[i].text);
    }
  free(b->slots), free(b->rows[0]), free(b->rows[1]), free(b->row_id[0]), free(b->row_id[1]);
  free(b->samplers), free(b->chosen), free(b->logits);
  pthread_mutex_destroy(&b->lock);
  free(b);
  return NULL;
}

llm_decoder_t *llm_batch_decoder(hcq_llm_batch_t *b) { return b ? b->dec : NULL; }

size_t hcq_llm_batch_captures(const hcq_llm_batch_t *b) {
  return b ? llm_decoder_captures(b->dec) : 0;
}

/* ---- sequences ---- */

hcq_status_t hcq_llm_batch_add(hcq_llm_batch_t *b, const int32_t *prompt, size_t n,
                               const hcq_llm_generate_options_t *options, int *seq) {
  if (!b || !seq || (!prompt && n))
    return hcq_status_make(HCQ_INVALID_ARGUMENT, "hcq_llm_batch_add: batch, prompt or seq is NULL");
  *seq = -1;
  hcq_llm_generate_options_t o = options ? *options : (hcq_llm_generate_options_t){0};
  TRY(llm_api_check_options("hcq_llm_batch_add", &o)); /* hcq_llm_generate's checks */
  if (n == 0 || n >= (size_t)b->ctx)
    return hcq_status_make(
        HCQ_OUT_OF_RANGE,
        "hcq_llm_batch_add: a prompt of %zu tokens (expected 1 to %d: a sequence "
        "holds %d positions, prompt and new tokens)",
        n, b->ctx - 1, b->ctx);
  for (size_t i = 0; i < n; i++)
    if (prompt[i] < 0 || prompt[i] >= b->vocab)
      return hcq_status_make(HCQ_INVALID_ARGUMENT,
                             "hcq_llm_batch_add: prompt id %d (at %zu) is outside the vocabulary "
                             "(%d ids)",
                             prompt[i], i, b->vocab);
  pthread_mutex_lock(&b->lock);
  seq_slot_t *s = NULL;
  for (int i = 0; i < b->max_seqs && !s; i++)
    if (b->slots[i].id < 0) s = &b->slots[i];
  if (!s) {
    pthread_mutex_unlock(&b->lock);
    return hcq_status_make(
        HCQ_UNAVAILABLE,
        "hcq_llm_batch_add: all %d sequences are busy (try again once one finishes)", b->max_seqs);
  }
  int room = b->ctx - (int)n;
  s->id = b->next_id;
  b->next_id = b->next_id == INT_MAX ? 0 : b->next_id + 1;
  memcpy(s->ids, prompt, n * sizeof(int32_t));
  s->prompt = s->len = (int)n;
  s->planned = s->choices = 0;
  s->max_new = o.max_tokens && o.max_tokens < room ? o.max_tokens : room;
  s->o = o;
  s->sampler = llm_api_sampler(&o.sampling, b->ctx);
  llm_detok_init(&s->detok);
  hcq_status_t st = copy_stops(s, &o);
  if (st) {
    s->id = -1;
    pthread_mutex_unlock(&b->lock);
    return st;
  }
  *seq = s->id;
  pthread_mutex_unlock(&b->lock);
  return NULL;
}

hcq_status_t hcq_llm_batch_cancel(hcq_llm_batch_t *b, int seq) {
  if (!b) return hcq_status_make(HCQ_INVALID_ARGUMENT, "hcq_llm_batch_cancel: batch is NULL");
  pthread_mutex_lock(&b->lock);
  bool found = false;
  for (int i = 0; i < b->max_seqs && !found; i++)
    if (seq >= 0 && b->slots[i].id == seq) release_slot(&b->slots[i]), found = true;
  pthread_mutex_unlock(&b->lock);
  return found ? NULL
               : hcq_status_make(HCQ_NOT_FOUND, "hcq_llm_batch_cancel: no active sequence %d", seq);
}

size_t hcq_llm_batch_active(hcq_llm_batch_t *b) {
  if (!b) return 0;
  size_t n = 0;
  pthread_mutex_lock(&b->lock);
  for (int i = 0; i < b->max_seqs; i++) n += b->slots[i].id >= 0;
  pthread_mutex_unlock(&b->lock);
  return n;
}

/* ---- steps ---- */

/* The rows of the next step (parity p): every decoding sequence's next token (the one the step
 * before chose, read on the device: the host need not know it yet), then the prompts still
 * entering, oldest sequence first, in chunks that fill the rows left (a chunk that reaches its
 * prompt's end chooses the first new token). A sequence that has all the choices it may make gets
 * no row; one that finishes in the step in flight got its row anyway (its result is dropped). */
static void plan_rows(hcq_llm_batch_t *b, int p) {
  int order[LLM_MAX_SLOTS], nactive = 0, nrows = 0, nsample = 0;
  for (int i = 0; i < b->max_seqs; i++) { /* the active slots by their ids: an insertion sort */
    if (b->slots[i].id < 0) continue;
    int k = nactive++;
    for (; k > 0 && b->slots[order[k - 1]].id > b->slots[i].id; k--) order[k] = order[k - 1];
    order[k] = i;
  }
  for (int pass = 0; pass < 2; pass++)
    for (int k = 0; k < nactive && nrows < b->max_rows; k++) {
      seq_slot_t *s = &b->slots[order[k]];
      if ((s->planned >= s->prompt) != (pass == 0) || s->choices >= s->max_new) continue;
      int end = pass == 0 ? s->planned + 1 : s->prompt;
      if (end - s->planned > b->max_rows - nrows) end = s->planned + b->max_rows - nrows;
      for (; s->planned < end; s->planned++) {
        bool sample = s->planned >= s->prompt - 1;
        int32_t token = s->planned < s->prompt ? s->ids[s->planned] : s->fed;
        b->rows[p][nrows] = (llm_batch_row_t){order[k], s->planned, token, sample};
        b->row_id[p][nrows++] = s->id;
        if (sample) {
          b->samplers[nsample] = s->sampler;
          s->fed = llm_decoder_batch_chosen(b->dec, p, nsample++);
          s->choices++;
        }
      }
    }
  b->nrows[p] = nrows, b->nsample[p] = nsample;
}

static int event_cmp(const void *pa, const void *pb) {
  const hcq_llm_batch_event_t *a = pa, *b = pb;
  return (a->seq > b->seq) - (a->seq < b->seq);
}

/* Appends to s->text (at *at) what of n bytes of text may be passed on now: all of it without stop
 * strings, else what the stop strings' matcher lets go (end: nothing more comes). */
static hcq_status_t pass_text(seq_slot_t *s, const char *text, size_t n, bool end, size_t *at) {
  const char *from = text;
  size_t pass = n;
  if (s->o.nstop) {
    TRY(llm_stop_push(&s->stop, text, n, end, &pass));
    from = s->stop.held;
  }
  if (*at + pass + 1 > s->text_cap) {
    size_t cap = (*at + pass + 1) * 2;
    char *grown = realloc(s->text, cap);
    if (!grown) return hcq_status_make(HCQ_OUT_OF_MEMORY, "out of memory");
    s->text = grown, s->text_cap = cap;
  }
  if (pass) memcpy(s->text + *at, from, pass); /* nothing held: held may be NULL */
  *at += pass;
  s->text[*at] = 0;
  if (s->o.nstop) llm_stop_consume(&s->stop, pass);
  return NULL;
}

/* Token tok chosen for s: its text (less what stop strings hold back), the callback, and whether
 * the sequence ends (then its slot is freed, its held-back text flushed into the event). *emitted
 * is false when the sequence was cancelled from the callback (no event). */
static hcq_status_t take_token(hcq_llm_batch_t *b, seq_slot_t *s, int32_t tok,
                               hcq_llm_batch_event_t *ev, bool *emitted) {
  int id = s->id;
  *emitted = false;
  s->ids[s->len++] = tok;
  const hcq_llm_logprob_t *logprob = s->o.logprobs ? &s->logprob : NULL;
  if (logprob && s->o.on_logprob) s->o.on_logprob(s->o.user, logprob);
  char piece[TEXT_CAP];
  size_t len = llm_detok_push(b->tok, &s->detok, tok, s->o.special, piece, LLM_DETOK_MAX_OUT),
         at = 0;
  int generated = s->len - s->prompt;
  bool end = !s->o.ignore_eos && llm_tokenizer_is_eog(b->tok, tok),
       last = end || generated >= s->max_new;
  TRY(pass_text(s, piece, len, false, &at));
  bool stopped = s->o.on_token && !s->o.on_token(s->o.user, tok, s->text, at);
  if (s->id != id) return NULL; /* cancelled by the callback */
  bool found = s->o.nstop && s->stop.found >= 0;
  if (!stopped && !found && !last) {
    *ev = (hcq_llm_batch_event_t){.seq = id,
                                  .id = tok,
                                  .text = s->text,
                                  .len = at,
                                  .tokens = (size_t)generated,
                                  .logprob = logprob};
    *emitted = true;
    return NULL;
  }
  if (!found) { /* what the detokenizer and the stop strings held back comes out now */
    char rest[8];
    size_t nrest = llm_detok_flush(&s->detok, rest, sizeof(rest) - 1), before = at;
    TRY(pass_text(s, rest, nrest, true, &at));
    if (at > before && s->o.on_token && !stopped)
      s->o.on_token(s->o.user, HCQ_LLM_NO_TOKEN, s->text + before, at - before);
  }
  *ev = (hcq_llm_batch_event_t){.seq = id,
                                .id = tok,
                                .text = s->text,
                                .len = at,
                                .tokens = (size_t)generated,
                                .finished = true,
                                .logprob = logprob};
  ev->stop = found                                             ? HCQ_LLM_STOP_STRING
             : stopped                                         ? HCQ_LLM_STOP_CALLBACK
             : end                                             ? HCQ_LLM_STOP_END
             : s->o.max_tokens && generated >= s->o.max_tokens ? HCQ_LLM_STOP_LENGTH
                                                               : HCQ_LLM_STOP_CONTEXT;
  /* the slot is free before the next step (the text lives on in s->text until then) */
  char *text = s->text;
  size_t cap = s->text_cap;
  release_slot(s);
  s->text = text, s->text_cap = cap;
  *emitted = true;
  return NULL;
}

/* Plans the step of the next parity and queues it (when it has rows). */
static hcq_status_t queue_step(hcq_llm_batch_t *b, bool *queued) {
  int p = b->parity;
  pthread_mutex_lock(&b->lock);
  plan_rows(b, p);
  pthread_mutex_unlock(&b->lock);
  *queued = b->nrows[p] > 0;
  if (!*queued) return NULL;
  b->parity = !p;
  return llm_decoder_batch_submit(b->dec, p, b->rows[p], b->nrows[p], b->samplers);
}

/* Whether a sequence choosing a token in step p (still active) wants its log-probabilities. */
static bool step_wants_logprobs(hcq_llm_batch_t *b, int p) {
  bool wants = false;
  pthread_mutex_lock(&b->lock);
  for (int i = 0; i < b->nrows[p] && !wants; i++) {
    const seq_slot_t *s = &b->slots[b->rows[p][i].slot];
    wants = b->rows[p][i].sample && s->id == b->row_id[p][i] && s->o.logprobs;
  }
  pthread_mutex_unlock(&b->lock);
  return wants;
}

/* The tokens step p chose (in b->chosen), each taken by its sequence (lock held): an event for each
 * that goes on or ends. early: the next step is queued already, so the logits are not step p's. */
static hcq_status_t take_tokens(hcq_llm_batch_t *b, int p, bool early,
                                hcq_llm_batch_event_t *events, size_t *n) {
  for (int i = 0, j = 0; i < b->nrows[p]; i++) {
    if (!b->rows[p][i].sample) continue;
    seq_slot_t *s = &b->slots[b->rows[p][i].slot];
    int32_t tok = b->chosen[j++];
    bool emitted = false;
    if (s->id != b->row_id[p][i]) continue; /* cancelled or finished meanwhile */
    if (s->o.logprobs && !early) {
      TRY(llm_decoder_batch_logits(b->dec, j - 1, b->logits));
      llm_logprob_of(b->logits, b->vocab, tok, s->o.top_logprobs, &s->logprob);
    }
    TRY(take_token(b, s, tok, &events[*n], &emitted));
    *n += emitted;
  }
  return NULL;
}

hcq_status_t hcq_llm_batch_step(hcq_llm_batch_t *b, hcq_llm_batch_event_t *events, size_t cap,
                                size_t *n) {
  if (!b || !n || (!events && cap))
    return hcq_status_make(HCQ_INVALID_ARGUMENT, "hcq_llm_batch_step: batch, events or n is NULL");
  *n = 0;
  if (cap < (size_t)b->max_seqs)
    return hcq_status_make(HCQ_INVALID_ARGUMENT,
                           "hcq_llm_batch_step: room for %zu events (a step gives up to "
                           "max_seqs = %d)",
                           cap, b->max_seqs);
  bool queued = false;
  if (!b->inflight) TRY(queue_step(b, &b->inflight));
  if (!b->inflight) return NULL; /* no sequence */
  int p = !b->parity;
  /* the step after it queued before this one's tokens are read: the device never waits for the
   * host; but every step writes the same logits, so where a sequence wants log-probabilities, after
   */
  bool early = !step_wants_logprobs(b, p);
  if (early) TRY(queue_step(b, &queued));
  /* the lock is free while the device runs: add and cancel go on meanwhile (a slot cancelled and
   * taken again then is written from position 0 by its new sequence before anything reads it) */
  TRY(llm_decoder_batch_tokens(b->dec, p, b->nsample[p], b->chosen));
  pthread_mutex_lock(&b->lock);
  hcq_status_t st = take_tokens(b, p, early, events, n);
  pthread_mutex_unlock(&b->lock);
  if (!st && !early) st = queue_step(b, &queued);
  b->inflight = queued;
  if (st) return st;
  qsort(events, *n, sizeof(*events), event_cmp);
  return NULL;
}
