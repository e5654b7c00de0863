/* What the tests need of a batch (hcq/llm.h's hcq_llm_batch_t) beyond the public API: its decoder.
 * Not installed. */
#ifndef HCQ_LLM_BATCH_H
#define HCQ_LLM_BATCH_H

#include <hcq/llm.h>

#include "llm.h"

llm_decoder_t *llm_batch_decoder(hcq_llm_batch_t *batch); /* borrowed */

#endif
