/* The Vulkan engine's batches (vk_engine_internal.h): the command buffers and semaphore waits the
 * engine thread collects, their submission with a timeline-semaphore signal, and the FIFO that
 * hands what each batch leaves to do (signal words, timestamps, command buffers to take back) to
 * the completion thread. */
#include "core/command.h"
#include "core/signal.h"
#include "vulkan/vk_engine_internal.h"

/* ---- the FIFO to the completion thread ---- */

void hcq__vk_push_pending(vk_engine_t *e, const vk_pending_t *p) {
  pthread_mutex_lock(&e->lock);
  while (e->fifo_head - e->fifo_tail == FIFO_CAP) pthread_cond_wait(&e->fifo_space, &e->lock);
  e->fifo[e->fifo_head % FIFO_CAP] = *p;
  e->fifo[e->fifo_head % FIFO_CAP].dep = e->dep_other;
  e->fifo_head++;
  pthread_cond_signal(&e->fifo_cv);
  pthread_mutex_unlock(&e->lock);
}

/* Waits until the completion thread passed FIFO position pos (or the ts ring has room). */
void hcq__vk_wait_fifo_pos(vk_engine_t *e, uint64_t pos) {
  pthread_mutex_lock(&e->lock);
  while (e->fifo_tail < pos) pthread_cond_wait(&e->fifo_space, &e->lock);
  pthread_mutex_unlock(&e->lock);
}

/* ---- batches ---- */

static void record_pending_signal(vk_device_t *vd, const void *word, uint64_t value, uint64_t sem,
                                  uint64_t seq, hcq_queue_kind_t kind) {
  size_t slot =
      ((uintptr_t)word >> 4) % (sizeof(vd->pending_signals) / sizeof(vd->pending_signals[0]));
  pthread_mutex_lock(&vd->pending_lock);
  vd->pending_signals[slot] = (struct vk_pending_signal){word, value, sem, seq, kind};
  pthread_mutex_unlock(&vd->pending_lock);
}

bool hcq__vk_lookup_pending_signal(vk_device_t *vd, const void *word,
                                   struct vk_pending_signal *out) {
  size_t slot =
      ((uintptr_t)word >> 4) % (sizeof(vd->pending_signals) / sizeof(vd->pending_signals[0]));
  pthread_mutex_lock(&vd->pending_lock);
  *out = vd->pending_signals[slot];
  pthread_mutex_unlock(&vd->pending_lock);
  return out->word == word;
}

/* Submits the batch (when it has commands or waits), then hands its bookkeeping and the signal
 * write (word may be NULL) to the completion thread. */
void hcq__vk_flush(vk_engine_t *e, hcq__signal_words_t *word, uint64_t value) {
  vk_device_t *vd = e->vd;
  uint64_t sem = e->sem_last;
  bool submitted = e->nbcbs || e->nbwaits;
  if (submitted) {
    sem = e->sem_last + 1;
    VkPipelineStageFlags stages[2] = {VK_PIPELINE_STAGE_ALL_COMMANDS_BIT,
                                      VK_PIPELINE_STAGE_ALL_COMMANDS_BIT};
    VkTimelineSemaphoreSubmitInfo tsi = {.sType = VK_STRUCTURE_TYPE_TIMELINE_SEMAPHORE_SUBMIT_INFO,
                                         .waitSemaphoreValueCount = e->nbwaits,
                                         .pWaitSemaphoreValues = e->bwait_val,
                                         .signalSemaphoreValueCount = 1,
                                         .pSignalSemaphoreValues = &sem};
    VkSubmitInfo si = {.sType = VK_STRUCTURE_TYPE_SUBMIT_INFO,
                       .pNext = &tsi,
                       .waitSemaphoreCount = e->nbwaits,
                       .pWaitSemaphores = e->bwait_sem,
                       .pWaitDstStageMask = stages,
                       .commandBufferCount = e->nbcbs,
                       .pCommandBuffers = e->bcbs,
                       .signalSemaphoreCount = 1,
                       .pSignalSemaphores = &e->sem};
    /* Published before the driver may run it (lavapipe runs it inside vkQueueSubmit or on its own
     * threads): a fault there names these kernels. */
    __typeof__(e->inflight[0]) *f = &e->inflight[sem % FAULT_BATCHES];
    atomic_store_explicit(&f->sem, 0, memory_order_relaxed);
    atomic_signal_fence(memory_order_seq_cst);
    f->nexecs = e->nbexecs;
    memcpy(f->execs, e->bexecs, sizeof(f->execs));
    atomic_store_explicit(&f->sem, sem, memory_order_release);
    pthread_mutex_lock(&e->q->lock);
    VkResult r = vd->fn.vkQueueSubmit(e->q->queue, 1, &si, VK_NULL_HANDLE);
    pthread_mutex_unlock(&e->q->lock);
    if (r != VK_SUCCESS) {
      atomic_store(&e->gpu_dead, true);
      hcq__vk_lose(e, e->bfirst, "vkQueueSubmit failed: %s", hcq__vk_result_name(r));
    }
    e->sem_last = sem;
    vk_pending_t b = {.kind = P_BATCH, .sem = sem, .u.batch = {e->bfirst, e->blast, e->bbase}};
    hcq__vk_push_pending(e, &b);
  }
  for (uint32_t i = 0; i < e->nbpend; i++) {
    e->bpend[i].sem = sem;
    hcq__vk_push_pending(e, &e->bpend[i]);
  }
  if (word) {
    uint64_t seq = atomic_load_explicit(&e->signals_flushed, memory_order_relaxed) + 1;
    record_pending_signal(vd, word, value, sem, seq, e->kind);
    vk_pending_t s = {.kind = P_SIGNAL, .sem = sem, .u.sig = {word, value, seq}};
    hcq__vk_push_pending(e, &s);
    atomic_store_explicit(&e->signals_flushed, seq, memory_order_release);
  }
  pthread_mutex_lock(&e->lock);
  uint64_t pos = e->fifo_head;
  pthread_mutex_unlock(&e->lock);
  for (uint32_t i = 0; i < e->nbcbs; i++)
    if (e->bsegs[i]) e->bsegs[i]->fifo_pos = pos;
  /* Counted once the batch's signal can be found by the other engine. */
  if (submitted) atomic_fetch_add_explicit(&e->submits, 1, memory_order_release);
  e->nbcbs = e->nbwaits = e->nbpend = e->nbexecs = 0;
  e->bfirst = e->blast = NULL;
}

void hcq__vk_batch_add_cb(vk_engine_t *e, VkCommandBuffer cb, vk_seg_t *seg, const uint32_t *first,
                          const uint32_t *last, const uint32_t *base) {
  if (e->nbcbs == MAX_BATCH_CBS || (e->nbcbs && e->bbase != base)) hcq__vk_flush(e, NULL, 0);
  if (!e->bfirst) e->bfirst = first, e->bbase = base;
  e->blast = last;
  for (const uint32_t *c = first; c <= last && e->nbexecs < UINT32_MAX; c += HCQ__HDR_LEN(c[0])) {
    if (HCQ__HDR_OP(c[0]) != HCQ__OP_EXEC) continue;
    if (e->nbexecs < FAULT_EXECS) e->bexecs[e->nbexecs] = c;
    e->nbexecs++;
  }
  e->bsegs[e->nbcbs] = seg;
  e->bcbs[e->nbcbs++] = cb;
}

void hcq__vk_batch_add_pending(vk_engine_t *e, const vk_pending_t *p) {
  if (e->nbpend == MAX_BATCH_PEND) hcq__vk_flush(e, NULL, 0);
  e->bpend[e->nbpend++] = *p;
}

void hcq__vk_batch_add_wait(vk_engine_t *e, VkSemaphore sem, uint64_t value) {
  for (uint32_t i = 0; i < e->nbwaits; i++)
    if (e->bwait_sem[i] == sem) {
      if (value > e->bwait_val[i]) e->bwait_val[i] = value;
      return;
    }
  e->bwait_sem[e->nbwaits] = sem;
  e->bwait_val[e->nbwaits++] = value;
}

void hcq__vk_wait_gpu(vk_engine_t *e, uint64_t v, bool note_done) {
  vk_device_t *vd = e->vd;
  while (atomic_load(&e->gpu_done) < v && !atomic_load(&e->gpu_dead)) {
    VkSemaphoreWaitInfo wi = {.sType = VK_STRUCTURE_TYPE_SEMAPHORE_WAIT_INFO,
                              .semaphoreCount = 1,
                              .pSemaphores = &e->sem,
                              .pValues = &v};
    VkResult r = vd->fn.vkWaitSemaphores(vd->device, &wi, UINT64_C(200000000));
    if (r == VK_SUCCESS) {
      uint64_t done = atomic_load(&e->gpu_done);
      while (note_done && done < v && !atomic_compare_exchange_weak(&e->gpu_done, &done, v)) {}
      return;
    }
    if (r != VK_TIMEOUT) {
      atomic_store(&e->gpu_dead, true);
      hcq__vk_lose(e, NULL, "the Vulkan driver reported %s", hcq__vk_result_name(r));
    }
  }
}
