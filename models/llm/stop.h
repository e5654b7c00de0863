/* Stop strings, host side: the text of a generation goes through llm_stop_push piece by piece;
 * what it says may be passed on never holds a stop string, nor text that could still become one
 * (held back until it cannot). One per generation (hcq_llm_generate's, a batch sequence's, a
 * server's request); not thread-safe. */
#ifndef HCQ_LLM_STOP_H
#define HCQ_LLM_STOP_H

#include <stdbool.h>
#include <stddef.h>

#include "hcq/status.h"

typedef struct llm_stop {
  const char *const *stop; /* nstop non-empty strings (the caller's: they must outlive this) */
  size_t nstop;
  int found;  /* the stop string found first in the text (-1: none yet) */
  char *held; /* text not passed on yet, NUL-terminated at nheld */
  size_t nheld, cap;
} llm_stop_t;

void llm_stop_init(llm_stop_t *s, const char *const *stop, size_t nstop);
/* Appends n bytes of text (whole UTF-8 characters) and sets *pass to how many of the held bytes
 * may be passed on now: up to the first stop string (setting found), else all but the longest end
 * that begins a stop string (both at character starts); with end (nothing more will come), all
 * when no stop string is found. OUT_OF_MEMORY when the text cannot be held. After found, nothing
 * more is taken. */
HCQ_MUST_USE hcq_status_t llm_stop_push(llm_stop_t *s, const char *text, size_t n, bool end,
                                        size_t *pass);
/* The first n held bytes are passed on: they go (after a stop string, all of it goes). held[n] is
 * the NUL the caller may put there meanwhile; see llm_stop_push. */
void llm_stop_consume(llm_stop_t *s, size_t n);
void llm_stop_free(llm_stop_t *s);

#endif
