#!/usr/bin/env bash
# The hcq tool under mpirun (docs/mpi.md, CLI.md): a graph file run with its devices spread over ranks
# by --device-map gives the single-process result byte for byte (--check passes, rank 0 writes every
# buffer with --out), over shared memory and TCP, with 2 and 4 ranks; every rank exits with the same
# status; hcq info shows the rank.
#
#   bash tests/cli/test_mpi_cli.sh /path/to/hcq /path/to/mpirun /path/to/examples
set -u
HCQ=$1 MPIRUN=$2 EX=$3
T=$(mktemp -d "${TMPDIR:-/tmp}/hcq-mpi-cli.XXXXXX") || exit 1
trap 'rm -rf "$T"' EXIT
export HCQ_CACHE_DIR=${HCQ_CACHE_DIR:-$T/cache}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 HCQ_WAIT_TIMEOUT_MS=${HCQ_WAIT_TIMEOUT_MS:-20000}
# Under AddressSanitizer (make asan) the leak check must name Open MPI's own allocations to leave
# them out (tests/lsan.supp): components stay mapped, and stacks are unwound in full.
export OMPI_MCA_mca_base_component_disable_dlclose=1
[ -n "${ASAN_OPTIONS:-}" ] && export ASAN_OPTIONS="$ASAN_OPTIONS:malloc_context_size=20:fast_unwind_on_malloc=0"
fails=0
ok() { echo "ok   $1"; }
fail() { echo "FAIL $1"; fails=$((fails + 1)); }
mpi() { # mpi NP shm|tcp ARGS...
  local np=$1 btl=self,vader
  [ "$2" = tcp ] && btl=self,tcp
  shift 2
  timeout -k 5 90 "$MPIRUN" -np "$np" --oversubscribe --bind-to none --mca btl "$btl" --mca btl_tcp_if_include lo "$@"
}

"$HCQ" run "$EX/pipeline_two_devices.json" --check --out "$T/ref" >"$T/ref.txt" 2>&1 || fail "single-process reference run"
for np in 2 4; do
  for tr in shm tcp; do
    if [ "$np" = 2 ]; then map=CPU:1=1/CPU:0; else map=CPU:0=3/CPU:0,CPU:1=1/CPU:0; fi
    name="np $np $tr --device-map $map"
    rm -rf "$T/out"
    if mpi "$np" "$tr" "$HCQ" run "$EX/pipeline_two_devices.json" --device-map "$map" --check --out "$T/out" >"$T/o.txt" 2>&1 &&
       grep -q "^3 passed, 0 failed" "$T/o.txt" && [ "$(grep -c passed "$T/o.txt")" = 1 ]; then
      same=1
      for f in "$T"/ref/*.bin; do cmp -s "$f" "$T/out/$(basename "$f")" || same=0; done
      [ "$same" = 1 ] && ok "$name: --check passes once (rank 0 prints), --out equals one process" ||
        fail "$name: --out differs from the single-process run"
    else
      fail "$name: $(tail -5 "$T/o.txt")"
    fi
  done
done

# The same exit status on every rank: bad input is 2 everywhere.
mpi 2 shm sh -c '"$0" run /nonexistent.json --device-map CPU:1=1/CPU:0 2>/dev/null; echo "rank $OMPI_COMM_WORLD_RANK exit $?"' \
  "$HCQ" >"$T/rc.txt" 2>&1
if grep -q "rank 0 exit 2" "$T/rc.txt" && grep -q "rank 1 exit 2" "$T/rc.txt"; then ok "bad input: exit 2 on every rank"
else fail "bad input exit status: $(cat "$T/rc.txt")"; fi
# A device on a rank that does not exist: a clear error, the same status everywhere.
mpi 2 shm sh -c '"$0" run "$1" --device-map CPU:1=5/CPU:0 2>&1 | head -1; echo "rank $OMPI_COMM_WORLD_RANK exit $?"' \
  "$HCQ" "$EX/pipeline_two_devices.json" >"$T/rank.txt" 2>&1
if grep -q 'rank 5 does not exist (2 ranks)' "$T/rank.txt"; then ok "unknown rank named"; else fail "unknown rank: $(cat "$T/rank.txt")"; fi

mpi 2 shm "$HCQ" info >"$T/info.txt" 2>&1
if grep -q "^MPI    rank 0 of 2" "$T/info.txt" && [ "$(grep -c '^hcq ' "$T/info.txt")" = 1 ]; then ok "hcq info shows the rank (rank 0 only)"
else fail "hcq info: $(cat "$T/info.txt")"; fi

# The decoder split over two ranks gives the tokens of one process (and eager = graph there).
"$HCQ" demo --steps 40 --repeat 1 --json >"$T/d1.json" 2>&1
mpi 2 shm "$HCQ" demo --ranks 2 --steps 40 --repeat 1 --json >"$T/d2.json" 2>"$T/d2.err"
if python3 - "$T/d1.json" "$T/d2.json" <<'PY'
import json, sys
a, b = (json.load(open(p)) for p in sys.argv[1:3])
sys.exit(0 if a["tokens"] == b["tokens"] and b["identical"] and b["ranks"] == 2 and len(b["tokens"]) == 40 else 1)
PY
then ok "demo --ranks 2: the tokens of one process"; else fail "demo --ranks 2: $(tail -3 "$T/d2.err") $(head -c 300 "$T/d2.json")"; fi
mpi 2 shm "$HCQ" demo --ranks 3 >"$T/d3.txt" 2>&1
grep -q 'expected 1 or 2' "$T/d3.txt" && ok "demo --ranks 3 refused" || fail "demo --ranks 3: $(cat "$T/d3.txt")"

[ "$fails" = 0 ] && echo "all mpi cli checks passed"
exit "$fails"
