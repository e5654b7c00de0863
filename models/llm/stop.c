/* Stop strings held back and matched on the host (stop.h). */
#include "stop.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

void llm_stop_init(llm_stop_t *s, const char *const *stop, size_t nstop) {
  *s = (llm_stop_t){.stop = stop, .nstop = stop ? nstop : 0, .found = -1};
}

static bool char_start(char c) { return ((unsigned char)c & 0xc0) != 0x80; }

/* Where the held text can be passed up to: the first stop string's start (setting found), else
 * all but its longest end that begins a stop string. Both only at character starts. */
static size_t passable(llm_stop_t *s) {
  size_t first = SIZE_MAX, hold = 0;
  for (size_t i = 0; i < s->nstop; i++) {
    size_t len = strlen(s->stop[i]);
    if (!len) continue;
    for (size_t at = 0; at + len <= s->nheld && at < first; at++)
      if (char_start(s->held[at]) && !memcmp(s->held + at, s->stop[i], len)) {
        first = at, s->found = (int)i;
        break;
      }
    for (size_t k = len - 1 < s->nheld ? len - 1 : s->nheld; k > hold; k--)
      if (char_start(s->held[s->nheld - k]) && !memcmp(s->held + s->nheld - k, s->stop[i], k)) {
        hold = k;
        break;
      }
  }
  return first != SIZE_MAX ? first : s->nheld - hold;
}

hcq_status_t llm_stop_push(llm_stop_t *s, const char *text, size_t n, bool end, size_t *pass) {
  *pass = 0;
  if (s->found >= 0) return NULL;
  if (s->nheld + n + 1 > s->cap) {
    size_t cap = (s->nheld + n + 1) * 2;
    char *grown = realloc(s->held, cap);
    if (!grown)
      return hcq_status_make(HCQ_OUT_OF_MEMORY, "out of memory holding back text for stop strings");
    s->held = grown, s->cap = cap;
  }
  if (n) memcpy(s->held + s->nheld, text, n);
  s->nheld += n;
  s->held[s->nheld] = 0;
  *pass = passable(s);
  if (end && s->found < 0) *pass = s->nheld;
  return NULL;
}

void llm_stop_consume(llm_stop_t *s, size_t n) {
  if (!s->held) return;
  s->nheld = s->found >= 0 ? 0 : s->nheld - (n < s->nheld ? n : s->nheld);
  memmove(s->held, s->held + n, s->found >= 0 ? 0 : s->nheld);
  s->held[s->nheld] = 0;
}

void llm_stop_free(llm_stop_t *s) {
  free(s->held);
  *s = (llm_stop_t){.found = -1};
}
