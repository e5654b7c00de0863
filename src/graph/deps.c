#include "graph/deps.h"

#include <string.h>

#define NONE UINT32_MAX

void hcq__deps_init(hcq__deps_t *d) { memset(d, 0, sizeof(*d)); }

void hcq__deps_deinit(hcq__deps_t *d) {
  for (size_t i = 0; i < d->cap; i++) hcq__vec_free(&d->table[i].readers);
  free(d->table);
  memset(d, 0, sizeof(*d));
}

static size_t slot_of(uintptr_t key, size_t cap) {
  uint64_t h = (uint64_t)key * UINT64_C(0x9E3779B97F4A7C15);
  return (size_t)(h >> 32) & (cap - 1);
}

static bool grow(hcq__deps_t *d) {
  size_t cap = d->cap ? d->cap * 2 : 64;
  hcq__deps_entry_t *t = calloc(cap, sizeof(*t));
  if (!t) return false;
  for (size_t i = 0; i < d->cap; i++) {
    if (!d->table[i].key) continue;
    size_t s = slot_of(d->table[i].key, cap);
    while (t[s].key) s = (s + 1) & (cap - 1);
    t[s] = d->table[i];
  }
  free(d->table);
  d->table = t;
  d->cap = cap;
  return true;
}

static hcq__deps_entry_t *lookup(hcq__deps_t *d, uintptr_t key) {
  if ((d->len + 1) * 2 > d->cap && !grow(d)) return NULL;
  size_t s = slot_of(key, d->cap);
  while (d->table[s].key && d->table[s].key != key) s = (s + 1) & (d->cap - 1);
  if (!d->table[s].key) {
    d->table[s].key = key;
    d->table[s].writer = NONE;
    d->len++;
  }
  return &d->table[s];
}

static int cmp_u32(const void *a, const void *b) {
  uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
  return x < y ? -1 : x > y;
}

hcq_status_t hcq__deps_access(hcq__deps_t *d, const uintptr_t *keys, const bool *writes, size_t n,
                              uint32_t token, hcq__u32_vec_t *out) {
  out->len = 0;
  /* Dependencies from every access first, then the item's own updates. */
  for (size_t i = 0; i < n; i++) {
    hcq__deps_entry_t *e = lookup(d, keys[i]);
    if (!e) return hcq_status_make(HCQ_OUT_OF_MEMORY, "out of memory tracking dependencies");
    if (e->writer != NONE && e->writer != token && !hcq__vec_push(out, e->writer))
      return hcq_status_make(HCQ_OUT_OF_MEMORY, "out of memory tracking dependencies");
    if (!writes[i]) continue;
    for (size_t r = 0; r < e->readers.len; r++)
      if (e->readers.data[r] != token && !hcq__vec_push(out, e->readers.data[r]))
        return hcq_status_make(HCQ_OUT_OF_MEMORY, "out of memory tracking dependencies");
  }
  for (size_t i = 0; i < n; i++) {
    bool write = false;
    for (size_t k = 0; k < n; k++) write |= keys[k] == keys[i] && writes[k];
    hcq__deps_entry_t *e = lookup(d, keys[i]);
    if (write) {
      e->writer = token;
      e->readers.len = 0;
    } else if (!e->readers.len || e->readers.data[e->readers.len - 1] != token) {
      if (!hcq__vec_push(&e->readers, token))
        return hcq_status_make(HCQ_OUT_OF_MEMORY, "out of memory tracking dependencies");
    }
  }
  if (out->len > 1) {
    qsort(out->data, out->len, sizeof(uint32_t), cmp_u32);
    size_t k = 1;
    for (size_t i = 1; i < out->len; i++)
      if (out->data[i] != out->data[k - 1]) out->data[k++] = out->data[i];
    out->len = k;
  }
  return NULL;
}
