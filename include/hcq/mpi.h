/* hcq over MPI (docs/mpi.md): devices, graphs and captures that span processes and machines.
 *
 * Optional: built and installed where CMake finds MPI, as libhcq_mpi.so (which uses libhcq.so, the
 * one core in the process) and libhcq_mpi.a (with libhcq.a); libhcq itself never links MPI. Include
 * <mpi.h> before this header, or let it include it. Linking, with your MPI's compiler wrapper:
 *
 *   mpicc app.c $(pkg-config --cflags --libs hcq-mpi)          (libhcq_mpi.so, libhcq.so)
 *   mpicc app.c $(pkg-config --cflags --libs hcq-mpi-static)   (libhcq_mpi.a, libhcq.a)
 *
 * or in CMake `find_package(hcq REQUIRED COMPONENTS mpi)` and `target_link_libraries(app PRIVATE
 * hcq::mpi)` (hcq::mpi_static, or -DHCQ_USE_STATIC_LIBS=ON; it brings MPI::MPI_C).
 *
 * Start: the application initialises MPI with at least MPI_THREAD_SERIALIZED and calls
 * hcq_mpi_init(comm) before opening devices; every rank of comm must call it. From then on one
 * communication thread per process makes every MPI call hcq needs, on duplicates of comm. An
 * application that makes its own MPI calls while hcq's layer runs needs MPI_THREAD_MULTIPLE
 * (hcq_mpi_init refuses less than SERIALIZED: FUNNELED would forbid hcq's thread).
 *
 * Devices: "R/KIND:N" names device KIND:N of rank R. On rank R it is that local device (the same
 * handle as "KIND:N"); on every other rank it is a remote device: its buffers have a size and an
 * address but no storage here, its programs are kept by name and source and compiled only on R,
 * kernels launched on it do nothing here (rank R runs them), hcq_buffer_copyin into its buffers
 * does nothing here (rank R's own copyin fills them) and hcq_buffer_copyout from them is
 * FAILED_PRECONDITION (use hcq_mpi_fetch). hcq_device_name gives "R/KIND:N" for remote devices.
 *
 * SPMD: every rank creates the same buffers, builds the same graphs and captures with the same
 * items in the same order, replays them with the same variable values and calls hcq_transfer in the
 * same order. A graph whose items touch devices of several ranks is checked at build: the ranks
 * involved compare a digest of every item (kind, devices, buffer sizes and offsets, kernel names,
 * constant values and dims, bytes) and fail, every one of them, naming the first item that differs.
 *
 * Transfers between ranks run on the remote device's copy queue: a send of the source's bytes on
 * the source rank, a receive into the destination on the destination rank, ordered by signals like
 * any other copy; ranks that hold neither end skip them. Message tags are per (graph, item) for
 * graph replays and per (pair of ranks, sequence number) for eager transfers, so consecutive
 * replays and transfers never match the wrong message. Only devices whose memory is host memory
 * (CPU) take part in transfers between ranks; stage GPU buffers through a CPU buffer.
 *
 * Faults: a send or receive still pending at the wait timeout (HCQ_WAIT_TIMEOUT_MS) makes the wait
 * fail with a hang report naming the peer rank, the item, the bytes and the tag; the work stays
 * queued (a slow rank may still answer). A peer is *lost* once MPI fails a request with it (a peer
 * that died, where the MPI library reports it) or the application gives up on it
 * (hcq_mpi_declare_rank_lost: hcq cannot tell a stopped process from a slow one). Then its remote
 * devices are lost, a local device whose queue holds a transfer with it is lost (the queue could
 * never move past it), and control calls with it fail at once: waits end with DEVICE_LOST naming
 * the rank, and tearing graphs and devices down takes no wait timeout per object. hcq never calls
 * MPI_Abort (the hcq tool does, to end a job whose peer is lost: docs/mpi.md).
 */
#ifndef HCQ_MPI_H
#define HCQ_MPI_H

#include <mpi.h>
#include <stdbool.h>
#include <stddef.h>

#include "hcq/buffer.h"
#include "hcq/status.h"

#ifdef __cplusplus
extern "C" {
#endif
#pragma GCC visibility push(default) /* exported from libhcq_mpi.so */

/* Starts the layer on comm (duplicated: hcq's messages never meet the application's). Collective
 * over comm. FAILED_PRECONDITION when MPI is not initialised, its thread level is below
 * MPI_THREAD_SERIALIZED, or the layer already runs. */
HCQ_MUST_USE hcq_status_t hcq_mpi_init(MPI_Comm comm);
/* For tools: when the process was started by mpirun/mpiexec (the launcher's environment says so),
 * initialises MPI itself (MPI_THREAD_MULTIPLE) and starts the layer on MPI_COMM_WORLD; otherwise
 * does nothing. *out_started (may be NULL) tells which. */
HCQ_MUST_USE hcq_status_t hcq_mpi_init_auto(bool *out_started);
/* Stops the layer (its devices must be closed first). Finalises MPI when hcq_mpi_init_auto
 * initialised it and no peer failed (MPI_Finalize could wait for a dead rank forever). */
HCQ_MUST_USE hcq_status_t hcq_mpi_finalize(void);
bool hcq_mpi_running(void);
/* This process's rank and the communicator's size (0 and 1 when the layer is not running). */
int hcq_mpi_rank(void);
int hcq_mpi_size(void);
/* The rank a device lives on (this rank for local devices). */
int hcq_mpi_device_rank(const hcq_device_t *device);
/* True when the buffer's storage is on another rank. */
bool hcq_mpi_buffer_is_remote(const hcq_buffer_t *buf);
/* True once a peer is lost (an MPI request with it failed, or hcq_mpi_declare_rank_lost). */
bool hcq_mpi_peer_failed(void);
/* Gives up on rank for good (until hcq_mpi_finalize), with reason (may be NULL) in every message
 * it causes: its remote devices are lost, a transfer with it on a local device's queue marks that
 * device lost, hcq_mpi_fetch, _allreduce_max and _barrier involving it fail at once (UNAVAILABLE).
 * For an application that has decided a rank is gone, typically after a TIMEOUT whose hang report
 * names it: teardown then takes no wait timeout per object. OUT_OF_RANGE for a rank that does not
 * exist, INVALID_ARGUMENT for this process's own. */
HCQ_MUST_USE hcq_status_t hcq_mpi_declare_rank_lost(int rank, const char *reason);
/* NULL while rank is not lost; UNAVAILABLE with the reason once it is. OUT_OF_RANGE for a rank that
 * does not exist. */
HCQ_MUST_USE hcq_status_t hcq_mpi_rank_health(int rank);

/* Collective over the layer's communicator (every rank calls it, in the same order): the contents
 * of buf (size bytes from offset 0) arrive in host memory dst on rank root; the buffer's owner
 * sends them, other ranks pass dst NULL or ignore it. */
HCQ_MUST_USE hcq_status_t hcq_mpi_fetch(hcq_buffer_t *buf, int root, void *dst, uint64_t size);
/* Collective: the maximum of every rank's value, within the wait timeout. Gathered on rank 0, so a
 * rank that does not take part is named: a TIMEOUT naming it on every rank (on rank 0 after the
 * timeout, on the others, told by rank 0, up to a second later); a lost rank fails it at once. */
HCQ_MUST_USE hcq_status_t hcq_mpi_allreduce_max(int value, int *out_max);
/* Collective: a barrier within the wait timeout; failures as hcq_mpi_allreduce_max's. */
HCQ_MUST_USE hcq_status_t hcq_mpi_barrier(void);

#pragma GCC visibility pop
#ifdef __cplusplus
}
#endif
#endif
