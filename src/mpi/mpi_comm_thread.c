/* The communication thread: it runs the remote devices' queues (a COPY with one end on the device's
 * rank is a message to or from it), posts the requests user threads hand over and polls MPI while
 * any is in flight, and naps on its doorbell, or on the signal a queue waits for, when idle. */
#include <pthread.h>
#include <stdlib.h>
#include <sys/prctl.h>

#include "mpi/mpi_internal.h"

/* ---- remote device queues ---- */

uint32_t hcq__mpi_mem_gid(mpi_rdev_t *rd, const uint32_t *list) {
  uint32_t gid = 0;
  pthread_mutex_lock(&rd->mem_lock);
  for (size_t i = 0; i < rd->tagged.len; i++) {
    mpi_tagged_mem_t *t = &rd->tagged.data[i];
    if ((const char *)list >= (const char *)t->host &&
        (const char *)list < (const char *)t->host + t->size) {
      gid = t->gid;
      break;
    }
  }
  pthread_mutex_unlock(&rd->mem_lock);
  return gid;
}

/* The message a COPY on rd's queue stands for: 1 send, 2 receive, 0 nothing here. */
int hcq__mpi_copy_role(const mpi_rdev_t *rd, const uint32_t *w, uint64_t *local) {
  uint64_t dst = hcq__rd64(w + HCQ__COPY_DST), src = hcq__rd64(w + HCQ__COPY_SRC);
  int role = 0;
  if (hcq__addr_is_remote(dst) && hcq__mpi_addr_owner(dst) == rd->id && !hcq__addr_is_remote(src))
    role = 1, *local = src;
  else if (hcq__addr_is_remote(src) && hcq__mpi_addr_owner(src) == rd->id &&
           !hcq__addr_is_remote(dst))
    role = 2, *local = dst;
  return role;
}

int hcq__mpi_copy_tag(uint32_t word_tag, uint32_t gid) {
  int tag;
  if (word_tag & HCQ__TAG_EAGER_REMOTE)
    tag = (int)(word_tag & 0x1fffffffu);
  else if (word_tag & HCQ__TAG_GRAPH_REMOTE)
    tag = (int)word_tag; /* the same formula, made at build */
  else
    tag = (int)((1u << 30) | ((gid & 0x3ffu) << 20) | ((word_tag ? word_tag - 1 : 0) & 0xfffffu));
  return hcq__mpi_state.tag_ub > 0 && tag > hcq__mpi_state.tag_ub
             ? tag % (hcq__mpi_state.tag_ub + 1)
             : tag;
}

enum { RUN_DONE, RUN_BLOCKED };

static uint64_t wall_clock(void *unused) {
  (void)unused;
  return hcq__now_ns();
}

static int run_list(mpi_rdev_t *rd, mpi_rqueue_t *q, bool *moved) {
  for (;;) {
    if (q->c.w == q->c.end) {
      if (!hcq__cursor_return(&q->c)) return RUN_DONE;
      q->gid = 0;
      continue;
    }
    int ran = hcq__cursor_run_signal_op(&q->c, wall_clock, NULL);
    if (ran == HCQ__CMD_BLOCKED) return RUN_BLOCKED;
    if (ran == HCQ__CMD_RAN) {
      *moved = true;
      continue;
    }
    const uint32_t *w = q->c.w;
    switch (HCQ__HDR_OP(w[0])) {
      case HCQ__OP_COPY: {
        if (q->pending) {
          uint32_t st = atomic_load_explicit(&q->pending->state, memory_order_acquire);
          if (st == OPS_NEW || st == OPS_POSTED) return RUN_BLOCKED;
          if (st == OPS_FAILED)
            hcq__device_mark_lost(rd->dev, "MPI %s rank %d failed: %s",
                                  q->pending->kind == OP_SEND ? "send to" : "receive from",
                                  rd->rank, q->pending->error);
          free(q->pending);
          q->pending = NULL;
          break;
        }
        if (!q->c.stamped) hcq__cursor_stamp(&q->c, w, hcq__now_ns());
        uint64_t local = 0;
        int role = hcq__mpi_copy_role(rd, w, &local);
        uint64_t bytes = hcq__rd64(w + HCQ__COPY_SIZE);
        if (!role || !bytes) break;
        mpi_op_t *o = calloc(1, sizeof(*o));
        if (!o) {
          hcq__device_mark_lost(rd->dev, "out of memory for an MPI request");
          break;
        }
        o->kind = role == 1 ? OP_SEND : OP_RECV;
        o->buf = (void *)(uintptr_t)local;
        o->count = (int)bytes;
        o->peer = rd->rank;
        o->tag = hcq__mpi_copy_tag(w[HCQ__COPY_TAG], q->gid);
        o->comm = hcq__mpi_state.data;
        q->pending = o;
        *moved = true;
        if (hcq__mpi_op_post(o) && !hcq__mpi_op_test(o)) {
          /* The thread's posted list is implicit: every queue's pending op is tested when it is
           * looked at. */
          return RUN_BLOCKED;
        }
        continue; /* finished at once: the next look frees it */
      }
      case HCQ__OP_CALL: q->gid = hcq__mpi_mem_gid(rd, hcq__cursor_call(&q->c, w)); continue;
      default: break; /* EXEC: the kernel runs on its own rank; BARRIER, NOP */
    }
    hcq__cursor_advance(&q->c, w);
    *moved = true;
  }
}

void hcq__mpi_drop_queue(mpi_rqueue_t *q) {
  if (q->pending) {
    uint32_t st = atomic_load(&q->pending->state);
    if (st == OPS_POSTED) {
      if (q->pending->kind == OP_RECV) MPI_Cancel(&q->pending->req);
      MPI_Request_free(&q->pending->req);
    }
    free(q->pending);
    q->pending = NULL;
  }
  pthread_mutex_lock(&q->lock);
  if (q->running) free(q->ent.owned);
  while (q->tail < q->head) free(q->ents[q->tail++ % q->cap].owned);
  q->running = false;
  atomic_store(&q->completed, q->head);
  pthread_mutex_unlock(&q->lock);
  hcq__cursor_clear(&q->c);
}

/* Runs q until it is empty or blocked; *blocked says whether it waits. */
static bool run_queue(mpi_rdev_t *rd, mpi_rqueue_t *q, bool *blocked) {
  bool moved = false;
  *blocked = false;
  for (;;) {
    if (!q->running) {
      pthread_mutex_lock(&q->lock);
      if (q->tail == q->head) {
        pthread_mutex_unlock(&q->lock);
        atomic_store_explicit(&q->c.cur, NULL, memory_order_relaxed);
        return moved;
      }
      q->ent = q->ents[q->tail % q->cap];
      q->tail++;
      pthread_mutex_unlock(&q->lock);
      q->running = true;
      /* A bound list (a graph's queue) is its own entry: its graph id tags its messages. */
      q->gid = q->ent.owned ? 0 : hcq__mpi_mem_gid(rd, q->ent.w);
      hcq__cursor_enter(&q->c, q->ent.w, q->ent.n, q->ent.owned ? NULL : q->ent.w);
    }
    if (run_list(rd, q, &moved) == RUN_BLOCKED) {
      *blocked = true;
      return moved;
    }
    free(q->ent.owned);
    q->running = false;
    atomic_store_explicit(&q->c.call_base, NULL, memory_order_relaxed);
    moved = true;
    atomic_fetch_add_explicit(&q->completed, 1, memory_order_release);
  }
}

/* What one pass of the thread over its work found: whether anything moved, whether some queue or
 * request still waits (and whether on MPI), and the signal a queue waits for, if one does. */
typedef struct mpi_sweep {
  bool moved, waiting, mpi_pending;
  const hcq__signal_words_t *park_on;
  uint64_t park_want;
} mpi_sweep_t;

/* Posts the ops user threads handed over onto the thread's posted list (under hcq__mpi_state.lock).
 */
static void post_new_ops(mpi_op_t **posted, mpi_sweep_t *s) {
  mpi_op_t *fresh = hcq__mpi_state.new_ops;
  hcq__mpi_state.new_ops = NULL;
  while (fresh) {
    mpi_op_t *o = fresh;
    fresh = o->next;
    if (hcq__mpi_op_post(o)) {
      o->next = *posted;
      *posted = o;
    }
    s->moved = true;
  }
}

/* Runs every remote device's queues as far as they go (under hcq__mpi_state.lock); a lost device's
 * are dropped. */
static void run_devices(mpi_sweep_t *s) {
  for (mpi_rdev_t *rd = hcq__mpi_state.devices; rd; rd = rd->next) {
    if (hcq__mpi_rank_is_lost(rd->rank) && !hcq__device_is_lost(rd->dev))
      hcq__device_mark_lost(rd->dev, "rank %d is lost: %s", rd->rank,
                            hcq__mpi_state.rank_lost_reason[rd->rank]);
    for (int k = 0; k < 2; k++) {
      mpi_rqueue_t *q = &rd->q[k];
      if (hcq__device_is_lost(rd->dev)) {
        if (q->running || atomic_load(&q->completed) != atomic_load(&q->submitted))
          hcq__mpi_drop_queue(q);
        continue;
      }
      if (q->pending && atomic_load(&q->pending->state) == OPS_POSTED) hcq__mpi_op_test(q->pending);
      bool blocked;
      s->moved |= run_queue(rd, q, &blocked);
      if (blocked) {
        s->waiting = true;
        if (!q->pending && q->c.w && HCQ__HDR_OP(q->c.w[0]) == HCQ__OP_WAIT) {
          s->park_on = (const hcq__signal_words_t *)(uintptr_t)hcq__rd64(q->c.w + HCQ__WAIT_ADDR);
          s->park_want = q->c.w[HCQ__WAIT_VALUE];
        } else {
          s->mpi_pending = true; /* an MPI request in flight: keep polling MPI */
        }
      }
    }
  }
}

/* Tests the posted ops and takes the ended ones off the list. */
static void reap_posted(mpi_op_t **posted, mpi_sweep_t *s) {
  for (mpi_op_t **p = posted; *p;) {
    mpi_op_t *o = *p, *next = o->next;
    bool abandoned = atomic_load(&o->abandoned); /* once done, a waiting user may free o at once */
    bool ended = hcq__mpi_op_test(o);
    if (!ended && hcq__mpi_rank_is_lost(o->peer)) hcq__mpi_op_fail_lost(o), ended = true;
    if (ended) {
      *p = next;
      if (abandoned) free(o);
      s->moved = true;
    } else {
      p = &o->next;
    }
  }
  if (*posted) s->waiting = true, s->mpi_pending = true;
}

/* One pause of an idle thread (idle passes in a row, the first at idle_since; seq: the doorbell
 * before the pass). A message in flight is only completed by MPI's progress, which runs inside
 * MPI_Test: while one is pending, poll MPI back to back (a pause, then yielding the core to the
 * threads being waited for) for a bounded time, HCQ_MPI_SPIN_NS, so a reply that comes soon is
 * seen within a poll rather than a nap. Past it, MPI is polled every 20 us. With nothing in flight
 * the thread spins only briefly (a hand-off from another core is near) and then sleeps on its
 * doorbell or on the signal its queue waits for: no CPU is used while idle. */
static void nap(const mpi_sweep_t *s, uint32_t seq, unsigned idle, uint64_t idle_since) {
  if (idle < 256 || (s->mpi_pending && hcq__now_ns() - idle_since < hcq__mpi_state.spin_ns)) {
    hcq__spin_step(idle);
    return;
  }
  if (s->mpi_pending) {
    hcq__futex_wait(&hcq__mpi_state.doorbell, seq, UINT64_C(20000));
    return;
  }
  hcq__park_t park;
  _Atomic uint32_t *word = &hcq__mpi_state.doorbell;
  if (s->park_on) {
    hcq__park_begin(s->park_on, &park);
    word = park.word, seq = park.seq;
    if (atomic_load_explicit(&s->park_on->value, memory_order_seq_cst) >= s->park_want) {
      hcq__park_end(&park);
      return;
    }
  }
  atomic_store_explicit(&hcq__mpi_state.sleep_word, word, memory_order_seq_cst);
  hcq__futex_wait(word, seq, s->waiting ? UINT64_C(1000000) : UINT64_C(50000000));
  atomic_store_explicit(&hcq__mpi_state.sleep_word, NULL, memory_order_seq_cst);
  if (s->park_on) hcq__park_end(&park);
}

void *hcq__mpi_comm_main(void *arg) {
  (void)arg;
  /* Its naps between MPI polls are short: the default 50 us timer slack would triple them. */
  prctl(PR_SET_TIMERSLACK, 1UL, 0UL, 0UL, 0UL);
  pthread_setname_np(pthread_self(), "hcq-mpi");
  mpi_op_t *posted = NULL;
  unsigned idle = 0;
  uint64_t idle_since = 0;
  for (;;) {
    mpi_sweep_t s = {.moved = false};
    uint32_t seq = atomic_load_explicit(&hcq__mpi_state.doorbell, memory_order_seq_cst);
    pthread_mutex_lock(&hcq__mpi_state.lock);
    post_new_ops(&posted, &s);
    run_devices(&s);
    pthread_mutex_unlock(&hcq__mpi_state.lock);
    reap_posted(&posted, &s);
    if (s.moved) {
      idle = 0;
      continue;
    }
    if (atomic_load(&hcq__mpi_state.stop) && !s.waiting) break;
    if (atomic_load(&hcq__mpi_state.stop) && s.waiting && idle > 20000)
      break; /* stopping with requests nobody answers */
    if (idle++ == 0) idle_since = hcq__now_ns();
    nap(&s, seq, idle, idle_since);
  }
  while (posted) {
    mpi_op_t *o = posted;
    posted = o->next;
    if (o->kind == OP_RECV) MPI_Cancel(&o->req);
    MPI_Request_free(&o->req);
    if (atomic_load(&o->abandoned)) free(o);
  }
  return NULL;
}
