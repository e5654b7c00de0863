#!/usr/bin/env bash
# The profile files of `hcq run` checked from outside, as a user's tools read them:
#   - the Chrome trace loads as JSON with one slice per item per replay (Perfetto's importer needs no
#     more than that, numeric pid/tid and M events);
#   - the SVG timeline parses as XML (python3's xml.etree) with one box per item per replay;
#   - the DOT dump renders with Graphviz when it is installed (it is optional: skipped otherwise);
#   - HCQ_PROFILE=FILE makes a program that never asks for a profile write one at exit.
#
#   bash tests/trace/test_trace_files.sh /path/to/hcq /path/to/examples
set -u
HCQ=$1
EXAMPLES=$2
T=$(mktemp -d "${TMPDIR:-/tmp}/hcq-trace-test.XXXXXX") || exit 1
trap 'rm -rf "$T"' EXIT
FAIL=0
ok() { echo "ok   $*"; }
bad() { FAIL=1; echo "FAIL $*"; }

unset HCQ_PROFILE HCQ_JIT_BATCH_SIZE
# pipeline_two_devices: 7 items in one graph, 3 runs, each repeated twice: 6 replays.
if "$HCQ" run "$EXAMPLES/pipeline_two_devices.json" --repeat 2 --profile "$T/p.json" --profile-svg "$T/p.svg" \
  --dot "$T/p.dot" >"$T/out" 2>&1; then ok "hcq run --profile --profile-svg --dot"; else bad "hcq run: $(cat "$T/out")"; fi

if python3 - "$T/p.json" <<'EOF'; then ok "trace: 6 slices per item, 6 submits, 8 flow pairs per replay"; else bad "trace"; fi
import json, sys, collections
p = json.load(open(sys.argv[1]))
ev = p["traceEvents"]
items = collections.Counter(e["args"]["item"] for e in ev if e["ph"] == "X" and "item" in e["args"])
assert sorted(items) == list(range(7)) and set(items.values()) == {6}, items
assert sum(1 for e in ev if e["ph"] == "X" and e["cat"] == "replay") == 6
assert sum(1 for e in ev if e["ph"] == "s") == sum(1 for e in ev if e["ph"] == "f") == 6 * 8
assert all(isinstance(e["pid"], int) and isinstance(e["tid"], int) for e in ev)
names = {e["args"]["name"] for e in ev if e["ph"] == "M" and e["name"] in ("process_name", "thread_name")}
assert {"host", "CPU:0", "CPU:1", "CPU:0 compute queue", "CPU:0 copy queue", "CPU:1 compute queue",
        "CPU:1 copy queue"} <= names, names
EOF

if python3 - "$T/p.svg" <<'EOF'; then ok "svg: XML, one box per item per replay, 5 rows, 48 arrows"; else bad "svg"; fi
import sys, xml.etree.ElementTree as ET
ns = "{http://www.w3.org/2000/svg}"
root = ET.parse(sys.argv[1]).getroot()
assert root.tag == ns + "svg", root.tag
rects = list(root.iter(ns + "rect"))
boxes = [r for r in rects if r.get("class") == "item"]
assert len(boxes) == 42, "want 7 items x 6 replays, have %d" % len(boxes)
rows = [r for r in rects if (r.get("class") or "").startswith("row")]
assert len(rows) == 5, "host thread and four device queues, have %d" % len(rows)
arrows = [l for l in root.iter(ns + "line") if l.get("class") == "dep"]
assert len(arrows) == 48, len(arrows)
assert all(float(b.get("width")) >= 1 for b in boxes)
titles = [t.text for t in root.iter(ns + "title")]
assert any(t.startswith("CPU:0 -> CPU:1") and "bytes" in t for t in titles), titles[:5]
EOF

if grep -q "^  g0_i6 \[label\|      g0_i6 \[label" "$T/p.dot" && [ "$(grep -c "^  g0_i[0-9]* -> " "$T/p.dot")" = 8 ]; then
  ok "dot: 7 items, 8 dependency edges"
else
  bad "dot: $(cat "$T/p.dot")"
fi
if command -v dot >/dev/null 2>&1; then
  if dot -Tsvg "$T/p.dot" -o "$T/p.dot.svg" && python3 - "$T/p.dot.svg" <<'EOF'; then ok "dot -Tsvg renders it"; else bad "dot -Tsvg"; fi
import sys, xml.etree.ElementTree as ET
root = ET.parse(sys.argv[1]).getroot()
nodes = [g for g in root.iter("{http://www.w3.org/2000/svg}g") if g.get("class") == "node"]
assert len(nodes) == 7, len(nodes)
EOF
else
  echo "skip dot -Tsvg: graphviz is not installed"
fi

# HCQ_PROFILE=FILE: written at exit by the library, with the loading's host copies in it too.
if HCQ_PROFILE="$T/env.json" "$HCQ" run "$EXAMPLES/chain.json" >"$T/out" 2>&1 && [ -s "$T/env.json" ]; then
  ok "HCQ_PROFILE=FILE writes the trace at exit"
else
  bad "HCQ_PROFILE: $(cat "$T/out")"
fi
if python3 - "$T/env.json" <<'EOF'; then ok "HCQ_PROFILE trace: every replay and the loading's copyins"; else bad "HCQ_PROFILE trace"; fi
import json, sys, collections
ev = json.load(open(sys.argv[1]))["traceEvents"]
items = collections.Counter(e["args"]["item"] for e in ev if e["ph"] == "X" and "item" in e["args"])
assert sorted(items) == list(range(5)) and set(items.values()) == {3}, items
assert any(e["ph"] == "X" and e["name"].startswith("copyin ") for e in ev)
EOF
exit $FAIL
