/* Test hooks of the update planner: tests include this header, production code does not
 * (docs/design.md, "Code conventions"); defined in update_plan.c, which includes it to check them.
 */
#ifndef HCQ_GRAPH_UPDATE_PLAN_TESTING_H
#define HCQ_GRAPH_UPDATE_PLAN_TESTING_H

#include <stddef.h>

#include "graph/update_plan.h"

/* Items the last prepare evaluated (tests check that the work follows what changed). */
size_t hcq__update_plan_evaluated_count(const hcq__update_plan_t *plan);

#endif
