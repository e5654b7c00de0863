/* The MPI layer's public API (hcq/mpi.h): it starts and stops the communication thread and installs
 * the hooks through which the core reaches remote devices; fetches and agreement across ranks are
 * control messages (mpi_ops.c). The layer itself is described in mpi_internal.h. */
#ifdef __SANITIZE_ADDRESS__
#include <sanitizer/lsan_interface.h>

#endif
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/buffer.h"
#include "core/options.h"
#include "core/status.h"
#include "mpi/mpi_internal.h"

hcq__mpi_state_t hcq__mpi_state = {.lock = PTHREAD_MUTEX_INITIALIZER,
                                   .seq_lock = PTHREAD_MUTEX_INITIALIZER,
                                   .lost_lock = PTHREAD_MUTEX_INITIALIZER};

/* How the core reaches the layer (hcq__remote_set); hcq_mpi_init fills in how engines copy. */
static hcq__remote_hooks_t hooks = {
    .open = hcq__mpi_remote_open,
    .graph_check = hcq__mpi_graph_check,
    .graph_built = hcq__mpi_graph_built,
    .eager_tag = hcq__mpi_eager_tag,
    .describe = hcq__mpi_describe,
    .graph_copy_tag = hcq__mpi_graph_copy_tag,
    .copy_start = hcq__mpi_engine_copy_start,
    .copy_poll = hcq__mpi_engine_copy_poll,
    .copy_drop = hcq__mpi_engine_copy_drop,
};

/* ---- public API ---- */

static void free_rank_tables(void) {
  free(hcq__mpi_state.eager_seq), free(hcq__mpi_state.ctrl_seq);
  free((void *)hcq__mpi_state.rank_lost), free(hcq__mpi_state.rank_lost_reason);
  hcq__mpi_state.eager_seq = hcq__mpi_state.ctrl_seq = NULL;
  hcq__mpi_state.rank_lost = NULL;
  hcq__mpi_state.rank_lost_reason = NULL;
}

hcq_status_t hcq_mpi_init(MPI_Comm comm) {
  int inited = 0, level = 0;
  MPI_Initialized(&inited);
  if (!inited)
    return hcq_status_make(HCQ_FAILED_PRECONDITION,
                           "hcq_mpi_init: MPI is not initialised (MPI_Init_thread first)");
  if (hcq__mpi_state.running)
    return hcq_status_make(HCQ_FAILED_PRECONDITION, "hcq_mpi_init: the MPI layer already runs");
  MPI_Query_thread(&level);
  if (level < MPI_THREAD_SERIALIZED)
    return hcq_status_make(
        HCQ_FAILED_PRECONDITION,
        "hcq_mpi_init: MPI was initialised with thread level %d; hcq's communication thread needs "
        "MPI_THREAD_SERIALIZED at least (MPI_THREAD_MULTIPLE when the application calls MPI "
        "itself)",
        level);
  hcq__mpi_state.spin_ns = UINT64_C(200000);
  const char *spin = getenv("HCQ_MPI_SPIN_NS");
  if (spin && *spin) {
    char *end = NULL;
    long long v = strtoll(spin, &end, 10);
    if (*end || v < 0 || v > INT64_C(10000000000))
      return hcq_status_make(
          HCQ_INVALID_ARGUMENT,
          "hcq_mpi_init: HCQ_MPI_SPIN_NS=%s is not a number of nanoseconds in 0..1e10", spin);
    hcq__mpi_state.spin_ns = (uint64_t)v;
  }
  const char *copies = getenv("HCQ_MPI_COPIES");
  bool engine = !copies || !*copies || !strcmp(copies, "engine");
  if (!engine && strcmp(copies, "thread"))
    return hcq_status_make(HCQ_INVALID_ARGUMENT,
                           "hcq_mpi_init: HCQ_MPI_COPIES=%s is neither \"engine\" nor \"thread\"",
                           copies);
  /* Engines make MPI calls beside the communication thread only under MPI_THREAD_MULTIPLE. */
  hooks.engine_copies = engine && level >= MPI_THREAD_MULTIPLE;
  hooks.copy_spin_ns = hcq__mpi_state.spin_ns;
  const char *host_runs = getenv("HCQ_MPI_HOST_RUNS");
  if (host_runs && *host_runs && strcmp(host_runs, "0") && strcmp(host_runs, "1"))
    return hcq_status_make(HCQ_INVALID_ARGUMENT,
                           "hcq_mpi_init: HCQ_MPI_HOST_RUNS=%s is neither 0 nor 1", host_runs);
  hooks.host_runs = hooks.engine_copies && !(host_runs && !strcmp(host_runs, "0"));
  if (MPI_Comm_dup(comm, &hcq__mpi_state.data) != MPI_SUCCESS ||
      MPI_Comm_dup(comm, &hcq__mpi_state.ctrl) != MPI_SUCCESS)
    return hcq_status_make(HCQ_UNAVAILABLE, "hcq_mpi_init: MPI_Comm_dup failed");
  MPI_Comm_set_errhandler(hcq__mpi_state.data, MPI_ERRORS_RETURN);
  MPI_Comm_set_errhandler(hcq__mpi_state.ctrl, MPI_ERRORS_RETURN);
  MPI_Comm_rank(comm, &hcq__mpi_state.rank);
  MPI_Comm_size(comm, &hcq__mpi_state.size);
  int *ub = NULL, flag = 0;
  MPI_Comm_get_attr(comm, MPI_TAG_UB, &ub, &flag);
  hcq__mpi_state.tag_ub = flag && ub ? *ub : 32767;
  hcq__mpi_state.eager_seq = calloc((size_t)hcq__mpi_state.size, sizeof(uint32_t));
  hcq__mpi_state.ctrl_seq = calloc((size_t)hcq__mpi_state.size, sizeof(uint32_t));
  hcq__mpi_state.rank_lost = calloc((size_t)hcq__mpi_state.size, sizeof(*hcq__mpi_state.rank_lost));
  hcq__mpi_state.rank_lost_reason =
      calloc((size_t)hcq__mpi_state.size, sizeof(*hcq__mpi_state.rank_lost_reason));
  if (!hcq__mpi_state.eager_seq || !hcq__mpi_state.ctrl_seq || !hcq__mpi_state.rank_lost ||
      !hcq__mpi_state.rank_lost_reason) {
    free_rank_tables();
    return hcq_status_make(HCQ_OUT_OF_MEMORY, "hcq_mpi_init: out of memory");
  }
  hcq__mpi_state.next_gid = 0;
  atomic_store(&hcq__mpi_state.stop, false);
  atomic_store(&hcq__mpi_state.peer_failed, false);
  if (pthread_create(&hcq__mpi_state.thread, NULL, hcq__mpi_comm_main, NULL)) {
    free_rank_tables();
    return hcq_status_make(HCQ_UNAVAILABLE, "hcq_mpi_init: cannot start the communication thread");
  }
  hcq__mpi_state.running = true;
  hcq__remote_set(&hooks);
  return NULL;
}

hcq_status_t hcq_mpi_init_auto(bool *out_started) {
  if (out_started) *out_started = false;
  static const char *const vars[] = {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK",
                                     "MPI_LOCALNRANKS"};
  bool launched = false;
  for (size_t i = 0; i < sizeof(vars) / sizeof(vars[0]); i++) launched |= getenv(vars[i]) != NULL;
  if (!launched) return NULL;
  int inited = 0;
  MPI_Initialized(&inited);
  if (!inited) {
    int provided = 0;
    if (MPI_Init_thread(NULL, NULL, MPI_THREAD_MULTIPLE, &provided) != MPI_SUCCESS)
      return hcq_status_make(HCQ_UNAVAILABLE, "MPI_Init_thread failed");
    hcq__mpi_state.own_mpi = true;
  }
  hcq_status_t st = hcq_mpi_init(MPI_COMM_WORLD);
  if (!st && out_started) *out_started = true;
  return st;
}

hcq_status_t hcq_mpi_finalize(void) {
  if (!hcq__mpi_state.running) return NULL;
  pthread_mutex_lock(&hcq__mpi_state.lock);
  const char *open_dev = hcq__mpi_state.devices ? hcq__mpi_state.devices->dev->name : NULL;
  char name[32] = "";
  if (open_dev) snprintf(name, sizeof(name), "%s", open_dev);
  pthread_mutex_unlock(&hcq__mpi_state.lock);
  if (open_dev)
    return hcq_status_make(HCQ_FAILED_PRECONDITION,
                           "hcq_mpi_finalize: remote device %s is still open (close the "
                           "devices first: nothing would run their queues)",
                           name);
  hcq__remote_set(NULL);
  atomic_store(&hcq__mpi_state.stop, true);
  hcq__mpi_wake_thread();
  pthread_join(hcq__mpi_state.thread, NULL);
  hcq__mpi_state.running = false;
  bool failed = atomic_load(&hcq__mpi_state.peer_failed);
  if (!failed) {
    MPI_Comm_free(&hcq__mpi_state.data);
    MPI_Comm_free(&hcq__mpi_state.ctrl);
  }
  free_rank_tables();
  if (hcq__mpi_state.own_mpi && !failed) {
#ifdef __SANITIZE_ADDRESS__
    /* Open MPI drops, without freeing, what MPI_Init allocated, and unmaps its components, so the
     * leak check at exit would see Open MPI's memory as leaked with stacks nobody can name. Checked
     * here instead, while that memory is still reachable: what is reported is hcq's own. */
    __lsan_do_leak_check();
#endif
    MPI_Finalize();
  }
  hcq__mpi_state.own_mpi = false;
  return NULL;
}

bool hcq_mpi_running(void) { return hcq__mpi_state.running; }
int hcq_mpi_rank(void) { return hcq__mpi_state.running ? hcq__mpi_state.rank : 0; }
int hcq_mpi_size(void) { return hcq__mpi_state.running ? hcq__mpi_state.size : 1; }
int hcq_mpi_device_rank(const hcq_device_t *device) {
  return device ? hcq__mpi_dev_rank(device) : -1;
}
bool hcq_mpi_buffer_is_remote(const hcq_buffer_t *buf) {
  return buf && hcq__device_is_remote(buf->dev);
}
bool hcq_mpi_peer_failed(void) { return atomic_load(&hcq__mpi_state.peer_failed); }

hcq_status_t hcq_mpi_declare_rank_lost(int rank, const char *reason) {
  if (!hcq__mpi_state.running)
    return hcq_status_make(HCQ_FAILED_PRECONDITION,
                           "hcq_mpi_declare_rank_lost: the MPI layer is not running");
  if (rank < 0 || rank >= hcq__mpi_state.size)
    return hcq_status_make(HCQ_OUT_OF_RANGE, "hcq_mpi_declare_rank_lost: no rank %d (%d ranks)",
                           rank, hcq__mpi_state.size);
  if (rank == hcq__mpi_state.rank)
    return hcq_status_make(HCQ_INVALID_ARGUMENT,
                           "hcq_mpi_declare_rank_lost: rank %d is this process", rank);
  hcq__mpi_rank_mark_lost(rank, "%s",
                          reason && *reason ? reason : "declared lost by the application");
  /* Its remote devices at once (the communication thread would soon): the caller may look next. */
  pthread_mutex_lock(&hcq__mpi_state.lock);
  for (mpi_rdev_t *rd = hcq__mpi_state.devices; rd; rd = rd->next)
    if (rd->rank == rank)
      hcq__device_mark_lost(rd->dev, "rank %d is lost: %s", rank,
                            hcq__mpi_state.rank_lost_reason[rank]);
  pthread_mutex_unlock(&hcq__mpi_state.lock);
  return NULL;
}

hcq_status_t hcq_mpi_rank_health(int rank) {
  if (!hcq__mpi_state.running)
    return rank == 0 ? NULL
                     : hcq_status_make(HCQ_OUT_OF_RANGE, "hcq_mpi_rank_health: no rank %d (1 rank)",
                                       rank);
  if (rank < 0 || rank >= hcq__mpi_state.size)
    return hcq_status_make(HCQ_OUT_OF_RANGE, "hcq_mpi_rank_health: no rank %d (%d ranks)", rank,
                           hcq__mpi_state.size);
  return hcq__mpi_rank_is_lost(rank) ? hcq__mpi_lost_status(rank, "hcq_mpi_rank_health") : NULL;
}

/* The owner's side of hcq_mpi_fetch: buf's first size bytes, through tmp, to root. */
static hcq_status_t send_contents(hcq_buffer_t *buf, int root, void *tmp, uint64_t size) {
  HCQ__TRY(hcq_buffer_copyout(buf, 0, tmp, size));
  return hcq__mpi_ctrl_msg(OP_SEND, root, tmp, (int)size, "hcq_mpi_fetch");
}

hcq_status_t hcq_mpi_fetch(hcq_buffer_t *buf, int root, void *dst, uint64_t size) {
  if (!buf) return hcq_status_make(HCQ_INVALID_ARGUMENT, "hcq_mpi_fetch: buffer is NULL");
  if (size > buf->size)
    return hcq_status_make(HCQ_OUT_OF_RANGE,
                           "hcq_mpi_fetch: %" PRIu64 " bytes from %s (%" PRIu64 " bytes)", size,
                           buf->label, buf->size);
  if (!hcq__mpi_state.running)
    return hcq__mpi_state.rank == root ? hcq_buffer_copyout(buf, 0, dst, size) : NULL;
  if (root < 0 || root >= hcq__mpi_state.size)
    return hcq_status_make(HCQ_OUT_OF_RANGE, "hcq_mpi_fetch: no rank %d", root);
  if (size > INT32_MAX)
    return hcq_status_make(HCQ_OUT_OF_RANGE, "hcq_mpi_fetch: %" PRIu64 " bytes is too much", size);
  int owner = hcq__mpi_dev_rank(buf->dev);
  if (owner == hcq__mpi_state.rank && root == hcq__mpi_state.rank)
    return hcq_buffer_copyout(buf, 0, dst, size);
  if (owner == hcq__mpi_state.rank) {
    void *tmp = malloc(size ? size : 1);
    if (!tmp) return hcq_status_make(HCQ_OUT_OF_MEMORY, "hcq_mpi_fetch: out of memory");
    hcq_status_t st = send_contents(buf, root, tmp, size);
    /* A copy or a send that timed out may still use tmp: it is left to them. */
    if (!st || hcq_status_code(st) != HCQ_TIMEOUT) free(tmp);
    return st;
  }
  if (root == hcq__mpi_state.rank) {
    if (!dst)
      return hcq_status_make(HCQ_INVALID_ARGUMENT, "hcq_mpi_fetch: dst is NULL on the root");
    return hcq__mpi_ctrl_msg(OP_RECV, owner, dst, (int)size, "hcq_mpi_fetch");
  }
  return NULL;
}

/* A rank other than 0: its value to rank 0, and rank 0's reply (the maximum, and the rank that did
 * not take part) back, waiting a second longer than rank 0 waits for the values. */
static hcq_status_t ask_rank0(int value, int32_t reply[2], int64_t ms, const char *what) {
  int64_t longer = ms > INT64_MAX - 1000 ? ms : ms + 1000;
  uint64_t deadline = hcq__deadline_after_ms(longer);
  mpi_ctrl_batch_t b = {.n = 0};
  hcq_status_t st;
  if ((st = hcq__mpi_batch_add(&b, OP_SEND, 0, &(int32_t){value}, sizeof(int32_t), what))) goto out;
  if ((st = hcq__mpi_batch_add(&b, OP_RECV, 0, NULL, 2 * sizeof(int32_t), what))) goto out;
  for (size_t i = 0; i < b.n; i++)
    if ((st = hcq__mpi_batch_wait(&b, i, deadline, longer, what))) goto out;
  memcpy(reply, b.ops[1] + 1, 2 * sizeof(int32_t));
out:
  hcq__mpi_batch_free(&b);
  return st;
}

/* Rank 0: the values of ranks first to last, through b; the maximum goes into reply[0] and a rank
 * that did not take part into reply[1]. */
static hcq_status_t gather_ranks(mpi_ctrl_batch_t *b, int first, int last, uint64_t deadline,
                                 int64_t ms, int32_t reply[2], const char *what) {
  for (int r = first; r <= last; r++) {
    hcq_status_t st = hcq__mpi_batch_add(b, OP_RECV, r, NULL, sizeof(int32_t), what);
    if (st) {
      if (hcq__mpi_rank_is_lost(r)) reply[1] = r;
      return st;
    }
  }
  for (size_t i = 0; i < b->n; i++) {
    int peer = b->ops[i]->peer;
    hcq_status_t st = hcq__mpi_batch_wait(b, i, deadline, ms, what);
    if (st) {
      if (hcq_status_code(st) == HCQ_TIMEOUT || hcq__mpi_rank_is_lost(peer)) reply[1] = peer;
      return st;
    }
    int32_t v;
    memcpy(&v, b->ops[i] + 1, sizeof(v));
    if (v > reply[0]) reply[0] = v;
  }
  return NULL;
}

/* Rank 0: every other rank's value, 64 ranks at a time (a batch's size). */
static hcq_status_t gather_values(int32_t reply[2], int64_t ms, const char *what) {
  uint64_t deadline = hcq__deadline_after_ms(ms);
  for (int first = 1; first < hcq__mpi_state.size; first += 64) {
    int last = first + 63 < hcq__mpi_state.size ? first + 63 : hcq__mpi_state.size - 1;
    mpi_ctrl_batch_t b = {.n = 0};
    hcq_status_t st = gather_ranks(&b, first, last, deadline, ms, reply, what);
    hcq__mpi_batch_free(&b);
    HCQ__TRY(st);
  }
  return NULL;
}

/* Rank 0 gathers every value, takes the maximum and sends it back with the first rank that did not
 * take part: unlike an MPI collective, a failure names the rank. The others wait for rank 0 a
 * second longer than it waits for them, so they hear its verdict rather than time out first. */
static hcq_status_t agree_max(int value, int *out_max, const char *what) {
  if (!hcq__mpi_state.running || hcq__mpi_state.size == 1) {
    *out_max = value;
    return NULL;
  }
  int64_t ms = hcq__options()->wait_timeout_ms;
  /* The reply: the maximum, and the rank that did not take part (-1: every rank did; 0: rank 0
   * could not gather for another reason, in its own message). */
  int32_t reply[2] = {value, -1};
  if (hcq__mpi_state.rank != 0) {
    HCQ__TRY(ask_rank0(value, reply, ms, what));
    if (reply[1] > 0)
      return hcq_status_make(HCQ_TIMEOUT,
                             "%s: rank %d did not take part within %" PRId64
                             " ms (rank 0 waited for it: "
                             "did it fail, stop, or run a different program?)",
                             what, (int)reply[1], ms);
    if (reply[1] == 0)
      return hcq_status_make(
          HCQ_UNAVAILABLE, "%s: rank 0 could not gather every rank's value (its message says why)",
          what);
    *out_max = reply[0];
    return NULL;
  }
  hcq_status_t st = gather_values(reply, ms, what);
  if (st && reply[1] < 0) reply[1] = 0;
  /* Every rank that took part hears the outcome, so none times out in turn; the sends are small,
   * and a rank that is there takes them within a second. */
  mpi_ctrl_batch_t b = {.n = 0};
  uint64_t reply_deadline = hcq__deadline_after_ms(1000);
  for (int r = 1; r < hcq__mpi_state.size; r++) {
    if (r == reply[1] || hcq__mpi_rank_is_lost(r)) continue;
    hcq_status_t sent = hcq__mpi_batch_add(&b, OP_SEND, r, reply, sizeof(reply), what);
    if (!sent && b.n == 64) sent = hcq__mpi_batch_drain(&b, reply_deadline, 1000, what);
    st = mpi_first_status(st, sent);
  }
  st = mpi_first_status(st, hcq__mpi_batch_drain(&b, reply_deadline, 1000, what));
  if (!st) *out_max = reply[0];
  return st;
}

hcq_status_t hcq_mpi_allreduce_max(int value, int *out_max) {
  if (!out_max)
    return hcq_status_make(HCQ_INVALID_ARGUMENT, "hcq_mpi_allreduce_max: out_max is NULL");
  return agree_max(value, out_max, "hcq_mpi_allreduce_max");
}

hcq_status_t hcq_mpi_barrier(void) {
  int unused;
  return agree_max(0, &unused, "hcq_mpi_barrier");
}
