/* Submitting to the CUDA device's streams and following their progress: completion words, the
 * records hang reports read, and CUDA graph launches. */
#include "core/command.h"
#include "core/device.h"
#include "core/hang_report.h"
#include "core/signal.h"
#include "core/status.h"
#include "cuda/cuda_device.h"

/* Remembers a submission's words for hang reports: bound words stay valid, others are copied. */
static void remember_locked(cuda_stream_t *cs, uint64_t seq, const uint32_t *words, size_t n,
                            bool bound);
static void remember(cuda_stream_t *cs, uint64_t seq, const uint32_t *words, size_t n, bool bound) {
  pthread_mutex_lock(&cs->records_lock);
  remember_locked(cs, seq, words, n, bound);
  pthread_mutex_unlock(&cs->records_lock);
}

static void remember_locked(cuda_stream_t *cs, uint64_t seq, const uint32_t *words, size_t n,
                            bool bound) {
  cuda_sub_record_t *r = &cs->records[seq % HCQ__CUDA_RECORDS];
  r->seq = seq;
  r->bound = bound;
  r->nwords = (uint32_t)n;
  if (bound) {
    r->words = words;
    return;
  }
  if (n == 0 || n > HCQ__CUDA_WORD_RING / 4) {
    r->words = NULL;
    return;
  }
  uint64_t pos = cs->ring_head % HCQ__CUDA_WORD_RING;
  if (pos + n > HCQ__CUDA_WORD_RING) {
    cs->ring_head += HCQ__CUDA_WORD_RING - pos;
    pos = 0;
  }
  memcpy(cs->ring + pos, words, n * sizeof(uint32_t));
  cs->ring_head += n;
  r->words = cs->ring + pos;
}

/* Ends a submission: the stream writes its sequence number into the completion word. */
static hcq_status_t finish_submission(cuda_device_t *cd, cuda_stream_t *cs, const uint32_t *words,
                                      size_t n, bool bound) {
  uint64_t seq = cs->submitted + 1;
  hcq_CUresult rc =
      cd->api->cuStreamWriteValue64(cs->s, cs->done_addr, seq, HCQ_CU_STREAM_WRITE_VALUE_DEFAULT);
  if (rc) {
    hcq_status_t st = hcq__cuda_fail(cd->dev, rc, "cuStreamWriteValue64 (completion word)");
    if (!hcq__device_is_lost(cd->dev)) hcq__device_mark_lost(cd->dev, "%s", hcq_status_message(st));
    return st;
  }
  remember(cs, seq, words, n, bound);
  cs->submitted = seq;
  atomic_store_explicit(&cs->published, seq, memory_order_release);
  return NULL;
}

/* A timeline wrap lowers the timeline value: what the streams remember of their writes is void. */
static void note_timeline(cuda_device_t *cd) {
  hcq_device_t *dev = cd->dev;
  if (dev->timeline_value < cd->seen_timeline_value || dev->timeline != cd->seen_timeline) {
    for (int k = 0; k < 2; k++) cd->streams[k].last_signal_addr = 0;
  }
  cd->seen_timeline_value = dev->timeline_value;
  cd->seen_timeline = dev->timeline;
}

hcq_status_t hcq__cuda_reserve(hcq_device_t *dev, hcq_queue_kind_t kind, size_t nwords,
                               bool bound) {
  (void)kind, (void)nwords, (void)bound; /* the driver queues whatever it is given */
  return hcq__device_check(dev);
}

hcq_status_t hcq__cuda_submit(hcq_device_t *dev, hcq_queue_kind_t kind, const uint32_t *words,
                              size_t nwords, bool bound) {
  cuda_device_t *cd = hcq__cuda_cdev(dev);
  cuda_stream_t *cs = &cd->streams[kind];
  HCQ__TRY(hcq__device_check(dev));
  HCQ__TRY(hcq__cuda_push(dev));
  hcq_status_t st = hcq__cuda_check_words(dev, words, nwords);
  if (st) {
    hcq__cuda_pop(dev);
    return st;
  }
  note_timeline(cd);
  hcq__cuda_flush_frees(cd, false);
  pthread_mutex_lock(&cd->submit_lock);
  hcq_CUresult rc = 0;
  const char *what = "";
  const uint32_t *w = words, *end = words + nwords;
  for (; w < end && !rc; w += HCQ__HDR_LEN(w[0])) rc = hcq__cuda_run_command(cd, cs, w, &what);
  if (rc) st = hcq__cuda_fail(dev, rc, "%s", what);
  /* Whatever was enqueued counts: completion must catch up with it. */
  hcq_status_t fst = finish_submission(cd, cs, words, nwords, bound);
  pthread_mutex_unlock(&cd->submit_lock);
  hcq__cuda_pop(dev);
  if (st) {
    hcq_status_destroy(fst);
    return st;
  }
  return fst;
}

uint64_t hcq__cuda_submitted(hcq_device_t *dev, hcq_queue_kind_t kind) {
  return atomic_load_explicit(&hcq__cuda_cdev(dev)->streams[kind].published, memory_order_acquire);
}

uint64_t hcq__cuda_completed(hcq_device_t *dev, hcq_queue_kind_t kind) {
  const cuda_stream_t *cs = &hcq__cuda_cdev(dev)->streams[kind];
  uint64_t done = atomic_load_explicit(cs->done, memory_order_acquire);
  /* A lost device's streams never finish: what they were given is abandoned, not pending. */
  if (hcq__device_is_lost(dev)) return atomic_load_explicit(&cs->published, memory_order_acquire);
  return done;
}

/* Asynchronous failures (a faulting kernel) surface through stream queries. */
void hcq__cuda_poll(hcq_device_t *dev) {
  cuda_device_t *cd = hcq__cuda_cdev(dev);
  if (hcq__device_is_lost(dev)) return;
  hcq_status_t st = hcq__cuda_push(dev);
  if (st) {
    hcq_status_destroy(st);
    return;
  }
  for (int k = 0; k < 2; k++) {
    hcq_CUresult rc = cd->api->cuStreamQuery(cd->streams[k].s);
    if (rc && rc != HCQ_CUDA_ERROR_NOT_READY) {
      st = hcq__cuda_fail(dev, rc, "the %s stream", k ? "copy" : "compute");
      break;
    }
  }
  hcq__cuda_pop(dev);
  hcq_status_destroy(st);
}

/* The core's wait, then the frees that waited for the streams. */
hcq_status_t hcq__cuda_wait_idle(hcq_device_t *dev, int64_t timeout_ms) {
  hcq_status_t st = hcq__device_wait_engines(dev, timeout_ms);
  if (!st) hcq__cuda_flush_frees(hcq__cuda_cdev(dev), false);
  return st;
}

/* The command a stream is at: the first wait of its oldest unfinished submission whose signal has
 * not reached the value, else that submission's first kernel, else its first command. */
void hcq__cuda_snapshot(hcq_device_t *dev, hcq_queue_kind_t kind, hcq__engine_snapshot_t *out) {
  cuda_stream_t *cs = &hcq__cuda_cdev(dev)->streams[kind];
  out->present = true;
  out->submitted = atomic_load_explicit(&cs->published, memory_order_acquire);
  out->completed = atomic_load_explicit(cs->done, memory_order_acquire);
  out->cur = out->prev = out->call_base = NULL;
  if (out->completed >= out->submitted || out->submitted - out->completed > HCQ__CUDA_RECORDS)
    return;
  /* Never blocks: while a submission is being recorded, the report goes without the detail. */
  if (pthread_mutex_trylock(&cs->records_lock) != 0) return;
  cuda_sub_record_t rec = cs->records[(out->completed + 1) % HCQ__CUDA_RECORDS];
  pthread_mutex_unlock(&cs->records_lock);
  const cuda_sub_record_t *r = &rec;
  if (r->seq != out->completed + 1 || !r->words || !r->nwords) return;
  const uint32_t *w = r->words, *end = r->words + r->nwords, *prev = NULL, *exec = NULL,
                 *exec_prev = NULL;
  for (; w < end && HCQ__HDR_LEN(w[0]); prev = w, w += HCQ__HDR_LEN(w[0])) {
    uint32_t op = HCQ__HDR_OP(w[0]);
    if (op == HCQ__OP_EXEC && !exec) exec = w, exec_prev = prev;
    if (op != HCQ__OP_WAIT) continue;
    char name[8];
    uint64_t value = 0;
    if (hcq__signal_lookup(hcq__rd64(w + HCQ__WAIT_ADDR), name, sizeof(name), &value, NULL) &&
        value < w[HCQ__WAIT_VALUE])
      break;
  }
  if (w < end) {
    out->cur = w, out->prev = prev;
  } else if (exec) {
    out->cur = exec, out->prev = exec_prev;
  } else {
    out->cur = r->words;
  }
  if (r->bound) out->call_base = r->words;
}

/* ---- CUDA graph launches (src/graph/cuda_graph.c) ---- */

hcq_status_t hcq__cuda_graph_launch(hcq_device_t *const *devs, size_t ndevs, hcq_CUgraphExec exec,
                                    hcq_CUevent start, hcq_CUevent end) {
  hcq_device_t *d0 = devs[0];
  cuda_device_t *c0 = hcq__cuda_cdev(d0);
  const hcq__cuda_api_t *api = c0->api;
  cuda_stream_t *s0 = &c0->streams[HCQ_QUEUE_COMPUTE];
  hcq_status_t st = hcq__cuda_push(d0);
  if (st) return st;
  note_timeline(c0);
  pthread_mutex_lock(&c0->submit_lock);
  hcq_CUresult rc = 0;
  const char *what = "";
  /* Kept as command words too, so a hang report can say which earlier work the replay waits for. */
  uint32_t waits[HCQ__CUDA_GRAPH_MAX_DEVICES * HCQ__LEN_WAIT];
  size_t nwords = 0;
  for (size_t i = 0; i < ndevs && i < HCQ__CUDA_GRAPH_MAX_DEVICES && !rc; i++) {
    hcq_device_t *d = devs[i];
    uint32_t *wait = waits + nwords;
    memset(wait, 0, HCQ__LEN_WAIT * sizeof(uint32_t));
    wait[0] = HCQ__HDR(WAIT);
    hcq__wr64(wait + HCQ__WAIT_ADDR, d->timeline->mem.addr);
    wait[HCQ__WAIT_VALUE] = (uint32_t)(d->timeline_value - 1);
    nwords += HCQ__LEN_WAIT;
    rc = hcq__cuda_run_command(c0, s0, wait, &what);
  }
  if (!rc && start && (rc = api->cuEventRecord(start, s0->s))) what = "cuEventRecord";
  if (!rc && (rc = api->cuGraphLaunch(exec, s0->s))) what = "cuGraphLaunch";
  if (!rc && (rc = api->cuEventRecord(end, s0->s))) what = "cuEventRecord";
  uint32_t signal[HCQ__LEN_SIGNAL] = {HCQ__HDR(SIGNAL)};
  hcq__wr64(signal + HCQ__SIGNAL_ADDR, d0->timeline->mem.addr);
  signal[HCQ__SIGNAL_VALUE] = (uint32_t)d0->timeline_value;
  if (!rc) rc = hcq__cuda_run_command(c0, s0, signal, &what);
  if (rc) st = hcq__cuda_fail(d0, rc, "graph launch: %s", what);
  hcq_status_t fst = finish_submission(c0, s0, waits, nwords, false);
  pthread_mutex_unlock(&c0->submit_lock);
  hcq__cuda_pop(d0);
  if (st || fst) {
    hcq_status_destroy(fst);
    return st ? st : fst;
  }
  /* The other devices' compute streams follow the graph (an event the driver sees), then signal. */
  for (size_t i = 1; i < ndevs; i++) {
    hcq_device_t *d = devs[i];
    cuda_device_t *cd = hcq__cuda_cdev(d);
    cuda_stream_t *cs = &cd->streams[HCQ_QUEUE_COMPUTE];
    HCQ__TRY(hcq__cuda_push(d));
    note_timeline(cd);
    pthread_mutex_lock(&cd->submit_lock);
    rc = api->cuStreamWaitEvent(cs->s, end, 0);
    what = "cuStreamWaitEvent";
    signal[0] = HCQ__HDR(SIGNAL);
    hcq__wr64(signal + HCQ__SIGNAL_ADDR, d->timeline->mem.addr);
    signal[HCQ__SIGNAL_VALUE] = (uint32_t)d->timeline_value;
    if (!rc) rc = hcq__cuda_run_command(cd, cs, signal, &what);
    if (rc) st = hcq__cuda_fail(d, rc, "graph launch: %s", what);
    fst = finish_submission(cd, cs, NULL, 0, false);
    pthread_mutex_unlock(&cd->submit_lock);
    hcq__cuda_pop(d);
    if (st) {
      hcq_status_destroy(fst);
      return st;
    }
    HCQ__TRY(fst);
  }
  return NULL;
}
