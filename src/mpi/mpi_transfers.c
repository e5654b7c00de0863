/* Transfers between ranks: their message tags, how a stuck one is described, and the hooks through
 * which a local engine runs its own cross-rank copies (HCQ__CAP_ENGINE_REMOTE_COPY). */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>

#include "mpi/mpi_internal.h"

uint32_t hcq__mpi_eager_tag(hcq_device_t *src, hcq_device_t *dst) {
  int a = hcq__mpi_dev_rank(src), b = hcq__mpi_dev_rank(dst);
  if (a == b) return 0;
  int peer = a == hcq__mpi_state.rank ? b : a;
  if (a != hcq__mpi_state.rank && b != hcq__mpi_state.rank)
    return 0; /* neither end here: nothing is sent */
  pthread_mutex_lock(&hcq__mpi_state.seq_lock);
  uint32_t seq = hcq__mpi_state.eager_seq[peer]++;
  pthread_mutex_unlock(&hcq__mpi_state.seq_lock);
  return HCQ__TAG_EAGER_REMOTE | (seq & 0x1fffffffu);
}

void hcq__mpi_describe(hcq_device_t *dev, const uint32_t *cmd, char *out, size_t size) {
  if (!out || !size) return;
  out[0] = '\0';
  if (HCQ__HDR_OP(cmd[0]) != HCQ__OP_COPY) return;
  uint64_t local = 0;
  int role = 0, peer = -1;
  uint32_t gid = 0;
  if (hcq__device_is_remote(dev)) {
    mpi_rdev_t *rd = hcq__mpi_rdev_of(dev);
    role = hcq__mpi_copy_role(rd, cmd, &local);
    peer = rd->rank;
    for (int k = 0; k < 2; k++) {
      const uint32_t *base = atomic_load_explicit(&rd->q[k].c.call_base, memory_order_relaxed);
      if (base) gid = hcq__mpi_mem_gid(rd, base);
    }
  } else { /* a local engine's (hcq__mpi_engine_copy_start) */
    uint64_t dst = hcq__rd64(cmd + HCQ__COPY_DST), src = hcq__rd64(cmd + HCQ__COPY_SRC);
    if (hcq__addr_is_remote(dst) != hcq__addr_is_remote(src)) {
      role = hcq__addr_is_remote(dst) ? 1 : 2;
      peer = atomic_load(&hcq__mpi_id_rank[hcq__mpi_addr_owner(role == 1 ? dst : src)]) - 1;
    }
  }
  if (!role) {
    snprintf(out, size, " (neither end on this rank: skipped)");
    return;
  }
  uint32_t wt = cmd[HCQ__COPY_TAG];
  char item[64];
  if (wt & HCQ__TAG_EAGER_REMOTE)
    snprintf(item, sizeof(item), "eager transfer #%u", wt & 0x1fffffffu);
  else if (wt & HCQ__TAG_GRAPH_REMOTE)
    snprintf(item, sizeof(item), "graph %u item %u", (wt >> 20) & 0x3ffu, wt & 0xfffffu);
  else
    snprintf(item, sizeof(item), "graph %u item %u", gid, wt ? wt - 1 : 0);
  snprintf(out, size, ": MPI %s %" PRIu64 " bytes %s rank %d, tag %d (%s)",
           role == 1 ? "send of" : "receive of", hcq__rd64(cmd + HCQ__COPY_SIZE),
           role == 1 ? "to" : "from", peer, hcq__mpi_copy_tag(wt, gid), item);
}

/* ---- cross-rank copies run by a local engine (HCQ__CAP_ENGINE_REMOTE_COPY) ---- */

uint32_t hcq__mpi_graph_copy_tag(uint32_t item) {
  return HCQ__TAG_GRAPH_REMOTE | ((hcq__mpi_build_gid & 0x3ffu) << 20) | (item & 0xfffffu);
}

void *hcq__mpi_engine_copy_start(hcq_device_t *dev, const uint32_t *w) {
  uint64_t dst = hcq__rd64(w + HCQ__COPY_DST), src = hcq__rd64(w + HCQ__COPY_SRC),
           bytes = hcq__rd64(w + HCQ__COPY_SIZE);
  if (hcq__addr_is_remote(dst) == hcq__addr_is_remote(src)) {
    hcq__device_mark_lost(dev, "a copy between two buffers of other ranks reached its engine");
    return NULL;
  }
  bool send = hcq__addr_is_remote(dst);
  int peer = atomic_load_explicit(&hcq__mpi_id_rank[hcq__mpi_addr_owner(send ? dst : src)],
                                  memory_order_acquire) -
             1;
  if (peer < 0 || bytes > INT32_MAX) {
    hcq__device_mark_lost(dev, "a copy to or from another rank with %s",
                          peer < 0 ? "no remote device at its address" : "more than 2^31-1 bytes");
    return NULL;
  }
  if (hcq__mpi_rank_is_lost(peer)) {
    hcq__device_mark_lost(dev, "its queue reached a %s rank %d, which is lost: %s",
                          send ? "send to" : "receive from", peer,
                          hcq__mpi_state.rank_lost_reason[peer]);
    return NULL;
  }
  mpi_op_t *o = calloc(1, sizeof(*o));
  if (!o) {
    hcq__device_mark_lost(dev, "out of memory for an MPI request");
    return NULL;
  }
  o->kind = send ? OP_SEND : OP_RECV;
  o->buf = (void *)(uintptr_t)(send ? src : dst);
  o->count = (int)bytes;
  o->peer = peer;
  o->tag = hcq__mpi_copy_tag(w[HCQ__COPY_TAG], 0);
  o->comm = hcq__mpi_state.data;
  if (!hcq__mpi_op_post(o)) {
    hcq__device_mark_lost(dev, "MPI %s rank %d failed: %s", send ? "send to" : "receive from", peer,
                          o->error);
    free(o);
    return NULL;
  }
  return o;
}

int hcq__mpi_engine_copy_poll(hcq_device_t *dev, void *op) {
  mpi_op_t *o = op;
  if (!hcq__mpi_op_test_quiet(o)) {
    if (!hcq__mpi_rank_is_lost(o->peer)) return 0;
    /* The queue cannot move past a transfer that will never complete. */
    hcq__device_mark_lost(dev, "its %s of %d bytes %s rank %d cannot complete: rank %d is lost: %s",
                          o->kind == OP_SEND ? "send" : "receive", o->count,
                          o->kind == OP_SEND ? "to" : "from", o->peer, o->peer,
                          hcq__mpi_state.rank_lost_reason[o->peer]);
    hcq__mpi_engine_copy_drop(o);
    return -1;
  }
  bool ok = atomic_load_explicit(&o->state, memory_order_acquire) == OPS_DONE;
  if (!ok)
    hcq__device_mark_lost(dev, "MPI %s rank %d failed: %s",
                          o->kind == OP_SEND ? "send to" : "receive from", o->peer, o->error);
  free(o);
  return ok ? 1 : -1;
}

void hcq__mpi_engine_copy_drop(void *op) {
  mpi_op_t *o = op;
  if (atomic_load(&o->state) == OPS_POSTED) {
    if (o->kind == OP_RECV) MPI_Cancel(&o->req);
    MPI_Request_free(&o->req);
  }
  free(o);
}
