/* Every private header of the core at once, while callers move to including what they use. */
#ifndef HCQ_CORE_INTERNAL_H
#define HCQ_CORE_INTERNAL_H

#include "core/backend.h"
#include "core/buffer.h"
#include "core/capture.h"
#include "core/command.h"
#include "core/device.h"
#include "core/eager.h"
#include "core/export.h"
#include "core/fence.h"
#include "core/hang_report.h"
#include "core/host_wait.h"
#include "core/memory.h"
#include "core/object.h"
#include "core/options.h"
#include "core/program.h"
#include "core/queue.h"
#include "core/remote.h"
#include "core/signal.h"
#include "core/status.h"
#include "core/validate.h"

#endif
