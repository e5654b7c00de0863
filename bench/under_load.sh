#!/bin/sh
# Graph replays against eager launches (SmolLM2 decode, `hcq generate --bench`) with busy processes
# beside them: for each load, RUNS runs of each hcq binary given, in alternation (so that a change in
# the machine's other load hits every binary alike), then the median decode rates and speed-ups.
#
#   bench/under_load.sh [-n RUNS] [-l "LOADS"] [-s STEPS] HCQ_BINARY [HCQ_BINARY...]
#
# LOADS are busy processes per core (`yes > /dev/null`), default "0 1.5 2.5": with 2 cores, 0, 3 and
# 5 processes. Each line of the output: binary, load, the 1-minute load average before the runs,
# median eager and graph decode tok/s and the median of the per-run graph/eager ratios.
# The model is hcq's default (SmolLM2-135M-Instruct Q4_1), which must already be downloaded.
set -u
RUNS=7
LOADS="0 1.5 2.5"
STEPS=64
while [ $# -gt 0 ]; do
  case $1 in
    -n) RUNS=$2; shift 2 ;;
    -l) LOADS=$2; shift 2 ;;
    -s) STEPS=$2; shift 2 ;;
    -*) echo "under_load.sh: unknown option $1" >&2; exit 2 ;;
    *) break ;;
  esac
done
[ $# -ge 1 ] || { echo "usage: bench/under_load.sh [-n RUNS] [-l LOADS] [-s STEPS] HCQ_BINARY..." >&2; exit 2; }
CORES=$(nproc)
TMP=$(mktemp -d "${TMPDIR:-/tmp}/hcq-under-load-XXXXXX")
PIDS=""
stop_load() {
  for p in $PIDS; do kill "$p" 2>/dev/null; done
  for p in $PIDS; do wait "$p" 2>/dev/null; done
  PIDS=""
}
trap 'stop_load; rm -rf "$TMP"' EXIT INT TERM

median() {
  sort -g | awk '{v[NR] = $1} END {if (NR) printf "%.3g\n", (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2}'
}

printf '%-28s %5s %6s %10s %10s %7s\n' binary load/core loadavg eager graph graph/eager
for load in $LOADS; do
  busy=$(awk -v l="$load" -v c="$CORES" 'BEGIN {printf "%d", l * c + 0.5}')
  i=0
  while [ "$i" -lt "$busy" ]; do
    yes >/dev/null &
    PIDS="$PIDS $!"
    i=$((i + 1))
  done
  [ "$busy" -gt 0 ] && sleep 2
  avg=$(cut -d' ' -f1 /proc/loadavg)
  r=0
  while [ "$r" -lt "$RUNS" ]; do
    b=0
    for hcq in "$@"; do
      "$hcq" generate --prompt "Hello" --steps "$STEPS" --ignore-eos --bench --json 2>/dev/null |
        python3 -c 'import json, sys
j = json.loads(sys.stdin.read())
e, g = j["eager_decode_tok_s"], j["graph_decode_tok_s"]
print(e, g, g / e)' >>"$TMP/$b.$load"
      b=$((b + 1))
    done
    r=$((r + 1))
  done
  stop_load
  b=0
  for hcq in "$@"; do
    f=$TMP/$b.$load
    printf '%-28s %5s %6s %10s %10s %7s\n' "$(basename "$(dirname "$(dirname "$hcq")")")/$(basename "$hcq")" "$load" \
      "$avg" "$(cut -d' ' -f1 "$f" | median)" "$(cut -d' ' -f2 "$f" | median)" "$(cut -d' ' -f3 "$f" | median)"
    echo "  ratios: $(cut -d' ' -f3 "$f" | awk '{printf "%.2f ", $1}')" >&2
    b=$((b + 1))
  done
done
