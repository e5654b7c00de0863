#!/usr/bin/env bash
# tools/metal-check.sh: build hcq on a Mac and check its Metal device and Metal graph on the real
# framework (what tests/fake_metal stands in for elsewhere; docs/metal.md says what only this shows).
#
# Needs macOS on Apple silicon (or a Mac with a Metal GPU), the Xcode command-line tools
# (xcode-select --install), CMake, pkg-config, Jansson, xxHash and Criterion (Homebrew:
# brew install cmake pkg-config jansson xxhash criterion). In order:
#   1. prints the OS, the CPU and `hcq info` (METAL must be available);
#   2. builds hcq with tests into build-metal-check/;
#   3. runs the Metal suite (tests/test_metal.c) on the real framework: eager work, compile errors,
#      graph replays against eager results (the stand-in's call counts are skipped there);
#   4. every example with `hcq run --device-map CPU=METAL --check` (graph replays against eager);
#   5. `hcq bench` eager against graph on METAL for every example;
#   6. the llama2 decoder on METAL: tests/test_llama2_gpu.c's Metal rows (teacher-forced against
#      the C reference), then `hcq demo --device METAL --json` for the small and 15m shapes;
#   7. prints a table (and writes it, the log and the bench JSON under $OUT, else ./metal-check-out).
# Exit status: 0 when every check passed, 1 otherwise.
#
#   bash tools/metal-check.sh --stand-in   on Linux: the same run against tests/fake_metal (a dry run
#       of the script itself; the numbers mean nothing)
set -u -o pipefail
cd "$(dirname "$0")/.." || exit 1
ROOT=$PWD
STAND_IN=0
[ "${1:-}" = "--stand-in" ] && STAND_IN=1
OUTDIR=${OUT:-$ROOT/metal-check-out}
mkdir -p "$OUTDIR"
LOG=$OUTDIR/metal-check.log
RESULTS=$OUTDIR/results.json
TABLE=$OUTDIR/table.txt
: >"$LOG"
: >"$RESULTS"
exec > >(tee -a "$LOG") 2>&1
FAILED=0
note_fail() { FAILED=1; echo "FAILED: $*"; }

echo "== machine"
echo "os: $(uname -srm)"
if [ "$(uname -s)" = Darwin ]; then
  echo "macOS $(sw_vers -productVersion 2>/dev/null || echo '?'), $(sysctl -n machdep.cpu.brand_string 2>/dev/null || echo '?')"
  xcode-select -p >/dev/null 2>&1 || note_fail "no Xcode command-line tools (xcode-select --install)"
elif [ "$STAND_IN" = 0 ]; then
  echo "not macOS: Metal exists on macOS only (bash tools/metal-check.sh --stand-in runs the dry run here)"
  exit 1
fi

echo "== build"
BUILD=$ROOT/build-metal-check
JOBS=$(getconf _NPROCESSORS_ONLN 2>/dev/null || echo 2)
if ! cmake -S "$ROOT" -B "$BUILD" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DHCQ_BUILD_BENCH=OFF >"$OUTDIR/cmake.log" 2>&1 ||
  ! cmake --build "$BUILD" -j "$JOBS" >>"$OUTDIR/cmake.log" 2>&1; then
  tail -30 "$OUTDIR/cmake.log"
  note_fail "build"
  exit 1
fi
HCQ=$BUILD/cli/hcq
if [ "$STAND_IN" = 1 ]; then
  FAKE=$BUILD/tests/libhcq_fake_metal.so
  export HCQ_OBJC_LIBRARY=$FAKE HCQ_METAL_FRAMEWORK=$FAKE
fi
"$HCQ" info | tee "$OUTDIR/info.txt"
metal_line=$(grep '^METAL' "$OUTDIR/info.txt" || true)
case $metal_line in
  *available*) ;;
  *) note_fail "METAL is not available: $metal_line"; exit 1 ;;
esac

echo "== the Metal suite"
suite=failed
if "$BUILD/tests/test_metal" --jobs 1 >"$OUTDIR/test_metal.log" 2>&1; then suite=passed; else note_fail "test_metal"; fi
grep -E "Synthesis|FAIL" "$OUTDIR/test_metal.log"

# macOS ships bash 3.2: no associative arrays; the table's rows go to a file as they are made.
ROWS=$OUTDIR/rows.txt
: >"$ROWS"
field() { printf '%s' "$2" | sed -n "s/.*\"$1\": \"*\([a-z0-9.]*\).*/\1/p"; }
echo "== examples with --check, then hcq bench eager against graph"
for f in "$ROOT"/examples/*.json; do
  name=$(basename "$f" .json)
  map=CPU=METAL
  [ "$name" = pipeline_two_devices ] && map=CPU:0=METAL:0,CPU:1=METAL:0 # one Metal device
  if out=$(timeout 120 "$HCQ" run "$f" --device-map "$map" --check --repeat 2 2>&1); then
    checked=$(printf '%s\n' "$out" | tail -1)
  else
    checked=FAILED
    note_fail "hcq run $name --device-map $map --check"
    printf '%s\n' "$out" | tail -5
  fi
  echo "$name: $checked"
  eager=- graph=- kind=-
  if out=$(timeout 120 "$HCQ" bench "$f" --device-map "$map" --json 2>&1) && [ "${out#\{}" != "$out" ]; then
    printf '{"name": "%s", "device_map": "%s", "bench": %s}\n' "$name" "$map" "$out" >>"$RESULTS"
    eager=$(field eager_us_per_run "$out") graph=$(field graph_us_per_run "$out") kind=$(field graph_kind "$out")
  else
    note_fail "hcq bench $name --device-map $map"
    printf '%s\n' "$out" | tail -5
  fi
  printf '%-22s %-22s %-7s %12s %12s\n' "$name" "$checked" "$kind" "$eager" "$graph" >>"$ROWS"
done

echo "== the llama2 decoder on METAL (models/llama2/kernels.metal)"
# Teacher-forced against the C reference (tests/test_llama2_gpu.c; two devices are logical ones on
# the GPU), then hcq demo: graph replays must give the eager tokens.
l2suite=failed
if HCQ_METAL_VIRTUAL=1 "$BUILD/tests/test_llama2_gpu" --filter "llama2_metal/*" --jobs 1 >"$OUTDIR/test_llama2_metal.log" 2>&1; then
  l2suite=passed
else
  note_fail "test_llama2_gpu llama2_metal"
fi
grep -E "Synthesis|FAIL" "$OUTDIR/test_llama2_metal.log"
DEMO_ROWS=$OUTDIR/demo_rows.txt
: >"$DEMO_ROWS"
for size in small 15m; do
  same=FAILED eager=- graph=- kind=-
  if out=$(timeout 300 "$HCQ" demo --device METAL --size "$size" --steps 64 --repeat 3 --json 2>&1) &&
    [ "${out#\{}" != "$out" ]; then
    printf '{"name": "demo %s", "device": "METAL", "demo": %s}\n' "$size" "$out" >>"$RESULTS"
    same=$(field identical "$out") eager=$(field eager_tok_s "$out") graph=$(field graph_tok_s "$out")
    kind=$(field graph_kind "$out")
    [ "$same" = true ] || note_fail "hcq demo --device METAL --size $size: graph tokens differ from eager"
  else
    note_fail "hcq demo --device METAL --size $size"
    printf '%s\n' "$out" | tail -5
  fi
  echo "demo $size: identical=$same"
  printf '%-22s %-22s %-7s %12s %12s\n' "demo $size" "identical: $same" "$kind" "$eager" "$graph" >>"$DEMO_ROWS"
done

{
  echo "hcq on Metal: ${metal_line#METAL }"
  echo "Metal suite (tests/test_metal.c): $suite"
  printf '%-22s %-22s %-7s %12s %12s\n' example "check" graph "eager us/run" "graph us/run"
  cat "$ROWS"
  echo "llama2 decoder on METAL, teacher-forced (tests/test_llama2_gpu.c): $l2suite"
  printf '%-22s %-22s %-7s %12s %12s\n' "hcq demo --device METAL" "64 tokens" graph "eager tok/s" "graph tok/s"
  cat "$DEMO_ROWS"
  [ "$STAND_IN" = 1 ] && echo "(stand-in run: tests/fake_metal in the framework's place; the numbers mean nothing)"
} | tee "$TABLE"
exit "$FAILED"
