/* The graph build check: the ranks of a graph that has work on more than one rank compare digests
 * of its items (a leader gathers them and answers with a verdict) and agree on the graph's id,
 * which tags its messages. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "core/buffer.h"
#include "core/status.h"
#include "mpi/mpi_internal.h"

_Thread_local uint32_t hcq__mpi_build_gid;

static void global_name(const hcq_device_t *d, char *out, size_t size) {
  if (hcq__device_is_remote(d))
    snprintf(out, size, "%s", d->name);
  else
    snprintf(out, size, "%d/%s", hcq__mpi_state.rank, d->name);
}

typedef struct mpi_digest_ctx {
  XXH3_state_t *h;
  const hcq_buffer_t **bases;
  size_t nbases, cap;
} mpi_digest_ctx_t;

static void feed(mpi_digest_ctx_t *c, const void *p, size_t n) { XXH3_64bits_update(c->h, p, n); }
static void feed_u64(mpi_digest_ctx_t *c, uint64_t v) { feed(c, &v, sizeof(v)); }
static void feed_str(mpi_digest_ctx_t *c, const char *s) { feed(c, s, strlen(s) + 1); }
static void feed_dev(mpi_digest_ctx_t *c, const hcq_device_t *d) {
  char n[48];
  global_name(d, n, sizeof(n));
  feed_str(c, n);
}
static void feed_buf(mpi_digest_ctx_t *c, const hcq_buffer_t *b) {
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
static void feed_operand(mpi_digest_ctx_t *c, const hcq_operand_t *o) {
  feed_u64(c, o->sym ? 1 : 0);
  feed_u64(c, o->sym ? 0 : (uint64_t)o->value);
}

static void describe_item(const hcq_exec_item_t *it, size_t j, char *out, size_t size) {
  char a[48] = "?", b[48] = "?";
  if (it->kind == HCQ_ITEM_KERNEL && it->kernel.program) {
    global_name(it->kernel.program->dev, a, sizeof(a));
    snprintf(out, size, "item %zu: kernel %s on %s with %zu buffers", j, it->kernel.program->name,
             a, it->kernel.nbufs);
  } else if (it->kind == HCQ_ITEM_TRANSFER && it->transfer.src && it->transfer.dst) {
    global_name(it->transfer.src->dev, a, sizeof(a));
    global_name(it->transfer.dst->dev, b, sizeof(b));
    snprintf(out, size, "item %zu: transfer of %" PRIu64 " bytes %s -> %s", j, it->transfer.bytes,
             a, b);
  } else {
    snprintf(out, size, "item %zu", j);
  }
}

typedef struct mpi_check_result {
  uint64_t gid, bad_item, bad_rank, bad_n, leader_n;
} mpi_check_result_t;

/* The digest of one item (never 0); devs: the devices it runs on or moves between. */
static uint64_t item_digest(mpi_digest_ctx_t *c, const hcq_exec_item_t *it,
                            const hcq_device_t *devs[2]) {
  XXH3_64bits_reset(c->h);
  feed_u64(c, (uint64_t)it->kind);
  if (it->kind == HCQ_ITEM_KERNEL) {
    const hcq_kernel_item_t *k = &it->kernel;
    if (k->program) {
      devs[0] = k->program->dev;
      feed_str(c, k->program->name);
      feed_dev(c, k->program->dev);
    }
    feed_u64(c, k->nbufs);
    for (size_t i = 0; i < k->nbufs && k->bufs; i++) feed_buf(c, k->bufs[i]);
    feed_u64(c, k->outs ? k->nouts + 1 : 0);
    for (size_t i = 0; i < k->nouts && k->outs; i++) feed_u64(c, k->outs[i]);
    feed_u64(c, k->nvals);
    for (size_t i = 0; i < k->nvals && k->vals; i++) feed_operand(c, &k->vals[i]);
    for (int i = 0; i < 3; i++) feed_operand(c, &k->global[i]), feed_operand(c, &k->local[i]);
  } else if (it->kind == HCQ_ITEM_TRANSFER) {
    feed_buf(c, it->transfer.dst);
    feed_buf(c, it->transfer.src);
    feed_u64(c, it->transfer.bytes);
    if (it->transfer.dst) devs[0] = it->transfer.dst->dev;
    if (it->transfer.src) devs[1] = it->transfer.src->dev;
  }
  uint64_t h = XXH3_64bits_digest(c->h);
  return h ? h : 1;
}

/* Rank r's item digests (and its next graph id), compared with the leader's (dig): the first rank
 * that differs goes into res. */
static hcq_status_t compare_rank(int r, const uint64_t *dig, size_t nitems,
                                 mpi_check_result_t *res) {
  uint64_t hdr[2];
  HCQ__TRY(hcq__mpi_ctrl_msg(OP_RECV, r, hdr, sizeof(hdr),
                             "graph build check (receiving a rank's item list)"));
  uint64_t *theirs = malloc((hdr[0] ? hdr[0] : 1) * sizeof(uint64_t));
  if (!theirs) return hcq_status_make(HCQ_OUT_OF_MEMORY, "graph build check: out of memory");
  hcq_status_t st = NULL;
  if (hdr[0] && (st = hcq__mpi_ctrl_msg(OP_RECV, r, theirs, (int)(hdr[0] * sizeof(uint64_t)),
                                        "graph build check")))
    goto out;
  if (hdr[1] > res->gid) res->gid = hdr[1];
  size_t n = hdr[0] < nitems ? hdr[0] : nitems, i = 0;
  while (i < n && theirs[i] == dig[i]) i++;
  if ((i < n || hdr[0] != nitems) && !res->bad_rank) {
    res->bad_item = i;
    res->bad_rank = (uint64_t)r + 1;
    res->bad_n = hdr[0];
  }
out:
  free(theirs);
  return st;
}

/* The leader's side: each other rank of the graph (in) sends its item digests, the first that
 * differs from the leader's own (dig) is the verdict, and every one of them hears it. */
static hcq_status_t lead_check(const uint8_t *in, int leader, const uint64_t *dig, size_t nitems,
                               mpi_check_result_t *res) {
  res->gid = hcq__mpi_state.next_gid + 1;
  res->leader_n = nitems;
  for (int r = leader + 1; r < hcq__mpi_state.size; r++)
    if (in[r]) HCQ__TRY(compare_rank(r, dig, nitems, res));
  for (int r = leader + 1; r < hcq__mpi_state.size; r++)
    if (in[r])
      HCQ__TRY(hcq__mpi_ctrl_msg(OP_SEND, r, res, sizeof(*res),
                                 "graph build check (sending the verdict)"));
  return NULL;
}

/* Every other rank's side: its item digests (dig) to the leader, and the leader's verdict back. */
static hcq_status_t follow_check(int leader, uint64_t *dig, size_t nitems,
                                 mpi_check_result_t *res) {
  uint64_t hdr[2] = {nitems, hcq__mpi_state.next_gid + 1};
  HCQ__TRY(hcq__mpi_ctrl_msg(OP_SEND, leader, hdr, sizeof(hdr),
                             "graph build check (sending this rank's item list)"));
  HCQ__TRY(hcq__mpi_ctrl_msg(OP_SEND, leader, dig, (int)(nitems * sizeof(uint64_t)),
                             "graph build check"));
  return hcq__mpi_ctrl_msg(OP_RECV, leader, res, sizeof(*res),
                           "graph build check (waiting for the verdict)");
}

/* The ranks of the graph (in) agree that each built the same items (dig: this rank's digests), and
 * on the graph's id, which then tags the bound lists this thread allocates (hcq__mpi_build_gid). */
static hcq_status_t agree_on_items(const hcq_exec_item_t *items, size_t nitems, const uint8_t *in,
                                   uint64_t *dig) {
  int leader = 0;
  while (!in[leader]) leader++;
  mpi_check_result_t res = {0};
  hcq_status_t st = hcq__mpi_state.rank == leader ? lead_check(in, leader, dig, nitems, &res)
                                                  : follow_check(leader, dig, nitems, &res);
  if (st)
    return hcq_status_annotate(
        st, "graph build: the ranks of the graph (leader rank %d) did not agree in time", leader);
  if (res.bad_rank) {
    char mine[160] = "";
    size_t j = (size_t)res.bad_item;
    if (j < nitems)
      describe_item(&items[j], j, mine, sizeof(mine));
    else
      snprintf(mine, sizeof(mine), "no item %zu (this rank has %zu items)", j, nitems);
    return hcq_status_make(
        HCQ_INVALID_ARGUMENT,
        "graph build: the ranks disagree on the item list: rank %d (%" PRIu64
        " items) differs from "
        "rank %d (%" PRIu64 " items) first at item %" PRIu64
        "; on this rank (%d) it is %s. Every "
        "rank must build the same graphs with the same items in the same order (SPMD)",
        (int)(res.bad_rank - 1), res.bad_n, leader, res.leader_n, res.bad_item, hcq__mpi_state.rank,
        mine);
  }
  hcq__mpi_state.next_gid = (uint32_t)res.gid;
  hcq__mpi_build_gid = (uint32_t)res.gid;
  return NULL;
}

hcq_status_t hcq__mpi_graph_check(const hcq_exec_item_t *items, size_t nitems) {
  hcq__mpi_build_gid = 0;
  if (!items || !nitems) return NULL;
  /* The ranks of the graph's devices. */
  uint8_t *in = calloc((size_t)hcq__mpi_state.size, 1);
  uint64_t *dig = malloc(nitems * sizeof(uint64_t));
  mpi_digest_ctx_t c = {XXH3_createState(), calloc(2 * nitems + 8, sizeof(void *)), 0,
                        2 * nitems + 8};
  hcq_status_t st = NULL;
  bool local = false, remote = false;
  if (!in || !dig || !c.h || !c.bases) {
    st = hcq_status_make(HCQ_OUT_OF_MEMORY, "graph build check: out of memory");
    goto out;
  }
  for (size_t j = 0; j < nitems; j++) {
    const hcq_device_t *devs[2] = {NULL, NULL};
    dig[j] = item_digest(&c, &items[j], devs);
    for (int i = 0; i < 2; i++)
      if (devs[i]) {
        int r = hcq__mpi_dev_rank(devs[i]);
        in[r] = 1;
        if (r == hcq__mpi_state.rank)
          local = true;
        else
          remote = true;
      }
  }
  /* Only graphs with work here and elsewhere need agreement (and message tags). */
  if (local && remote) st = agree_on_items(items, nitems, in, dig);
out:
  free(in);
  free(dig);
  free(c.bases);
  if (c.h) XXH3_freeState(c.h);
  return st;
}

void hcq__mpi_graph_built(void) { hcq__mpi_build_gid = 0; }
