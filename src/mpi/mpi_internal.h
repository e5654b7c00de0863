/* The MPI layer (hcq/mpi.h, docs/mpi.md): remote devices whose queues run on one communication
 * thread per process, which also makes the control calls. Under MPI_THREAD_MULTIPLE a graph's
 * transfers between ranks run instead on the copy queue of their local (CPU) end, whose engine
 * posts and polls the request through the engine_copy_* hooks below.
 *
 * A remote device's queues hold the same command words as any device's; the thread walks them as a
 * CPU engine would, except that kernels are skipped (their rank runs them) and a COPY that has one
 * end in the device's own (storage-less) address range is a send to or a receive from its rank. The
 * other end is host memory of a local CPU device. A COPY blocks its queue until its request
 * completed, so a send's source and a receive's destination are never touched by later items early,
 * and the thread keeps serving every other queue and request meanwhile (nothing blocks it).
 *
 * Remote buffer addresses: 0x7e in the top byte (operands are signed 64-bit), the remote device's
 * id in bits 40..55 and an offset below; no user-space pointer looks like that, so a COPY tells its
 * ends apart by address alone.
 *
 * Tags (on a duplicate of the application's communicator reserved for transfers):
 *   graph items  bit 30 | (graph id mod 1024) << 20 | (item mod 2^20)
 *   eager        (sequence number of transfers between the two ranks) mod 2^29
 * Graph ids are agreed at build by the ranks of the graph. Control messages (the build check,
 * fetches) use a second duplicate, tagged by per-peer sequence numbers. */
#ifndef HCQ_MPI_INTERNAL_H
#define HCQ_MPI_INTERNAL_H

/* The layer's files share what this header declares:
 *   mpi_layer.c          the public API (hcq/mpi.h): starting and stopping the layer, fetches,
 *                        agreement
 *   mpi_ops.c            MPI requests handed to the communication thread, lost ranks, control
 *                        messages
 *   mpi_comm_thread.c    the communication thread: remote device queues, posted requests, naps
 *   mpi_remote_device.c  the remote device backend (its vtable) and opening RANK/KIND:N names
 *   mpi_graph_check.c    the ranks of a graph agree on its items and its id at build
 *   mpi_transfers.c      transfers between ranks: tags, descriptions, the engines' copy hooks */

#include <pthread.h>
#include <stdint.h>

#include "core/cmd_cursor.h"
#include "core/remote.h"
#include "core/vec.h"
#include "hcq/graph.h"
#include "hcq/mpi.h"

#define REMOTE_OFF_BITS 40
#define MAX_REMOTE 65535

/* ---- MPI operations, run by the communication thread ---- */

typedef enum mpi_op_kind { OP_SEND, OP_RECV } mpi_op_kind_t;
/* An op's state (mpi_op_t.state holds one, atomically). */
typedef enum mpi_op_state { OPS_NEW, OPS_POSTED, OPS_DONE, OPS_FAILED } mpi_op_state_t;

typedef struct mpi_op {
  mpi_op_kind_t kind;
  void *buf;
  int count; /* bytes */
  int peer, tag;
  MPI_Comm comm;
  MPI_Request req;
  _Atomic uint32_t state;
  char error[160];
  bool lost; /* failed because its peer was given up on (hcq__mpi_op_fail_lost) */
  _Atomic bool abandoned;
  struct mpi_op *next; /* on the thread's posted list, or the new list */
} mpi_op_t;

/* ---- remote devices, their queues and the layer's state ---- */

typedef struct mpi_rentry {
  const uint32_t *w;
  size_t n;
  uint32_t *owned; /* unbound submissions: a copy */
} mpi_rentry_t;

typedef struct mpi_rqueue {
  pthread_mutex_t lock;
  mpi_rentry_t *ents;
  size_t cap;
  uint64_t head, tail; /* entries pushed, entries taken by the thread */
  _Atomic uint64_t submitted, completed;
  /* The thread's cursor. */
  bool running;
  mpi_rentry_t ent;
  hcq__cmd_cursor_t c;
  uint32_t gid; /* graph id of the bound list being run (0: the ring) */
  mpi_op_t *pending;
} mpi_rqueue_t;

typedef struct mpi_tagged_mem {
  void *host;
  uint64_t size;
  uint32_t gid;
} mpi_tagged_mem_t;

typedef struct mpi_rdev {
  hcq_device_t *dev;
  int rank;
  unsigned id;
  char local_name[32]; /* KIND:N on its rank */
  uint64_t next_off;
  mpi_rqueue_t q[2];
  pthread_mutex_t mem_lock;
  HCQ__VEC(mpi_tagged_mem_t) tagged;
  struct mpi_rdev *next;
} mpi_rdev_t;

typedef struct hcq__mpi_state {
  bool running, own_mpi;
  MPI_Comm data, ctrl;
  int rank, size;
  int tag_ub;
  pthread_t thread;
  _Atomic bool stop;
  _Atomic uint32_t doorbell;
  _Atomic(_Atomic uint32_t *) sleep_word;
  pthread_mutex_t lock; /* devices list, new ops */
  mpi_rdev_t *devices;
  mpi_op_t *new_ops;
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
  uint64_t spin_ns; /* HCQ_MPI_SPIN_NS: how long the thread polls MPI back to back while a request
                       is pending */
} hcq__mpi_state_t;

extern hcq__mpi_state_t hcq__mpi_state;

/* The rank + 1 of each remote device id (0: none): an engine tags its message without a lock. */
extern _Atomic int32_t hcq__mpi_id_rank[MAX_REMOTE + 1];

extern _Thread_local uint32_t
    hcq__mpi_build_gid; /* graph being built by this thread (tags its bound lists) */

static inline unsigned hcq__mpi_addr_owner(uint64_t a) {
  return (unsigned)((a >> REMOTE_OFF_BITS) & 0xffff);
}
static inline mpi_rdev_t *hcq__mpi_rdev_of(const hcq_device_t *dev) { return dev->backend; }
static inline int hcq__mpi_dev_rank(const hcq_device_t *d) {
  return hcq__device_is_remote(d) ? hcq__mpi_rdev_of(d)->rank : hcq__mpi_state.rank;
}

static inline bool hcq__mpi_rank_is_lost(int rank) {
  return rank >= 0 && rank < hcq__mpi_state.size && hcq__mpi_state.rank_lost &&
         atomic_load_explicit(&hcq__mpi_state.rank_lost[rank], memory_order_acquire);
}

/* ---- mpi_ops.c ---- */

void hcq__mpi_wake_thread(void);
void hcq__mpi_rank_mark_lost(int rank, const char *fmt, ...);
bool hcq__mpi_op_post(mpi_op_t *o);
bool hcq__mpi_op_test_quiet(mpi_op_t *o);
bool hcq__mpi_op_test(mpi_op_t *o);
void hcq__mpi_op_fail_lost(mpi_op_t *o);
HCQ_MUST_USE hcq_status_t hcq__mpi_lost_status(int rank, const char *what);

/* Ops handed to the thread together, waited for with one deadline: their peers' ranks in order,
 * each op a control message of count bytes (sent from buf, or received into it). */
typedef struct mpi_ctrl_batch {
  mpi_op_t *ops[64];
  size_t n;
} mpi_ctrl_batch_t;

/* The earlier of two outcomes (the later one is dropped). */
static inline hcq_status_t mpi_first_status(hcq_status_t a, hcq_status_t b) {
  if (!a) return b;
  hcq_status_destroy(b);
  return a;
}
void hcq__mpi_batch_free(mpi_ctrl_batch_t *b);
HCQ_MUST_USE hcq_status_t hcq__mpi_batch_add(mpi_ctrl_batch_t *b, mpi_op_kind_t kind, int peer,
                                             const void *buf, int bytes, const char *what);
HCQ_MUST_USE hcq_status_t hcq__mpi_batch_wait(mpi_ctrl_batch_t *b, size_t i, uint64_t deadline_ns,
                                              int64_t timeout_ms, const char *what);
HCQ_MUST_USE hcq_status_t hcq__mpi_batch_drain(mpi_ctrl_batch_t *b, uint64_t deadline_ns,
                                               int64_t timeout_ms, const char *what);
HCQ_MUST_USE hcq_status_t hcq__mpi_ctrl_msg(mpi_op_kind_t kind, int peer, void *buf, int bytes,
                                            const char *what);

/* ---- mpi_comm_thread.c ---- */

void *hcq__mpi_comm_main(void *arg);
uint32_t hcq__mpi_mem_gid(mpi_rdev_t *rd, const uint32_t *list);
int hcq__mpi_copy_role(const mpi_rdev_t *rd, const uint32_t *w, uint64_t *local);
int hcq__mpi_copy_tag(uint32_t word_tag, uint32_t gid);
void hcq__mpi_drop_queue(mpi_rqueue_t *q);

/* ---- the hooks the core calls (hcq__remote_hooks_t), in the files named ---- */

/* mpi_remote_device.c */
HCQ_MUST_USE hcq_status_t hcq__mpi_remote_open(const char *name,
                                               const hcq_device_options_t *options,
                                               hcq_device_t **out);
/* mpi_graph_check.c */
HCQ_MUST_USE hcq_status_t hcq__mpi_graph_check(const hcq_exec_item_t *items, size_t nitems);
void hcq__mpi_graph_built(void);
/* mpi_transfers.c */
uint32_t hcq__mpi_eager_tag(hcq_device_t *src, hcq_device_t *dst);
void hcq__mpi_describe(hcq_device_t *dev, const uint32_t *cmd, char *out, size_t size);
uint32_t hcq__mpi_graph_copy_tag(uint32_t item);
void *hcq__mpi_engine_copy_start(hcq_device_t *dev, const uint32_t *w);
int hcq__mpi_engine_copy_poll(hcq_device_t *dev, void *op);
void hcq__mpi_engine_copy_drop(void *op);

#endif
