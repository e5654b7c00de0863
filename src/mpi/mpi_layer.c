/* The MPI layer (hcq/mpi.h, docs/mpi.md): remote devices whose queues run on one
 * communication thread per process, which also makes the control calls. Under MPI_THREAD_MULTIPLE a
 * graph's transfers between ranks run instead on the copy queue of their local (CPU) end, whose
 * engine posts and polls the request through the engine_copy_* hooks below.
 *
 * A remote device's queues hold the same command words as any device's; the thread walks them as a
 * CPU engine would, except that kernels are skipped (their rank runs them) and a COPY that has one
 * end in the device's own (storage-less) address range is a send to or a receive from its rank. The
 * other end is host memory of a local CPU device. A COPY blocks its queue until its request
 * completed, so a send's source and a receive's destination are never touched by later items early,
 * and the thread keeps serving every other queue and request meanwhile (nothing blocks it).
 *
 * Remote buffer addresses: 0x7e in the top byte (operands are signed 64-bit), the remote device's id in bits 40..55 and an offset
 * below; no user-space pointer looks like that, so a COPY tells its ends apart by address alone.
 *
 * Tags (on a duplicate of the application's communicator reserved for transfers):
 *   graph items  bit 30 | (graph id mod 1024) << 20 | (item mod 2^20)
 *   eager        (sequence number of transfers between the two ranks) mod 2^29
 * Graph ids are agreed at build by the ranks of the graph. Control messages (the build check,
 * fetches) use a second duplicate, tagged by per-peer sequence numbers. */
#ifdef __SANITIZE_ADDRESS__
#include <sanitizer/lsan_interface.h>
#endif
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdarg.h>
#include <sys/prctl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <xxhash.h>

#include "core/backend.h"
#include "core/cmd_cursor.h"
#include "core/internal.h"
#include "hcq/graph.h"
#include "hcq/mpi.h"

#define REMOTE_TOP HCQ__REMOTE_ADDR_TOP
#define REMOTE_OFF_BITS 40
#define MAX_REMOTE 65535

static inline bool addr_remote(uint64_t a) { return hcq__addr_is_remote(a); }
static inline unsigned addr_owner(uint64_t a) { return (unsigned)((a >> REMOTE_OFF_BITS) & 0xffff); }

/* The rank + 1 of each remote device id (0: none): an engine tags its message without a lock. */
static _Atomic int32_t id_rank[MAX_REMOTE + 1];

/* ---- MPI operations, run by the communication thread ---- */

enum { OP_SEND, OP_RECV };
enum { OPS_NEW, OPS_POSTED, OPS_DONE, OPS_FAILED };

typedef struct op {
  int kind;
  void *buf;
  int count; /* bytes */
  int peer, tag;
  MPI_Comm comm;
  MPI_Request req;
  _Atomic uint32_t state;
  char error[160];
  bool lost; /* failed because its peer was given up on (op_fail_lost) */
  _Atomic bool abandoned;
  struct op *next; /* on the thread's posted list, or the new list */
} op_t;

typedef struct rentry {
  const uint32_t *w;
  size_t n;
  uint32_t *owned; /* unbound submissions: a copy */
} rentry_t;

typedef struct rqueue {
  pthread_mutex_t lock;
  rentry_t *ents;
  size_t cap;
  uint64_t head, tail; /* entries pushed, entries taken by the thread */
  _Atomic uint64_t submitted, completed;
  /* The thread's cursor. */
  bool running;
  rentry_t ent;
  hcq__cmd_cursor_t c;
  uint32_t gid; /* graph id of the bound list being run (0: the ring) */
  op_t *pending;
} rqueue_t;

typedef struct tagged_mem {
  void *host;
  uint64_t size;
  uint32_t gid;
} tagged_mem_t;

typedef struct rdev {
  hcq_device_t *dev;
  int rank;
  unsigned id;
  char local_name[32]; /* KIND:N on its rank */
  uint64_t next_off;
  rqueue_t q[2];
  pthread_mutex_t mem_lock;
  HCQ__VEC(tagged_mem_t) tagged;
  struct rdev *next;
} rdev_t;

static struct {
  bool running, own_mpi;
  MPI_Comm data, ctrl;
  int rank, size;
  int tag_ub;
  pthread_t thread;
  _Atomic bool stop;
  _Atomic uint32_t doorbell;
  _Atomic(_Atomic uint32_t *) sleep_word;
  pthread_mutex_t lock; /* devices list, new ops */
  rdev_t *devices;
  op_t *new_ops;
  unsigned next_id;
  _Atomic bool peer_failed;
  /* Sequence numbers per peer: eager transfers, control messages. */
  uint32_t *eager_seq, *ctrl_seq;
  /* Ranks given up on (hcq_mpi_declare_rank_lost, or an MPI error on a request with them): the
   * reason is written, under lost_lock, before the flag is set, and never changes after. */
  _Atomic uint8_t *rank_lost;
  char (*rank_lost_reason)[200];
  pthread_mutex_t lost_lock;
  pthread_mutex_t seq_lock;
  uint32_t next_gid;
  uint64_t spin_ns; /* HCQ_MPI_SPIN_NS: how long the thread polls MPI back to back while a request is pending */
} G = {.lock = PTHREAD_MUTEX_INITIALIZER, .seq_lock = PTHREAD_MUTEX_INITIALIZER, .lost_lock = PTHREAD_MUTEX_INITIALIZER};

static _Thread_local uint32_t t_build_gid; /* graph being built by this thread (tags its bound lists) */

static void wake_thread(void) {
  atomic_fetch_add_explicit(&G.doorbell, 1, memory_order_seq_cst);
  _Atomic uint32_t *w = atomic_load_explicit(&G.sleep_word, memory_order_seq_cst);
  if (w && w != &G.doorbell) {
    atomic_fetch_add_explicit(w, 1, memory_order_seq_cst);
    hcq__futex_wake(w);
  }
  hcq__futex_wake(&G.doorbell);
}

static void mpi_error_text(int rc, char *out, size_t size) {
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  if (MPI_Error_string(rc, text, &len) != MPI_SUCCESS) snprintf(text, sizeof(text), "MPI error %d", rc);
  size_t n = strlen(text);
  if (n >= size) n = size - 1;
  memcpy(out, text, n);
  out[n] = '\0';
}

static bool rank_is_lost(int rank) {
  return rank >= 0 && rank < G.size && G.rank_lost && atomic_load_explicit(&G.rank_lost[rank], memory_order_acquire);
}

/* Gives up on rank for good: the communication thread marks its remote devices lost, engines drop
 * their transfers with it (engine_copy_poll) and control messages with it fail (op_fail_lost). */
static void rank_mark_lost(int rank, const char *fmt, ...) {
  if (rank < 0 || rank >= G.size || rank == G.rank || !G.rank_lost) return;
  pthread_mutex_lock(&G.lost_lock);
  if (!atomic_load_explicit(&G.rank_lost[rank], memory_order_relaxed)) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(G.rank_lost_reason[rank], sizeof(G.rank_lost_reason[rank]), fmt, ap);
    va_end(ap);
    atomic_store_explicit(&G.rank_lost[rank], 1, memory_order_release);
  }
  pthread_mutex_unlock(&G.lost_lock);
  atomic_store(&G.peer_failed, true);
  wake_thread();
}

/* The thread posts a new op; true when it is in flight (false: failed, and a user's op may be gone). */
static bool op_post(op_t *o) {
  int rc = MPI_SUCCESS;
  switch (o->kind) {
    case OP_SEND: rc = MPI_Isend(o->buf, o->count, MPI_BYTE, o->peer, o->tag, o->comm, &o->req); break;
    case OP_RECV: rc = MPI_Irecv(o->buf, o->count, MPI_BYTE, o->peer, o->tag, o->comm, &o->req); break;
    default: break;
  }
  if (rc != MPI_SUCCESS) {
    mpi_error_text(rc, o->error, sizeof(o->error));
    rank_mark_lost(o->peer, "MPI failed a %s it: %s", o->kind == OP_SEND ? "send to" : "receive from", o->error);
    atomic_store_explicit(&o->state, OPS_FAILED, memory_order_release);
    hcq__futex_wake(&o->state);
    return false;
  }
  atomic_store_explicit(&o->state, OPS_POSTED, memory_order_release);
  return true;
}

/* Tests a posted op; true when it finished (done or failed). Nobody sleeps on its state. */
static bool op_test_quiet(op_t *o) {
  int flag = 0;
  MPI_Status status;
  int rc = MPI_Test(&o->req, &flag, &status);
  if (rc == MPI_SUCCESS && !flag) return false;
  uint32_t state = OPS_DONE;
  if (rc != MPI_SUCCESS) {
    mpi_error_text(rc, o->error, sizeof(o->error));
    rank_mark_lost(o->peer, "MPI failed a %s it: %s", o->kind == OP_SEND ? "send to" : "receive from", o->error);
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
static bool op_test(op_t *o) {
  if (!op_test_quiet(o)) return false;
  hcq__futex_wake(&o->state);
  return true;
}

/* The thread ends a posted op whose peer was given up on: its request is cancelled (a receive) or
 * left to MPI (a send), and whoever waits for it hears why. */
static void op_fail_lost(op_t *o) {
  if (o->kind == OP_RECV) MPI_Cancel(&o->req);
  MPI_Request_free(&o->req);
  snprintf(o->error, sizeof(o->error), "rank %d is lost: %s", o->peer, G.rank_lost_reason[o->peer]);
  o->lost = true;
  atomic_store_explicit(&o->state, OPS_FAILED, memory_order_release);
  hcq__futex_wake(&o->state);
}

static hcq_status_t lost_status(int rank, const char *what) {
  return hcq_status_make(HCQ_UNAVAILABLE, "%s: rank %d is lost: %s", what, rank, G.rank_lost_reason[rank]);
}

/* User threads: hands o to the thread (false: its peer is lost, o is not taken). */
static bool op_submit(op_t *o) {
  if (rank_is_lost(o->peer)) return false;
  atomic_store(&o->state, OPS_NEW);
  pthread_mutex_lock(&G.lock);
  o->next = G.new_ops;
  G.new_ops = o;
  pthread_mutex_unlock(&G.lock);
  wake_thread();
  return true;
}

/* Waits for a submitted op until deadline_ns. On a timeout the op stays with the thread (it frees it
 * when it ends) and the caller must not touch it again. */
static hcq_status_t op_wait(op_t *o, uint64_t deadline_ns, int64_t timeout_ms, const char *what) {
  for (unsigned i = 0;; i++) {
    uint32_t s = atomic_load_explicit(&o->state, memory_order_acquire);
    if (s == OPS_DONE) return NULL;
    if (s == OPS_FAILED) return hcq_status_make(HCQ_UNAVAILABLE, "%s: %s%s", what, o->lost ? "" : "MPI failed: ", o->error);
    uint64_t now = hcq__now_ns();
    if (deadline_ns && now >= deadline_ns) {
      hcq_status_t st = hcq_status_make(HCQ_TIMEOUT, "%s: %s of %d bytes %s rank %d (tag %d) still pending after %" PRId64
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

/* ---- remote device queues ---- */

static uint32_t mem_gid(rdev_t *rd, const uint32_t *list) {
  uint32_t gid = 0;
  pthread_mutex_lock(&rd->mem_lock);
  for (size_t i = 0; i < rd->tagged.len; i++) {
    tagged_mem_t *t = &rd->tagged.data[i];
    if ((const char *)list >= (const char *)t->host && (const char *)list < (const char *)t->host + t->size) {
      gid = t->gid;
      break;
    }
  }
  pthread_mutex_unlock(&rd->mem_lock);
  return gid;
}

/* The message a COPY on rd's queue stands for: 1 send, 2 receive, 0 nothing here. */
static int copy_role(const rdev_t *rd, const uint32_t *w, uint64_t *local) {
  uint64_t dst = hcq__rd64(w + HCQ__COPY_DST), src = hcq__rd64(w + HCQ__COPY_SRC);
  int role = 0;
  if (addr_remote(dst) && addr_owner(dst) == rd->id && !addr_remote(src)) role = 1, *local = src;
  else if (addr_remote(src) && addr_owner(src) == rd->id && !addr_remote(dst)) role = 2, *local = dst;
  return role;
}

static int copy_tag(uint32_t word_tag, uint32_t gid) {
  int tag;
  if (word_tag & HCQ__TAG_EAGER_REMOTE) tag = (int)(word_tag & 0x1fffffffu);
  else if (word_tag & HCQ__TAG_GRAPH_REMOTE) tag = (int)word_tag; /* the same formula, made at build */
  else tag = (int)((1u << 30) | ((gid & 0x3ffu) << 20) | ((word_tag ? word_tag - 1 : 0) & 0xfffffu));
  return G.tag_ub > 0 && tag > G.tag_ub ? tag % (G.tag_ub + 1) : tag;
}

enum { RUN_DONE, RUN_BLOCKED };

static uint64_t wall_clock(void *unused) {
  (void)unused;
  return hcq__now_ns();
}

static int run_list(rdev_t *rd, rqueue_t *q, bool *moved) {
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
            hcq__device_mark_lost(rd->dev, "MPI %s rank %d failed: %s", q->pending->kind == OP_SEND ? "send to" : "receive from",
                                  rd->rank, q->pending->error);
          free(q->pending);
          q->pending = NULL;
          break;
        }
        if (!q->c.stamped) hcq__cursor_stamp(&q->c, w, hcq__now_ns());
        uint64_t local = 0;
        int role = copy_role(rd, w, &local);
        uint64_t bytes = hcq__rd64(w + HCQ__COPY_SIZE);
        if (!role || !bytes) break;
        op_t *o = calloc(1, sizeof(*o));
        if (!o) {
          hcq__device_mark_lost(rd->dev, "out of memory for an MPI request");
          break;
        }
        o->kind = role == 1 ? OP_SEND : OP_RECV;
        o->buf = (void *)(uintptr_t)local;
        o->count = (int)bytes;
        o->peer = rd->rank;
        o->tag = copy_tag(w[HCQ__COPY_TAG], q->gid);
        o->comm = G.data;
        q->pending = o;
        *moved = true;
        if (op_post(o) && !op_test(o)) {
          /* The thread's posted list is implicit: every queue's pending op is tested when it is looked at. */
          return RUN_BLOCKED;
        }
        continue; /* finished at once: the next look frees it */
      }
      case HCQ__OP_CALL: q->gid = mem_gid(rd, hcq__cursor_call(&q->c, w)); continue;
      default: break; /* EXEC: the kernel runs on its own rank; BARRIER, NOP */
    }
    hcq__cursor_advance(&q->c, w);
    *moved = true;
  }
}

static void drop_queue(rqueue_t *q) {
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
static bool run_queue(rdev_t *rd, rqueue_t *q, bool *blocked) {
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
      q->gid = q->ent.owned ? 0 : mem_gid(rd, q->ent.w);
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

static void *comm_main(void *arg) {
  (void)arg;
  /* Its naps between MPI polls are short: the default 50 us timer slack would triple them. */
  prctl(PR_SET_TIMERSLACK, 1UL, 0UL, 0UL, 0UL);
  pthread_setname_np(pthread_self(), "hcq-mpi");
  op_t *posted = NULL;
  unsigned idle = 0;
  uint64_t idle_since = 0;
  for (;;) {
    bool moved = false, waiting = false, mpi_pending = false;
    const hcq__signal_words_t *park_on = NULL;
    uint64_t park_want = 0;
    uint32_t seq = atomic_load_explicit(&G.doorbell, memory_order_seq_cst);
    pthread_mutex_lock(&G.lock);
    op_t *fresh = G.new_ops;
    G.new_ops = NULL;
    while (fresh) {
      op_t *o = fresh;
      fresh = o->next;
      if (op_post(o)) {
        o->next = posted;
        posted = o;
      }
      moved = true;
    }
    for (rdev_t *rd = G.devices; rd; rd = rd->next) {
      if (rank_is_lost(rd->rank) && !hcq__device_is_lost(rd->dev))
        hcq__device_mark_lost(rd->dev, "rank %d is lost: %s", rd->rank, G.rank_lost_reason[rd->rank]);
      for (int k = 0; k < 2; k++) {
        rqueue_t *q = &rd->q[k];
        if (hcq__device_is_lost(rd->dev)) {
          if (q->running || atomic_load(&q->completed) != atomic_load(&q->submitted)) drop_queue(q);
          continue;
        }
        if (q->pending && atomic_load(&q->pending->state) == OPS_POSTED) op_test(q->pending);
        bool blocked;
        moved |= run_queue(rd, q, &blocked);
        if (blocked) {
          waiting = true;
          if (!q->pending && q->c.w && HCQ__HDR_OP(q->c.w[0]) == HCQ__OP_WAIT) {
            park_on = (const hcq__signal_words_t *)(uintptr_t)hcq__rd64(q->c.w + HCQ__WAIT_ADDR);
            park_want = q->c.w[HCQ__WAIT_VALUE];
          } else {
            mpi_pending = true; /* an MPI request in flight: keep polling MPI */
          }
        }
      }
    }
    pthread_mutex_unlock(&G.lock);
    for (op_t **p = &posted; *p;) {
      op_t *o = *p, *next = o->next;
      bool abandoned = atomic_load(&o->abandoned); /* once done, a waiting user may free o at once */
      bool ended = op_test(o);
      if (!ended && rank_is_lost(o->peer)) op_fail_lost(o), ended = true;
      if (ended) {
        *p = next;
        if (abandoned) free(o);
        moved = true;
      } else {
        p = &o->next;
      }
    }
    if (posted) waiting = true, mpi_pending = true;
    if (moved) {
      idle = 0;
      continue;
    }
    if (atomic_load(&G.stop) && !waiting) break;
    if (atomic_load(&G.stop) && waiting && idle > 20000) break; /* stopping with requests nobody answers */
    if (idle++ == 0) idle_since = hcq__now_ns();
    /* A message in flight is only completed by MPI's progress, which runs inside MPI_Test: while
     * one is pending, poll MPI back to back (a pause, then yielding the core to the threads being
     * waited for) for a bounded time, HCQ_MPI_SPIN_NS, so a reply that comes soon is seen within
     * a poll rather than a nap. Past it, MPI is polled every 20 us. With nothing in flight the
     * thread spins only briefly (a hand-off from another core is near) and then sleeps on its
     * doorbell or on the signal its queue waits for: no CPU is used while idle. */
    if (idle < 256 || (mpi_pending && hcq__now_ns() - idle_since < G.spin_ns)) {
      hcq__spin_step(idle);
      continue;
    }
    if (mpi_pending) {
      hcq__futex_wait(&G.doorbell, seq, UINT64_C(20000));
      continue;
    }
    hcq__park_t park;
    _Atomic uint32_t *word = &G.doorbell;
    if (park_on) {
      hcq__park_begin(park_on, &park);
      word = park.word, seq = park.seq;
      if (atomic_load_explicit(&park_on->value, memory_order_seq_cst) >= park_want) {
        hcq__park_end(&park);
        continue;
      }
    }
    atomic_store_explicit(&G.sleep_word, word, memory_order_seq_cst);
    hcq__futex_wait(word, seq, waiting ? UINT64_C(1000000) : UINT64_C(50000000));
    atomic_store_explicit(&G.sleep_word, NULL, memory_order_seq_cst);
    if (park_on) hcq__park_end(&park);
  }
  while (posted) {
    op_t *o = posted;
    posted = o->next;
    if (o->kind == OP_RECV) MPI_Cancel(&o->req);
    MPI_Request_free(&o->req);
    if (atomic_load(&o->abandoned)) free(o);
  }
  return NULL;
}

/* ---- the remote device backend ---- */

static rdev_t *rdev_of(const hcq_device_t *dev) { return dev->backend; }

static void r_destroy(hcq_device_t *dev) {
  rdev_t *rd = rdev_of(dev);
  for (int k = 0; k < 2; k++) {
    free(rd->q[k].ents);
    pthread_mutex_destroy(&rd->q[k].lock);
  }
  hcq__vec_free(&rd->tagged);
  pthread_mutex_destroy(&rd->mem_lock);
  free(rd);
  dev->backend = NULL;
}

static bool r_stop(hcq_device_t *dev) {
  rdev_t *rd = rdev_of(dev);
  pthread_mutex_lock(&G.lock);
  for (rdev_t **p = &G.devices; *p; p = &(*p)->next)
    if (*p == rd) {
      *p = rd->next;
      break;
    }
  for (int k = 0; k < 2; k++)
    if (rd->q[k].pending || rd->q[k].running || rd->q[k].tail < rd->q[k].head) drop_queue(&rd->q[k]);
  pthread_mutex_unlock(&G.lock);
  return false;
}

static hcq_status_t r_mem_alloc(hcq_device_t *dev, uint64_t size, uint32_t flags, hcq__mem_t *out) {
  rdev_t *rd = rdev_of(dev);
  memset(out, 0, sizeof(*out));
  out->size = size;
  if (flags & HCQ__MEM_HOST_VISIBLE) {
    /* Signals, kernel arguments and command words are this process's: real memory. */
    void *p = NULL;
    if (posix_memalign(&p, 64, size ? size : 64)) return hcq_status_make(HCQ_OUT_OF_MEMORY, "%s: out of host memory", dev->name);
    memset(p, 0, size);
    out->host = p;
    out->addr = (uint64_t)(uintptr_t)p;
    if (t_build_gid) {
      pthread_mutex_lock(&rd->mem_lock);
      bool ok = hcq__vec_push(&rd->tagged, ((tagged_mem_t){p, size, t_build_gid}));
      pthread_mutex_unlock(&rd->mem_lock);
      if (!ok) {
        free(p);
        return hcq_status_make(HCQ_OUT_OF_MEMORY, "%s: out of host memory", dev->name);
      }
    }
    return NULL;
  }
  uint64_t rounded = (size + 63) & ~UINT64_C(63);
  pthread_mutex_lock(&rd->mem_lock);
  uint64_t off = rd->next_off;
  bool fits = rounded < (UINT64_C(1) << REMOTE_OFF_BITS) && off + rounded < (UINT64_C(1) << REMOTE_OFF_BITS);
  if (fits) rd->next_off = off + rounded;
  pthread_mutex_unlock(&rd->mem_lock);
  if (!fits)
    return hcq_status_make(HCQ_OUT_OF_MEMORY, "%s: remote address space (1 TiB per remote device) used up", dev->name);
  out->addr = (REMOTE_TOP << 56) | ((uint64_t)rd->id << REMOTE_OFF_BITS) | off;
  return NULL;
}

static void r_mem_free(hcq_device_t *dev, hcq__mem_t *mem) {
  rdev_t *rd = rdev_of(dev);
  if (!mem->host) return;
  pthread_mutex_lock(&rd->mem_lock);
  for (size_t i = 0; i < rd->tagged.len; i++)
    if (rd->tagged.data[i].host == mem->host) {
      rd->tagged.data[i] = rd->tagged.data[rd->tagged.len - 1];
      rd->tagged.len--;
      break;
    }
  pthread_mutex_unlock(&rd->mem_lock);
  free(mem->host);
  mem->host = NULL;
}

static hcq_status_t r_reserve(hcq_device_t *dev, hcq_queue_kind_t kind, size_t nwords, bool bound) {
  (void)dev, (void)kind, (void)nwords, (void)bound;
  return NULL; /* the entry list grows */
}

static hcq_status_t r_submit(hcq_device_t *dev, hcq_queue_kind_t kind, const uint32_t *words, size_t nwords, bool bound) {
  rqueue_t *q = &rdev_of(dev)->q[kind];
  rentry_t e = {words, nwords, NULL};
  if (!bound) {
    e.owned = malloc(nwords * sizeof(uint32_t) + 1);
    if (!e.owned) return hcq_status_make(HCQ_OUT_OF_MEMORY, "%s: out of memory submitting", dev->name);
    memcpy(e.owned, words, nwords * sizeof(uint32_t));
    e.w = e.owned;
  }
  pthread_mutex_lock(&q->lock);
  if (q->head - q->tail == q->cap) {
    size_t cap = q->cap ? 2 * q->cap : 64;
    rentry_t *ents = malloc(cap * sizeof(*ents));
    if (!ents) {
      pthread_mutex_unlock(&q->lock);
      free(e.owned);
      return hcq_status_make(HCQ_OUT_OF_MEMORY, "%s: out of memory submitting", dev->name);
    }
    for (uint64_t i = q->tail; i < q->head; i++) ents[i % cap] = q->ents[i % q->cap];
    free(q->ents);
    q->ents = ents;
    q->cap = cap;
  }
  q->ents[q->head % q->cap] = e;
  q->head++;
  atomic_fetch_add_explicit(&q->submitted, 1, memory_order_release);
  pthread_mutex_unlock(&q->lock);
  wake_thread();
  return NULL;
}

static uint64_t r_submitted(hcq_device_t *dev, hcq_queue_kind_t kind) {
  return atomic_load_explicit(&rdev_of(dev)->q[kind].submitted, memory_order_acquire);
}
static uint64_t r_completed(hcq_device_t *dev, hcq_queue_kind_t kind) {
  return atomic_load_explicit(&rdev_of(dev)->q[kind].completed, memory_order_acquire);
}

static void r_snapshot(hcq_device_t *dev, hcq_queue_kind_t kind, hcq__engine_snapshot_t *out) {
  rqueue_t *q = &rdev_of(dev)->q[kind];
  out->submitted = atomic_load(&q->submitted);
  out->completed = atomic_load(&q->completed);
  hcq__cursor_snapshot(&q->c, out);
}

static void r_lost(hcq_device_t *dev) {
  (void)dev;
  wake_thread();
}

static hcq_status_t r_compile(hcq_device_t *dev, const char *entry, const char *source, hcq__program_impl_t *out) {
  /* Compiled on its own rank only; the core keeps the source and the name. */
  (void)dev, (void)entry, (void)source;
  memset(out, 0, sizeof(*out));
  return NULL;
}

static const hcq__device_vtable_t remote_vtable = {
    .destroy = r_destroy,
    .stop = r_stop,
    .mem_alloc = r_mem_alloc,
    .mem_free = r_mem_free,
    .reserve = r_reserve,
    .submit = r_submit,
    .submitted = r_submitted,
    .completed = r_completed,
    .snapshot = r_snapshot,
    .lost = r_lost,
    .program_compile = r_compile,
};

typedef struct create_ctx {
  const char *name;
  int rank;
  hcq_device_kind_t kind;
  int index;
} create_ctx_t;

static hcq_status_t remote_create(hcq_device_t *dev, void *ctx) {
  create_ctx_t *c = ctx;
  rdev_t *rd = calloc(1, sizeof(*rd));
  if (!rd) return hcq_status_make(HCQ_OUT_OF_MEMORY, "out of memory opening %s", c->name);
  pthread_mutex_lock(&G.lock);
  if (G.next_id >= MAX_REMOTE) {
    pthread_mutex_unlock(&G.lock);
    free(rd);
    return hcq_status_make(HCQ_UNAVAILABLE, "cannot open %s: %d remote devices were opened already", c->name, MAX_REMOTE);
  }
  rd->id = G.next_id++;
  pthread_mutex_unlock(&G.lock);
  rd->dev = dev;
  rd->rank = c->rank;
  atomic_store_explicit(&id_rank[rd->id], c->rank + 1, memory_order_release);
  snprintf(rd->local_name, sizeof(rd->local_name), "%s:%d", hcq_device_kind_name(c->kind), c->index);
  for (int k = 0; k < 2; k++) pthread_mutex_init(&rd->q[k].lock, NULL);
  pthread_mutex_init(&rd->mem_lock, NULL);
  snprintf(dev->name, sizeof(dev->name), "%s", c->name);
  dev->vt = &remote_vtable;
  dev->backend = rd;
  const hcq__backend_t *row = hcq__backend(c->kind);
  uint32_t kind_caps = row ? row->kernel_caps : 0;
  dev->caps = HCQ_CAP_IN_ORDER_QUEUES | HCQ_CAP_COPY_QUEUE | HCQ_CAP_HOST_MEMORY | HCQ__CAP_REMOTE | kind_caps;
  dev->threads = 0;
  pthread_mutex_lock(&G.lock);
  rd->next = G.devices;
  G.devices = rd;
  pthread_mutex_unlock(&G.lock);
  return NULL;
}

/* "1/CPU:0" -> rank 1, "CPU:0". */
static hcq_status_t remote_open(const char *name, const hcq_device_options_t *options, hcq_device_t **out) {
  const char *slash = strchr(name, '/');
  char *end;
  errno = 0;
  long rank = strtol(name, &end, 10);
  if (end != slash || slash == name || errno || rank < 0)
    return hcq_status_make(HCQ_NOT_FOUND, "unknown device \"%.64s\": a rank-qualified name is RANK/KIND:N", name);
  if (rank >= G.size)
    return hcq_status_make(HCQ_NOT_FOUND, "unknown device \"%.64s\": rank %ld does not exist (%d ranks)", name, rank, G.size);
  if (strchr(slash + 1, '/'))
    return hcq_status_make(HCQ_NOT_FOUND, "unknown device \"%.64s\": one rank per name", name);
  if (rank == G.rank) return hcq_device_open_ex(slash + 1, options, out);
  /* Parse the rest with the core's own rules, through a throw-away probe of the name's syntax. */
  const char *rest = slash + 1;
  const char *colon = strchr(rest, ':');
  size_t klen = colon ? (size_t)(colon - rest) : strlen(rest);
  int kind = -1;
  for (int k = 0; k < HCQ_DEVICE_KIND_COUNT; k++) {
    const char *kn = hcq_device_kind_name((hcq_device_kind_t)k);
    if (strlen(kn) == klen && !strncasecmp(kn, rest, klen)) kind = k;
  }
  long index = 0;
  if (colon) {
    errno = 0;
    index = strtol(colon + 1, &end, 10);
    if (!colon[1] || *end || errno || index < 0 || index >= 1024) kind = -1;
  }
  if (kind < 0) return hcq_status_make(HCQ_NOT_FOUND, "unknown device \"%.64s\" on rank %ld", name, rank);
  if (options && (options->timeline_start || options->isolate || options->threads))
    return hcq_status_make(HCQ_INVALID_ARGUMENT, "device %s: options apply on its own rank, not to a remote device", name);
  char canon[32];
  snprintf(canon, sizeof(canon), "%ld/%s:%ld", rank, hcq_device_kind_name((hcq_device_kind_t)kind), index);
  create_ctx_t c = {canon, (int)rank, (hcq_device_kind_t)kind, (int)index};
  return hcq__device_open_with(canon, (hcq_device_kind_t)kind, (int)index, remote_create, &c, out);
}

/* ---- the graph build check ---- */

static int dev_rank(const hcq_device_t *d) { return hcq__device_is_remote(d) ? rdev_of(d)->rank : G.rank; }

static void global_name(const hcq_device_t *d, char *out, size_t size) {
  if (hcq__device_is_remote(d)) snprintf(out, size, "%s", d->name);
  else snprintf(out, size, "%d/%s", G.rank, d->name);
}

typedef struct digest_ctx {
  XXH3_state_t *h;
  const hcq_buffer_t **bases;
  size_t nbases, cap;
} digest_ctx_t;

static void feed(digest_ctx_t *c, const void *p, size_t n) { XXH3_64bits_update(c->h, p, n); }
static void feed_u64(digest_ctx_t *c, uint64_t v) { feed(c, &v, sizeof(v)); }
static void feed_str(digest_ctx_t *c, const char *s) { feed(c, s, strlen(s) + 1); }
static void feed_dev(digest_ctx_t *c, const hcq_device_t *d) {
  char n[48];
  global_name(d, n, sizeof(n));
  feed_str(c, n);
}
static void feed_buf(digest_ctx_t *c, const hcq_buffer_t *b) {
  if (!b) {
    feed_u64(c, UINT64_MAX);
    return;
  }
  const hcq_buffer_t *base = hcq_buffer_base(b);
  size_t i = 0;
  while (i < c->nbases && c->bases[i] != base) i++;
  if (i == c->nbases && c->nbases < c->cap) c->bases[c->nbases++] = base;
  feed_u64(c, i);
  feed_dev(c, b->dev);
  feed_u64(c, hcq_buffer_size(base));
  feed_u64(c, hcq_buffer_offset(b));
  feed_u64(c, b->size);
}
static void feed_operand(digest_ctx_t *c, const hcq_operand_t *o) {
  feed_u64(c, o->sym ? 1 : 0);
  feed_u64(c, o->sym ? 0 : (uint64_t)o->value);
}

static void describe_item(const hcq_exec_item_t *it, size_t j, char *out, size_t size) {
  char a[48] = "?", b[48] = "?";
  if (it->kind == HCQ_ITEM_KERNEL && it->kernel.program) {
    global_name(it->kernel.program->dev, a, sizeof(a));
    snprintf(out, size, "item %zu: kernel %s on %s with %zu buffers", j, it->kernel.program->name, a, it->kernel.nbufs);
  } else if (it->kind == HCQ_ITEM_TRANSFER && it->transfer.src && it->transfer.dst) {
    global_name(it->transfer.src->dev, a, sizeof(a));
    global_name(it->transfer.dst->dev, b, sizeof(b));
    snprintf(out, size, "item %zu: transfer of %" PRIu64 " bytes %s -> %s", j, it->transfer.bytes, a, b);
  } else {
    snprintf(out, size, "item %zu", j);
  }
}

static uint32_t next_ctrl_tag(int peer) {
  pthread_mutex_lock(&G.seq_lock);
  uint32_t t = G.ctrl_seq[peer]++ & 0x3fffffffu;
  pthread_mutex_unlock(&G.seq_lock);
  return G.tag_ub > 0 && (int)t > G.tag_ub ? t % (uint32_t)(G.tag_ub + 1) : t;
}

/* Ops handed to the thread together, waited for with one deadline: their peers' ranks in order,
 * each op a control message of count bytes (sent from buf, or received into it). */
typedef struct ctrl_batch {
  op_t *ops[64];
  size_t n;
} ctrl_batch_t;

/* Ends a batch: ops still in flight are left to the thread (abandoned), the others freed. */
static void batch_free(ctrl_batch_t *b) {
  for (size_t i = 0; i < b->n; i++) {
    op_t *o = b->ops[i];
    uint32_t s = o ? atomic_load_explicit(&o->state, memory_order_acquire) : OPS_DONE;
    if (o && (s == OPS_NEW || s == OPS_POSTED)) atomic_store(&o->abandoned, true);
    else free(o);
  }
  b->n = 0;
}

/* A control message of bytes with peer, handed to the thread as part of b (NULL: sent or posted). The
 * bytes travel through the op's own memory, so a caller that timed out may drop its buffer while the
 * request stays with the thread. */
static hcq_status_t batch_add(ctrl_batch_t *b, int kind, int peer, const void *buf, int bytes, const char *what) {
  if (!G.running) return hcq_status_make(HCQ_FAILED_PRECONDITION, "%s: the MPI layer is not running", what);
  op_t *o = calloc(1, sizeof(*o) + (size_t)bytes);
  if (!o) return hcq_status_make(HCQ_OUT_OF_MEMORY, "%s: out of memory", what);
  o->kind = kind;
  o->buf = o + 1;
  if (kind == OP_SEND) memcpy(o->buf, buf, (size_t)bytes);
  o->count = bytes;
  o->peer = peer;
  o->tag = (int)next_ctrl_tag(peer);
  o->comm = G.ctrl;
  if (!op_submit(o)) {
    free(o);
    return lost_status(peer, what);
  }
  b->ops[b->n++] = o;
  return NULL;
}

/* Waits for op i of b; a timed-out op is the thread's from then on, so b forgets it. */
static hcq_status_t batch_wait(ctrl_batch_t *b, size_t i, uint64_t deadline_ns, int64_t timeout_ms, const char *what) {
  hcq_status_t st = op_wait(b->ops[i], deadline_ns, timeout_ms, what);
  if (st && hcq_status_code(st) == HCQ_TIMEOUT) b->ops[i] = NULL;
  return st;
}

/* Waits for every op of b and ends it: the first failure. */
static hcq_status_t batch_drain(ctrl_batch_t *b, uint64_t deadline_ns, int64_t timeout_ms, const char *what) {
  hcq_status_t st = NULL;
  for (size_t i = 0; i < b->n; i++) {
    hcq_status_t w = batch_wait(b, i, deadline_ns, timeout_ms, what);
    if (w && !st) st = w;
    else hcq_status_destroy(w);
  }
  batch_free(b);
  return st;
}

/* The earlier of two outcomes (the later one is dropped). */
static hcq_status_t first_status(hcq_status_t a, hcq_status_t b) {
  if (!a) return b;
  hcq_status_destroy(b);
  return a;
}

/* One control message within the wait timeout. */
static hcq_status_t ctrl_msg(int kind, int peer, void *buf, int bytes, const char *what) {
  ctrl_batch_t b = {.n = 0};
  hcq_status_t st = batch_add(&b, kind, peer, buf, bytes, what);
  int64_t ms = hcq__options()->wait_timeout_ms;
  if (!st) st = batch_wait(&b, 0, hcq__deadline_after_ms(ms), ms, what);
  if (!st && kind == OP_RECV) memcpy(buf, b.ops[0] + 1, (size_t)bytes);
  batch_free(&b);
  return st;
}

typedef struct check_result {
  uint64_t gid, bad_item, bad_rank, bad_n, leader_n;
} check_result_t;

static hcq_status_t graph_check(const hcq_exec_item_t *items, size_t nitems) {
  t_build_gid = 0;
  if (!items || !nitems) return NULL;
  /* The ranks of the graph's devices. */
  uint8_t *in = calloc((size_t)G.size, 1);
  uint64_t *dig = malloc(nitems * sizeof(uint64_t));
  digest_ctx_t c = {XXH3_createState(), calloc(2 * nitems + 8, sizeof(void *)), 0, 2 * nitems + 8};
  hcq_status_t st = NULL;
  if (!in || !dig || !c.h || !c.bases) st = hcq_status_make(HCQ_OUT_OF_MEMORY, "graph build check: out of memory");
  bool local = false, remote = false;
  for (size_t j = 0; j < nitems && !st; j++) {
    const hcq_exec_item_t *it = &items[j];
    XXH3_64bits_reset(c.h);
    feed_u64(&c, (uint64_t)it->kind);
    const hcq_device_t *devs[2] = {NULL, NULL};
    if (it->kind == HCQ_ITEM_KERNEL) {
      const hcq_kernel_item_t *k = &it->kernel;
      if (k->program) {
        devs[0] = k->program->dev;
        feed_str(&c, k->program->name);
        feed_dev(&c, k->program->dev);
      }
      feed_u64(&c, k->nbufs);
      for (size_t i = 0; i < k->nbufs && k->bufs; i++) feed_buf(&c, k->bufs[i]);
      feed_u64(&c, k->outs ? k->nouts + 1 : 0);
      for (size_t i = 0; i < k->nouts && k->outs; i++) feed_u64(&c, k->outs[i]);
      feed_u64(&c, k->nvals);
      for (size_t i = 0; i < k->nvals && k->vals; i++) feed_operand(&c, &k->vals[i]);
      for (int i = 0; i < 3; i++) feed_operand(&c, &k->global[i]), feed_operand(&c, &k->local[i]);
    } else if (it->kind == HCQ_ITEM_TRANSFER) {
      feed_buf(&c, it->transfer.dst);
      feed_buf(&c, it->transfer.src);
      feed_u64(&c, it->transfer.bytes);
      if (it->transfer.dst) devs[0] = it->transfer.dst->dev;
      if (it->transfer.src) devs[1] = it->transfer.src->dev;
    }
    for (int i = 0; i < 2; i++)
      if (devs[i]) {
        int r = dev_rank(devs[i]);
        in[r] = 1;
        if (r == G.rank) local = true;
        else remote = true;
      }
    uint64_t h = XXH3_64bits_digest(c.h);
    dig[j] = h ? h : 1;
  }
  /* Only graphs with work here and elsewhere need agreement (and message tags). */
  if (!st && local && remote) {
    int leader = 0;
    while (!in[leader]) leader++;
    check_result_t res = {0};
    if (G.rank == leader) {
      res.gid = G.next_gid + 1;
      res.leader_n = nitems;
      for (int r = leader + 1; r < G.size && !st; r++) {
        if (!in[r]) continue;
        uint64_t hdr[2];
        st = ctrl_msg(OP_RECV, r, hdr, sizeof(hdr), "graph build check (receiving a rank's item list)");
        uint64_t *theirs = st ? NULL : malloc((hdr[0] ? hdr[0] : 1) * sizeof(uint64_t));
        if (!st && !theirs) st = hcq_status_make(HCQ_OUT_OF_MEMORY, "graph build check: out of memory");
        if (!st && hdr[0]) st = ctrl_msg(OP_RECV, r, theirs, (int)(hdr[0] * sizeof(uint64_t)), "graph build check");
        if (!st) {
          if (hdr[1] > res.gid) res.gid = hdr[1];
          size_t n = hdr[0] < nitems ? hdr[0] : nitems, i = 0;
          while (i < n && theirs[i] == dig[i]) i++;
          if ((i < n || hdr[0] != nitems) && !res.bad_rank) {
            res.bad_item = i;
            res.bad_rank = (uint64_t)r + 1;
            res.bad_n = hdr[0];
          }
        }
        free(theirs);
      }
      for (int r = leader + 1; r < G.size && !st; r++)
        if (in[r]) st = ctrl_msg(OP_SEND, r, &res, sizeof(res), "graph build check (sending the verdict)");
    } else {
      uint64_t hdr[2] = {nitems, G.next_gid + 1};
      st = ctrl_msg(OP_SEND, leader, hdr, sizeof(hdr), "graph build check (sending this rank's item list)");
      if (!st) st = ctrl_msg(OP_SEND, leader, dig, (int)(nitems * sizeof(uint64_t)), "graph build check");
      if (!st) st = ctrl_msg(OP_RECV, leader, &res, sizeof(res), "graph build check (waiting for the verdict)");
    }
    if (st) {
      st = hcq_status_annotate(st, "graph build: the ranks of the graph (leader rank %d) did not agree in time", leader);
    } else if (res.bad_rank) {
      char mine[160] = "";
      size_t j = (size_t)res.bad_item;
      if (j < nitems) describe_item(&items[j], j, mine, sizeof(mine));
      else snprintf(mine, sizeof(mine), "no item %zu (this rank has %zu items)", j, nitems);
      st = hcq_status_make(HCQ_INVALID_ARGUMENT,
                           "graph build: the ranks disagree on the item list: rank %d (%" PRIu64 " items) differs from "
                           "rank %d (%" PRIu64 " items) first at item %" PRIu64 "; on this rank (%d) it is %s. Every "
                           "rank must build the same graphs with the same items in the same order (SPMD)",
                           (int)(res.bad_rank - 1), res.bad_n, leader, res.leader_n, res.bad_item, G.rank, mine);
    } else {
      G.next_gid = (uint32_t)res.gid;
      t_build_gid = (uint32_t)res.gid;
    }
  }
  free(in);
  free(dig);
  free(c.bases);
  if (c.h) XXH3_freeState(c.h);
  return st;
}

static void graph_built(void) { t_build_gid = 0; }

static uint32_t eager_tag(hcq_device_t *src, hcq_device_t *dst) {
  int a = dev_rank(src), b = dev_rank(dst);
  if (a == b) return 0;
  int peer = a == G.rank ? b : a;
  if (a != G.rank && b != G.rank) return 0; /* neither end here: nothing is sent */
  pthread_mutex_lock(&G.seq_lock);
  uint32_t seq = G.eager_seq[peer]++;
  pthread_mutex_unlock(&G.seq_lock);
  return HCQ__TAG_EAGER_REMOTE | (seq & 0x1fffffffu);
}

static void describe(hcq_device_t *dev, const uint32_t *cmd, char *out, size_t size) {
  if (!out || !size) return;
  out[0] = '\0';
  if (HCQ__HDR_OP(cmd[0]) != HCQ__OP_COPY) return;
  uint64_t local = 0;
  int role = 0, peer = -1;
  uint32_t gid = 0;
  if (hcq__device_is_remote(dev)) {
    rdev_t *rd = rdev_of(dev);
    role = copy_role(rd, cmd, &local);
    peer = rd->rank;
    for (int k = 0; k < 2; k++) {
      const uint32_t *base = atomic_load_explicit(&rd->q[k].c.call_base, memory_order_relaxed);
      if (base) gid = mem_gid(rd, base);
    }
  } else { /* a local engine's (engine_copy_start) */
    uint64_t dst = hcq__rd64(cmd + HCQ__COPY_DST), src = hcq__rd64(cmd + HCQ__COPY_SRC);
    if (addr_remote(dst) != addr_remote(src)) {
      role = addr_remote(dst) ? 1 : 2;
      peer = atomic_load(&id_rank[addr_owner(role == 1 ? dst : src)]) - 1;
    }
  }
  if (!role) {
    snprintf(out, size, " (neither end on this rank: skipped)");
    return;
  }
  uint32_t wt = cmd[HCQ__COPY_TAG];
  char item[64];
  if (wt & HCQ__TAG_EAGER_REMOTE) snprintf(item, sizeof(item), "eager transfer #%u", wt & 0x1fffffffu);
  else if (wt & HCQ__TAG_GRAPH_REMOTE) snprintf(item, sizeof(item), "graph %u item %u", (wt >> 20) & 0x3ffu, wt & 0xfffffu);
  else snprintf(item, sizeof(item), "graph %u item %u", gid, wt ? wt - 1 : 0);
  snprintf(out, size, ": MPI %s %" PRIu64 " bytes %s rank %d, tag %d (%s)", role == 1 ? "send of" : "receive of",
           hcq__rd64(cmd + HCQ__COPY_SIZE), role == 1 ? "to" : "from", peer, copy_tag(wt, gid), item);
}

/* ---- cross-rank copies run by a local engine (HCQ__CAP_ENGINE_REMOTE_COPY) ---- */

static uint32_t graph_copy_tag(uint32_t item) {
  return HCQ__TAG_GRAPH_REMOTE | ((t_build_gid & 0x3ffu) << 20) | (item & 0xfffffu);
}

static void *engine_copy_start(hcq_device_t *dev, const uint32_t *w) {
  uint64_t dst = hcq__rd64(w + HCQ__COPY_DST), src = hcq__rd64(w + HCQ__COPY_SRC), bytes = hcq__rd64(w + HCQ__COPY_SIZE);
  if (addr_remote(dst) == addr_remote(src)) {
    hcq__device_mark_lost(dev, "a copy between two buffers of other ranks reached its engine");
    return NULL;
  }
  bool send = addr_remote(dst);
  int peer = atomic_load_explicit(&id_rank[addr_owner(send ? dst : src)], memory_order_acquire) - 1;
  if (peer < 0 || bytes > INT32_MAX) {
    hcq__device_mark_lost(dev, "a copy to or from another rank with %s", peer < 0 ? "no remote device at its address"
                                                                                   : "more than 2^31-1 bytes");
    return NULL;
  }
  if (rank_is_lost(peer)) {
    hcq__device_mark_lost(dev, "its queue reached a %s rank %d, which is lost: %s", send ? "send to" : "receive from",
                          peer, G.rank_lost_reason[peer]);
    return NULL;
  }
  op_t *o = calloc(1, sizeof(*o));
  if (!o) {
    hcq__device_mark_lost(dev, "out of memory for an MPI request");
    return NULL;
  }
  o->kind = send ? OP_SEND : OP_RECV;
  o->buf = (void *)(uintptr_t)(send ? src : dst);
  o->count = (int)bytes;
  o->peer = peer;
  o->tag = copy_tag(w[HCQ__COPY_TAG], 0);
  o->comm = G.data;
  if (!op_post(o)) {
    hcq__device_mark_lost(dev, "MPI %s rank %d failed: %s", send ? "send to" : "receive from", peer, o->error);
    free(o);
    return NULL;
  }
  return o;
}

static void engine_copy_drop(void *op);

static int engine_copy_poll(hcq_device_t *dev, void *op) {
  op_t *o = op;
  if (!op_test_quiet(o)) {
    if (!rank_is_lost(o->peer)) return 0;
    /* The queue cannot move past a transfer that will never complete. */
    hcq__device_mark_lost(dev, "its %s of %d bytes %s rank %d cannot complete: rank %d is lost: %s",
                          o->kind == OP_SEND ? "send" : "receive", o->count, o->kind == OP_SEND ? "to" : "from",
                          o->peer, o->peer, G.rank_lost_reason[o->peer]);
    engine_copy_drop(o);
    return -1;
  }
  bool ok = atomic_load_explicit(&o->state, memory_order_acquire) == OPS_DONE;
  if (!ok)
    hcq__device_mark_lost(dev, "MPI %s rank %d failed: %s", o->kind == OP_SEND ? "send to" : "receive from", o->peer,
                          o->error);
  free(o);
  return ok ? 1 : -1;
}

static void engine_copy_drop(void *op) {
  op_t *o = op;
  if (atomic_load(&o->state) == OPS_POSTED) {
    if (o->kind == OP_RECV) MPI_Cancel(&o->req);
    MPI_Request_free(&o->req);
  }
  free(o);
}

static hcq__remote_hooks_t hooks = {
    .open = remote_open,
    .graph_check = graph_check,
    .graph_built = graph_built,
    .eager_tag = eager_tag,
    .describe = describe,
    .graph_copy_tag = graph_copy_tag,
    .copy_start = engine_copy_start,
    .copy_poll = engine_copy_poll,
    .copy_drop = engine_copy_drop,
};

/* ---- public API ---- */

static void free_rank_tables(void) {
  free(G.eager_seq), free(G.ctrl_seq);
  free((void *)G.rank_lost), free(G.rank_lost_reason);
  G.eager_seq = G.ctrl_seq = NULL;
  G.rank_lost = NULL;
  G.rank_lost_reason = NULL;
}

hcq_status_t hcq_mpi_init(MPI_Comm comm) {
  int inited = 0, level = 0;
  MPI_Initialized(&inited);
  if (!inited) return hcq_status_make(HCQ_FAILED_PRECONDITION, "hcq_mpi_init: MPI is not initialised (MPI_Init_thread first)");
  if (G.running) return hcq_status_make(HCQ_FAILED_PRECONDITION, "hcq_mpi_init: the MPI layer already runs");
  MPI_Query_thread(&level);
  if (level < MPI_THREAD_SERIALIZED)
    return hcq_status_make(HCQ_FAILED_PRECONDITION,
                           "hcq_mpi_init: MPI was initialised with thread level %d; hcq's communication thread needs "
                           "MPI_THREAD_SERIALIZED at least (MPI_THREAD_MULTIPLE when the application calls MPI itself)",
                           level);
  G.spin_ns = UINT64_C(200000);
  const char *spin = getenv("HCQ_MPI_SPIN_NS");
  if (spin && *spin) {
    char *end = NULL;
    long long v = strtoll(spin, &end, 10);
    if (*end || v < 0 || v > INT64_C(10000000000))
      return hcq_status_make(HCQ_INVALID_ARGUMENT, "hcq_mpi_init: HCQ_MPI_SPIN_NS=%s is not a number of nanoseconds in 0..1e10", spin);
    G.spin_ns = (uint64_t)v;
  }
  const char *copies = getenv("HCQ_MPI_COPIES");
  bool engine = !copies || !*copies || !strcmp(copies, "engine");
  if (!engine && strcmp(copies, "thread"))
    return hcq_status_make(HCQ_INVALID_ARGUMENT, "hcq_mpi_init: HCQ_MPI_COPIES=%s is neither \"engine\" nor \"thread\"", copies);
  /* Engines make MPI calls beside the communication thread only under MPI_THREAD_MULTIPLE. */
  hooks.engine_copies = engine && level >= MPI_THREAD_MULTIPLE;
  hooks.copy_spin_ns = G.spin_ns;
  const char *host_runs = getenv("HCQ_MPI_HOST_RUNS");
  if (host_runs && *host_runs && strcmp(host_runs, "0") && strcmp(host_runs, "1"))
    return hcq_status_make(HCQ_INVALID_ARGUMENT, "hcq_mpi_init: HCQ_MPI_HOST_RUNS=%s is neither 0 nor 1", host_runs);
  hooks.host_runs = hooks.engine_copies && !(host_runs && !strcmp(host_runs, "0"));
  if (MPI_Comm_dup(comm, &G.data) != MPI_SUCCESS || MPI_Comm_dup(comm, &G.ctrl) != MPI_SUCCESS)
    return hcq_status_make(HCQ_UNAVAILABLE, "hcq_mpi_init: MPI_Comm_dup failed");
  MPI_Comm_set_errhandler(G.data, MPI_ERRORS_RETURN);
  MPI_Comm_set_errhandler(G.ctrl, MPI_ERRORS_RETURN);
  MPI_Comm_rank(comm, &G.rank);
  MPI_Comm_size(comm, &G.size);
  int *ub = NULL, flag = 0;
  MPI_Comm_get_attr(comm, MPI_TAG_UB, &ub, &flag);
  G.tag_ub = flag && ub ? *ub : 32767;
  G.eager_seq = calloc((size_t)G.size, sizeof(uint32_t));
  G.ctrl_seq = calloc((size_t)G.size, sizeof(uint32_t));
  G.rank_lost = calloc((size_t)G.size, sizeof(*G.rank_lost));
  G.rank_lost_reason = calloc((size_t)G.size, sizeof(*G.rank_lost_reason));
  if (!G.eager_seq || !G.ctrl_seq || !G.rank_lost || !G.rank_lost_reason) {
    free_rank_tables();
    return hcq_status_make(HCQ_OUT_OF_MEMORY, "hcq_mpi_init: out of memory");
  }
  G.next_gid = 0;
  atomic_store(&G.stop, false);
  atomic_store(&G.peer_failed, false);
  if (pthread_create(&G.thread, NULL, comm_main, NULL)) {
    free_rank_tables();
    return hcq_status_make(HCQ_UNAVAILABLE, "hcq_mpi_init: cannot start the communication thread");
  }
  G.running = true;
  hcq__remote_set(&hooks);
  return NULL;
}

hcq_status_t hcq_mpi_init_auto(bool *out_started) {
  if (out_started) *out_started = false;
  static const char *const vars[] = {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK", "MPI_LOCALNRANKS"};
  bool launched = false;
  for (size_t i = 0; i < sizeof(vars) / sizeof(vars[0]); i++) launched |= getenv(vars[i]) != NULL;
  if (!launched) return NULL;
  int inited = 0;
  MPI_Initialized(&inited);
  if (!inited) {
    int provided = 0;
    if (MPI_Init_thread(NULL, NULL, MPI_THREAD_MULTIPLE, &provided) != MPI_SUCCESS)
      return hcq_status_make(HCQ_UNAVAILABLE, "MPI_Init_thread failed");
    G.own_mpi = true;
  }
  hcq_status_t st = hcq_mpi_init(MPI_COMM_WORLD);
  if (!st && out_started) *out_started = true;
  return st;
}

hcq_status_t hcq_mpi_finalize(void) {
  if (!G.running) return NULL;
  pthread_mutex_lock(&G.lock);
  const char *open_dev = G.devices ? G.devices->dev->name : NULL;
  char name[32] = "";
  if (open_dev) snprintf(name, sizeof(name), "%s", open_dev);
  pthread_mutex_unlock(&G.lock);
  if (open_dev)
    return hcq_status_make(HCQ_FAILED_PRECONDITION, "hcq_mpi_finalize: remote device %s is still open (close the "
                           "devices first: nothing would run their queues)", name);
  hcq__remote_set(NULL);
  atomic_store(&G.stop, true);
  wake_thread();
  pthread_join(G.thread, NULL);
  G.running = false;
  bool failed = atomic_load(&G.peer_failed);
  if (!failed) {
    MPI_Comm_free(&G.data);
    MPI_Comm_free(&G.ctrl);
  }
  free_rank_tables();
  if (G.own_mpi && !failed) {
#ifdef __SANITIZE_ADDRESS__
    /* Open MPI drops, without freeing, what MPI_Init allocated, and unmaps its components, so the
     * leak check at exit would see Open MPI's memory as leaked with stacks nobody can name. Checked
     * here instead, while that memory is still reachable: what is reported is hcq's own. */
    __lsan_do_leak_check();
#endif
    MPI_Finalize();
  }
  G.own_mpi = false;
  return NULL;
}

bool hcq_mpi_running(void) { return G.running; }
int hcq_mpi_rank(void) { return G.running ? G.rank : 0; }
int hcq_mpi_size(void) { return G.running ? G.size : 1; }
int hcq_mpi_device_rank(const hcq_device_t *device) { return device ? dev_rank(device) : -1; }
bool hcq_mpi_buffer_is_remote(const hcq_buffer_t *buf) { return buf && hcq__device_is_remote(buf->dev); }
bool hcq_mpi_peer_failed(void) { return atomic_load(&G.peer_failed); }

hcq_status_t hcq_mpi_declare_rank_lost(int rank, const char *reason) {
  if (!G.running) return hcq_status_make(HCQ_FAILED_PRECONDITION, "hcq_mpi_declare_rank_lost: the MPI layer is not running");
  if (rank < 0 || rank >= G.size)
    return hcq_status_make(HCQ_OUT_OF_RANGE, "hcq_mpi_declare_rank_lost: no rank %d (%d ranks)", rank, G.size);
  if (rank == G.rank)
    return hcq_status_make(HCQ_INVALID_ARGUMENT, "hcq_mpi_declare_rank_lost: rank %d is this process", rank);
  rank_mark_lost(rank, "%s", reason && *reason ? reason : "declared lost by the application");
  /* Its remote devices at once (the communication thread would soon): the caller may look next. */
  pthread_mutex_lock(&G.lock);
  for (rdev_t *rd = G.devices; rd; rd = rd->next)
    if (rd->rank == rank) hcq__device_mark_lost(rd->dev, "rank %d is lost: %s", rank, G.rank_lost_reason[rank]);
  pthread_mutex_unlock(&G.lock);
  return NULL;
}

hcq_status_t hcq_mpi_rank_health(int rank) {
  if (!G.running) return rank == 0 ? NULL : hcq_status_make(HCQ_OUT_OF_RANGE, "hcq_mpi_rank_health: no rank %d (1 rank)", rank);
  if (rank < 0 || rank >= G.size)
    return hcq_status_make(HCQ_OUT_OF_RANGE, "hcq_mpi_rank_health: no rank %d (%d ranks)", rank, G.size);
  return rank_is_lost(rank) ? lost_status(rank, "hcq_mpi_rank_health") : NULL;
}

hcq_status_t hcq_mpi_fetch(hcq_buffer_t *buf, int root, void *dst, uint64_t size) {
  if (!buf) return hcq_status_make(HCQ_INVALID_ARGUMENT, "hcq_mpi_fetch: buffer is NULL");
  if (size > buf->size)
    return hcq_status_make(HCQ_OUT_OF_RANGE, "hcq_mpi_fetch: %" PRIu64 " bytes from %s (%" PRIu64 " bytes)", size,
                           buf->label, buf->size);
  if (!G.running) return G.rank == root ? hcq_buffer_copyout(buf, 0, dst, size) : NULL;
  if (root < 0 || root >= G.size) return hcq_status_make(HCQ_OUT_OF_RANGE, "hcq_mpi_fetch: no rank %d", root);
  if (size > INT32_MAX) return hcq_status_make(HCQ_OUT_OF_RANGE, "hcq_mpi_fetch: %" PRIu64 " bytes is too much", size);
  int owner = dev_rank(buf->dev);
  if (owner == G.rank && root == G.rank) return hcq_buffer_copyout(buf, 0, dst, size);
  if (owner == G.rank) {
    void *tmp = malloc(size ? size : 1);
    if (!tmp) return hcq_status_make(HCQ_OUT_OF_MEMORY, "hcq_mpi_fetch: out of memory");
    hcq_status_t st = hcq_buffer_copyout(buf, 0, tmp, size);
    if (!st) st = ctrl_msg(OP_SEND, root, tmp, (int)size, "hcq_mpi_fetch");
    if (!st || hcq_status_code(st) != HCQ_TIMEOUT) free(tmp);
    return st;
  }
  if (root == G.rank) {
    if (!dst) return hcq_status_make(HCQ_INVALID_ARGUMENT, "hcq_mpi_fetch: dst is NULL on the root");
    return ctrl_msg(OP_RECV, owner, dst, (int)size, "hcq_mpi_fetch");
  }
  return NULL;
}

/* Rank 0 gathers every value, takes the maximum and sends it back with the first rank that did not
 * take part: unlike an MPI collective, a failure names the rank. The others wait for rank 0 a second
 * longer than it waits for them, so they hear its verdict rather than time out first. */
static hcq_status_t agree_max(int value, int *out_max, const char *what) {
  if (!G.running || G.size == 1) {
    *out_max = value;
    return NULL;
  }
  int64_t ms = hcq__options()->wait_timeout_ms;
  ctrl_batch_t b = {.n = 0};
  hcq_status_t st = NULL;
  /* The reply: the maximum, and the rank that did not take part (-1: every rank did; 0: rank 0
   * could not gather for another reason, in its own message). */
  int32_t reply[2] = {value, -1};
  if (G.rank != 0) {
    int64_t longer = ms > INT64_MAX - 1000 ? ms : ms + 1000;
    uint64_t deadline = hcq__deadline_after_ms(longer);
    st = batch_add(&b, OP_SEND, 0, &(int32_t){value}, sizeof(int32_t), what);
    if (!st) st = batch_add(&b, OP_RECV, 0, NULL, sizeof(reply), what);
    for (size_t i = 0; i < b.n && !st; i++) st = batch_wait(&b, i, deadline, longer, what);
    if (!st) memcpy(reply, b.ops[1] + 1, sizeof(reply));
    batch_free(&b);
    if (!st && reply[1] > 0)
      st = hcq_status_make(HCQ_TIMEOUT, "%s: rank %d did not take part within %" PRId64 " ms (rank 0 waited for it: "
                           "did it fail, stop, or run a different program?)", what, (int)reply[1], ms);
    else if (!st && reply[1] == 0)
      st = hcq_status_make(HCQ_UNAVAILABLE, "%s: rank 0 could not gather every rank's value (its message says why)", what);
    if (!st) *out_max = reply[0];
    return st;
  }
  uint64_t deadline = hcq__deadline_after_ms(ms);
  for (int first = 1; first < G.size && !st; first += 64) { /* 64 ranks at a time: a batch's size */
    int last = first + 63 < G.size ? first + 63 : G.size - 1;
    for (int r = first; r <= last && !st; r++) {
      st = batch_add(&b, OP_RECV, r, NULL, sizeof(int32_t), what);
      if (st && rank_is_lost(r)) reply[1] = r;
    }
    for (size_t i = 0; i < b.n && !st; i++) {
      int peer = b.ops[i]->peer;
      st = batch_wait(&b, i, deadline, ms, what);
      if (st && (hcq_status_code(st) == HCQ_TIMEOUT || rank_is_lost(peer))) reply[1] = peer;
      int32_t v;
      if (!st) memcpy(&v, b.ops[i] + 1, sizeof(v));
      if (!st && v > reply[0]) reply[0] = v;
    }
    batch_free(&b);
  }
  if (st && reply[1] < 0) reply[1] = 0;
  /* Every rank that took part hears the outcome, so none times out in turn; the sends are small,
   * and a rank that is there takes them within a second. */
  uint64_t reply_deadline = hcq__deadline_after_ms(1000);
  for (int r = 1; r < G.size; r++) {
    if (r == reply[1] || rank_is_lost(r)) continue;
    hcq_status_t sent = batch_add(&b, OP_SEND, r, reply, sizeof(reply), what);
    if (!sent && b.n == 64) sent = batch_drain(&b, reply_deadline, 1000, what);
    st = first_status(st, sent);
  }
  st = first_status(st, batch_drain(&b, reply_deadline, 1000, what));
  if (!st) *out_max = reply[0];
  return st;
}

hcq_status_t hcq_mpi_allreduce_max(int value, int *out_max) {
  if (!out_max) return hcq_status_make(HCQ_INVALID_ARGUMENT, "hcq_mpi_allreduce_max: out_max is NULL");
  return agree_max(value, out_max, "hcq_mpi_allreduce_max");
}

hcq_status_t hcq_mpi_barrier(void) {
  int unused;
  return agree_max(0, &unused, "hcq_mpi_barrier");
}
