#include "world.h"

void world_open_on(world_t *w, const test_backend_t *b, int ndev) {
  memset(w, 0, sizeof(*w));
  w->ndev = ndev;
  for (int d = 0; d < ndev; d++) {
    char name[32];
    test_device_name(b, d, name, sizeof(name));
    w->devs[d] = test_open(name);
    w->mix[d] = test_program(w->devs[d], "mix", test_backend_kernels(b));
  }
}

void world_open(world_t *w, int ndev) { world_open_on(w, &test_backends[0], ndev); }

void world_close(world_t *w) {
  for (int i = w->nbufs - 1; i >= 0; i--) {
    hcq_buffer_release(w->buf[i]);
    hcq_buffer_release(w->mirror[i]);
  }
  for (int d = 0; d < w->ndev; d++) {
    hcq_program_release(w->mix[d]);
    test_close(w->devs[d]);
  }
}

static uint32_t next_rand(uint32_t *s) {
  *s ^= *s << 13;
  *s ^= *s >> 17;
  *s ^= *s << 5;
  return *s;
}

int world_buffer(world_t *w, int d, size_t count, uint32_t seed) {
  cr_assert_lt(w->nbufs, WORLD_MAX_BUFS);
  int i = w->nbufs++;
  w->buf[i] = test_buffer(w->devs[d], count * 4);
  w->mirror[i] = test_buffer(w->devs[d], count * 4);
  char label[32];
  snprintf(label, sizeof(label), "b%d", i);
  hcq_buffer_set_label(w->buf[i], label);
  uint32_t *h = malloc(count * 4), s = seed * 2654435761u + 1;
  for (size_t k = 0; k < count; k++) h[k] = next_rand(&s) % 1000;
  OK(hcq_buffer_copyin(w->buf[i], 0, h, count * 4));
  OK(hcq_buffer_copyin(w->mirror[i], 0, h, count * 4));
  free(h);
  return i;
}

int world_view(world_t *w, int base, size_t offset_words, size_t count) {
  cr_assert_lt(w->nbufs, WORLD_MAX_BUFS);
  int i = w->nbufs++;
  OK(hcq_buffer_view_create(w->buf[base], offset_words * 4, count * 4, &w->buf[i]));
  OK(hcq_buffer_view_create(w->mirror[base], offset_words * 4, count * 4, &w->mirror[i]));
  return i;
}

int world_index(const world_t *w, const hcq_buffer_t *b) {
  for (int i = 0; i < w->nbufs; i++)
    if (w->buf[i] == b) return i;
  cr_assert_fail("buffer %s is not in the world", hcq_buffer_label(b));
  return -1;
}

int world_device_of(const world_t *w, int idx) {
  for (int d = 0; d < w->ndev; d++)
    if (hcq_buffer_device(w->buf[idx]) == w->devs[d]) return d;
  return -1;
}

void world_mix(world_t *w, world_item_t *wi, int out, int x, int y, hcq_operand_t mul,
               hcq_operand_t add, hcq_operand_t n, const hcq_expr_t *groups) {
  memset(wi, 0, sizeof(*wi));
  int d = world_device_of(w, out);
  wi->bufs[0] = w->buf[out];
  wi->bufs[1] = w->buf[x];
  wi->bufs[2] = w->buf[y];
  wi->outs[0] = 0;
  wi->vals[0] = mul;
  wi->vals[1] = add;
  wi->vals[2] = n;
  hcq_kernel_item_t k = {
      w->mix[d],
      wi->bufs,
      3,
      wi->outs,
      1,
      wi->vals,
      3,
      {groups ? hcq_sym(groups) : hcq_imm(n.sym ? 1 : (n.value + 63) / 64), hcq_imm(1), hcq_imm(1)},
      {hcq_imm(64), hcq_imm(1), hcq_imm(1)}};
  cr_assert(groups || !n.sym, "a symbolic n needs a symbolic group count");
  wi->item.kind = HCQ_ITEM_KERNEL;
  wi->item.kernel = k;
}

void world_copy(world_t *w, world_item_t *wi, int dst, int src, uint64_t bytes) {
  memset(wi, 0, sizeof(*wi));
  wi->item.kind = HCQ_ITEM_TRANSFER;
  wi->item.transfer = (hcq_transfer_item_t){w->buf[dst], w->buf[src], bytes};
}

/* The mirror of graph buffer b, with input swaps applied. */
static hcq_buffer_t *mirror_of(world_t *w, hcq_buffer_t *b, const int *inputs, const int *swaps,
                               int ninputs) {
  int i = world_index(w, b);
  for (int k = 0; k < ninputs; k++)
    if (inputs[k] == i && swaps && swaps[k] >= 0) return w->mirror[swaps[k]];
  return w->mirror[i];
}

void world_run_eager(world_t *w, world_item_t *items, int nitems, const int *inputs,
                     const int *swaps, int ninputs, const hcq_var_value_t *vals, size_t nvals) {
  for (int j = 0; j < nitems; j++) {
    hcq_exec_item_t it = items[j].item;
    hcq_buffer_t *bufs[3];
    if (it.kind == HCQ_ITEM_KERNEL) {
      for (size_t i = 0; i < it.kernel.nbufs; i++)
        bufs[i] = mirror_of(w, it.kernel.bufs[i], inputs, swaps, ninputs);
      it.kernel.bufs = bufs;
      int d = world_device_of(w, world_index(w, items[j].item.kernel.bufs[0]));
      it.kernel.program = w->mix[d];
    } else {
      it.transfer.dst = mirror_of(w, it.transfer.dst, inputs, swaps, ninputs);
      it.transfer.src = mirror_of(w, it.transfer.src, inputs, swaps, ninputs);
    }
    OK(hcq_exec_item_run(&it, vals, nvals));
  }
}

void world_compare(world_t *w, const char *what) {
  for (int i = 0; i < w->nbufs; i++) {
    uint64_t size = hcq_buffer_size(w->buf[i]);
    uint8_t *a = malloc(size), *b = malloc(size);
    OK(hcq_buffer_copyout(w->buf[i], 0, a, size));
    OK(hcq_buffer_copyout(w->mirror[i], 0, b, size));
    for (uint64_t k = 0; k < size; k++)
      if (a[k] != b[k])
        cr_assert_fail(
            "%s: buffer %d (%s) differs from the eager ground truth at byte %lu (%u vs %u)", what,
            i, hcq_buffer_label(w->buf[i]), (unsigned long)k, a[k], b[k]);
    free(a);
    free(b);
  }
}

uint32_t world_rand(uint32_t *s) {
  *s ^= *s << 13;
  *s ^= *s >> 17;
  *s ^= *s << 5;
  return *s;
}

hcq_graph_t *world_graph(world_t *w, world_item_t *items, int n, const int *inputs, int ninputs,
                         const hcq_var_value_t *vals, size_t nvals, bool profile) {
  hcq_exec_item_t *its = calloc((size_t)n, sizeof(*its));
  hcq_buffer_t *ins[8];
  cr_assert(its);
  cr_assert_leq(ninputs, 8);
  for (int j = 0; j < n; j++) its[j] = items[j].item;
  for (int k = 0; k < ninputs; k++) ins[k] = w->buf[inputs[k]];
  hcq_graph_options_t opts = {.profile = profile};
  hcq_graph_t *g = NULL;
  OK(hcq_graph_create(its, (size_t)n, ins, (size_t)ninputs, vals, nvals, &opts, &g));
  free(its);
  /* CUDA devices run the CUDA graph, Metal ones the Metal graph, every other kind
   * the HCQ graph. */
  hcq_device_kind_t kind = hcq_device_kind(w->devs[0]);
  cr_assert_str_eq(hcq_graph_kind(g), kind == HCQ_DEVICE_CUDA    ? "cuda"
                                      : kind == HCQ_DEVICE_METAL ? "metal"
                                                                 : "hcq");
  return g;
}

void world_replay(world_t *w, hcq_graph_t *g, world_item_t *items, int n, const int *inputs,
                  const int *swaps, int ninputs, const hcq_var_value_t *vals, size_t nvals,
                  bool wait, const char *what) {
  hcq_buffer_t *ins[8];
  cr_assert_leq(ninputs, 8);
  for (int k = 0; k < ninputs; k++) ins[k] = w->buf[swaps && swaps[k] >= 0 ? swaps[k] : inputs[k]];
  uint64_t ns = 0;
  OK(hcq_graph_run(g, ins, (size_t)ninputs, vals, nvals, wait, wait ? &ns : NULL));
  if (wait) cr_assert_gt(ns, 0);
  world_run_eager(w, items, n, inputs, swaps, ninputs, vals, nvals);
  world_compare(w, what);
}

void world_replay_n(world_t *w, hcq_graph_t *g, world_item_t *items, int n, int times) {
  for (int r = 0; r < times; r++) {
    char what[32];
    snprintf(what, sizeof(what), "replay %d", r);
    world_replay(w, g, items, n, NULL, NULL, 0, NULL, 0, r % 2 == 0, what);
  }
}

void world_vars_open(world_vars_t *v) {
  OK(hcq_var_create("n", 1, 64, &v->n));
  OK(hcq_var_create("k", -9, 9, &v->k));
  const hcq_expr_t *vars[] = {v->n, v->k};
  OK(hcq_expr_parse("(n+63)//64", vars, 2, &v->groups));
}

void world_vars_close(world_vars_t *v) {
  hcq_expr_release(v->n);
  hcq_expr_release(v->k);
  hcq_expr_release(v->groups);
}

typedef struct {
  int idx, words, base, dev;
} fz_buf_t;

void world_random(world_t *w, uint32_t *seed, const world_vars_t *v, world_random_t *out) {
  world_random_on(w, &test_backends[0], seed, v, out);
}

void world_random_on(world_t *w, const test_backend_t *b, uint32_t *seed, const world_vars_t *v,
                     world_random_t *out) {
  memset(out, 0, sizeof(*out));
  int ndev = 1 + (int)(world_rand(seed) % 4);
  world_open_on(w, b, ndev);
  fz_buf_t bufs[48];
  int nb = 0;
  for (int d = 0; d < ndev; d++)
    for (int i = 0; i < 3; i++) {
      int words = 64 * (1 + (int)(world_rand(seed) % 3));
      int idx = world_buffer(w, d, (size_t)words, world_rand(seed));
      bufs[nb++] = (fz_buf_t){idx, words, idx, d};
      int off = 16 * (int)(world_rand(seed) % (words / 32)), len = 64;
      if (off + len <= words) {
        int vw = world_view(w, idx, (size_t)off, (size_t)len);
        bufs[nb++] = (fz_buf_t){vw, len, idx, d};
      }
    }
  /* Inputs: the first base buffer of each device, each with one replacement. */
  for (int i = 0; i < nb && out->ninputs < ndev; i++)
    if (bufs[i].idx == bufs[i].base && bufs[i].dev == out->ninputs) {
      out->inputs[out->ninputs] = bufs[i].idx;
      out->alts[out->ninputs] =
          world_buffer(w, bufs[i].dev, (size_t)bufs[i].words, world_rand(seed));
      out->ninputs++;
    }
  out->nitems = 4 + (int)(world_rand(seed) % 20);
  for (int j = 0; j < out->nitems; j++) {
    world_item_t *wi = &out->items[j];
    fz_buf_t *o = &bufs[world_rand(seed) % nb];
    if (world_rand(seed) % 3 == 0) {
      fz_buf_t *src = &bufs[world_rand(seed) % nb];
      if (src->base == o->base) src = o; /* overlapping copies within one base stay exact */
      int words = o->words < src->words ? o->words : src->words;
      world_copy(w, wi, o->idx, src->idx, (uint64_t)(1 + world_rand(seed) % words) * 4);
    } else {
      /* Sources on the output's device; an output that shares a base with a source must be it, so
       * that no kernel reads what another of its threads writes. */
      fz_buf_t *x = NULL, *y = NULL;
      for (int tries = 0; tries < 20 && (!x || !y); tries++) {
        fz_buf_t *c = &bufs[world_rand(seed) % nb];
        if (c->dev != o->dev || (c->base == o->base && c != o)) continue;
        if (!x)
          x = c;
        else
          y = c;
      }
      if (!x) x = o;
      if (!y) y = o;
      int words = o->words;
      if (x->words < words) words = x->words;
      if (y->words < words) words = y->words;
      bool symbolic = words >= 64 && world_rand(seed) % 2;
      world_mix(w, wi, o->idx, x->idx, y->idx,
                symbolic ? hcq_sym(v->k) : hcq_imm(world_rand(seed) % 5),
                hcq_imm(world_rand(seed) % 100),
                symbolic ? hcq_sym(v->n) : hcq_imm(1 + world_rand(seed) % words),
                symbolic ? v->groups : NULL);
    }
  }
}

void world_random_replay(const world_random_t *rw, uint32_t *seed, const world_vars_t *v,
                         int *swaps, hcq_var_value_t vals[2]) {
  for (int i = 0; i < rw->ninputs; i++) swaps[i] = world_rand(seed) % 2 ? rw->alts[i] : -1;
  vals[0] = (hcq_var_value_t){v->n, 1 + world_rand(seed) % 64};
  vals[1] = (hcq_var_value_t){v->k, (int64_t)(world_rand(seed) % 19) - 9};
}

void world_graph_fuzz(const test_backend_t *b, uint32_t seed, int rounds, int replays) {
  world_vars_t v;
  world_vars_open(&v);
  for (int round = 0; round < rounds; round++) {
    world_t w;
    world_random_t rw;
    world_random_on(&w, b, &seed, &v, &rw);
    hcq_var_value_t init[] = {{v.n, 64}, {v.k, 1}};
    hcq_graph_t *g = world_graph(&w, rw.items, rw.nitems, rw.inputs, rw.ninputs, init, 2, false);
    for (int r = 0; r < replays; r++) {
      int swaps[WORLD_MAX_DEVS];
      hcq_var_value_t vals[2];
      world_random_replay(&rw, &seed, &v, swaps, vals);
      char what[96];
      snprintf(what, sizeof(what), "fuzz round %d (%d devices, %d items) replay %d", round, w.ndev,
               rw.nitems, r);
      world_replay(&w, g, rw.items, rw.nitems, rw.inputs, swaps, rw.ninputs, vals, 2, seed % 2,
                   what);
    }
    OK(hcq_graph_destroy(g));
    world_close(&w);
  }
  world_vars_close(&v);
}
