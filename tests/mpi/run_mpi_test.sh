#!/bin/sh
# Runs one MPI scenario: run_mpi_test.sh MPIRUN NP shm|tcp PROGRAM ARGS...
# Every run is bounded (timeout) so a hang fails the test instead of stopping CI. As root, Open MPI
# needs the two OMPI_ALLOW_RUN_AS_ROOT variables. --oversubscribe lets 4 ranks run on 2 cores;
# --bind-to none keeps the ranks from being pinned to one core each (hcq pins its own threads).
set -u
mpirun=$1 np=$2 transport=$3
shift 3
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_rmaps_base_oversubscribe=1
# Under AddressSanitizer (make asan) the leak check must name Open MPI's own allocations to leave
# them out (tests/lsan.supp): components stay mapped, and stacks are unwound in full.
export OMPI_MCA_mca_base_component_disable_dlclose=1
[ -n "${ASAN_OPTIONS:-}" ] && export ASAN_OPTIONS="$ASAN_OPTIONS:malloc_context_size=20:fast_unwind_on_malloc=0"
case "$transport" in
  shm) btl="self,vader" ;;
  tcp) btl="self,tcp" ;;
  *) echo "run_mpi_test.sh: transport is shm or tcp" >&2; exit 2 ;;
esac
exec timeout -k 5 ${HCQ_MPI_TEST_TIMEOUT:-100} "$mpirun" -np "$np" --oversubscribe --bind-to none \
  --mca btl "$btl" --mca btl_tcp_if_include lo "$@"
