#!/usr/bin/env bash
# The hcq tool under mpirun (docs/mpi.md, docs/cli.md): a graph file run with its devices spread over ranks
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

# A rank that stops (SIGSTOP) or is killed mid-run: rank 0 reports within the wait timeout + 1 s,
# naming the rank, then gives up on it (no second wait per object while tearing down) and ends the
# whole job with MPI_Abort, also under --mca orte_abort_on_non_zero_status 0, where mpirun used to
# stay up after both ranks were gone (docs/mpi.md).
stamp() { while IFS= read -r l; do printf '%s %s\n' "$EPOCHREALTIME" "$l"; done; }
lost_rank() { # lost_rank NAME SIGNAL shm|tcp [mpirun options]
  local name=$1 sig=$2 tr=$3
  shift 3
  rm -f "$T"/pid.* "$T/lost.rc"
  (HCQ_WAIT_TIMEOUT_MS=2000 mpi 2 "$tr" "$@" sh -c 'echo $$ >"$0/pid.$OMPI_COMM_WORLD_RANK"; exec "$1" run "$2" \
     --device-map CPU:1=1/CPU:0 --repeat 100000000' "$T" "$HCQ" "$EX/pipeline_two_devices.json" 2>&1 | stamp >"$T/lost.txt"
   echo "${PIPESTATUS[0]}" >"$T/lost.rc") &
  local job=$! i
  # Both ranks past MPI_Init (their hcq-mpi thread runs: MPI errors are no longer fatal), then
  # replays under way.
  started() { [ -s "$T/pid.$1" ] && grep -qs '^hcq-mpi$' /proc/"$(cat "$T/pid.$1")"/task/*/comm; }
  for i in $(seq 300); do started 0 && started 1 && break; sleep 0.1; done
  sleep 2
  local stopped=$EPOCHREALTIME
  kill "-$sig" "$(cat "$T/pid.1")"
  wait "$job"
  local ended=$EPOCHREALTIME
  kill -KILL "$(cat "$T/pid.1")" 2>/dev/null
  local first rc
  first=$(grep -m1 'hcq (rank 0):' "$T/lost.txt" | cut -d' ' -f1)
  rc=$(cat "$T/lost.rc" 2>/dev/null)
  if [ -z "$first" ]; then fail "$name: rank 0 reported nothing (exit \"$rc\"): $(tail -5 "$T/lost.txt")"; return; fi
  local ok=1
  awk -v a="$stopped" -v b="$first" 'BEGIN { exit !(b - a <= 3.0) }' || { ok=0; fail "$name: rank 0 reported $(awk -v a="$stopped" -v b="$first" 'BEGIN { printf "%.2f", b - a }') s after the stop (timeout 2 s + 1 s allowed)"; }
  awk -v a="$stopped" -v b="$ended" 'BEGIN { exit !(b - a <= 5.0) }' || { ok=0; fail "$name: the job ended $(awk -v a="$stopped" -v b="$ended" 'BEGIN { printf "%.2f", b - a }') s after the stop (5 s allowed)"; }
  grep 'hcq (rank 0):' -A8 "$T/lost.txt" | grep -q 'rank 1' || { ok=0; fail "$name: rank 0's report does not name rank 1: $(grep -A8 'hcq (rank 0):' "$T/lost.txt" | head -9)"; }
  # MPI_Abort's status (3, a runtime failure); mpirun reports a rank killed by a signal as 137.
  case "$sig:$rc" in STOP:3 | KILL:3 | KILL:137) ;; *) ok=0; fail "$name: mpirun exit status \"$rc\"" ;; esac
  [ "$ok" = 1 ] && ok "$name: rank 0 reported in $(awk -v a="$stopped" -v b="$first" 'BEGIN { printf "%.2f", b - a }') s, the job ended in $(awk -v a="$stopped" -v b="$ended" 'BEGIN { printf "%.2f", b - a }') s (exit $rc)"
}
lost_rank "rank 1 stopped, shm" STOP shm
lost_rank "rank 1 stopped, tcp, transfers on the communication thread" STOP tcp -x HCQ_MPI_COPIES=thread
lost_rank "rank 1 killed, orte_abort_on_non_zero_status 0" KILL shm --mca orte_abort_on_non_zero_status 0

[ "$fails" = 0 ] && echo "all mpi cli checks passed"
exit "$fails"
