/* The profiler moved to src/trace/; its hooks are trace/trace_internal.h. This old name forwards
 * there only until the sources that still include it (core/device.c, core/eager.c, graph/graph.c,
 * graph/hcq_graph.c, edited elsewhere at the time of the move) name the new one; then it goes. */
#include "trace/trace_internal.h"
