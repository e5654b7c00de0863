/* Test hooks of the graph layer: tests include this header, production code does not
 * (docs/design.md, "Code conventions"); defined in queue_graph.c, which includes it to check them.
 */
#ifndef HCQ_GRAPH_GRAPH_TESTING_H
#define HCQ_GRAPH_GRAPH_TESTING_H

#include <stdint.h>

#include "hcq/graph.h"

/* The queue graph's replay counter, and setting it as if that many replays had finished (with no
 * replay in flight), to exercise its wrap. */
uint64_t hcq__graph_kickoff_value_for_tests(const hcq_graph_t *g);
void hcq__graph_pretend_replays_for_tests(hcq_graph_t *g, uint64_t replays);

#endif
