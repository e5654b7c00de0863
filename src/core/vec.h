/* Growable arrays: the one container the library needs. */
#ifndef HCQ_CORE_VEC_H
#define HCQ_CORE_VEC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdlib.h>

#define HCQ__VEC(T)  \
  struct {           \
    T *data;         \
    size_t len, cap; \
  }

/* Makes room for need elements; false (and nothing changed) when memory runs out. */
static inline bool hcq__vec_reserve(void **data, size_t *cap, size_t need, size_t elem) {
  if (need <= *cap) return true;
  size_t n = *cap ? *cap : 8;
  while (n < need) n *= 2;
  void *p = realloc(*data, n * elem);
  if (!p) return false;
  *data = p;
  *cap = n;
  return true;
}

#define hcq__vec_reserve_for(v, need) \
  hcq__vec_reserve((void **)&(v)->data, &(v)->cap, (need), sizeof(*(v)->data))
#define hcq__vec_push(v, x) \
  (hcq__vec_reserve_for((v), (v)->len + 1) ? ((v)->data[(v)->len++] = (x), true) : false)
#define hcq__vec_free(v) (free((v)->data), (v)->data = NULL, (v)->len = (v)->cap = 0)

#endif
