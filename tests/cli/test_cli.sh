#!/usr/bin/env bash
# End-to-end tests of the hcq command against its contract (docs/cli.md, docs/graph-format.md):
# every exit code, every error case with its message, outputs (--out, --profile, bench --json),
# and a reproducible fuzz loop over mangled graph files (no input may crash the tool).
#
#   bash tests/cli/test_cli.sh /path/to/hcq
#
# Prints one line per check ("ok   ..." or "FAIL ...") and exits non-zero if any check fails.
# Everything it needs is written into a private temporary directory, removed at exit.
set -u

if [ $# -lt 1 ] || [ -z "$1" ]; then
  echo "usage: bash test_cli.sh /path/to/hcq" >&2
  exit 2
fi
HCQ=$1
case $HCQ in
  /*) ;;
  *) HCQ=$PWD/$HCQ ;;
esac
if [ ! -x "$HCQ" ]; then
  echo "FAIL: $HCQ is not an executable" >&2
  exit 1
fi
command -v python3 >/dev/null 2>&1 || { echo "FAIL: python3 is needed" >&2; exit 1; }

T=$(mktemp -d "${TMPDIR:-/tmp}/hcq-cli-test.XXXXXX") || exit 1
trap 'rm -rf "$T"' EXIT
export HCQ_CACHE_DIR=${HCQ_CACHE_DIR:-$T/cache}
cd "$T" || exit 1

PASS=0
FAIL=0
SKIP=0
RC=0

ok() { PASS=$((PASS + 1)); echo "ok   $*"; }
bad() { FAIL=$((FAIL + 1)); echo "FAIL $*"; }
skip() { SKIP=$((SKIP + 1)); echo "skip $*"; }

# The batch size decides which items are graphed (and so profiled): use the default.
unset HCQ_JIT_BATCH_SIZE

# Runs hcq with a time limit; stdout in $T/out, stderr in $T/err, exit status in RC.
hcq() {
  timeout -k 5 30 "$HCQ" "$@" >"$T/out" 2>"$T/err"
  RC=$?
}

show_failure() {
  echo "     command: hcq $*"
  echo "     exit: $RC"
  sed -n '1,6s/^/     stdout| /p' "$T/out"
  sed -n '1,6s/^/     stderr| /p' "$T/err"
}

# expect NAME RC [FRAGMENT...] -- ARGS...
#   runs `hcq ARGS`, checks the exit status (unless RC is "any") and that every fragment occurs in stdout or stderr
#   (a fragment starting with "~" is an extended regular expression, "!" must NOT occur).
expect() {
  local name=$1 want=$2
  shift 2
  local frags=()
  while [ $# -gt 0 ] && [ "$1" != "--" ]; do
    frags+=("$1")
    shift
  done
  shift
  hcq "$@"
  local why=""
  if [ "$want" != any ] && [ "$RC" != "$want" ]; then
    why="exit $RC, want $want"
    [ "$RC" -ge 124 ] && why="$why (timeout or signal)"
  fi
  local f
  for f in ${frags[@]+"${frags[@]}"}; do
    case $f in
      "~"*) grep -qE -- "${f#\~}" "$T/out" "$T/err" || why="$why; no match for /${f#\~}/" ;;
      "!"*) grep -qF -- "${f#!}" "$T/out" "$T/err" && why="$why; unexpected \"${f#!}\"" ;;
      *) grep -qF -- "$f" "$T/out" "$T/err" || why="$why; missing \"$f\"" ;;
    esac
  done
  if [ -z "$why" ]; then
    ok "$name"
  else
    bad "$name: ${why#; }"
    show_failure "$@"
  fi
}

# check NAME COMMAND...: a check done by a shell command (true: passes).
check() {
  local name=$1
  shift
  if "$@" >"$T/check.log" 2>&1; then
    ok "$name"
  else
    bad "$name"
    sed -n '1,8s/^/     | /p' "$T/check.log"
  fi
}

# ---------------------------------------------------------------------------------------------
# Graph files.

# The valid file: a kernel with variables and an input swapped between runs, a view, a
# cross-device copy. b[i] = 2*x[i] + k for i < n; c = b.
#   run 0: x = a = iota32, n = 64, k = 3      -> b[i] = 2i + 3      (i < 64)
#   run 1: x = a2 = fill32 1000, n = 32, k = 5 -> b[i] = 2005       (i < 32)
cat >ok.json <<'EOF'
{
  "format": "hcq-graph/1",
  "vars": { "n": { "min": 1, "max": 64, "value": 64 }, "k": { "min": 0, "max": 100, "value": 3 } },
  "buffers": {
    "a":  { "device": "CPU:0", "bytes": 256, "init": "iota32" },
    "a2": { "device": "CPU:0", "bytes": 256, "init": { "fill32": 1000 } },
    "b":  { "device": "CPU:0", "bytes": 256, "init": "zeros" },
    "c":  { "device": "CPU:1", "bytes": 256, "init": { "random": 7 } },
    "bv": { "view": "b", "offset": 64, "bytes": 128 },
    "cv": { "view": "c", "offset": 128, "bytes": 16 }
  },
  "programs": {
    "scale": { "entry": "scale", "c": "void scale(void *const *b, const int32_t *v, const hcq_launch_t *l) {\n  uint32_t *o = b[0];\n  const uint32_t *x = b[1];\n  for (uint32_t t = 0; t < l->lsz[0]; t++) {\n    size_t i = (size_t)l->gid[0] * l->lsz[0] + t;\n    if (i < (size_t)v[0]) o[i] = x[i] * 2u + (uint32_t)v[1];\n  }\n}\n" }
  },
  "items": [
    { "kernel": "scale", "bufs": ["b", "a"], "outs": [0], "vals": ["n", "k"], "global": ["(n+15)//16", 1, 1], "local": [16, 1, 1] },
    { "copy": { "dst": "c", "src": "b" } },
    { "copy": { "dst": "cv", "src": "bv", "bytes": 16 } }
  ],
  "inputs": ["a"],
  "runs": [ {}, { "inputs": { "a": "a2" }, "vars": { "n": 32, "k": 5 } } ]
}
EOF

# Expected final contents of every buffer of ok.json.
python3 - <<'EOF'
import struct
def words(ws): return b"".join(struct.pack("<I", w & 0xffffffff) for w in ws)
def rnd(seed, size):  # the documented generator (splitmix64 stream)
    out, state = bytearray(), seed
    M = (1 << 64) - 1
    while len(out) < size:
        state = (state + 0x9E3779B97F4A7C15) & M
        z = state
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & M
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & M
        z ^= z >> 31
        out += z.to_bytes(8, "little")
    return bytes(out[:size])
a = list(range(64)); a2 = [1000] * 64
b = [0] * 64
for i in range(64): b[i] = 2 * a[i] + 3          # run 0
for i in range(32): b[i] = 2 * a2[i] + 5         # run 1
bb = words(b)
c = bytearray(rnd(7, 256)); c[:] = bb            # copy c <- b (the whole 256 bytes)
c[128:144] = bb[64:80]                           # copy cv <- bv (16 bytes)
exp = {"a": words(a), "a2": words(a2), "b": bb, "c": bytes(c), "bv": bb[64:192], "cv": bytes(c[128:144])}
import os
os.makedirs("expected", exist_ok=True)
for k, v in exp.items(): open("expected/%s.bin" % k, "wb").write(v)
# Same file with only run 0: c keeps bytes that show the random init is used where nothing writes.
EOF

# A kernel that accumulates (so repeats are visible): o[i] += x[i] + v0 for the 16 words.
cat >acc.c <<'EOF'
void acc(void *const *b, const int32_t *v, const hcq_launch_t *l) {
  uint32_t *o = b[0];
  const uint32_t *x = b[1];
  for (uint32_t t = 0; t < l->lsz[0]; t++) {
    size_t i = (size_t)l->gid[0] * l->lsz[0] + t;
    o[i] += x[i] + (uint32_t)v[0];
  }
}
EOF
cat >acc.json <<'EOF'
{
  "format": "hcq-graph/1",
  "buffers": {
    "o": { "device": "CPU:0", "bytes": 64, "init": "zeros" },
    "x": { "device": "CPU:0", "bytes": 64, "init": "iota32" },
    "y": { "device": "CPU:0", "bytes": 64, "init": { "fill32": -1 } }
  },
  "programs": { "acc": { "c": { "file": "acc.c" } } },
  "items": [
    { "kernel": "acc", "bufs": ["o", "x"], "vals": [7], "global": [4], "local": [4] },
    { "kernel": "acc", "bufs": ["o", "x"], "vals": [1], "global": [2], "local": [8] },
    { "copy": { "dst": "y", "src": "o", "bytes": 32 } }
  ]
}
EOF
# After R repeats: o[i] = R * (2 x[i] + 8); y[0..7] = o[0..7], y[8..15] = 0xffffffff.
python3 - <<'EOF'
import struct
for r in (1, 3):
    o = [r * (2 * i + 8) for i in range(16)]
    y = o[:8] + [0xffffffff] * 8
    open("expected/acc%d_o.bin" % r, "wb").write(b"".join(struct.pack("<I", w) for w in o))
    open("expected/acc%d_y.bin" % r, "wb").write(b"".join(struct.pack("<I", w) for w in y))
EOF

# The mismatch: a kernel that stores the address of its own buffer. The eager world (ground truth)
# and the graph world of --check are two loads of the file, so their buffers are two live
# allocations at different addresses: the stored bytes differ, deterministically.
cat >addr.c <<'EOF'
#include <string.h>
void addr(void *const *b, const int32_t *v, const hcq_launch_t *l) {
  (void)v; (void)l;
  void *p = b[1];
  memcpy((char *)b[1] + 16, &p, sizeof(p));
}
EOF
cat >mismatch.json <<'EOF'
{
  "format": "hcq-graph/1",
  "buffers": {
    "same": { "device": "CPU:0", "bytes": 64, "init": "iota32" },
    "p":    { "device": "CPU:0", "bytes": 64, "init": "zeros" }
  },
  "programs": { "addr": { "c": { "file": "addr.c" } } },
  "items": [
    { "kernel": "addr", "bufs": ["same", "p"], "outs": [1] },
    { "kernel": "addr", "bufs": ["same", "p"], "outs": [1] }
  ],
  "runs": [ {}, {} ]
}
EOF

# A common body for the bad files: one valid kernel (a source file) and buffers on two devices.
cat >k.c <<'EOF'
void k(void *const *b, const int32_t *v, const hcq_launch_t *l) {
  uint32_t *o = b[0];
  (void)v;
  o[l->gid[0]] += 1;
}
EOF

# bad NAME: writes NAME.json from stdin.
bad_file() { cat >"$1.json"; }

# ---------------------------------------------------------------------------------------------
echo "# exit 0"

expect "info lists the CPU" 0 "CPU" "~CPU +available" -- info
expect "run (graph mode)" 0 "ok.json: 2 runs x 1 of 3 items (graph)" -- run ok.json
expect "run --mode graph" 0 "(graph)" -- run ok.json --mode graph
expect "run --mode eager" 0 "(eager)" -- run ok.json --mode eager
expect "run --check" 0 "run 0: ok" "run 1: ok" "2 passed, 0 failed" "!MISMATCH" -- run ok.json --check
check "run --check prints one line per run and the closing line" \
  python3 -c 'import sys; l=open(sys.argv[1]).read().split("\n"); assert l[:3]==["run 0: ok","run 1: ok","2 passed, 0 failed"], l' "$T/out"
expect "run --check --repeat 3" 0 "run 0 (repeat 1): ok" "run 0 (repeat 3): ok" "run 1 (repeat 3): ok" \
  "6 passed, 0 failed" -- run ok.json --check --repeat 3
expect "run --repeat 3" 0 "2 runs x 3 of 3 items" -- run ok.json --repeat 3
# Portable limits (docs/portability.md): a work-group of 2048 runs on the CPU, and HCQ_PORTABLE=1
# refuses it as a GPU would, naming the limit.
sed 's|"global": \["(n+15)//16", 1, 1\], "local": \[16, 1, 1\]|"global": [1, 1, 1], "local": [2048, 1, 1]|' ok.json >big_group.json
check "big_group.json has the 2048-thread work-group" grep -q '"local": \[2048' big_group.json
expect "a 2048-thread work-group runs on the CPU" 0 "2 runs x 1 of 3 items" -- run big_group.json
HCQ_PORTABLE=1 expect "HCQ_PORTABLE=1 refuses it naming the limit" any "2048" "portable limit of 1024 threads per work-group" \
  "HCQ_PORTABLE" -- run big_group.json
check "... and fails" test "$RC" != 0

compare_out() { # DIR: every buffer of ok.json written with the expected bytes
  local d=$1 n
  for n in a a2 b c bv cv; do
    cmp "$d/$n.bin" "expected/$n.bin" || return 1
  done
  [ "$(ls "$d" | wc -l)" -eq 6 ] || { echo "want exactly 6 files in $d, have: $(ls "$d")"; return 1; }
}
expect "run --out DIR (graph)" 0 -- run ok.json --out out_graph
check "--out wrote NAME.bin for every buffer with the expected bytes (graph)" compare_out out_graph
expect "run --out DIR (eager)" 0 -- run ok.json --mode eager --out out_eager
check "--out wrote NAME.bin for every buffer with the expected bytes (eager)" compare_out out_eager
expect "run --check --out DIR" 0 "2 passed, 0 failed" -- run ok.json --check --out out_check
check "--check --out wrote the expected bytes" compare_out out_check

expect "run --repeat 3 --out (accumulating kernel)" 0 -- run acc.json --repeat 3 --out out_acc3
check "--repeat 3 ran every item 3 times" \
  sh -c 'cmp out_acc3/o.bin expected/acc3_o.bin && cmp out_acc3/y.bin expected/acc3_y.bin'
expect "run --repeat 1 --out (accumulating kernel, eager)" 0 -- run acc.json --mode eager --out out_acc1
check "one run of the accumulating kernel" \
  sh -c 'cmp out_acc1/o.bin expected/acc1_o.bin && cmp out_acc1/y.bin expected/acc1_y.bin'
expect "run --check --repeat 3 (accumulating kernel)" 0 "3 passed, 0 failed" -- run acc.json --check --repeat 3

expect "run --profile OUT.json" 0 -- run ok.json --profile prof.json
check "--profile wrote valid JSON" python3 -m json.tool prof.json
check "--profile has one slice per item per replay, numeric ids and named tracks" python3 - prof.json <<'EOF'
import json, sys
p = json.load(open(sys.argv[1]))
ev = p["traceEvents"]
items = [e for e in ev if e["ph"] == "X" and "item" in e.get("args", {})]
assert len(items) == 6, "want 6 item slices (3 items x 2 runs), have %d" % len(items)
for e in ev:
    for f in ("name", "ph", "pid", "tid"):
        assert f in e, (f, e)
    assert isinstance(e["pid"], int) and isinstance(e["tid"], int), e
    if e["ph"] == "X":
        assert e["dur"] >= 0 and e["ts"] >= 0, e
assert sorted(e["cat"] for e in items) == ["copy"] * 4 + ["kernel"] * 2, items
named = {e["pid"] for e in ev if e["ph"] == "M" and e["name"] == "process_name"}
assert {e["pid"] for e in items} <= named, "every device is named by an M event"
flows = [e for e in ev if e["ph"] in "sf"]
# Dependencies: copy c <- b and copy cv <- bv on the kernel (b), and the second copy on the first (c).
assert len(flows) == 3 * 2 * 2, "3 dependencies per replay, 2 replays, as s/f pairs: %d" % len(flows)
EOF
expect "run --profile-svg --dot -v" 0 "memory CPU:0: buffers" "memory CPU:1: buffers" "kernel cache" -- \
  run ok.json --profile-svg prof.svg --dot prof.dot -v
check "--profile-svg is XML with one box per item per replay" python3 - prof.svg <<'EOF'
import sys, xml.etree.ElementTree as ET
root = ET.parse(sys.argv[1]).getroot()
boxes = [r for r in root.iter("{http://www.w3.org/2000/svg}rect") if r.get("class") == "item"]
assert len(boxes) == 6, "want 6 item boxes, have %d" % len(boxes)
EOF
# The first copy waits for the kernel; the second needs nothing more (its queue waited for as much,
# and runs in order after the first copy): two dependencies dropped by scheduling.
check "--dot names every item and the three dependencies, one kept as a wait" sh -c \
  'test "$(grep -c "^ *g0_i[0-9]* \[label" prof.dot)" = 3 && test "$(grep -c "^  g0_i[0-9]* -> " prof.dot)" = 3 &&
   test "$(grep -c "class=\"wait\"" prof.dot)" = 1 && test "$(grep -c "class=\"dropped\"" prof.dot)" = 2'
expect "--profile-svg with --mode eager" 2 "--profile-svg" -- run ok.json --mode eager --profile-svg p.svg
expect "--dot with --mode eager" 2 "--dot" -- run ok.json --mode eager --dot p.dot
expect "--dot without a file" 2 "--dot needs an output file" -- run ok.json --dot
expect "--profile into a missing folder" 3 "cannot write no/such/dir/p.json" "!runs x" -- run ok.json --profile no/such/dir/p.json
# An output that cannot be written is said before the runs, not after them.
expect "--out into a missing folder: exit 3 before running" 3 "cannot create no/such/out" "!runs x" -- run ok.json --out no/such/out
expect "--out naming a file" 3 "cannot create ok.json: it is not a folder" "!runs x" -- run ok.json --out ok.json
expect "--check --out into a missing folder: exit 3 before running" 3 "cannot create no/out" "!passed" -- run ok.json --check --out no/out
expect "--dot naming a folder" 3 "cannot write out_graph: it is a folder" "!runs x" -- run ok.json --dot out_graph
expect "--profile-svg into a missing folder" 3 "cannot write no/p.svg" "!runs x" -- run ok.json --profile-svg no/p.svg

expect "bench --json" 0 -- bench ok.json --json
check "bench --json prints one JSON object with the contract's fields" python3 - "$T/out" <<'EOF'
import json, sys
lines = [l for l in open(sys.argv[1]).read().split("\n") if l.strip()]
assert len(lines) == 1, "want one line, have %r" % lines
o = json.loads(lines[0])
assert isinstance(o, dict)
assert o["items"] == 3, o
for f in ("eager_us_per_run", "graph_us_per_run", "graph_submit_us", "per_item_graph_ns"):
    assert isinstance(o[f], (int, float)) and not isinstance(o[f], bool) and o[f] >= 0, (f, o)
assert o["graph_submit_us"] <= o["graph_us_per_run"] * 1.5 + 1, o
want = o["graph_us_per_run"] * 1000 / o["items"]
assert abs(o["per_item_graph_ns"] - want) <= 0.01 * want + 0.01, (want, o)
EOF
expect "bench (text)" 0 "eager" "graph" "!parameter updates" "!graph kind" -- bench ok.json
expect "demo" 0 -- demo
expect "help" 0 "usage" -- --help

# ---------------------------------------------------------------------------------------------
echo "# exit 1: --check mismatch"

expect "--check mismatch exits 1" 1 -- run mismatch.json --check
check "mismatch names the run, the buffer and the first differing byte (16..23)" python3 - "$T/out" <<'EOF'
import re, sys
l = open(sys.argv[1]).read().split("\n")
for r in (0, 1):
    m = re.fullmatch(r'run %d: MISMATCH in buffer "p" at byte (\d+)' % r, l[r])
    assert m, l
    assert 16 <= int(m.group(1)) < 24, l[r]
assert l[2] == "0 passed, 2 failed", l
EOF
expect "--check mismatch with --repeat 2" 1 "run 0 (repeat 1): MISMATCH in buffer \"p\" at byte" \
  "run 1 (repeat 2): MISMATCH in buffer \"p\"" "0 passed, 4 failed" -- run mismatch.json --check --repeat 2
expect "--check mismatch in eager mode" 1 "~^[0-9]+ passed, [1-9][0-9]* failed$" -- run mismatch.json --check --mode eager
expect "the mismatching file runs fine without --check" 0 -- run mismatch.json

# ---------------------------------------------------------------------------------------------
echo "# exit 2: bad input"

printf '{\n  "format": "hcq-graph/1",\n  "buffers": {,}\n}\n' >syntax.json
expect "malformed JSON gives FILE:LINE:COL" 2 "~syntax\.json:3:[0-9]+: " -- run syntax.json
head -c 200 ok.json >trunc.json
expect "truncated JSON gives FILE:LINE:COL" 2 "~trunc\.json:[0-9]+:[0-9]+: " -- run trunc.json
python3 -c 'import sys; sys.stdout.write("[" * 100000)' >deep.json
expect "100000 nested '[' (no crash)" 2 "~deep\.json:[0-9]+:[0-9]+: " -- run deep.json
python3 -c 'import sys; sys.stdout.write("{\"a\":" * 100000)' >deep2.json
expect "100000 nested objects (no crash)" 2 "~deep2\.json:[0-9]+:[0-9]+: " -- run deep2.json
: >empty.json
expect "empty file" 2 "~empty\.json(:[0-9]+:[0-9]+)?: " -- run empty.json
printf '{"format": "hcq-graph/1", "format": "hcq-graph/1"}' >dup.json
expect "duplicate key" 2 "~dup\.json:1:[0-9]+: .*format" -- run dup.json
printf '[1, 2, 3]\n' >array.json
expect "not an object" 2 "array.json: must be a JSON object, not an array" -- run array.json
printf '"hcq-graph/1"\n' >string.json
expect "a JSON string" 2 "string.json" -- run string.json

bad_file nofmt <<'EOF'
{ "buffers": { "b": { "device": "CPU:0", "bytes": 64 } },
  "items": [ { "copy": { "dst": "b", "src": "b" } } ] }
EOF
expect "missing format" 2 'nofmt.json: format: missing' -- run nofmt.json
bad_file wrongfmt <<'EOF'
{ "format": "hcq-graph/2", "buffers": { "b": { "device": "CPU:0", "bytes": 64 } },
  "items": [ { "copy": { "dst": "b", "src": "b" } } ] }
EOF
expect "wrong format string" 2 'wrongfmt.json: format: must be "hcq-graph/1"' -- run wrongfmt.json
bad_file unknownfield <<'EOF'
{ "format": "hcq-graph/1", "buffers": { "b": { "device": "CPU:0", "bytes": 64 } },
  "items": [ { "copy": { "dst": "b", "src": "b" } } ], "itmes": [] }
EOF
expect "unknown top-level field" 2 'unknownfield.json: itmes: unknown field' -- run unknownfield.json
bad_file unknownfield2 <<'EOF'
{ "format": "hcq-graph/1", "buffers": { "b": { "device": "CPU:0", "bytes": 64, "inti": "zeros" } },
  "items": [ { "copy": { "dst": "b", "src": "b" } } ] }
EOF
expect "unknown buffer field" 2 'unknownfield2.json: buffers.b.inti: unknown field' -- run unknownfield2.json
bad_file nobuffers <<'EOF'
{ "format": "hcq-graph/1", "items": [ { "copy": { "dst": "b", "src": "b" } } ] }
EOF
expect "missing buffers" 2 'nobuffers.json: buffers: missing' -- run nobuffers.json
bad_file noitems <<'EOF'
{ "format": "hcq-graph/1", "buffers": { "b": { "device": "CPU:0", "bytes": 64 } } }
EOF
expect "missing items" 2 'noitems.json: items: missing' -- run noitems.json
bad_file gpu <<'EOF'
{ "format": "hcq-graph/1",
  "buffers": { "b": { "device": "CPU:0", "bytes": 64 }, "g": { "device": "GPU:0", "bytes": 64 } },
  "items": [ { "copy": { "dst": "g", "src": "b" } } ] }
EOF
expect "unknown device GPU:0" 2 'gpu.json: buffers.g.device: unknown device "GPU:0"' -- run gpu.json
bad_file kdev <<'EOF'
{ "format": "hcq-graph/1",
  "buffers": { "b": { "device": "CPU:0", "bytes": 64 } },
  "programs": { "k": { "c": { "file": "k.c" } } },
  "items": [ { "kernel": "k", "bufs": ["b"], "device": "TPU:3" } ] }
EOF
expect "unknown kernel device" 2 'kdev.json: items[0].device: unknown device "TPU:3"' -- run kdev.json
bad_file badinit <<'EOF'
{ "format": "hcq-graph/1",
  "buffers": { "b": { "device": "CPU:0", "bytes": 64, "init": "ones" } },
  "items": [ { "copy": { "dst": "b", "src": "b" } } ] }
EOF
expect "unknown init" 2 'badinit.json: buffers.b.init: unknown init "ones"' -- run badinit.json
bad_file fillrange <<'EOF'
{ "format": "hcq-graph/1",
  "buffers": { "b": { "device": "CPU:0", "bytes": 64, "init": { "fill32": 4294967296 } } },
  "items": [ { "copy": { "dst": "b", "src": "b" } } ] }
EOF
expect "fill32 out of range" 2 'fillrange.json: buffers.b.init.fill32: 4294967296 is outside' -- run fillrange.json
bad_file zerobytes <<'EOF'
{ "format": "hcq-graph/1",
  "buffers": { "b": { "device": "CPU:0", "bytes": 0 } },
  "items": [ { "copy": { "dst": "b", "src": "b" } } ] }
EOF
expect "a buffer of 0 bytes" 2 'zerobytes.json: buffers.b.bytes: 0 is outside' -- run zerobytes.json

# items[3].bufs[1]: the 4th item, 2nd buffer.
bad_file unkbuf <<'EOF'
{ "format": "hcq-graph/1",
  "buffers": { "b": { "device": "CPU:0", "bytes": 64 }, "c": { "device": "CPU:0", "bytes": 64 } },
  "programs": { "k": { "c": { "file": "k.c" } } },
  "items": [
    { "kernel": "k", "bufs": ["b"], "global": [1] },
    { "copy": { "dst": "c", "src": "b" } },
    { "kernel": "k", "bufs": ["c", "b"], "global": [1] },
    { "kernel": "k", "bufs": ["b", "q"], "global": [1] }
  ] }
EOF
expect "unknown buffer in items[3].bufs[1]" 2 'unkbuf.json: items[3].bufs[1]: unknown buffer "q"' -- run unkbuf.json
bad_file unkcopy <<'EOF'
{ "format": "hcq-graph/1",
  "buffers": { "b": { "device": "CPU:0", "bytes": 64 } },
  "items": [ { "copy": { "dst": "b", "src": "zz" } } ] }
EOF
expect "unknown buffer in a copy" 2 'unkcopy.json: items[0].copy.src: unknown buffer "zz"' -- run unkcopy.json
bad_file unkview <<'EOF'
{ "format": "hcq-graph/1",
  "buffers": { "b": { "device": "CPU:0", "bytes": 64 }, "v": { "view": "nothere", "offset": 0, "bytes": 4 } },
  "items": [ { "copy": { "dst": "b", "src": "v" } } ] }
EOF
expect "view of an unknown buffer" 2 'unkview.json: buffers.v.view: unknown buffer "nothere"' -- run unkview.json
bad_file unkprog <<'EOF'
{ "format": "hcq-graph/1",
  "buffers": { "b": { "device": "CPU:0", "bytes": 64 } },
  "programs": { "k": { "c": { "file": "k.c" } } },
  "items": [ { "kernel": "k", "bufs": ["b"] }, { "kernel": "nope", "bufs": ["b"] } ] }
EOF
expect "unknown program" 2 'unkprog.json: items[1].kernel: unknown program "nope"' -- run unkprog.json
bad_file zerodim <<'EOF'
{ "format": "hcq-graph/1",
  "buffers": { "b": { "device": "CPU:0", "bytes": 64 } },
  "programs": { "k": { "c": { "file": "k.c" } } },
  "items": [ { "kernel": "k", "bufs": ["b"], "global": [2] }, { "kernel": "k", "bufs": ["b"], "global": [2, 0] } ] }
EOF
expect "an explicit 0 launch dim names the item and the dim" 2 'zerodim.json: items[1].global[1]: is 0 (launch dims must be >= 1' -- run zerodim.json
bad_file arity <<'EOF'
{ "format": "hcq-graph/1",
  "buffers": { "b": { "device": "CPU:0", "bytes": 64 } },
  "programs": { "k": { "c": { "file": "k.c" }, "nbufs": 2, "nvals": 0 } },
  "items": [ { "kernel": "k", "bufs": ["b", "b"] }, { "kernel": "k", "bufs": ["b"] } ] }
EOF
expect "an item passing fewer buffers than its program declares" 2 'arity.json: items[1]: bufs and vals: kernel k takes 2 buffers and 0 values (as declared), but 1 buffer and 0 values are passed' -- run arity.json
bad_file nosource <<'EOF'
{ "format": "hcq-graph/1",
  "buffers": { "b": { "device": "CPU:0", "bytes": 64 } },
  "programs": { "k": { "entry": "k" } },
  "items": [ { "kernel": "k", "bufs": ["b"] } ] }
EOF
expect "program without source" 2 'nosource.json: items[0].kernel' 'program "k" has no source' -- run nosource.json
bad_file nosrcfile <<'EOF'
{ "format": "hcq-graph/1",
  "buffers": { "b": { "device": "CPU:0", "bytes": 64 } },
  "programs": { "k": { "c": { "file": "missing-source.c" } } },
  "items": [ { "kernel": "k", "bufs": ["b"] } ] }
EOF
expect "program source file missing" 2 'nosrcfile.json: programs.k.c.file: cannot open' 'missing-source.c' -- run nosrcfile.json

bad_file unkvar <<'EOF'
{ "format": "hcq-graph/1",
  "vars": { "n": { "min": 1, "max": 64, "value": 4 } },
  "buffers": { "b": { "device": "CPU:0", "bytes": 64 } },
  "programs": { "k": { "c": { "file": "k.c" } } },
  "items": [ { "kernel": "k", "bufs": ["b"], "global": ["n", "m + 1"] } ] }
EOF
expect "unknown variable in an expression" 2 'unkvar.json: items[0].global[1]' 'unknown variable "m"' -- run unkvar.json
bad_file badexpr <<'EOF'
{ "format": "hcq-graph/1",
  "vars": { "n": { "min": 1, "max": 64, "value": 4 } },
  "buffers": { "b": { "device": "CPU:0", "bytes": 64 } },
  "programs": { "k": { "c": { "file": "k.c" } } },
  "items": [ { "kernel": "k", "bufs": ["b"], "vals": ["(n + "] } ] }
EOF
expect "malformed expression" 2 'badexpr.json: items[0].vals[0]' 'expression "(n + "' -- run badexpr.json
bad_file divzero <<'EOF'
{ "format": "hcq-graph/1",
  "vars": { "n": { "min": 0, "max": 64, "value": 4 } },
  "buffers": { "b": { "device": "CPU:0", "bytes": 64 } },
  "programs": { "k": { "c": { "file": "k.c" } } },
  "items": [ { "kernel": "k", "bufs": ["b"], "vals": ["n // (n - 4)"] } ] }
EOF
expect "division by zero in an expression" 2 'divzero.json: items[0].vals[0]' 'division by zero' -- run divzero.json
bad_file negdim <<'EOF'
{ "format": "hcq-graph/1",
  "vars": { "n": { "min": 1, "max": 64, "value": 4 } },
  "buffers": { "b": { "device": "CPU:0", "bytes": 64 } },
  "programs": { "k": { "c": { "file": "k.c" } } },
  "items": [ { "kernel": "k", "bufs": ["b"], "global": ["n - 8"] } ],
  "runs": [ { "vars": { "n": 9 } }, {} ] }
EOF
expect "a launch dim that evaluates below 0" 2 'negdim.json: items[0].global[0]' 'run 1' -- run negdim.json
bad_file runvar <<'EOF'
{ "format": "hcq-graph/1",
  "vars": { "n": { "min": 1, "max": 64, "value": 4 } },
  "buffers": { "b": { "device": "CPU:0", "bytes": 64 } },
  "programs": { "k": { "c": { "file": "k.c" } } },
  "items": [ { "kernel": "k", "bufs": ["b"], "global": ["n"] } ],
  "runs": [ {}, { "vars": { "n": 2, "zz": 1 } } ] }
EOF
expect "unknown variable in runs[i].vars" 2 'runvar.json: runs[1].vars.zz: unknown variable "zz"' -- run runvar.json
bad_file runrange <<'EOF'
{ "format": "hcq-graph/1",
  "vars": { "n": { "min": 1, "max": 64, "value": 4 } },
  "buffers": { "b": { "device": "CPU:0", "bytes": 64 } },
  "programs": { "k": { "c": { "file": "k.c" } } },
  "items": [ { "kernel": "k", "bufs": ["b"], "global": ["n"] } ],
  "runs": [ {}, {}, { "vars": { "n": 65 } } ] }
EOF
expect "variable value above max in runs" 2 'runrange.json: runs[2].vars.n: 65 is outside [1, 64]' -- run runrange.json
sed 's/"n": 65/"n": 0/' runrange.json >runrange0.json
expect "variable value below min in runs" 2 'runrange0.json: runs[2].vars.n: 0 is outside [1, 64]' -- run runrange0.json
bad_file varvalue <<'EOF'
{ "format": "hcq-graph/1",
  "vars": { "n": { "min": 1, "max": 64, "value": 100 } },
  "buffers": { "b": { "device": "CPU:0", "bytes": 64 } },
  "items": [ { "copy": { "dst": "b", "src": "b" } } ] }
EOF
expect "variable value outside its [min, max]" 2 'varvalue.json: vars.n.value: 100 is outside [1, 64]' -- run varvalue.json

bad_file copybytes <<'EOF'
{ "format": "hcq-graph/1",
  "buffers": { "big": { "device": "CPU:0", "bytes": 256 }, "small": { "device": "CPU:0", "bytes": 64 } },
  "items": [ { "copy": { "dst": "small", "src": "big" } }, { "copy": { "dst": "big", "src": "small", "bytes": 128 } } ] }
EOF
expect "copy bytes larger than a buffer" 2 'copybytes.json: items[1].copy.bytes: 128 is outside [0, 64]' -- run copybytes.json
bad_file swapsize <<'EOF'
{ "format": "hcq-graph/1",
  "buffers": { "a": { "device": "CPU:0", "bytes": 64 }, "a2": { "device": "CPU:0", "bytes": 128 },
               "o": { "device": "CPU:0", "bytes": 64 } },
  "items": [ { "copy": { "dst": "o", "src": "a" } } ],
  "inputs": ["a"],
  "runs": [ {}, { "inputs": { "a": "a2" } } ] }
EOF
expect "run swaps an input for a buffer of another size" 2 \
  'swapsize.json: runs[1].inputs.a: buffer "a2" has 128 bytes but input "a" has 64' -- run swapsize.json
bad_file swapdev <<'EOF'
{ "format": "hcq-graph/1",
  "buffers": { "a": { "device": "CPU:0", "bytes": 64 }, "a2": { "device": "CPU:1", "bytes": 64 },
               "o": { "device": "CPU:0", "bytes": 64 } },
  "items": [ { "copy": { "dst": "o", "src": "a" } } ],
  "inputs": ["a"],
  "runs": [ { "inputs": { "a": "a2" } } ] }
EOF
expect "run swaps an input for a buffer on another device" 2 \
  'swapdev.json: runs[0].inputs.a: buffer "a2" is on CPU:1 but input "a" is on CPU:0' -- run swapdev.json
bad_file notinput <<'EOF'
{ "format": "hcq-graph/1",
  "buffers": { "a": { "device": "CPU:0", "bytes": 64 }, "o": { "device": "CPU:0", "bytes": 64 } },
  "items": [ { "copy": { "dst": "o", "src": "a" } } ],
  "runs": [ { "inputs": { "o": "a" } } ] }
EOF
expect "run swaps a buffer that is not an input" 2 'notinput.json: runs[0].inputs.o: "o" is not an input' -- run notinput.json
bad_file viewout <<'EOF'
{ "format": "hcq-graph/1",
  "buffers": { "b": { "device": "CPU:0", "bytes": 256 }, "bv": { "view": "b", "offset": 200, "bytes": 64 } },
  "items": [ { "copy": { "dst": "bv", "src": "b" } } ] }
EOF
expect "view outside its base" 2 'viewout.json: buffers.bv: view [200, 264) is outside its base "b" (256 bytes)' -- run viewout.json
bad_file viewoff <<'EOF'
{ "format": "hcq-graph/1",
  "buffers": { "b": { "device": "CPU:0", "bytes": 256 }, "bv": { "view": "b", "offset": "x", "bytes": 64 } },
  "items": [ { "copy": { "dst": "bv", "src": "b" } } ] }
EOF
expect "view offset of the wrong type" 2 'viewoff.json: buffers.bv.offset: must be an integer, not a string' -- run viewoff.json
bad_file viewchain <<'EOF'
{ "format": "hcq-graph/1",
  "buffers": { "b": { "device": "CPU:0", "bytes": 256 },
               "w": { "view": "v", "offset": 60, "bytes": 8 },
               "v": { "view": "b", "offset": 0, "bytes": 64 } },
  "items": [ { "copy": { "dst": "w", "src": "b" } } ] }
EOF
expect "view of a view outside its base" 2 'viewchain.json: buffers.w: view [60, 68) is outside its base "v" (64 bytes)' \
  -- run viewchain.json
bad_file viewcycle <<'EOF'
{ "format": "hcq-graph/1",
  "buffers": { "b": { "device": "CPU:0", "bytes": 256 },
               "v1": { "view": "v2", "offset": 0, "bytes": 4 }, "v2": { "view": "v1", "offset": 0, "bytes": 4 } },
  "items": [ { "copy": { "dst": "v1", "src": "b" } } ] }
EOF
expect "views forming a cycle" 2 "viewcycle.json: buffers.v" "cycle" -- run viewcycle.json
bad_file otherdev <<'EOF'
{ "format": "hcq-graph/1",
  "buffers": { "b": { "device": "CPU:0", "bytes": 64 }, "c": { "device": "CPU:1", "bytes": 64 } },
  "programs": { "k": { "c": { "file": "k.c" } } },
  "items": [ { "kernel": "k", "bufs": ["b", "c"] } ] }
EOF
expect "a buffer on another device than the kernel" 2 \
  'otherdev.json: items[0].bufs[1]: buffer "c" is on CPU:1 but the kernel runs on CPU:0' -- run otherdev.json
bad_file twice <<'EOF'
{ "format": "hcq-graph/1",
  "buffers": { "a": { "device": "CPU:0", "bytes": 64 }, "o": { "device": "CPU:0", "bytes": 64 } },
  "items": [ { "copy": { "dst": "o", "src": "a" } } ],
  "inputs": ["a", "a"] }
EOF
expect "an input listed twice" 2 'twice.json: inputs[1]: buffer "a" is listed twice' -- run twice.json
bad_file nobufs <<'EOF'
{ "format": "hcq-graph/1",
  "buffers": { "b": { "device": "CPU:0", "bytes": 64 } },
  "programs": { "k": { "c": { "file": "k.c" } } },
  "items": [ { "copy": { "dst": "b", "src": "b" } }, { "kernel": "k" } ] }
EOF
expect "a kernel with 0 buffers and no device" 2 'nobufs.json: items[1]: a kernel without buffers must name its device' \
  -- run nobufs.json
bad_file outsrange <<'EOF'
{ "format": "hcq-graph/1",
  "buffers": { "b": { "device": "CPU:0", "bytes": 64 } },
  "programs": { "k": { "c": { "file": "k.c" } } },
  "items": [ { "kernel": "k", "bufs": ["b"], "outs": [1] } ] }
EOF
expect "outs index past the buffers" 2 'outsrange.json: items[0].outs[0]: 1 is outside [0, 0]' -- run outsrange.json
bad_file bothkinds <<'EOF'
{ "format": "hcq-graph/1",
  "buffers": { "b": { "device": "CPU:0", "bytes": 64 } },
  "programs": { "k": { "c": { "file": "k.c" } } },
  "items": [ { "kernel": "k", "bufs": ["b"], "copy": { "dst": "b", "src": "b" } } ] }
EOF
expect "an item both kernel and copy" 2 'bothkinds.json: items[0]: an item has exactly one of' -- run bothkinds.json
bad_file typeerr <<'EOF'
{ "format": "hcq-graph/1",
  "buffers": { "b": { "device": "CPU:0", "bytes": "64" } },
  "items": [ { "copy": { "dst": "b", "src": "b" } } ] }
EOF
expect "a field of the wrong type" 2 'typeerr.json: buffers.b.bytes: must be an integer, not a string' -- run typeerr.json

printf '{"format": "hcq-graph/1",\n "x": 100000000000000000000000}\n' >bigint.json
expect "an integer too big for JSON" 2 "~bigint\.json:2:[0-9]+: .*too big" -- run bigint.json
printf '{"format": "hcq-\000graph/1"}' >nul.json
expect "a NUL byte in the file" 2 "~nul\.json:1:[0-9]+: " -- run nul.json
printf '{"format": "hcq-\377\376graph/1"}' >utf8.json
expect "invalid UTF-8" 2 "~utf8\.json:1:[0-9]+: " -- run utf8.json
bad_file hugebuf <<'EOF'
{ "format": "hcq-graph/1",
  "buffers": { "b": { "device": "CPU:0", "bytes": 1099511627777 } },
  "items": [ { "copy": { "dst": "b", "src": "b" } } ] }
EOF
expect "a buffer above the size limit" 2 'hugebuf.json: buffers.b.bytes: 1099511627777 is outside' -- run hugebuf.json
python3 - <<'EOF'
import json
bufs = {"b%d" % i: {"device": "CPU:0", "bytes": 4} for i in range(257)}
json.dump({"format": "hcq-graph/1", "buffers": bufs, "programs": {"k": {"c": {"file": "k.c"}}},
           "items": [{"kernel": "k", "bufs": sorted(bufs)}]}, open("manybufs.json", "w"))
long = "n" * 100
json.dump({"format": "hcq-graph/1", "buffers": {long: {"device": "CPU:0", "bytes": 4}},
           "items": [{"copy": {"dst": long, "src": long}}]}, open("longname.json", "w"))
EOF
expect "a kernel with 257 buffers" 2 'manybufs.json: items[0].bufs: at most 256 buffers' -- run manybufs.json
expect "a buffer name of 100 characters" 2 'longname.json: buffers.' 'buffer names use' -- run longname.json
# A buffer the machine cannot hold (1 TiB, under an address-space limit so that the test is the
# same everywhere): a runtime failure with a message, not a crash. Sanitizer builds reserve
# terabytes of shadow memory and cannot run under such a limit.
if grep -qaE '__(asan|tsan|msan)_init' "$HCQ"; then
  skip "a 1 TiB buffer (sanitizer build)"
else
  bad_file tib <<'EOF'
{ "format": "hcq-graph/1",
  "buffers": { "b": { "device": "CPU:0", "bytes": 1099511627776 } },
  "items": [ { "copy": { "dst": "b", "src": "b" } } ] }
EOF
  (ulimit -v 8000000 && timeout -k 5 30 "$HCQ" run tib.json) >"$T/out" 2>"$T/err"
  RC=$?
  if [ "$RC" = 3 ] && grep -qF 'tib.json: buffers.b' "$T/err" && grep -qF 'out of memory' "$T/err"; then
    ok "a 1 TiB buffer: exit 3, out of memory"
  else
    bad "a 1 TiB buffer: exit $RC, want 3 with \"tib.json: buffers.b\" and \"out of memory\""
    show_failure run tib.json
  fi
fi

expect "bad --mode value" 2 '--mode must be graph or eager, not "fast"' -- run ok.json --mode fast
expect "--mode without a value" 2 '--mode needs graph or eager' -- run ok.json --mode
expect "unknown option" 2 'unknown option "--frobnicate" for run' -- run ok.json --frobnicate
expect "unknown bench option" 2 'unknown option "--xml" for bench' -- bench ok.json --xml
expect "missing FILE (run)" 2 "usage: hcq run FILE" -- run
expect "missing FILE (bench)" 2 "usage: hcq bench FILE" -- bench
expect "two files" 2 'run takes one graph file' -- run ok.json ok.json
expect "--repeat 0" 2 "--repeat needs a whole number" -- run ok.json --repeat 0
expect "--repeat -1" 2 "--repeat needs a whole number" -- run ok.json --repeat -1
expect "--repeat x" 2 "--repeat needs a whole number" -- run ok.json --repeat x
expect "--profile with --mode eager" 2 "--profile" -- run ok.json --mode eager --profile p.json
expect "nonexistent file" 2 "cannot read graph file does-not-exist.json" -- run does-not-exist.json
expect "nonexistent file (bench)" 2 "does-not-exist.json" -- bench does-not-exist.json
mkdir -p adir
expect "a file that is a directory: exit 2, the message names it" 2 "hcq: adir" -- run adir
# The message must say what is wrong (docs/cli.md: it names the thing at fault), not report JSON syntax.
check "a file that is a directory: the message says it is a directory" \
  sh -c 'cat "$1"; grep -qi directory "$1"' _ "$T/err"

# Only regular files are read: a FIFO as the graph file or a {"file": ...} source blocked forever
# in open() (the 30 s limit of hcq() turns a regression into a failure, not a hang).
mkfifo graph.fifo src.fifo
expect "a FIFO as the graph file: exit 2 at once" 2 "graph.fifo: cannot read graph file: it is a FIFO (named pipe)" -- run graph.fifo
expect "a character device as the graph file" 2 "/dev/zero: cannot read graph file: it is a character device" -- run /dev/zero
for src in src.fifo /dev/zero adir; do
  case $src in
    src.fifo) what="is a FIFO (named pipe), not a regular file" ;;
    /dev/zero) what="is a character device, not a regular file" ;;
    *) what="is a directory, not a regular file" ;;
  esac
  cat >nonreg.json <<EOF
{ "format": "hcq-graph/1",
  "buffers": { "b": { "device": "CPU:0", "bytes": 64 }, "d": { "device": "CPU:0", "bytes": 8, "init": { "file": "$src" } } },
  "programs": { "k": { "c": { "file": "k.c" } } },
  "items": [ { "kernel": "k", "bufs": ["b"] } ] }
EOF
  expect "$src as a data file: exit 2" 2 "nonreg.json: buffers.d.init.file:" "$what" -- run nonreg.json
  sed -e 's/"init": { "file": "[^"]*" }/"init": "zeros"/' -e "s|\"file\": \"k.c\"|\"file\": \"$src\"|" nonreg.json >nonreg2.json
  expect "$src as a program source: exit 2" 2 "nonreg2.json: programs.k.c.file:" "$what" -- run nonreg2.json
done

# A source path longer than PATH_MAX (4096 here) is an error. It was cut to 4095 bytes, which here
# leaves ./././...k.c: another file, read in place of the one named.
longpath=$(python3 -c 'n = 4095 - len("./") - len("k.c"); print(".//" * (n % 2) + "./" * ((n - 3 * (n % 2)) // 2) + "k.c.missing")')
cat >longpath.json <<EOF
{ "format": "hcq-graph/1",
  "buffers": { "b": { "device": "CPU:0", "bytes": 64 } },
  "programs": { "k": { "c": { "file": "$longpath" } } },
  "items": [ { "kernel": "k", "bufs": ["b"] } ] }
EOF
expect "a source path longer than PATH_MAX: exit 2, not another file" 2 'longpath.json: programs.k.c.file: path "./' \
  "is too long: 4103 bytes with the graph file's folder" -- run longpath.json
expect "--out longer than PATH_MAX allows: exit 2 before running" 2 '--out "' 'is too long' '!1 run' \
  -- run ok.json --out "$(python3 -c 'print("o" * 4100)')"

# uniform_f32 whose hi - lo overflows a float gave +inf (the docs promise lo <= x < hi).
bad_file uniform_inf <<'EOF'
{ "format": "hcq-graph/1",
  "buffers": { "u": { "device": "CPU:0", "bytes": 64, "init": { "uniform_f32": { "seed": 1, "lo": -3e38, "hi": 3e38 } } } },
  "items": [ { "copy": { "dst": "u", "src": "u" } } ] }
EOF
expect "uniform_f32 with hi - lo past FLT_MAX: exit 2" 2 \
  'uniform_inf.json: buffers.u.init.uniform_f32: lo -3e+38, hi 3e+38: hi - lo overflows a float' -- run uniform_inf.json

# A 5000-term flat expression was "out of memory" (exit 3): it is bad input, with its length and the limit.
python3 - <<'EOF'
import json
expr = "+".join(["n"] * 5000)
json.dump({"format": "hcq-graph/1", "vars": {"n": {"min": 1, "max": 1}},
           "buffers": {"b": {"device": "CPU:0", "bytes": 64}}, "programs": {"k": {"c": {"file": "k.c"}}},
           "items": [{"kernel": "k", "bufs": ["b"], "vals": [expr]}]}, open("longexpr.json", "w"))
EOF
expect "a 5000-term expression: exit 2 with its length and the limit" 2 'longexpr.json: items[0].vals[0]: expression "n+n+n' \
  'is too long: 5000 terms in a row make it 5000 levels deep, the limit is 1000' '!out of memory' -- run longexpr.json

# A view range reports the numbers of the file.
bad_file viewrange <<'EOF'
{ "format": "hcq-graph/1",
  "buffers": { "b": { "device": "CPU:0", "bytes": 64 }, "v": { "view": "b", "offset": 1099511627776, "bytes": 1099511627776 } },
  "items": [ { "copy": { "dst": "b", "src": "v" } } ] }
EOF
expect "a view past its base: the offsets of the file" 2 \
  'viewrange.json: buffers.v: view [1099511627776, 2199023255552) is outside its base "b" (64 bytes)' -- run viewrange.json
expect "bench on a bad file" 2 'unkbuf.json: items[3].bufs[1]: unknown buffer "q"' -- bench unkbuf.json
expect "--check on a bad file" 2 'unkbuf.json: items[3].bufs[1]: unknown buffer "q"' -- run unkbuf.json --check
expect "no command" 2 "usage" -- 
expect "unknown command" 2 'unknown command "frob"' -- frob
expect "info takes no arguments" 2 "info takes no arguments" -- info extra

# ---------------------------------------------------------------------------------------------
echo "# exit 3: runtime failures"

cat >broken.c <<'EOF'
void broken(void *const *b, const int32_t *v, const hcq_launch_t *l) {
  int x = this_is_not_declared;
}
EOF
bad_file compile <<'EOF'
{ "format": "hcq-graph/1",
  "buffers": { "b": { "device": "CPU:0", "bytes": 64 } },
  "programs": { "broken": { "c": { "file": "broken.c" } } },
  "items": [ { "kernel": "broken", "bufs": ["b"] } ] }
EOF
expect "compile error (with the compiler's output)" 3 "compile.json: items[0].kernel" "compiling broken failed" \
  "error" "this_is_not_declared" -- run compile.json

hcq info
if grep -qE '^CUDA +available' "$T/out"; then
  skip "--device-map CPU=CUDA without a GPU (this machine has CUDA)"
else
  expect "--device-map CPU=CUDA without a GPU" 3 "CUDA:0" -- run ok.json --device-map CPU=CUDA
fi

bad_file noentry <<'EOF'
{ "format": "hcq-graph/1",
  "buffers": { "b": { "device": "CPU:0", "bytes": 64 } },
  "programs": { "k": { "entry": "not_in_the_source", "c": { "file": "k.c" } } },
  "items": [ { "kernel": "k", "bufs": ["b"] } ] }
EOF
expect "a program whose entry function is missing: the message names the entry and the item" any \
  "noentry.json: items[0].kernel" "not_in_the_source" -- run noentry.json
# docs/cli.md: exit 3 is a runtime failure such as a compile error; a source that does not define its
# entry is a failure to build the kernel, found only by compiling and loading it.
check "a program whose entry function is missing: exit 3" sh -c 'echo "exit $1, want 3"; [ "$1" = 3 ]' _ "$RC"

# ---------------------------------------------------------------------------------------------
echo "# no input crashes the tool"

# The fuzzed file keeps its kernel in a source file, and the kernel touches no memory: what is
# under test is the tool (loader, runner, copies), not C code that a mangled file could make
# index out of bounds.
cat >fz.c <<'EOF'
void fz(void *const *b, const int32_t *v, const hcq_launch_t *l) {
  (void)b; (void)v; (void)l;
}
EOF
cat >fz.json <<'EOF'
{
  "format": "hcq-graph/1",
  "vars": { "n": { "min": 1, "max": 64, "value": 8 }, "s": { "min": -5, "max": 5, "value": 2 } },
  "buffers": {
    "a":  { "device": "CPU:0", "bytes": 64, "init": { "random": 3 } },
    "a2": { "device": "CPU:0", "bytes": 64, "init": { "fill32": -7 } },
    "b":  { "device": "CPU:0", "bytes": 64, "init": "iota32" },
    "c":  { "device": "CPU:1", "bytes": 64, "init": "zeros" },
    "bv": { "view": "b", "offset": 16, "bytes": 32 }
  },
  "programs": { "fz": { "entry": "fz", "c": { "file": "fz.c" } } },
  "items": [
    { "kernel": "fz", "bufs": ["b", "a"], "outs": [0], "vals": ["n", "s*2", "max(n, 3) % 4"], "global": ["(n+3)//4", 1], "local": [4] },
    { "copy": { "dst": "c", "src": "bv", "bytes": 16 } },
    { "kernel": "fz", "bufs": ["c"], "device": "CPU:1", "global": [2, "min(n, 2)"] }
  ],
  "inputs": ["a"],
  "runs": [ {}, { "inputs": { "a": "a2" }, "vars": { "n": 3, "s": -1 } } ]
}
EOF
expect "the fuzz seed file is valid" 0 "2 passed, 0 failed" -- run fz.json --check
mkdir -p fuzz
cp fz.c fuzz/fz.c # sources are found relative to the graph file
python3 - <<'EOF'
import random
random.seed(1)
src = open("fz.json").read()
alphabet = '{}[]":,0123456789-abcnsz \\/.'
for i in range(30):
    kind = i % 3
    if kind == 0:                       # truncated at a random offset
        out = src[:random.randrange(len(src))]
    elif kind == 1:                     # a few characters replaced
        s = list(src)
        for _ in range(random.randint(1, 3)):
            s[random.randrange(len(s))] = random.choice(alphabet)
        out = "".join(s)
    else:                               # characters deleted or duplicated
        s = list(src)
        for _ in range(random.randint(1, 3)):
            p = random.randrange(len(s))
            if random.random() < 0.5:
                del s[p]
            else:
                s.insert(p, s[p])
        out = "".join(s)
    open("fuzz/%02d.json" % i, "w").write(out)
EOF
# Structural mutations: still valid JSON, with values replaced by values of other types or out of
# range, or entries deleted (integers stay small enough that a valid variant runs quickly).
python3 - <<'EOF'
import copy, json, random
random.seed(1)
base = json.load(open("fz.json"))
values = [-1, 0, 1, 3, 65, 4096, 1.5, "", "x", "n", "zz", "CPU:7", "CUDA:0", "GPU:0", "b", "a2", "bv",
          "zeros", "n//0", "(n", "max(", None, True, [], {}, ["b", "b"], {"file": "nope.c"}, {"random": -1},
          {"view": "b", "offset": 60, "bytes": 8}, {"dst": "c", "src": "b"}]
def paths(node, prefix=()):
    yield prefix
    if isinstance(node, dict):
        for k, v in node.items():
            yield from paths(v, prefix + (k,))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            yield from paths(v, prefix + (i,))
for i in range(30):
    doc = copy.deepcopy(base)
    for _ in range(random.randint(1, 2)):
        p = random.choice([p for p in paths(doc) if p])
        parent = doc
        for k in p[:-1]:
            parent = parent[k]
        if random.random() < 0.25:
            del parent[p[-1]]
        else:
            parent[p[-1]] = copy.deepcopy(random.choice(values))
    json.dump(doc, open("fuzz/s%02d.json" % i, "w"), indent=1)
EOF
fuzz_bad=0
fuzz_rcs=""
no_path=""
for f in fuzz/*.json; do
  hcq run "$f" --check
  fuzz_rcs="$fuzz_rcs $RC"
  case $RC in
    0 | 1 | 2 | 3) ;;
    *)
      fuzz_bad=$((fuzz_bad + 1))
      bad "mangled file $f: exit $RC (want 0, 1, 2 or 3)"
      sed -n '1,4s/^/     stderr| /p' "$T/err"
      echo "     (the file is regenerated by this script: fixed seed; its text follows)"
      head -c 2000 "$f" | sed 's/^/     file| /'
      echo
      ;;
  esac
  # A failing exit must come with a message.
  if [ "$RC" -ge 2 ] && [ "$RC" -le 3 ] && ! grep -q '^hcq: ' "$T/err"; then
    fuzz_bad=$((fuzz_bad + 1))
    bad "mangled file $f: exit $RC without an \"hcq: \" message"
  fi
  # A message about the file gives a position (FILE:LINE:COL) or a JSON path, never an empty one.
  grep -qF "hcq: $f: : " "$T/err" && no_path="$no_path $f"
done
if [ "$fuzz_bad" -eq 0 ]; then
  ok "60 mangled files (30 textual, 30 structural): every exit in {0,1,2,3} with a message (exits:$fuzz_rcs)"
fi
if [ -z "$no_path" ]; then
  ok "mangled files: every message gives a JSON position or path"
else
  bad "mangled files: messages with an empty JSON path (\"FILE: : ...\"):$no_path"
  for f in $no_path; do
    hcq run "$f"
    sed -n '1s/^/     stderr| /p' "$T/err"
  done
fi
# The same mangled files through bench (a different loader path), truncations only.
bench_bad=0
for f in fuzz/00.json fuzz/03.json fuzz/06.json fuzz/09.json; do
  hcq bench "$f" --json
  case $RC in 0 | 2 | 3) ;; *) bench_bad=1; bad "bench $f: exit $RC" ;; esac
done
[ "$bench_bad" -eq 0 ] && ok "bench on truncated files exits 2 (or 0/3), never crashes"

# ---------------------------------------------------------------------------------------------
# HCQ_VALIDATE=1: a kernel that writes a buffer its "outs" leave out ("outs": [] is "writes
# nothing") is named with the item and the buffer; without validation the file runs.
cat >undeclared.json <<'EOF'
{"format": "hcq-graph/1",
 "programs": {"add1": {"c": "void add1(void *const *b, const int32_t *v, const hcq_launch_t *l) { (void)v; int32_t *o = b[0]; const int32_t *a = b[1]; for (uint32_t t = 0; t < l->lsz[0]; t++) { size_t i = (size_t)l->gid[0] * l->lsz[0] + t; if (i < 64) o[i] = a[i] + 1; } }"}},
 "buffers": {"a": {"device": "CPU:0", "bytes": 256, "init": "iota32"}, "o": {"device": "CPU:0", "bytes": 256},
             "c": {"device": "CPU:0", "bytes": 256}},
 "items": [{"kernel": "add1", "bufs": ["o", "a"], "outs": [], "global": [1], "local": [64]},
           {"kernel": "add1", "bufs": ["c", "o"], "outs": [0], "global": [1], "local": [64]}]}
EOF
expect "undeclared write runs without HCQ_VALIDATE" 0 -- run undeclared.json
HCQ_VALIDATE=1 expect "HCQ_VALIDATE=1 names the undeclared write" 2 "item 0 (add1" "wrote buffer 0 (o)" \
  "declared that it writes nothing" -- run undeclared.json
sed 's/"outs": \[\], //' undeclared.json >declared.json
HCQ_VALIDATE=1 expect "HCQ_VALIDATE=1 passes a kernel without outs (every buffer written)" 0 -- run declared.json --check

# ---------------------------------------------------------------------------------------------
# hcq compile: kernels built offline (docs/cli.md), and graph files that name the result.
cat >add1.glsl <<'EOF'
layout(buffer_reference, std430, buffer_reference_align = 4) buffer u32s { uint v[]; };
void main() {
  uint i = gl_GlobalInvocationID.x;
  if (i < uint(hcq_val(0))) u32s(hcq_buf(0)).v[i] = u32s(hcq_buf(1)).v[i] + uint(hcq_val(1));
}
EOF
printf 'void main() { this is not GLSL; }\n' >broken.glsl
cat >add_const.cu <<'EOF'
extern "C" __global__ void add_const(unsigned *y, const unsigned *x, int n, int k) {
  long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = x[i] + (unsigned)k;
}
EOF
expect "compile without --device: exit 2" 2 "--device KIND is required" -- compile --out x.spv add1.glsl
expect "compile without --out: exit 2" 2 "--out FILE is required" -- compile --device VULKAN add1.glsl
expect "compile without SOURCE: exit 2" 2 "give the kernel's SOURCE file" -- compile --device VULKAN --out x.spv
expect "compile --device TPU: exit 2" 2 "\"TPU\" is not a device kind" -- compile --device TPU --out x add1.glsl
expect "compile --format elf: exit 2" 2 "\"elf\" is not a format" -- compile --device CUDA --format elf --out x add_const.cu
expect "compile --bogus: exit 2" 2 "unknown option \"--bogus\"" -- compile --bogus --device VULKAN --out x add1.glsl
expect "compile a missing SOURCE: exit 2" 2 "nothere.glsl" -- compile --device VULKAN --out x.spv nothere.glsl
mkfifo compile.fifo
expect "compile a FIFO: refused by type, exit 2" 2 "FIFO" -- compile --device VULKAN --out x.spv compile.fifo
expect "compile for CPU: exit 2, CPU loads no binaries" 2 "CPU devices load no precompiled kernels" -- \
  compile --device CPU --out k.so add1.glsl
expect "compile for METAL: exit 3, Apple's toolchain" 3 "Apple's toolchain" "xcrun" -- \
  compile --device METAL --out k.metallib add1.glsl
expect "compile a cubin for VULKAN: exit 2" 2 "a cubin does not load on VULKAN devices" -- \
  compile --device VULKAN --format cubin --out x add1.glsl
expect "compile --arch for VULKAN: exit 2" 2 "for CUDA only" -- compile --device VULKAN --arch sm_90 --out x add1.glsl
if "$HCQ" compile --device VULKAN --out probe.spv add1.glsl 2>/dev/null; then
  expect "compile GLSL to SPIR-V (entry from the file name)" 0 -- compile --device VULKAN --out add1.spv add1.glsl
  check "the SPIR-V file starts with the SPIR-V magic" sh -c '[ "$(od -An -tx4 -N4 add1.spv | tr -d " ")" = 07230203 ]'
  expect "a GLSL compile error: exit 3 with the compiler's log" 3 "broken" "libshaderc" -- \
    compile --device VULKAN --out broken.spv broken.glsl
  check "a failed compile leaves no output file" sh -c '! ls broken.spv* 2>/dev/null'
  expect "compile --out in a missing folder: exit 2" 2 "--out nodir/x.spv" -- \
    compile --device VULKAN --out nodir/x.spv add1.glsl
  cat >bin.json <<'EOF'
{"format": "hcq-graph/1",
 "buffers": {"x": {"device": "VULKAN:0", "bytes": 4096, "init": "iota32"},
             "y": {"device": "VULKAN:0", "bytes": 4096, "init": "zeros"}},
 "programs": {"add1": {"glsl": {"binary": "add1.spv"}}},
 "items": [{"kernel": "add1", "bufs": ["y", "x"], "outs": [0], "vals": [1024, 5],
            "global": [16, 1, 1], "local": [64, 1, 1]}],
 "runs": [{}, {}]}
EOF
  if "$HCQ" info 2>/dev/null | grep -q "^VULKAN *available"; then
    expect "a graph file naming the SPIR-V runs and checks" 0 "2 passed, 0 failed" -- run bin.json --check --out bin_out
    check "the SPIR-V kernel's output is x + 5" python3 - bin_out/y.bin <<'EOF'
import struct, sys
y = struct.unpack("<1024I", open(sys.argv[1], "rb").read())
assert all(v == i + 5 for i, v in enumerate(y)), y[:8]
EOF
  else
    skip "a graph file naming the SPIR-V (no Vulkan device here)"
  fi
  sed 's/"add1.spv"/"add1.spv", "format": "ptx"/' bin.json >bin_bad.json
  expect "a binary's format for another kind: exit 2 with the JSON path" 2 \
    "programs.add1.glsl.format: a ptx does not load on VULKAN devices" -- run bin_bad.json
else
  skip "compile to SPIR-V (this build has no libshaderc)"
fi
expect "compile CUDA without --arch: exit 2" 2 "name one (sm_90" -- compile --device CUDA --out k.ptx add_const.cu
"$HCQ" compile --device CUDA --arch sm_90 --format ptx --out add_const.ptx add_const.cu >"$T/out" 2>"$T/err"
case $? in
  0) check "compile CUDA C to PTX for sm_90 (NVRTC, no GPU)" grep -q "^.visible .entry add_const" add_const.ptx ;;
  3) if grep -q "NVRTC" "$T/err"; then skip "compile CUDA C (no NVRTC here)"; else bad "compile CUDA C: $(cat "$T/err")"; fi ;;
  *) bad "compile CUDA C to PTX: unexpected exit status" ;;
esac

# ---------------------------------------------------------------------------------------------
echo "# $PASS passed, $FAIL failed, $SKIP skipped"
[ "$FAIL" -eq 0 ]
