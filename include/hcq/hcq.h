/* hcq: record kernel launches and buffer copies once, replay them as a graph with almost no host
 * work per replay. This header includes every public module.
 *
 * Linking: `cc app.c $(pkg-config --cflags --libs hcq)` (shared), `... hcq-static` (static), or in
 * CMake `find_package(hcq)` and `target_link_libraries(app PRIVATE hcq::hcq)`.
 *
 * The library is built with hidden visibility: libhcq.so exports what the module headers declare
 * between their `#pragma GCC visibility push(default)` and `pop`, and nothing else but the few
 * internals its MPI layer (libhcq_mpi.so) calls, under the version node HCQ_PRIVATE_<version>: no
 * API, never to be called. A new public header needs the same pair.
 *
 * Handles after release: a buffer, program, signal or graph used after its last release (or
 * released twice) is undefined behaviour, and by default a call given one may well return OK and
 * act on freed memory. Run with HCQ_VALIDATE=1 while developing: then each such use is an error
 * naming the object ("buffer \"x\" was released already") or, for calls that return nothing, a line
 * on stderr (device.h, hcq_validation_error_count). Queues, expressions and jits are never checked.
 * A closed device handle is checked with or without it (hcq_device_close). */
#ifndef HCQ_HCQ_H
#define HCQ_HCQ_H

#include "hcq/buffer.h"
#include "hcq/device.h"
#include "hcq/fence.h"
#include "hcq/graph.h"
#include "hcq/graphfile.h"
#include "hcq/jit.h"
#include "hcq/memory.h"
#include "hcq/program.h"
#include "hcq/queue.h"
#include "hcq/signal.h"
#include "hcq/status.h"
#include "hcq/symbolic.h"
#include "hcq/trace.h"
#include "hcq/vulkan.h"

#define HCQ_VERSION_MAJOR 0
#define HCQ_VERSION_MINOR 1
#define HCQ_VERSION_PATCH 0

#endif
