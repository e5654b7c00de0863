#!/usr/bin/env bash
# The hcq command on CUDA devices, against the stand-in driver (tests/fake_cuda; two devices):
#   bash tests/cuda/test_cli_cuda.sh HCQ FAKE_LIBCUDA EXAMPLES_DIR
# `hcq info` with and without a driver, every example with --device-map CPU=CUDA --check, the
# errors a CUDA run can hit (no `cuda` source, a compile error), and bench's CUDA fields.
# Skips (exit 77) where NVRTC is missing: the CUDA programs could not be compiled.
set -u
HCQ=$1 FAKE=$2 EXAMPLES=$3
T=$(mktemp -d "${TMPDIR:-/tmp}/hcq-cli-cuda.XXXXXX") || exit 1
trap 'rm -rf "$T"' EXIT
export HCQ_CACHE_DIR=${HCQ_CACHE_DIR:-$T/cache} HCQ_FAKE_CUDA_DEVICES=2 HCQ_CUDA_ARCH=sm_90 \
  HCQ_FAKE_CUDA_SYNC_PAGEABLE=1 HCQ_FAKE_CUDA_IMPLICIT_SYNC=1 # the stand-in as strict as the driver may be
PASS=0 FAIL=0

check() { # NAME WANT_RC FRAGMENT... -- ARGS...  (runs hcq with the stand-in driver)
  local name=$1 want=$2 why=""
  shift 2
  local frags=()
  while [ "$1" != "--" ]; do frags+=("$1"); shift; done
  shift
  HCQ_CUDA_LIBRARY=$FAKE timeout -k 5 60 "$HCQ" "$@" >"$T/out" 2>"$T/err"
  local rc=$?
  [ "$rc" = "$want" ] || why="exit $rc, want $want"
  for f in ${frags[@]+"${frags[@]}"}; do grep -qF -- "$f" "$T/out" "$T/err" || why="$why; missing \"$f\""; done
  if [ -z "$why" ]; then PASS=$((PASS + 1)); echo "ok   $name"; else
    FAIL=$((FAIL + 1)); echo "FAIL $name: $why"; sed -n '1,8s/^/     | /p' "$T/out" "$T/err"; fi
}

HCQ_CUDA_LIBRARY=$FAKE "$HCQ" info >"$T/info" 2>&1
if grep -q "NVRTC absent" "$T/info"; then
  echo "SKIPPED: $(grep '^CUDA' "$T/info")"
  exit 77
fi

check "info lists the stand-in GPUs, the driver and NVRTC versions" 0 "available" "driver 13.0" "2 device(s)" \
  "hcq fake GPU 0 (sm_90)" "NVRTC" -- info
if HCQ_CUDA_LIBRARY=$FAKE "$HCQ" info | grep -q "NVRTC 13\."; then
  check "info says NVRTC 13 fits a CUDA 13.0 driver" 0 "driver 13.0" "compatible with the driver" -- info
  HCQ_FAKE_CUDA_DRIVER_VERSION=12.8 check "info says NVRTC 13 is too new for a CUDA 12.8 driver, and why" 0 \
    "driver 12.8" "NVRTC 13.0 INCOMPATIBLE" "PTX ISA 9.0 > 8.7" -- info
fi
HCQ_CUDA_LIBRARY=/nonexistent/libcuda.so.1 "$HCQ" info >"$T/out" 2>&1
if grep -qE "^CUDA +absent +/nonexistent/libcuda.so.1 could not be loaded.*NVRTC" "$T/out"; then
  PASS=$((PASS + 1)); echo "ok   info says why CUDA is absent, and which NVRTC it found"
else
  FAIL=$((FAIL + 1)); echo "FAIL info without a driver:"; cat "$T/out"
fi

for f in "$EXAMPLES"/*.json; do
  check "$(basename "$f") on CUDA: graph replays equal eager execution" 0 "passed, 0 failed" -- \
    run "$f" --device-map CPU=CUDA --check --repeat 2
done

cat >"$T/nocuda.json" <<'JSON'
{ "format": "hcq-graph/1",
  "buffers": { "a": { "device": "CPU:0", "bytes": 64, "init": "zeros" } },
  "programs": { "k": { "c": "void k(void *const *b, const int32_t *v, const hcq_launch_t *l) { (void)b; (void)v; (void)l; }" } },
  "items": [ { "kernel": "k", "bufs": ["a"], "global": [1], "local": [1] } ] }
JSON
check "a program without a cuda source on CUDA is bad input" 2 "nocuda.json" "no source for CUDA:0" "give \"cuda\"" -- \
  run "$T/nocuda.json" --device-map CPU=CUDA
sed 's/"c": "void k(void \*const \*b, const int32_t \*v, const hcq_launch_t \*l) { (void)b; (void)v; (void)l; }"/"cuda": "extern \\"C\\" __global__ void k(unsigned *a) { a[0] = not_declared; }"/' \
  "$T/nocuda.json" >"$T/badcuda.json"
check "a CUDA compile error carries NVRTC's log" 3 "compiling k with NVRTC" "not_declared" -- \
  run "$T/badcuda.json" --device-map CPU=CUDA
check "CPU:1 folded onto CUDA:0 runs the two-device example on one GPU" 0 "3 passed, 0 failed" -- \
  run "$EXAMPLES/pipeline_two_devices.json" --device-map CPU:1=CUDA:0,CPU=CUDA --check
check "bench on CUDA reports the CUDA graph and its parameter updates" 0 '"graph_kind": "cuda"' \
  '"graph_updates_per_replay": 0.000' '"graph_updates_alternating_runs": 1.000' -- \
  bench "$EXAMPLES/chain.json" --device-map CPU=CUDA --json
check "bench (text) on CUDA prints the parameter-update line" 0 \
  "graph kind cuda: 0.00 parameter updates per unchanged replay, 1.00 alternating runs" -- \
  bench "$EXAMPLES/chain.json" --device-map CPU=CUDA

echo "# $PASS passed, $FAIL failed"
[ "$FAIL" -eq 0 ]
