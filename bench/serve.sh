#!/bin/sh
# make bench's server rows (issue 44, item 6): hcq serve against llama.cpp's llama-server on the same
# SmolLM2 Q4_1 file with the same threads, 1, 4 and 8 concurrent streams of 96 tokens (EOS ignored),
# aggregate decode tok/s and time to first token (bench/serve_bench.py).
#
#   bench/serve.sh BUILD_DIR [--rows FILE] [--threads N] [--rounds N]
#
# llama-server is built once from the llama.cpp that llama-cpp-python 0.3.36's sdist vendors
# (pip download --no-binary :all: --no-deps llama-cpp-python==0.3.36; cmake target llama-server,
# -DGGML_NATIVE=ON, as bench/llm_peers.py builds the library) and cached in ~/.cache/hcq
# ($HCQ_CACHE_DIR is the kernel cache, not this). Without network or a compiler the llama-server
# rows say "missing" and why. The first build takes about 10 minutes on 2 cores.
set -eu
BUILD=${1:?usage: bench/serve.sh BUILD_DIR [--rows FILE] [--threads N] [--rounds N]}
shift
SRC=$(cd "$(dirname "$0")/.." && pwd)
CACHE=${XDG_CACHE_HOME:-$HOME/.cache}/hcq/llama-server-0.3.36
LLAMA_SERVER=$CACHE/build/bin/llama-server
LOG=$BUILD/bench/serve.log
mkdir -p "$BUILD/bench" "$CACHE"

build_llama_server() {
  [ -x "$LLAMA_SERVER" ] && return 0
  echo "bench: building llama-server from llama-cpp-python 0.3.36's vendored llama.cpp (once, ~10 min)" >&2
  if [ ! -d "$CACHE/src" ]; then
    python3 -m pip download --quiet --no-binary :all: --no-deps --dest "$CACHE" llama-cpp-python==0.3.36 \
      >>"$LOG" 2>&1 ||
      { echo "pip download of llama-cpp-python 0.3.36 failed (no network?)"; return 1; }
    mkdir -p "$CACHE/src"
    tar -xzf "$CACHE"/llama_cpp_python-0.3.36.tar.gz -C "$CACHE/src" --strip-components=1 ||
      { echo "unpacking the sdist failed"; return 1; }
  fi
  cmake -S "$CACHE/src/vendor/llama.cpp" -B "$CACHE/build" -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=ON \
    -DLLAMA_CURL=OFF -DLLAMA_BUILD_SERVER=ON -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF >>"$LOG" 2>&1 &&
    nice -n 10 cmake --build "$CACHE/build" -j2 --target llama-server >>"$LOG" 2>&1 ||
    { echo "building llama-server failed (see $LOG)"; return 1; }
}

why=""
if ! why=$(build_llama_server); then
  echo "bench: llama-server: $why" >&2
  exec python3 "$SRC/bench/serve_bench.py" --hcq "$BUILD/cli/hcq" --llama-server-missing "$why" "$@"
fi
exec python3 "$SRC/bench/serve_bench.py" --hcq "$BUILD/cli/hcq" --llama-server "$LLAMA_SERVER" "$@"
