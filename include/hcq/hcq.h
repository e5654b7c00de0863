/* hcq: record kernel launches and buffer copies once, replay them as a graph with almost no host
 * work per replay. This header includes every public module. */
#ifndef HCQ_HCQ_H
#define HCQ_HCQ_H

#include "hcq/status.h"
#include "hcq/symbolic.h"
#include "hcq/device.h"
#include "hcq/signal.h"
#include "hcq/buffer.h"
#include "hcq/program.h"
#include "hcq/queue.h"
#include "hcq/graph.h"
#include "hcq/jit.h"
#include "hcq/graphfile.h"
#include "hcq/vulkan.h"

#define HCQ_VERSION_MAJOR 0
#define HCQ_VERSION_MINOR 1
#define HCQ_VERSION_PATCH 0

#endif
