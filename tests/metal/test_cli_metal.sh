#!/usr/bin/env bash
# The hcq command on METAL:0 of the stand-in (tests/fake_metal):
#   bash tests/metal/test_cli_metal.sh HCQ FAKE_METAL EXAMPLES_DIR
# `hcq info` with and without the framework, every example with --device-map CPU=METAL --check
# (graph replays against eager execution), and the errors a Metal run can hit.
set -u
HCQ=$1 FAKE=$2 EXAMPLES=$3
T=$(mktemp -d "${TMPDIR:-/tmp}/hcq-cli-metal.XXXXXX") || exit 1
trap 'rm -rf "$T"' EXIT
export HCQ_CACHE_DIR=${HCQ_CACHE_DIR:-$T/cache}
PASS=0 FAIL=0

check() { # NAME WANT_RC FRAGMENT... -- ARGS...  (runs hcq with the stand-in)
  local name=$1 want=$2 why=""
  shift 2
  local frags=()
  while [ "$1" != "--" ]; do frags+=("$1"); shift; done
  shift
  HCQ_OBJC_LIBRARY=$FAKE HCQ_METAL_FRAMEWORK=$FAKE timeout -k 5 60 "$HCQ" "$@" >"$T/out" 2>"$T/err"
  local rc=$?
  [ "$rc" = "$want" ] || why="exit $rc, want $want"
  for f in ${frags[@]+"${frags[@]}"}; do grep -qF -- "$f" "$T/out" "$T/err" || why="$why; missing \"$f\""; done
  if [ -z "$why" ]; then PASS=$((PASS + 1)); echo "ok   $name"; else
    FAIL=$((FAIL + 1)); echo "FAIL $name: $why"; sed -n '1,8s/^/     | /p' "$T/out" "$T/err"; fi
}

check "info lists the stand-in device" 0 "METAL  available" "stand-in" -- info
HCQ_METAL_FRAMEWORK=/nonexistent/Metal "$HCQ" info >"$T/out" 2>&1
if grep -qE "^METAL +absent +Metal.framework not found at /nonexistent/Metal" "$T/out"; then
  PASS=$((PASS + 1)); echo "ok   info says why Metal is absent"
else
  FAIL=$((FAIL + 1)); echo "FAIL info without the framework:"; cat "$T/out"
fi

for f in "$EXAMPLES"/*.json; do
  map=CPU=METAL
  [ "$(basename "$f")" = pipeline_two_devices.json ] && map=CPU:0=METAL:0,CPU:1=METAL:0 # one Metal device
  check "$(basename "$f") on METAL:0: graph replays equal eager execution" 0 "passed, 0 failed" -- \
    run "$f" --device-map "$map" --check --repeat 2
done

cat >"$T/nometal.json" <<'JSON'
{ "format": "hcq-graph/1",
  "buffers": { "a": { "device": "CPU:0", "bytes": 64, "init": "zeros" } },
  "programs": { "k": { "c": "void k(void *const *b, const int32_t *v, const hcq_launch_t *l) { (void)b; (void)v; (void)l; }" } },
  "items": [ { "kernel": "k", "bufs": ["a"], "global": [1], "local": [1] } ] }
JSON
check "a program without a metal source on METAL is bad input" 2 "no source for METAL:0" "give \"metal\"" -- \
  run "$T/nometal.json" --device-map CPU=METAL
cat >"$T/bad.json" <<'JSON'
{ "format": "hcq-graph/1",
  "buffers": { "a": { "device": "METAL:0", "bytes": 64, "init": "zeros" } },
  "programs": { "k": { "metal": "#include <metal_stdlib>\n#error use of undeclared identifier 'q'\nkernel void k() {}\n" } },
  "items": [ { "kernel": "k", "bufs": ["a"], "global": [1], "local": [1] } ] }
JSON
check "a compile error names the program and carries the compiler's text" 3 "METAL:0" "program_source:2" \
  "undeclared identifier" -- run "$T/bad.json"

echo "$PASS passed, $FAIL failed"
[ "$FAIL" = 0 ]
