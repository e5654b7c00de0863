#ifndef HCQ_CORE_EXPORT_H
#define HCQ_CORE_EXPORT_H

/* The internals the MPI layer calls. It is a library of its own (libhcq_mpi.so) that must use the
 * one core in the process, libhcq.so's, not carry a copy (two device registries, two option sets),
 * so libhcq.so exports these and no other hcq__ symbol: under the version node
 * HCQ_PRIVATE_<version> (cmake/libhcq.map.in), which no header offers and which only a
 * libhcq_mpi.so linked against this very release of libhcq.so finds. Protected, so calls inside
 * libhcq.so still bind directly, as for every hidden internal (the core's objects are compiled with
 * HCQ__CORE); the layer's references must be plain (default), as a protected reference would have
 * to be defined in its own library. tests/install checks that this list and libhcq_mpi.so's needs
 * are the same. */
#ifdef HCQ__CORE
#define HCQ__PRIVATE_EXPORT __attribute__((visibility("protected")))
#else
#define HCQ__PRIVATE_EXPORT __attribute__((visibility("default")))
#endif

#endif
