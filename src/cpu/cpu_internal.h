/* CPU backend pieces shared between its files. */
#ifndef HCQ_CPU_INTERNAL_H
#define HCQ_CPU_INTERNAL_H

#include "core/internal.h"

/* Compiles source with the system C compiler into a cached shared object and resolves entry. */
hcq_status_t hcq__cpu_compile(hcq_device_t *dev, const char *entry, const char *source, hcq__program_impl_t *out);
void hcq__cpu_unload(hcq_device_t *dev, hcq__program_impl_t *impl);

#endif
