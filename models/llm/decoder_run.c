/* Running the decoder: its item lists eagerly, or as their captures (each list is captured by its
 * first graph-mode call), the tokens in and out, and the generation loop that keeps one step queued
 * ahead of the token it reads. */
#include <math.h>
#include <stdlib.h>
#include <time.h>

#include "decoder_internal.h"
#include "model_status.h"
#include "model_time.h"

/* ---- running ---- */

hcq_status_t llm_decoder_sync(llm_decoder_t *m) {
  for (int d = 0; d < m->ndev; d++) TRY(hcq_device_synchronize(m->d[d].dev));
  return NULL;
}

hcq_status_t llm_sampler_params(const llm_sampler_t *s, llm_sampler_params_t *out) {
  if (!s) return hcq_status_make(HCQ_INVALID_ARGUMENT, "llm sampler: NULL");
  if (!(s->temperature >= 0) || !isfinite(s->temperature))
    return hcq_status_make(HCQ_INVALID_ARGUMENT, "llm sampler: temperature %g (expected 0 or more)",
                           (double)s->temperature);
  if (!(s->top_p > 0 && s->top_p <= 1))
    return hcq_status_make(HCQ_INVALID_ARGUMENT,
                           "llm sampler: top-p %g (expected more than 0, at most 1)",
                           (double)s->top_p);
  if (s->top_k < 0)
    return hcq_status_make(HCQ_INVALID_ARGUMENT, "llm sampler: top-k %d (expected 0 or more)",
                           s->top_k);
  if (!(s->min_p >= 0 && s->min_p <= 1))
    return hcq_status_make(HCQ_INVALID_ARGUMENT, "llm sampler: min-p %g (expected 0 to 1)",
                           (double)s->min_p);
  if (!(s->repeat_penalty >= 0) || !isfinite(s->repeat_penalty))
    return hcq_status_make(HCQ_INVALID_ARGUMENT,
                           "llm sampler: repeat penalty %g (expected 0 or more; 1 or 0: none)",
                           (double)s->repeat_penalty);
  if (!isfinite(s->frequency_penalty) || !isfinite(s->presence_penalty))
    return hcq_status_make(HCQ_INVALID_ARGUMENT,
                           "llm sampler: frequency penalty %g, presence penalty %g (expected "
                           "finite)",
                           (double)s->frequency_penalty, (double)s->presence_penalty);
  if (s->penalty_last_n < 0)
    return hcq_status_make(HCQ_INVALID_ARGUMENT,
                           "llm sampler: penalty last-n %d (expected 0 or more)",
                           s->penalty_last_n);
  /* a repeat penalty of 0 is none (1) */
  *out = (llm_sampler_params_t){s->temperature,
                                s->top_p,
                                s->top_k,
                                (uint32_t)s->seed,
                                (uint32_t)(s->seed >> 32),
                                s->min_p,
                                s->repeat_penalty > 0 ? s->repeat_penalty : 1.0f,
                                s->frequency_penalty,
                                s->presence_penalty,
                                s->penalty_last_n};
  return NULL;
}

hcq_status_t llm_decoder_set_sampler(llm_decoder_t *m, const llm_sampler_t *s) {
  llm_sampler_params_t p;
  TRY(llm_sampler_params(s, &p));
  TRY(llm_decoder_sync(m));
  return llm_write_buffer(m, m->params, 0, &p, sizeof(p));
}

hcq_status_t llm_decoder_set_tokens(llm_decoder_t *m, int pos, const int32_t *ids, int n) {
  if (n < 0 || pos < 0 || pos > m->ctx - n)
    return hcq_status_make(HCQ_OUT_OF_RANGE,
                           "llm decoder: tokens %d..%d are outside the context (%d positions)", pos,
                           pos + n - 1, m->ctx);
  for (int i = 0; i < n; i++)
    if (ids[i] < 0 || ids[i] >= m->c.vocab)
      return hcq_status_make(
          HCQ_INVALID_ARGUMENT,
          "llm decoder: token id %d at position %d is outside the vocabulary (%d ids)", ids[i],
          pos + i, m->c.vocab);
  TRY(llm_decoder_sync(m));
  return n ? llm_write_buffer(m, m->tokens, (uint64_t)pos * 4, ids, (uint64_t)n * 4) : NULL;
}

/* Arms fence (when given) at the work queued so far on the decoder's devices. */
static hcq_status_t record(llm_decoder_t *m, hcq_fence_t *fence) {
  hcq_device_t *devs[2] = {m->d[0].dev, m->ndev > 1 ? m->d[1].dev : NULL};
  return fence ? hcq_fence_record(fence, devs, (size_t)m->ndev) : NULL;
}

/* Runs list eagerly, or its capture (capturing it first, which runs it), and arms fence (may be
 * NULL) at what it queued. */
static hcq_status_t run_list(llm_decoder_t *m, item_list_t *L, hcq_jit_t **jit,
                             const hcq_var_value_t *v, size_t nv, bool graph, hcq_fence_t *fence) {
  if (!graph || *jit) {
    if (graph) return hcq_jit_submit(*jit, NULL, 0, v, nv, fence);
    for (size_t i = 0; i < L->n; i++) TRY(hcq_exec_item_run(&L->items[i], v, nv));
    return record(m, fence);
  }
  hcq_capture_t *cap;
  TRY(hcq_capture_begin(&cap));
  for (size_t i = 0; i < L->n; i++) {
    hcq_status_t st = hcq_exec_item_run(&L->items[i], v, nv);
    if (st) {
      hcq_capture_abort(cap);
      return st;
    }
  }
  hcq_jit_options_t opts = {L->n, m->profile, false, false, NULL, NULL, false, LLM_STEPS_AHEAD};
  TRY(hcq_capture_end(cap, NULL, 0, v, nv, &opts, jit));
  m->captures++;
  return record(m, fence);
}

static hcq_status_t step(llm_decoder_t *m, int pos, bool graph, hcq_fence_t *fence) {
  if (m->slots)
    return hcq_status_make(HCQ_FAILED_PRECONDITION,
                           "llm decoder: a batch decoder runs batches, not steps");
  if (pos < 0 || pos >= m->ctx)
    return hcq_status_make(HCQ_OUT_OF_RANGE,
                           "llm decoder: position %d is outside the context (0..%d)", pos,
                           m->ctx - 1);
  hcq_var_value_t v = {m->pos, pos};
  return run_list(m, &m->step, &m->step_jit, &v, 1, graph, fence);
}

hcq_status_t llm_decoder_step(llm_decoder_t *m, int pos, bool graph) {
  return step(m, pos, graph, NULL);
}

hcq_status_t llm_decoder_prefill(llm_decoder_t *m, int p0, int n, bool graph) {
  if (m->slots)
    return hcq_status_make(HCQ_FAILED_PRECONDITION,
                           "llm decoder: a batch decoder runs batches, not passes");
  if (n < 1 || p0 < 0 || p0 > m->ctx - n)
    return hcq_status_make(
        HCQ_OUT_OF_RANGE,
        "llm decoder: a prompt at positions %d..%d is outside the context (%d positions)", p0,
        p0 + n - 1, m->ctx);
  for (int done = 0; done < n;) {
    int k = n - done < m->max_batch ? n - done : m->max_batch;
    hcq_var_value_t v[3] = {{m->p0, p0 + done}, {m->n, k}, {m->choose, done + k == n}};
    TRY(run_list(m, &m->pass, &m->pass_jit, v, 3, graph, NULL));
    done += k;
  }
  return NULL;
}

hcq_status_t llm_decoder_capture(llm_decoder_t *m) {
  if (m->slots) return llm_decoder_batch_capture(m);
  /* A pass of one token at 0 and a step at 1: what they write (the caches at 0 and 1, tokens 1 and
   * 2) is written again before anything reads it. */
  int32_t zero[2] = {0, 0};
  TRY(llm_decoder_set_tokens(m, 0, zero, 2));
  if (!m->pass_jit) TRY(llm_decoder_prefill(m, 0, 1, true));
  if (!m->step_jit && m->ctx > 1) TRY(llm_decoder_step(m, 1, true));
  return llm_decoder_sync(m);
}

hcq_status_t llm_decoder_tokens(llm_decoder_t *m, int pos, int32_t *out, int n) {
  if (n < 0 || pos < 0 || pos > m->ctx + 1 - n)
    return hcq_status_make(HCQ_OUT_OF_RANGE, "llm decoder: tokens %d..%d are outside 0..%d", pos,
                           pos + n - 1, m->ctx);
  TRY(llm_decoder_sync(m));
  return n ? hcq_buffer_copyout(m->tokens, (uint64_t)pos * 4, out, (uint64_t)n * 4) : NULL;
}

hcq_status_t llm_decoder_logits(llm_decoder_t *m, float *out) {
  TRY(llm_decoder_sync(m));
  return hcq_buffer_copyout(m->logits, 0, out, (uint64_t)m->c.vocab * 4);
}

hcq_status_t llm_decoder_batch_logits(llm_decoder_t *m, int j, float *out) {
  if (!m->slots || j < 0 || j >= m->slots)
    return hcq_status_make(HCQ_INVALID_ARGUMENT, "llm decoder: the logits of choosing row %d", j);
  TRY(llm_decoder_sync(m));
  return hcq_buffer_copyout(m->logits, (uint64_t)j * (uint64_t)m->c.vocab * 4, out,
                            (uint64_t)m->c.vocab * 4);
}

/* ---- generation ---- */

/* The token at pos once the work fence f covers has finished: read through the mapped tokens
 * buffer, so later steps keep running; where it cannot be mapped, a copy (which waits for them
 * too). */
static hcq_status_t token_at(llm_decoder_t *m, const hcq_fence_t *f, int pos, int32_t *out) {
  if (m->tokens_host) {
    TRY(hcq_fence_wait(f, HCQ_TIMEOUT_DEFAULT));
    *out = m->tokens_host[pos];
    return NULL;
  }
  return hcq_buffer_copyout(m->tokens, (uint64_t)pos * 4, out, 4);
}

/* Records token tok as generated (while the run has not ended). */
static void took(llm_generate_result_t *out, const llm_generate_options_t *o, int32_t tok) {
  if (out->ended) return;
  out->ids[out->n++] = tok;
  if (o->on_token) o->on_token(o->ctx, tok);
  out->ended = !o->ignore_eos && o->is_end && o->is_end(o->ctx, tok);
}

/* When a generation's phases ended, and the host's time to queue each step (host[nhost]). */
typedef struct gen_clock {
  double t1, t_last; /* the prompt pass done; the last token taken */
  double *host;
  int nhost;
} gen_clock_t;

/* The prompt pass, then the first new token once it is done (read where this rank holds the
 * tokens). */
static hcq_status_t prompt_pass(llm_decoder_t *m, int nprompt, const llm_generate_options_t *o,
                                llm_generate_result_t *out) {
  TRY(llm_decoder_prefill(m, 0, nprompt, o->graph));
  if (!m->reads_tokens) return llm_decoder_sync(m);
  int32_t tok = 0;
  TRY(record(m, m->fences[0]));
  TRY(token_at(m, m->fences[0], nprompt, &tok));
  took(out, o, tok);
  return NULL;
}

/* The steps after the prompt: step p reads the token at p and writes p + 1. Steps are queued ahead
 * of the one whose token is awaited (LLM_STEPS_AHEAD in all), so the devices never wait for the
 * host. Under two ranks both run the same steps (an early stop on one would leave the other waiting
 * for it): only the rank holding the tokens reads them, and what follows an end token is dropped.
 */
static hcq_status_t decode(llm_decoder_t *m, int nprompt, int steps,
                           const llm_generate_options_t *o, llm_generate_result_t *out,
                           gen_clock_t *c) {
  bool stop_early = m->ranks == 1 || o->agree_end, reads = m->reads_tokens, all_ended = false;
  /* next step to queue; next step whose token to read */
  int next = nprompt, read = nprompt, last = nprompt + steps - 1;
  if (m->ranks > 1 && o->agree_end) all_ended = o->agree_end(o->ctx, out->ended);
  while (!(stop_early && (m->ranks > 1 ? all_ended : out->ended)) && read < last) {
    while (next - read < (o->logits_in_step ? 1 : LLM_STEPS_AHEAD) && next < last) {
      double h0 = hcq_model_now_ms();
      hcq_status_t st = step(m, next, o->graph, m->fences[next % LLM_STEPS_AHEAD]);
      c->host[c->nhost++] = (hcq_model_now_ms() - h0) * 1e3;
      if (st) return st;
      next++;
    }
    int32_t tok = 0;
    if (reads) TRY(token_at(m, m->fences[read % LLM_STEPS_AHEAD], read + 1, &tok));
    if (reads && !out->ended) {
      took(out, o, tok);
      c->t_last = hcq_model_now_ms();
    }
    read++;
    if (m->ranks > 1 && o->agree_end) all_ended = o->agree_end(o->ctx, out->ended);
  }
  return NULL;
}

/* The prompt, its pass and the steps, timed into out and c. */
static hcq_status_t run_generation(llm_decoder_t *m, const int32_t *prompt, int nprompt, int steps,
                                   const llm_generate_options_t *o, llm_generate_result_t *out,
                                   gen_clock_t *c) {
  TRY(llm_decoder_set_tokens(m, 0, prompt, nprompt));
  double t0 = hcq_model_now_ms();
  c->t1 = c->t_last = t0;
  if (steps > 0) {
    TRY(prompt_pass(m, nprompt, o, out));
    c->t_last = c->t1 = hcq_model_now_ms();
    out->prefill_ms = c->t1 - t0;
    hcq_status_t st = decode(m, nprompt, steps, o, out, c);
    /* to the last token known: a step queued past an end token is not counted */
    out->decode_ms = (m->reads_tokens ? c->t_last : hcq_model_now_ms()) - c->t1;
    if (st) return st;
  }
  return llm_decoder_sync(m);
}

hcq_status_t llm_generate(llm_decoder_t *m, const int32_t *prompt, int nprompt,
                          const llm_generate_options_t *o, llm_generate_result_t *out) {
  *out = (llm_generate_result_t){0};
  if (!o || o->steps < 0) return hcq_status_make(HCQ_INVALID_ARGUMENT, "llm_generate: bad options");
  if (nprompt < 1 || nprompt >= m->ctx)
    return hcq_status_make(HCQ_OUT_OF_RANGE,
                           "llm_generate: a prompt of %d tokens (the context holds %d positions)",
                           nprompt, m->ctx);
  int steps = o->steps < m->ctx - nprompt ? o->steps : m->ctx - nprompt;
  out->ids = malloc(((size_t)steps + 1) * sizeof(int32_t));
  gen_clock_t c = {.host = malloc(((size_t)steps + 1) * sizeof(double))};
  if (!out->ids || !c.host) {
    free(out->ids), free(c.host);
    out->ids = NULL;
    return hcq_status_make(HCQ_OUT_OF_MEMORY, "out of memory");
  }
  hcq_status_t st = run_generation(m, prompt, nprompt, steps, o, out, &c);
  if (c.nhost) {
    qsort(c.host, (size_t)c.nhost, sizeof(double), hcq_model_cmp_double);
    out->host_us_per_step = c.host[c.nhost / 2];
  }
  free(c.host);
  if (st) {
    free(out->ids);
    out->ids = NULL;
    out->n = 0;
  }
  return st;
}

/* ---- batches (a batch decoder: slots > 0) ---- */

static hcq_status_t check_rows(const llm_decoder_t *m, const llm_batch_row_t *rows, int nrows,
                               int *nsample) {
  if (nrows < 1 || nrows > m->max_batch)
    return hcq_status_make(HCQ_INVALID_ARGUMENT,
                           "llm decoder: a batch of %d rows (expected 1 to %d)", nrows,
                           m->max_batch);
  *nsample = 0;
  for (int i = 0; i < nrows; i++) {
    const llm_batch_row_t *r = &rows[i];
    if (r->slot < 0 || r->slot >= m->slots || r->pos < 0 || r->pos >= m->ctx)
      return hcq_status_make(HCQ_INVALID_ARGUMENT,
                             "llm decoder: batch row %d at slot %d position %d (expected slots "
                             "0..%d, positions 0..%d)",
                             i, r->slot, r->pos, m->slots - 1, m->ctx - 1);
    if (r->token >= m->c.vocab || r->token < -2 * m->max_batch)
      return hcq_status_make(HCQ_INVALID_ARGUMENT,
                             "llm decoder: batch row %d: token id %d is outside the vocabulary "
                             "(%d ids) and names no token chosen on the device",
                             i, r->token, m->c.vocab);
    if (r->sample && ++*nsample > m->slots)
      return hcq_status_make(HCQ_INVALID_ARGUMENT,
                             "llm decoder: more than %d batch rows choose a token", m->slots);
  }
  return NULL;
}

/* The info's region of this parity (kernels.c, BATCH): {nsample, 0, 0, 0}, the rows, the choosing
 * rows' list. The other parity's region is the step in flight's: untouched. */
static hcq_status_t write_rows(llm_decoder_t *m, int parity, const llm_batch_row_t *rows, int nrows,
                               int nsample) {
  size_t words = LLM_BATCH_REGION_WORDS(m->max_batch);
  int32_t *region = calloc(words, 4);
  if (!region) return hcq_status_make(HCQ_OUT_OF_MEMORY, "out of memory");
  region[0] = nsample;
  int32_t *list = region + 4 + 4 * (size_t)m->max_batch;
  for (int i = 0, j = 0; i < nrows; i++) {
    int32_t *row = region + 4 + 4 * (size_t)i;
    row[0] = rows[i].pos, row[1] = rows[i].slot * m->ctx_alloc + rows[i].pos,
    row[2] = rows[i].token;
    if (rows[i].sample) list[j++] = i;
  }
  hcq_status_t st =
      llm_write_buffer(m, m->d[0].info, (4 + (uint64_t)parity * words) * 4, region, words * 4);
  free(region);
  return st;
}

int32_t llm_decoder_batch_chosen(const llm_decoder_t *m, int parity, int j) {
  return -1 - (parity * m->max_batch + j);
}

hcq_status_t llm_decoder_batch_submit(llm_decoder_t *m, int parity, const llm_batch_row_t *rows,
                                      int nrows, const llm_sampler_t *samplers) {
  if (!m->slots)
    return hcq_status_make(HCQ_FAILED_PRECONDITION, "llm decoder: not a batch decoder (slots 0)");
  if (parity != 0 && parity != 1)
    return hcq_status_make(HCQ_INVALID_ARGUMENT, "llm decoder: parity %d", parity);
  int nsample = 0;
  TRY(check_rows(m, rows, nrows, &nsample));
  llm_sampler_params_t params[LLM_MAX_SLOTS];
  for (int j = 0; j < nsample; j++) TRY(llm_sampler_params(&samplers[j], &params[j]));
  /* the step before the one in flight, which wrote this parity's tokens and read its region, is
   * done */
  TRY(hcq_fence_wait(m->fences[parity], HCQ_TIMEOUT_DEFAULT));
  TRY(write_rows(m, parity, rows, nrows, nsample));
  uint64_t at = (uint64_t)parity * (uint64_t)m->max_batch * sizeof(params[0]);
  if (nsample)
    TRY(llm_write_buffer(m, m->params, at, params, (uint64_t)nsample * sizeof(params[0])));
  hcq_var_value_t v[3] = {{m->n, nrows}, {m->choose, nsample}, {m->p0, parity}};
  return run_list(m, &m->pass, &m->pass_jit, v, 3, true, m->fences[parity]);
}

hcq_status_t llm_decoder_batch_tokens(llm_decoder_t *m, int parity, int nsample, int32_t *out) {
  if (!m->slots || parity < 0 || parity > 1 || nsample < 0 || nsample > m->slots)
    return hcq_status_make(HCQ_INVALID_ARGUMENT,
                           "llm decoder: batch tokens of parity %d, %d of them", parity, nsample);
  uint64_t first = (uint64_t)parity * (uint64_t)m->max_batch;
  if (m->tokens_host) { /* mapped: a read once the step is done, not a copy through the device's
                           queue */
    TRY(hcq_fence_wait(m->fences[parity], HCQ_TIMEOUT_DEFAULT));
    for (int j = 0; j < nsample; j++) out[j] = m->tokens_host[first + (uint64_t)j];
    return NULL;
  }
  return nsample ? hcq_buffer_copyout(m->tokens, first * 4, out, (uint64_t)nsample * 4) : NULL;
}

hcq_status_t llm_decoder_batch_history(llm_decoder_t *m, int slot, int32_t *out, int n) {
  if (!m->slots || slot < 0 || slot >= m->slots || n < 0 || n > m->ctx)
    return hcq_status_make(HCQ_INVALID_ARGUMENT, "llm decoder: history of slot %d, %d positions",
                           slot, n);
  TRY(llm_decoder_sync(m));
  return n ? hcq_buffer_copyout(m->history, (uint64_t)slot * (uint64_t)m->ctx_alloc * 4, out,
                                (uint64_t)n * 4)
           : NULL;
}

hcq_status_t llm_decoder_batch(llm_decoder_t *m, const llm_batch_row_t *rows, int nrows,
                               const llm_sampler_t *samplers, int32_t *out) {
  TRY(llm_decoder_sync(m));
  TRY(llm_decoder_batch_submit(m, 0, rows, nrows, samplers));
  int nsample = 0;
  for (int i = 0; i < nrows; i++) nsample += rows[i].sample;
  TRY(llm_decoder_batch_tokens(m, 0, nsample, out));
  return llm_decoder_sync(m);
}

hcq_status_t llm_decoder_batch_capture(llm_decoder_t *m) {
  if (!m->slots)
    return hcq_status_make(HCQ_FAILED_PRECONDITION, "llm decoder: not a batch decoder (slots 0)");
  if (m->pass_jit) return NULL;
  /* slot 0's position 0 is written again by its first sequence's first row before anything reads it
   */
  llm_batch_row_t row = {0, 0, 0, true};
  int32_t token;
  return llm_decoder_batch(m, &row, 1, &(llm_sampler_t){0, 1, 0, 0}, &token);
}
