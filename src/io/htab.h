/* A small open-addressing table from 64-bit hashes to indices, for the graph-file loader and
 * saver: files with 100k buffers must not cost 100k x 100k name comparisons. The table holds
 * only hashes; the caller compares the candidates it returns with its own keys, so one table
 * serves names, pointers and (name, source) pairs alike. */
#ifndef HCQ_IO_HTAB_H
#define HCQ_IO_HTAB_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

typedef struct hcq__htab {
  uint64_t *hashes;
  size_t *index;   /* entry + 1; 0 marks a free slot */
  size_t cap, len; /* cap is 0 or a power of two */
} hcq__htab_t;

/* XXH3 (the xxHash the kernel cache uses); h chains a previous hash in as the seed. */
static inline uint64_t hcq__hash_bytes(uint64_t h, const void *p, size_t n) {
  return XXH3_64bits_withSeed(p, n, h);
}
static inline uint64_t hcq__hash_str(const char *s) { return hcq__hash_bytes(0, s, strlen(s)); }
static inline uint64_t hcq__hash_ptr(const void *p) {
  uint64_t h = (uint64_t)(uintptr_t)p * UINT64_C(0x9E3779B97F4A7C15);
  return h ^ (h >> 29);
}

static inline void hcq__htab_free(hcq__htab_t *t) {
  free(t->hashes);
  free(t->index);
  memset(t, 0, sizeof(*t));
}

static inline void hcq__htab_place(hcq__htab_t *t, uint64_t h, size_t entry) {
  size_t at = (size_t)h & (t->cap - 1);
  while (t->index[at]) at = (at + 1) & (t->cap - 1);
  t->hashes[at] = h;
  t->index[at] = entry + 1;
}

/* Adds entry under hash h (duplicates are the caller's business); false when memory runs out. */
static inline bool hcq__htab_add(hcq__htab_t *t, uint64_t h, size_t entry) {
  if ((t->len + 1) * 2 > t->cap) { /* at most half full, so probes stay short */
    size_t cap = t->cap ? t->cap * 2 : 64;
    hcq__htab_t n = {calloc(cap, sizeof(uint64_t)), calloc(cap, sizeof(size_t)), cap, t->len};
    if (!n.hashes || !n.index) {
      free(n.hashes);
      free(n.index);
      return false;
    }
    for (size_t i = 0; i < t->cap; i++)
      if (t->index[i]) hcq__htab_place(&n, t->hashes[i], t->index[i] - 1);
    hcq__htab_free(t);
    *t = n;
  }
  hcq__htab_place(t, h, entry);
  t->len++;
  return true;
}

/* The entries stored under hash h, one per call: start with *cursor = 0; SIZE_MAX when done. */
static inline size_t hcq__htab_next(const hcq__htab_t *t, uint64_t h, size_t *cursor) {
  if (!t->cap) return SIZE_MAX;
  for (size_t at; (at = ((size_t)h + *cursor) & (t->cap - 1)), t->index[at];) {
    ++*cursor;
    if (t->hashes[at] == h) return t->index[at] - 1;
  }
  return SIZE_MAX;
}

#endif
