/* Chat templates (models/llm/chat.c): placeholder, filled below. */
#include "test_util.h"
