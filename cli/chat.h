/* hcq chat (hcq generate --interactive): a conversation with a model, a line of standard input a
 * turn. */
#ifndef HCQ_CLI_CHAT_H
#define HCQ_CLI_CHAT_H

#include <hcq/llm.h>
#include <stdio.h>

/* Lines from in, each a user turn answered in the model's chat template (template_name; NULL: the
 * model's) over the whole conversation so far (a system message first when system is given), the
 * reply streamed to out and kept as the assistant's turn; an empty line is skipped; /exit or the
 * end of in ends it. When the conversation leaves too little room for a reply (o's max_tokens, at
 * most half the context) its oldest turns are dropped (said on standard error); a single turn too
 * long for the context is refused and the conversation goes on. o:
 * the sampling, stop strings and most tokens per reply (its callbacks are replaced). With in a
 * terminal, a "> " prompt goes to standard error. */
HCQ_MUST_USE hcq_status_t cli_chat_loop(hcq_llm_t *llm, const hcq_llm_generate_options_t *o,
                                        const char *system, const char *template_name, FILE *in,
                                        FILE *out);

#endif
