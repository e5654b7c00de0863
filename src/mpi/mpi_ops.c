/* MPI requests (mpi_op_t): posted and tested by the communication thread, or by an engine for its
 * own transfers; handed over and waited for by user threads. Ranks given up on, and the control
 * messages user threads exchange (the build check, fetches, agreement). */
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/options.h"
#include "mpi/mpi_internal.h"

void hcq__mpi_wake_thread(void) {
  atomic_fetch_add_explicit(&hcq__mpi_state.doorbell, 1, memory_order_seq_cst);
  _Atomic uint32_t *w = atomic_load_explicit(&hcq__mpi_state.sleep_word, memory_order_seq_cst);
  if (w && w != &hcq__mpi_state.doorbell) {
    atomic_fetch_add_explicit(w, 1, memory_order_seq_cst);
    hcq__futex_wake(w);
  }
  hcq__futex_wake(&hcq__mpi_state.doorbell);
}

static void mpi_error_text(int rc, char *out, size_t size) {
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  if (MPI_Error_string(rc, text, &len) != MPI_SUCCESS)
    snprintf(text, sizeof(text), "MPI error %d", rc);
  size_t n = strlen(text);
  if (n >= size) n = size - 1;
  memcpy(out, text, n);
  out[n] = '\0';
}

/* Gives up on rank for good: the communication thread marks its remote devices lost, engines drop
 * their transfers with it (hcq__mpi_engine_copy_poll) and control messages with it fail
 * (hcq__mpi_op_fail_lost). */
void hcq__mpi_rank_mark_lost(int rank, const char *fmt, ...) {
  if (rank < 0 || rank >= hcq__mpi_state.size || rank == hcq__mpi_state.rank ||
      !hcq__mpi_state.rank_lost)
    return;
  pthread_mutex_lock(&hcq__mpi_state.lost_lock);
  if (!atomic_load_explicit(&hcq__mpi_state.rank_lost[rank], memory_order_relaxed)) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(hcq__mpi_state.rank_lost_reason[rank], sizeof(hcq__mpi_state.rank_lost_reason[rank]),
              fmt, ap);
    va_end(ap);
    atomic_store_explicit(&hcq__mpi_state.rank_lost[rank], 1, memory_order_release);
  }
  pthread_mutex_unlock(&hcq__mpi_state.lost_lock);
  atomic_store(&hcq__mpi_state.peer_failed, true);
  hcq__mpi_wake_thread();
}

/* The thread posts a new op; true when it is in flight (false: failed, and a user's op may be
 * gone). */
bool hcq__mpi_op_post(mpi_op_t *o) {
  int rc = MPI_SUCCESS;
  switch (o->kind) {
    case OP_SEND:
      rc = MPI_Isend(o->buf, o->count, MPI_BYTE, o->peer, o->tag, o->comm, &o->req);
      break;
    case OP_RECV:
      rc = MPI_Irecv(o->buf, o->count, MPI_BYTE, o->peer, o->tag, o->comm, &o->req);
      break;
    default: break;
  }
  if (rc != MPI_SUCCESS) {
    mpi_error_text(rc, o->error, sizeof(o->error));
    hcq__mpi_rank_mark_lost(o->peer, "MPI failed a %s it: %s",
                            o->kind == OP_SEND ? "send to" : "receive from", o->error);
    atomic_store_explicit(&o->state, OPS_FAILED, memory_order_release);
    hcq__futex_wake(&o->state);
    return false;
  }
  atomic_store_explicit(&o->state, OPS_POSTED, memory_order_release);
  return true;
}

/* Tests a posted op; true when it finished (done or failed). Nobody sleeps on its state. */
bool hcq__mpi_op_test_quiet(mpi_op_t *o) {
  int flag = 0;
  MPI_Status status;
  int rc = MPI_Test(&o->req, &flag, &status);
  if (rc == MPI_SUCCESS && !flag) return false;
  uint32_t state = OPS_DONE;
  if (rc != MPI_SUCCESS) {
    mpi_error_text(rc, o->error, sizeof(o->error));
    hcq__mpi_rank_mark_lost(o->peer, "MPI failed a %s it: %s",
                            o->kind == OP_SEND ? "send to" : "receive from", o->error);
    state = OPS_FAILED;
  } else if (o->kind == OP_RECV) {
    int got = 0;
    MPI_Get_count(&status, MPI_BYTE, &got);
    if (got != o->count) {
      snprintf(o->error, sizeof(o->error), "received %d bytes, expected %d", got, o->count);
      state = OPS_FAILED;
    }
  }
  atomic_store_explicit(&o->state, state, memory_order_release);
  return true;
}

/* The same, waking a user thread that waits for o (op_wait). */
bool hcq__mpi_op_test(mpi_op_t *o) {
  if (!hcq__mpi_op_test_quiet(o)) return false;
  hcq__futex_wake(&o->state);
  return true;
}

/* The thread ends a posted op whose peer was given up on: its request is cancelled (a receive) or
 * left to MPI (a send), and whoever waits for it hears why. */
void hcq__mpi_op_fail_lost(mpi_op_t *o) {
  if (o->kind == OP_RECV) MPI_Cancel(&o->req);
  MPI_Request_free(&o->req);
  snprintf(o->error, sizeof(o->error), "rank %d is lost: %s", o->peer,
           hcq__mpi_state.rank_lost_reason[o->peer]);
  o->lost = true;
  atomic_store_explicit(&o->state, OPS_FAILED, memory_order_release);
  hcq__futex_wake(&o->state);
}

hcq_status_t hcq__mpi_lost_status(int rank, const char *what) {
  return hcq_status_make(HCQ_UNAVAILABLE, "%s: rank %d is lost: %s", what, rank,
                         hcq__mpi_state.rank_lost_reason[rank]);
}

/* User threads: hands o to the thread (false: its peer is lost, o is not taken). */
static bool op_submit(mpi_op_t *o) {
  if (hcq__mpi_rank_is_lost(o->peer)) return false;
  atomic_store(&o->state, OPS_NEW);
  pthread_mutex_lock(&hcq__mpi_state.lock);
  o->next = hcq__mpi_state.new_ops;
  hcq__mpi_state.new_ops = o;
  pthread_mutex_unlock(&hcq__mpi_state.lock);
  hcq__mpi_wake_thread();
  return true;
}

/* Waits for a submitted op until deadline_ns. On a timeout the op stays with the thread (it frees
 * it when it ends) and the caller must not touch it again. */
static hcq_status_t op_wait(mpi_op_t *o, uint64_t deadline_ns, int64_t timeout_ms,
                            const char *what) {
  for (unsigned i = 0;; i++) {
    uint32_t s = atomic_load_explicit(&o->state, memory_order_acquire);
    if (s == OPS_DONE) return NULL;
    if (s == OPS_FAILED)
      return hcq_status_make(HCQ_UNAVAILABLE, "%s: %s%s", what,
                             o->lost ? "" : "MPI failed: ", o->error);
    uint64_t now = hcq__now_ns();
    if (deadline_ns && now >= deadline_ns) {
      hcq_status_t st = hcq_status_make(
          HCQ_TIMEOUT,
          "%s: %s of %d bytes %s rank %d (tag %d) still pending after %" PRId64
          " ms: that rank did not take part (did it fail, stop, or run a different program?)",
          what, o->kind == OP_SEND ? "send" : "receive", o->count,
          o->kind == OP_SEND ? "to" : "from", o->peer, o->tag, timeout_ms);
      atomic_store(&o->abandoned, true); /* the thread's from here on: it may free o at once */
      return st;
    }
    if (i < 2000) {
      hcq__spin_step(i);
    } else {
      uint64_t left = deadline_ns ? deadline_ns - now : UINT64_C(1000000);
      hcq__futex_wait(&o->state, s, left < UINT64_C(1000000) ? left : UINT64_C(1000000));
    }
  }
}

static uint32_t next_ctrl_tag(int peer) {
  pthread_mutex_lock(&hcq__mpi_state.seq_lock);
  uint32_t t = hcq__mpi_state.ctrl_seq[peer]++ & 0x3fffffffu;
  pthread_mutex_unlock(&hcq__mpi_state.seq_lock);
  return hcq__mpi_state.tag_ub > 0 && (int)t > hcq__mpi_state.tag_ub
             ? t % (uint32_t)(hcq__mpi_state.tag_ub + 1)
             : t;
}

/* Ends a batch: ops still in flight are left to the thread (abandoned), the others freed. */
void hcq__mpi_batch_free(mpi_ctrl_batch_t *b) {
  for (size_t i = 0; i < b->n; i++) {
    mpi_op_t *o = b->ops[i];
    uint32_t s = o ? atomic_load_explicit(&o->state, memory_order_acquire) : OPS_DONE;
    if (o && (s == OPS_NEW || s == OPS_POSTED))
      atomic_store(&o->abandoned, true);
    else
      free(o);
  }
  b->n = 0;
}

/* A control message of bytes with peer, handed to the thread as part of b (NULL: sent or posted).
 * The bytes travel through the op's own memory, so a caller that timed out may drop its buffer
 * while the request stays with the thread. */
hcq_status_t hcq__mpi_batch_add(mpi_ctrl_batch_t *b, mpi_op_kind_t kind, int peer, const void *buf,
                                int bytes, const char *what) {
  if (!hcq__mpi_state.running)
    return hcq_status_make(HCQ_FAILED_PRECONDITION, "%s: the MPI layer is not running", what);
  mpi_op_t *o = calloc(1, sizeof(*o) + (size_t)bytes);
  if (!o) return hcq_status_make(HCQ_OUT_OF_MEMORY, "%s: out of memory", what);
  o->kind = kind;
  o->buf = o + 1;
  if (kind == OP_SEND) memcpy(o->buf, buf, (size_t)bytes);
  o->count = bytes;
  o->peer = peer;
  o->tag = (int)next_ctrl_tag(peer);
  o->comm = hcq__mpi_state.ctrl;
  if (!op_submit(o)) {
    free(o);
    return hcq__mpi_lost_status(peer, what);
  }
  b->ops[b->n++] = o;
  return NULL;
}

/* Waits for op i of b; a timed-out op is the thread's from then on, so b forgets it. */
hcq_status_t hcq__mpi_batch_wait(mpi_ctrl_batch_t *b, size_t i, uint64_t deadline_ns,
                                 int64_t timeout_ms, const char *what) {
  hcq_status_t st = op_wait(b->ops[i], deadline_ns, timeout_ms, what);
  if (st && hcq_status_code(st) == HCQ_TIMEOUT) b->ops[i] = NULL;
  return st;
}

/* Waits for every op of b and ends it: the first failure. */
hcq_status_t hcq__mpi_batch_drain(mpi_ctrl_batch_t *b, uint64_t deadline_ns, int64_t timeout_ms,
                                  const char *what) {
  hcq_status_t st = NULL;
  for (size_t i = 0; i < b->n; i++) {
    st = mpi_first_status(st, hcq__mpi_batch_wait(b, i, deadline_ns, timeout_ms, what));
  }
  hcq__mpi_batch_free(b);
  return st;
}

/* One control message within the wait timeout. */
hcq_status_t hcq__mpi_ctrl_msg(mpi_op_kind_t kind, int peer, void *buf, int bytes,
                               const char *what) {
  mpi_ctrl_batch_t b = {.n = 0};
  int64_t ms = hcq__options()->wait_timeout_ms;
  hcq_status_t st;
  if ((st = hcq__mpi_batch_add(&b, kind, peer, buf, bytes, what))) goto out;
  if ((st = hcq__mpi_batch_wait(&b, 0, hcq__deadline_after_ms(ms), ms, what))) goto out;
  if (kind == OP_RECV) memcpy(buf, b.ops[0] + 1, (size_t)bytes);
out:
  hcq__mpi_batch_free(&b);
  return st;
}
