#!/usr/bin/env bash
# tools/gpu-check.sh: build hcq on a GPU machine and check its CUDA device, its CUDA graph and its
# LLM decoder there, the decoder raced against llama.cpp's CUDA backend on the same model file.
#
# Needs, on the GPU machine: an NVIDIA driver, NVRTC (a CUDA toolkit, or pip's nvidia-cuda-nvrtc),
# CMake, a C compiler, Python 3 and what step 2 below unpacks; for llama.cpp's row, cuBLAS of the
# CUDA major version it was built with (a toolkit, or pip's nvidia-cublas). It reaches no package
# registry, so everything else is carried (below). In order, within 6 minutes (HCQ_GPU_CHECK_BUDGET
# seconds, default 360, and 3600 with --stand-in: every step runs under what is left of it, and one
# that finds too little left is skipped, saying so):
#   1. prints the OS (architecture, glibc), NVIDIA driver and the CUDA version it supports, and every
#      NVRTC it finds with whether the driver loads what it makes (fails at once when none fits, or
#      when there is a GPU and no NVRTC);
#   2. unpacks the carried Debian packages (.gpu-debs/*.deb: Jansson, Criterion, xxHash and what they
#      need at run time, and pkgconf) with `dpkg -x` (or Python, or ar and the right decompressor,
#      where there is no dpkg) into a prefix under /tmp, never into /, and points pkg-config and
#      CMake at it (the GPU machine may not be Debian); packages of another architecture, or needing
#      a newer glibc than the machine's, fail here, saying so;
#   3. builds hcq (tests on), runs the CUDA tests (ctest -L cuda: the suite on the real driver, the
#      same suite on the stand-in driver, NVRTC, the update planner is in -L graph), every example
#      with `hcq run --device-map CPU=CUDA --check`, and `hcq bench` eager against graph on CUDA for
#      every example and for a generated 1000-kernel chain;
#   4. runs the llama2 decoder (`hcq demo --json`, small and 15m shapes) on CUDA, eager against the
#      CUDA graph;
#   5. races the LLM (tools/llm-race.py): `hcq generate --device CUDA --bench --json` on
#      SmolLM2-135M-Instruct Q4_1 (the GGUF of `make demo`), eager launches against CUDA graph
#      replays (decode of 128 tokens after a 37-token chat prompt, a 100-token prompt in one pass,
#      the host's microseconds to queue a token, identical tokens), and llama.cpp's CUDA backend
#      (tools/llamacpp/llamacpp-bench, CUDA graphs on as llama.cpp ships) on the same file and ids;
#      the targets set for an H200 are printed beside what was measured (CUDA graph decode >= 3x
#      eager, >= 1.5x llama.cpp's decode, <= 5 us of host time per token): a missed target is
#      reported, not failed;
#   6. runs tools/vulkan-check.sh on NVIDIA's Vulkan driver (the Vulkan suite, the examples, the
#      decoders eager against the HCQ graph, the LLM rows on VULKAN), when its bundle was carried;
#   7. prints one table. Log and results go under $OUT when it is set (else ./gpu-check-out):
#      gpu-check.log, results.json (every bench object), demo.jsonl (every demo object),
#      llm.json (the LLM race), table.txt.
# Without a GPU it says so in its first lines, still builds and runs what needs none (the stand-in
# driver's tests, NVRTC, the planner) and exits 0; the GPU rows of the table then read "no GPU".
# With a GPU but no NVRTC the CUDA C checks fail, loudly: they would otherwise count as skipped.
# Exit status: 0 when every check that could run passed, 1 otherwise (a speed target is not a
# check; eager and replay tokens that differ are); 2 when pieces of the carry are still missing
# (nothing was checked).
#
#   bash tools/gpu-check.sh --stand-in   here, without a GPU: the same run with the stand-in driver
#       (tests/fake_cuda, two devices) in the GPU's place, so every step and row runs (a dry run of
#       the script itself; the numbers mean nothing). The LLM race runs shortened (--quick); its
#       llama.cpp row says why llama.cpp cannot run on the stand-in.
#
# Carrying it to the GPU machine, which reaches no package registry and takes at most 64 MiB a
# call (the working tree and the carried folders together, with the device tool this project uses):
#   here, once per checkout (Debian, with apt):   bash tools/gpu-check.sh --download [ARCH]
#       downloads the .deb files into .gpu-debs/ (git-ignored, about 5 MB); ARCH is the GPU
#       machine's Debian architecture when it is not this one's (arm64 for a GH200:
#       `dpkg --add-architecture arm64 && apt-get update` first)
#   for llama.cpp's row (needs a CUDA toolkit with nvcc, CMake, a C++ compiler and pip here):
#                                                 bash tools/gpu-check.sh --prepare-llamacpp
#       downloads llama-cpp-python 0.3.36's source (pip download) and builds the llama.cpp it
#       vendors with its CUDA backend (-DGGML_CUDA=ON, CUDA graphs on, for compute capability 9.0,
#       the H100 and H200; HCQ_LLAMACPP_CUDA_ARCH=80 for an A100...) into build-llamacpp/, linked
#       statically but for cudart, cuBLAS and the driver; stages tools/llamacpp/llamacpp-bench with
#       libcudart into .llamacpp/ (git-ignored). cuBLAS (about 570 MB) is not carried: the GPU
#       machine's is used. The build compiles about 200 CUDA files: an hour or more on 2 cores
#   and, for the Vulkan suite too:              bash tools/vulkan-check.sh prepare
#       builds it with every library it needs into .vkcarry/ (git-ignored, about 40 MB)
#   then:                                         bash tools/gpu-check.sh --pack
#       packs .gpu-debs/, .llamacpp/, .vkcarry/ (those there are) and the model file (98 MB: hcq's
#       copy, `hcq generate --fetch-model`, or HCQ_GPU_CHECK_MODEL) into pieces small enough to
#       travel one a call beside the working tree: .gpu-carry/1, .gpu-carry/2, ... (git-ignored);
#       it prints the calls to make
#   then one call of the device tool's run per piece, from the repository root, back to back (the
#   machine keeps /tmp only while it stays warm between calls, 30 s on the H200 machine):
#       command:  bash tools/gpu-check.sh
#       carry:    [".gpu-carry/K"]        (K = 1, 2, ...; one piece a call)
#       timeout_s: 420
#   Each call puts its piece in /tmp/hcq-gpu-carry and checks it; the calls before the last say
#   which pieces are still missing and exit 2; the last unpacks them all and runs the check. A
#   machine given back between calls loses the pieces: start again from the first. Without the
#   model or llama.cpp the old way still works: carry [".gpu-debs", ".vkcarry"] in one call (the
#   LLM rows then say what was not carried). Read gpu-check.log, llm.json and table.txt from the
#   files that come back ($OUT).
set -u -o pipefail
cd "$(dirname "$0")/.." || exit 1
ROOT=$PWD

# Runtime closure of libcriterion3, libjansson4 and libxxhash0 beyond libc, their -dev packages
# (headers, .pc files, .so links), and pkgconf in case the machine has no pkg-config.
DEBS="libcriterion-dev libcriterion3 libjansson-dev libjansson4 libxxhash-dev libxxhash0 libffi8 libgit2-1.5
libnanomsg5 libcom-err2 libgssapi-krb5-2 libhttp-parser2.9 libk5crypto3 libkeyutils1 libkrb5-3 libkrb5support0
libmbedcrypto7 libmbedtls14 libmbedx509-1 libpcre2-8-0 libssh2-1 libssl3 zlib1g pkgconf-bin libpkgconf3"

# This machine's Debian architecture and multiarch triplet (where the .debs put their libraries).
case $(uname -m) in
  x86_64) DEB_ARCH=amd64 MULTIARCH=x86_64-linux-gnu ;;
  aarch64 | arm64) DEB_ARCH=arm64 MULTIARCH=aarch64-linux-gnu ;;
  ppc64le) DEB_ARCH=ppc64el MULTIARCH=powerpc64le-linux-gnu ;;
  *) DEB_ARCH=$(uname -m) MULTIARCH=$(uname -m)-linux-gnu ;;
esac

if [ "${1:-}" = "--download" ]; then
  arch=${2:-}
  mkdir -p .gpu-debs && cd .gpu-debs || exit 1
  pkgs=()
  for p in $DEBS; do pkgs+=("$p${arch:+:$arch}"); done
  apt-get download "${pkgs[@]}" || {
    echo "apt-get download failed (run apt-get update first${arch:+; for $arch: dpkg --add-architecture $arch})" >&2
    exit 1
  }
  n=$(find . -maxdepth 1 -name '*.deb' | wc -l)
  echo "downloaded $n packages into .gpu-debs/ ($(du -sh . | cut -f1))"
  exit 0
fi
STAND_IN=0
[ "${1:-}" = "--stand-in" ] && STAND_IN=1

LLAMACPP_PY_VERSION=0.3.36 # llama-cpp-python's release, whose vendored llama.cpp bench/llm_peers.py races on the CPU
MODEL_FILE=SmolLM2-135M-Instruct.Q4_1.gguf
# The model where hcq keeps it (`hcq generate --fetch-model` puts it there), or HCQ_GPU_CHECK_MODEL.
model_here() {
  if [ -n "${HCQ_GPU_CHECK_MODEL:-}" ]; then echo "$HCQ_GPU_CHECK_MODEL"; return; fi
  local d=${HCQ_DATA_DIR:-}
  [ -n "$d" ] || d=${XDG_DATA_HOME:+$XDG_DATA_HOME/hcq}
  [ -n "$d" ] || d=${HOME:-/tmp}/.local/share/hcq
  echo "$d/models/$MODEL_FILE"
}

if [ "${1:-}" = "--prepare-llamacpp" ]; then
  # llama.cpp's CUDA backend, built here and staged into .llamacpp/ for the GPU machine.
  W=$ROOT/build-llamacpp
  arch=${HCQ_LLAMACPP_CUDA_ARCH:-90}
  nvcc=$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)
  [ -x "$nvcc" ] || { echo "--prepare-llamacpp needs nvcc (a CUDA toolkit) on the PATH or in /usr/local/cuda" >&2; exit 1; }
  for t in cmake python3 c++ readelf strip; do
    command -v "$t" >/dev/null 2>&1 || { echo "--prepare-llamacpp needs $t" >&2; exit 1; }
  done
  mkdir -p "$W" || exit 1
  src=$W/llama_cpp_python-$LLAMACPP_PY_VERSION
  if [ ! -f "$src/vendor/llama.cpp/include/llama.h" ]; then
    python3 -m pip download --no-deps --no-binary :all: "llama-cpp-python==$LLAMACPP_PY_VERSION" -d "$W" ||
      { echo "pip download llama-cpp-python==$LLAMACPP_PY_VERSION failed" >&2; exit 1; }
    tar -xzf "$W/llama_cpp_python-$LLAMACPP_PY_VERSION.tar.gz" -C "$W" || exit 1
  fi
  gen=()
  command -v ninja >/dev/null 2>&1 && gen=(-G Ninja)
  # Only what llamacpp-bench links: ggml (CPU and CUDA) and libllama, static; no tools, tests,
  # server, OpenSSL or NCCL. CUDA graphs stay on, as llama.cpp's CMakeLists sets them.
  cmake -S tools/llamacpp -B "$W/cuda" "${gen[@]}" -DCMAKE_BUILD_TYPE=Release -DLLAMA_CPP_DIR="$src/vendor/llama.cpp" \
    -DCMAKE_CUDA_COMPILER="$nvcc" -DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES="$arch" -DGGML_NATIVE=OFF \
    -DBUILD_SHARED_LIBS=OFF -DGGML_CUDA_NCCL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF \
    -DLLAMA_BUILD_TOOLS=OFF -DLLAMA_BUILD_SERVER=OFF -DLLAMA_BUILD_APP=OFF -DLLAMA_BUILD_COMMON=OFF \
    -DLLAMA_OPENSSL=OFF >"$W/configure.log" 2>&1 || { tail -20 "$W/configure.log"; exit 1; }
  jobs=$(nproc)
  echo "building llama.cpp (llama-cpp-python $LLAMACPP_PY_VERSION) with CUDA for sm_$arch on $jobs cores; log: $W/build.log"
  t0=$(date +%s)
  cmake --build "$W/cuda" -j "$jobs" --target llamacpp-bench >"$W/build.log" 2>&1 || { tail -30 "$W/build.log"; exit 1; }
  secs=$(($(date +%s) - t0))
  rm -rf .llamacpp && mkdir -p .llamacpp/bin .llamacpp/lib || exit 1
  cp "$W/cuda/llamacpp-bench" .llamacpp/bin/ && strip .llamacpp/bin/llamacpp-bench || exit 1
  needed=$(readelf -d .llamacpp/bin/llamacpp-bench | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p' | tr '\n' ' ')
  # cudart is small: carried. cuBLAS is not (about 570 MB): the GPU machine's is found at run time.
  ldd "$W/cuda/llamacpp-bench" | awk '/libcudart\.so/ {print $3}' | while read -r f; do cp -L "$f" .llamacpp/lib/; done
  {
    echo "llama.cpp vendored by llama-cpp-python $LLAMACPP_PY_VERSION, built $(date -u +%Y-%m-%dT%H:%MZ) in ${secs}s on $jobs cores"
    echo "nvcc: $("$nvcc" --version | grep -o 'release [0-9.]*')"
    echo "CUDA architectures: $arch; GGML_CUDA=ON, GGML_CUDA_GRAPHS=$(sed -n 's/^GGML_CUDA_GRAPHS:BOOL=//p' "$W/cuda/CMakeCache.txt")"
    echo "needed: $needed"
  } >.llamacpp/BUILD.txt
  cat .llamacpp/BUILD.txt
  echo "staged .llamacpp/ ($(du -sh .llamacpp | cut -f1)): bash tools/gpu-check.sh --pack takes it with the rest"
  exit 0
fi

if [ "${1:-}" = "--pack" ]; then
  # Everything that must travel, in pieces that fit beside the working tree in one call each.
  model=$(model_here)
  [ -f "$model" ] || { echo "no model at $model (hcq generate --fetch-model downloads it; or HCQ_GPU_CHECK_MODEL=FILE)" >&2; exit 1; }
  items=()
  for d in .gpu-debs .llamacpp .vkcarry; do [ -d "$d" ] && items+=("$d"); done
  # The working tree that travels with each piece: tracked and untracked-not-ignored files.
  tree=$(git ls-files -z -c -o --exclude-standard | xargs -0 stat -c %s 2>/dev/null | awk '{s += $1} END {print s + 0}')
  piece=$(((64 << 20) - tree - (2 << 20)))
  [ "$piece" -gt $((8 << 20)) ] || { echo "the working tree is $((tree >> 20)) MiB: too little room for pieces" >&2; exit 1; }
  rm -rf .gpu-carry && mkdir -p .gpu-carry/model || exit 1
  cp "$model" .gpu-carry/model/ || exit 1
  tar -cf .gpu-carry/all.tar ${items[@]+"${items[@]}"} -C .gpu-carry model || exit 1
  rm -rf .gpu-carry/model
  id=$(sha256sum .gpu-carry/all.tar | cut -c1-16)
  (cd .gpu-carry && split -b "$piece" -d -a 2 all.tar part.) || exit 1
  n=$(find .gpu-carry -name 'part.*' | wc -l)
  k=0
  for f in $(find .gpu-carry -name 'part.*' | sort); do
    k=$((k + 1))
    mkdir -p ".gpu-carry/$k" && mv "$f" ".gpu-carry/$k/piece" || exit 1
    printf 'pack=%s\npieces=%s\npiece=%s\nsha256=%s\ncontents=%s\n' "$id" "$n" "$k" \
      "$(sha256sum ".gpu-carry/$k/piece" | cut -d' ' -f1)" "${items[*]+${items[*]} }model/$MODEL_FILE" >".gpu-carry/$k/MANIFEST"
  done
  rm -f .gpu-carry/all.tar
  echo "packed ${items[*]+${items[*]} }$MODEL_FILE into $n pieces of at most $((piece >> 20)) MiB (pack $id; the tree is $((tree >> 20)) MiB)"
  echo "make $n calls of the device tool's run, back to back, from the repository root:"
  for k in $(seq 1 "$n"); do echo "  command: bash tools/gpu-check.sh   carry: [\".gpu-carry/$k\"]   timeout_s: 420"; done
  exit 0
fi

START=$(date +%s)
OUTDIR=${OUT:-$ROOT/gpu-check-out}
mkdir -p "$OUTDIR"
LOG=$OUTDIR/gpu-check.log
: >"$LOG"
exec > >(tee -a "$LOG") 2>&1
FAILED=0
note_fail() { FAILED=1; echo "FAILED: $*"; }
elapsed() { echo $(($(date +%s) - START)); }
# The GPU run fits in 6 minutes; the stand-in's, on a small machine's few cores, is not held to it.
BUDGET=${HCQ_GPU_CHECK_BUDGET:-$([ "$STAND_IN" = 1 ] && echo 3600 || echo 360)}
# cap N: N seconds, or what is left of the budget when that is less (at least 1).
cap() {
  local left=$((BUDGET - $(elapsed)))
  [ "$left" -lt "$1" ] && { [ "$left" -gt 0 ] && echo "$left" || echo 1; } || echo "$1"
}
# spent NEED STEP: true (and says so) when less than NEED seconds of the budget are left for STEP.
spent() {
  [ $((BUDGET - $(elapsed))) -ge "$1" ] && return 1
  echo "[$(elapsed)s] skipped: $2 (less than $1 s of the ${BUDGET} s budget left)"
  SKIPPED+=("$2")
  return 0
}
declare -a SKIPPED

# ---- 0. the carried pieces (bash tools/gpu-check.sh --pack): kept in /tmp between calls ----
CARRY=/tmp/hcq-gpu-carry
for m in .gpu-carry/*/MANIFEST; do
  [ -e "$m" ] || continue
  p=$(sed -n 's/^pack=//p' "$m") n=$(sed -n 's/^pieces=//p' "$m") k=$(sed -n 's/^piece=//p' "$m")
  want=$(sed -n 's/^sha256=//p' "$m")
  got=$(sha256sum "$(dirname "$m")/piece" | cut -d' ' -f1)
  [ "$got" = "$want" ] || { note_fail "piece $k of pack $p arrived damaged (sha256 $got, not $want)"; exit 1; }
  # Another pack's pieces (an earlier run on this warm machine) go.
  find "$CARRY" -mindepth 1 -maxdepth 1 ! -name "$p" -exec rm -rf {} + 2>/dev/null
  mkdir -p "$CARRY/$p" && cp "$(dirname "$m")/piece" "$CARRY/$p/piece.$k" && echo "$n" >"$CARRY/$p/pieces" || exit 1
  echo "received piece $k of $n (pack $p) into $CARRY/$p"
done
for d in "$CARRY"/*/; do
  if [ ! -f "$d/pieces" ] || [ -f "$d/unpacked/complete" ]; then continue; fi
  n=$(cat "$d/pieces") have=() absent=()
  for k in $(seq 1 "$n"); do if [ -f "$d/piece.$k" ]; then have+=("$k"); else absent+=("$k"); fi; done
  if [ "${#absent[@]}" -gt 0 ]; then
    echo "pack $(basename "$d"): have piece(s) ${have[*]} of $n; missing ${absent[*]}: carry .gpu-carry/${absent[0]} in the next call"
    echo "(the pieces wait in $CARRY only while this machine stays warm). Nothing was checked yet."
    exit 2
  fi
  rm -rf "$d/unpacked" && mkdir -p "$d/unpacked" || exit 1
  for k in $(seq 1 "$n"); do cat "$d/piece.$k"; done | tar -x -C "$d/unpacked" || { note_fail "unpacking pack $(basename "$d")"; exit 1; }
  echo "unpacked pack $(basename "$d") ($n pieces): $(find "$d/unpacked" -mindepth 1 -maxdepth 2 ! -path '*/.*/*' -printf '%P ')"
  rm -f "$d"/piece.* && touch "$d/unpacked/complete"
done
# What was carried: in the working tree itself, else in the unpacked pack.
UNPACKED=$(find "$CARRY" -mindepth 3 -maxdepth 3 -path '*/unpacked/complete' 2>/dev/null | head -1)
UNPACKED=${UNPACKED:+$(dirname "$UNPACKED")}
carried() { # carried NAME: the path of a carried folder or file, or nothing
  if [ -e "$ROOT/$1" ]; then echo "$ROOT/$1"; elif [ -n "$UNPACKED" ] && [ -e "$UNPACKED/$1" ]; then echo "$UNPACKED/$1"; fi
}
DEBDIR=$(carried .gpu-debs)
VKDIR=$(carried .vkcarry)
LLAMACPP=$(carried .llamacpp)
MODEL=$(carried "model/$MODEL_FILE")
[ -n "$MODEL" ] || { [ -f "$(model_here)" ] && MODEL=$(model_here); }

# ---- 1. what this machine has ----
# shellcheck disable=SC1091 # the machine's own file
os=$( (. /etc/os-release 2>/dev/null && echo "$PRETTY_NAME") || uname -sr)
driver=none gpu_names="" gpu_cc=""
if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then
  driver=$(nvidia-smi --query-gpu=driver_version --format=csv,noheader | head -1)
  gpu_names=$(nvidia-smi --query-gpu=name --format=csv,noheader | sort | uniq -c | sed 's/^ *//' | tr '\n' ';')
  gpu_cc=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -1 | tr -d ' .' || true)
fi
glibc=$(getconf GNU_LIBC_VERSION 2>/dev/null | awk '{print $2}' || true)
# The CUDA version the driver supports, asked of the library itself ("12.8"; "?" when unknown).
cuda_version=none
if [ "$STAND_IN" = 1 ]; then
  driver="stand-in (tests/fake_cuda)" cuda_version=${HCQ_FAKE_CUDA_DRIVER_VERSION:-13.0}
elif [ "$driver" != none ]; then
  cuda_version=$(python3 - <<'PY' 2>/dev/null || echo "?"
import ctypes
v = ctypes.c_int(0)
ctypes.CDLL("libcuda.so.1").cuDriverGetVersion(ctypes.byref(v))
print(f"{v.value // 1000}.{v.value % 1000 // 10}")
PY
  )
fi
# NVRTC: every libnvrtc.so.N this machine has: the linker cache (Debian's and Fedora's /usr/lib64
# alike), toolkits under /usr/local/cuda*, /opt/cuda (Arch) and */targets/*/lib, and pip's
# nvidia-cuda-nvrtc wheels (nvidia/cuda_nvrtc/lib for CUDA 12, nvidia/cu13/lib for 13) in every
# Python site directory. hcq is given all of them (HCQ_NVRTC_LIBRARY, ':'-separated) and picks
# the one the driver loads; they are listed here, with what each fits, before anything runs.
nvrtc_candidates() {
  {
    ldconfig -p 2>/dev/null | awk '/libnvrtc\.so\.[0-9]/ && !/builtins|\.alt\./ {print $NF}'
    local sites=""
    if command -v python3 >/dev/null 2>&1; then
      sites=$(python3 -c 'import site; print("\n".join(site.getsitepackages() + [site.getusersitepackages()]))' 2>/dev/null || true)
    fi
    local d
    for d in /usr/local/cuda/lib64 /usr/local/cuda-*/lib64 /usr/local/cuda-*/lib /usr/local/cuda*/targets/*/lib \
      /opt/cuda/lib64 /opt/cuda/targets/*/lib /usr/lib64 /usr/lib/"$MULTIARCH" $sites \
      /usr/local/lib/python3*/dist-packages /usr/local/lib/python3*/site-packages /opt/*/.venv/lib/python3*/site-packages \
      /opt/*/lib/python3*/site-packages; do
      [ -d "$d" ] || continue
      for f in "$d"/libnvrtc.so.[0-9]* "$d"/nvidia/cuda_nvrtc/lib/libnvrtc.so.[0-9]* "$d"/nvidia/cu[0-9]*/lib/libnvrtc.so.[0-9]*; do
        case $f in *builtins* | *'*'*) ;; *) [ -e "$f" ] && echo "$f" ;; esac
      done
    done
  } | while read -r f; do readlink -f "$f"; done | awk '!seen[$0]++'
}
# One line per candidate: "VERSION ARCHS PATH" (ARCHS: "75,80,...,120"), "? - PATH" when it does not load.
nvrtc_probe() {
  python3 - "$@" <<'PY' 2>/dev/null
import ctypes, sys
for path in sys.argv[1:]:
    try:
        lib = ctypes.CDLL(path)
        a, b, n = ctypes.c_int(0), ctypes.c_int(0), ctypes.c_int(0)
        lib.nvrtcVersion(ctypes.byref(a), ctypes.byref(b))
        archs = "-"
        if hasattr(lib, "nvrtcGetNumSupportedArchs") and lib.nvrtcGetNumSupportedArchs(ctypes.byref(n)) == 0:
            arr = (ctypes.c_int * n.value)()
            lib.nvrtcGetSupportedArchs(arr)
            archs = ",".join(str(x) for x in arr)
        print(f"{a.value}.{b.value} {archs} {path}")
    except OSError:
        print(f"? - {path}")
PY
}
vnum() { echo "$1" | awk -F. '{print ($1 + 0) * 1000 + ($2 + 0) * 10}'; } # "12.8" -> 12080
if [ -n "${HCQ_NVRTC_LIBRARY:-}" ]; then
  # The caller's choice (one library, or several ':'-separated) stands, and is checked like the rest.
  IFS=: read -r -a NVRTC_FOUND <<<"$HCQ_NVRTC_LIBRARY"
else
  mapfile -t NVRTC_FOUND < <(nvrtc_candidates)
fi
nvrtc_version=none nvrtc_lines=""
if [ "${#NVRTC_FOUND[@]}" -gt 0 ]; then
  if command -v python3 >/dev/null 2>&1; then
    nvrtc_lines=$(nvrtc_probe "${NVRTC_FOUND[@]}")
  else
    nvrtc_lines=$(for f in "${NVRTC_FOUND[@]}"; do echo "? - $f"; done)
  fi
  list=$(printf '%s:' "${NVRTC_FOUND[@]}")
  list=${list%:}
  # hcq keeps 255 bytes of it: a longer list is cut to the candidates that fit.
  while [ "${#list}" -gt 255 ] && [ "${list%:*}" != "$list" ]; do list=${list%:*}; done
  export HCQ_NVRTC_LIBRARY=$list
fi
echo "OS:     $os ($(uname -m), kernel $(uname -r), glibc ${glibc:-unknown})"
echo "driver: $driver${gpu_names:+, GPUs: $gpu_names}${gpu_cc:+ (sm_$gpu_cc)}"
echo "CUDA:   $cuda_version (what the driver supports)$(command -v nvcc >/dev/null 2>&1 && echo "; nvcc $(nvcc --version | grep -o 'release [0-9.]*' | cut -d' ' -f2)")"
if [ -z "$nvrtc_lines" ]; then
  echo "NVRTC:  none found (searched the linker cache, /usr/local/cuda*, /opt/cuda, /usr/lib64, pip's nvidia packages)"
else
  # Which the driver loads: NVRTC X.Y writes PTX that needs a driver for CUDA >= X.Y; cubins need
  # one of the same major version. The same rule hcq applies (docs/cuda.md).
  fits=0
  while read -r v archs path; do
    fit=""
    if [ "$v" = "?" ]; then
      fit="does not load"
    elif [ "$cuda_version" != none ] && [ "$cuda_version" != "?" ]; then
      if [ "$(vnum "$v")" -le "$(vnum "$cuda_version")" ]; then
        fit="fits the driver"; fits=1
      elif [ "${v%%.*}" = "${cuda_version%%.*}" ]; then
        fit="newer than the driver: cubins only"; fits=1
      else
        fit="TOO NEW for the driver's CUDA $cuda_version"
      fi
      if [ -n "$gpu_cc" ] && [ "$archs" != "-" ] && ! echo ",$archs," | grep -q ",$gpu_cc,"; then
        fit="$fit; knows no sm_$gpu_cc (PTX for an older architecture, compiled by the driver)"
      fi
    fi
    echo "NVRTC:  $v $path${fit:+ ($fit)}"
    [ "$nvrtc_version" = none ] && [ "$v" != "?" ] && nvrtc_version=$v
  done <<<"$nvrtc_lines"
  if [ "$driver" != none ] && [ "$fits" = 0 ] && [ "$cuda_version" != "?" ]; then
    note_fail "no NVRTC here fits the driver's CUDA $cuda_version: the CUDA C checks will fail (install NVRTC $cuda_version or older)"
  fi
fi
if [ "$driver" = none ]; then
  echo "GPU:    none found (no nvidia-smi or no device): the checks that need a GPU are skipped"
elif [ "$nvrtc_version" = none ]; then
  note_fail "a GPU but no NVRTC: every CUDA C test and example fails (pip install nvidia-cuda-nvrtc, or a toolkit)"
fi
echo

# ---- 2. the carried packages, unpacked into a prefix ----
PREFIX=/tmp/hcq-gpu-prefix
LIBDIR=$PREFIX/usr/lib/$MULTIARCH
PKGCONF=$(command -v pkg-config || true)
# A .deb is an ar archive; its data.tar.* is what dpkg -x unpacks. Without dpkg: Python's ar and
# tar readers, else ar and the right decompressor (tar cannot guess one from a pipe).
unpack_deb() { # DEB DEST
  local how=${HCQ_GPU_CHECK_UNPACK:-}
  if [ -z "$how" ]; then
    how="ar"
    command -v python3 >/dev/null 2>&1 && how="python"
    command -v dpkg >/dev/null 2>&1 && how="dpkg"
  fi
  case $how in
    dpkg) dpkg -x "$1" "$2" ;;
    python)
      python3 - "$1" "$2" <<'PY'
import io, sys, tarfile
data = open(sys.argv[1], "rb").read()
if data[:8] != b"!<arch>\n":
    sys.exit(f"{sys.argv[1]}: not an ar archive")
pos = 8
while pos + 60 <= len(data):
    name, size = data[pos:pos + 16].decode().strip().rstrip("/"), int(data[pos + 48:pos + 58])
    body = data[pos + 60:pos + 60 + size]
    if name.startswith("data.tar"):
        if name.endswith(".zst"):
            import zstandard  # not in the standard library: fails clearly where it is missing
            body = zstandard.ZstdDecompressor().stream_reader(io.BytesIO(body)).read()
        tarfile.open(fileobj=io.BytesIO(body)).extractall(sys.argv[2])
        sys.exit(0)
    pos += 60 + size + (size & 1)
sys.exit(f"{sys.argv[1]}: no data.tar member")
PY
      ;;
    ar)
      local member dec
      member=$(ar t "$1" | grep '^data\.tar') || { echo "$1: no data.tar member (or no ar)"; return 1; }
      case $member in
        *.xz) dec="xz -dc" ;; *.zst) dec="zstd -dc" ;; *.gz) dec="gzip -dc" ;; *.bz2) dec="bzip2 -dc" ;; *) dec="cat" ;;
      esac
      command -v "${dec%% *}" >/dev/null 2>&1 || { echo "unpacking $1 needs ${dec%% *}"; return 1; }
      ar p "$1" "$member" | $dec | (cd "$2" && tar -x -f -)
      ;;
  esac
}
debs=()
for f in ${DEBDIR:+"$DEBDIR"/*.deb}; do [ -e "$f" ] && debs+=("$f"); done
if [ "${#debs[@]}" -gt 0 ]; then
  # Packages for another architecture would unpack fine and then fail to link: say so first.
  wrong=$(printf '%s\n' "${debs[@]}" | grep -v -e "_${DEB_ARCH}\.deb\$" -e '_all\.deb$' | head -3 | tr '\n' ' ')
  if [ -n "$wrong" ]; then
    note_fail "the carried packages are not for $DEB_ARCH ($(uname -m)): $wrong(bash tools/gpu-check.sh --download $DEB_ARCH)"
    exit 1
  fi
  rm -rf "$PREFIX" && mkdir -p "$PREFIX"
  for f in "${debs[@]}"; do unpack_deb "$f" "$PREFIX" || note_fail "unpacking $f"; done
  [ -d "$LIBDIR" ] || { note_fail "the carried packages hold no $LIBDIR"; exit 1; }
  # The newest glibc symbol version the carried libraries use, against this machine's C library.
  need=$(cat "$LIBDIR"/*.so* "$PREFIX"/usr/bin/* 2>/dev/null | grep -aoE 'GLIBC_2\.[0-9]+' | sort -t. -k2,2n -u | tail -1 |
    sed 's/GLIBC_//' || true)
  if [ -z "$glibc" ]; then
    note_fail "this machine's C library is not glibc (getconf GNU_LIBC_VERSION fails); the carried libraries need glibc ${need:-?}"
    exit 1
  elif [ -n "$need" ] && [ "$(printf '%s\n%s\n' "$need" "$glibc" | sort -V | tail -1)" != "$glibc" ]; then
    note_fail "the carried libraries need glibc $need, this machine has $glibc: carry packages of an older Debian, or install Criterion, Jansson and xxHash here"
    exit 1
  fi
  # .pc files name /usr: point them at the prefix. Criterion's private requirements are static-link
  # only (their -dev packages are not carried): drop them.
  for pc in "$LIBDIR"/pkgconfig/*.pc; do
    sed -i "s|^prefix=/usr|prefix=$PREFIX/usr|; s|=/usr/|=$PREFIX/usr/|g; /^Requires.private/d; /^Libs.private/d" "$pc"
  done
  if [ -z "$PKGCONF" ]; then
    mkdir -p "$PREFIX/bin"
    printf '#!/bin/sh\nLD_LIBRARY_PATH=%s exec %s/usr/bin/pkgconf "$@"\n' "$LIBDIR" "$PREFIX" >"$PREFIX/bin/pkg-config"
    chmod +x "$PREFIX/bin/pkg-config"
    PKGCONF=$PREFIX/bin/pkg-config
  fi
  export PKG_CONFIG_PATH=$LIBDIR/pkgconfig${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}
  echo "unpacked ${#debs[@]} packages into $PREFIX (needs glibc ${need:-?}, have $glibc); pkg-config: $PKGCONF"
else
  echo "no .gpu-debs/ here: building against the system's Jansson, Criterion and xxHash"
fi
[ -n "$PKGCONF" ] || { note_fail "no pkg-config and no carried pkgconf"; exit 1; }

# ---- 3. build ----
B=$ROOT/build-gpu
LDFLAGS_EXTRA="-L$LIBDIR -Wl,-rpath-link,$LIBDIR -Wl,--disable-new-dtags -Wl,-rpath,$LIBDIR"
echo "[$(elapsed)s] configuring and building in $B"
if ! cmake -S . -B "$B" -DCMAKE_BUILD_TYPE=Release -DHCQ_BUILD_BENCH=OFF -DPKG_CONFIG_EXECUTABLE="$PKGCONF" \
  -DCMAKE_EXE_LINKER_FLAGS="$LDFLAGS_EXTRA" -DCMAKE_SHARED_LINKER_FLAGS="$LDFLAGS_EXTRA" >"$OUTDIR/cmake.txt" 2>&1 ||
  ! timeout "$(cap "$([ "$STAND_IN" = 1 ] && echo 3000 || echo 300)")" cmake --build "$B" -j "$(nproc)" >"$OUTDIR/build.txt" 2>&1; then
  tail -30 "$OUTDIR/cmake.txt" "$OUTDIR/build.txt" 2>/dev/null
  note_fail "the build"
  exit 1
fi
rm -f "$OUTDIR/cmake.txt" "$OUTDIR/build.txt"
HCQ=$B/cli/hcq
export HCQ_CACHE_DIR=$B/kernel-cache
if [ "$STAND_IN" = 1 ]; then
  # The dry run: the stand-in driver where the GPU would be (tests/fake_cuda; kernels run as host twins).
  export HCQ_CUDA_LIBRARY=$B/tests/libhcq_fake_cuda.so HCQ_FAKE_CUDA_DEVICES=2
  echo "--stand-in: CUDA is the stand-in driver $HCQ_CUDA_LIBRARY; nothing here is measured on a GPU"
fi
echo "[$(elapsed)s] built; criterion from: $(ldd "$B/tests/test_cuda" | grep -o '/[^ ]*libcriterion[^ ]*' || echo '?')"
info=$("$HCQ" info) || note_fail "hcq info"
echo "$info"
have_gpu=0
grep -qE '^CUDA +available' <<<"$info" && have_gpu=1
ndev=$(sed -n 's/^CUDA .*, \([0-9]*\) device(s).*/\1/p' <<<"$info")
ndev=${ndev:-0}
if [ "$have_gpu" = 1 ] && grep -qE '^CUDA .*NVRTC (absent|[0-9.]+ INCOMPATIBLE)' <<<"$info"; then
  note_fail "hcq has no NVRTC it can use with this driver: $(grep '^CUDA' <<<"$info" | sed 's/.*; NVRTC/NVRTC/')"
fi
echo

if ! spent 30 "the CUDA tests (ctest -L 'cuda|graph')"; then
  echo "[$(elapsed)s] CUDA tests (ctest -L 'cuda|graph')"
  timeout "$(cap 240)" ctest --test-dir "$B" -L 'cuda|graph' --output-on-failure >"$OUTDIR/ctest.txt" 2>&1 || note_fail "CUDA tests"
  cat "$OUTDIR/ctest.txt"
  # CTest counts a skipped test as passed: with a GPU, the suite on the real driver must have run.
  if [ "$have_gpu" = 1 ] && grep -E '^[[:space:]]*[0-9]+ - cuda \(Skipped\)|Test +#[0-9]+: cuda +\.+\*+Skipped' "$OUTDIR/ctest.txt"; then
    note_fail "the CUDA suite was skipped on a machine with a GPU"
  fi
fi
if [ "$have_gpu" = 1 ] && ! spent 20 "the CUDA suite test by test"; then
  echo "[$(elapsed)s] the CUDA suite on the GPU, test by test"
  timeout "$(cap 120)" "$B/tests/test_cuda" --verbose --jobs 1 >"$OUTDIR/test_cuda.txt" 2>&1 || note_fail "test_cuda"
  grep -E '^\[(PASS|FAIL|SKIP|----)\]|Synthesis' "$OUTDIR/test_cuda.txt" || note_fail "test_cuda printed no results"
  # A skip here means something the GPU run needs is missing (NVRTC, most often): a failure, said so.
  skipped=$(grep -c '^\[SKIP\]' "$OUTDIR/test_cuda.txt" || true)
  [ "$skipped" = 0 ] || note_fail "$skipped CUDA tests skipped on a machine with a GPU (see the [SKIP] lines above)"
fi
echo

# ---- examples with --check on CUDA ----
declare -a ROWS
if [ "$have_gpu" = 1 ] && ! spent 20 "the examples with --check on CUDA"; then
  for f in examples/*.json; do
    map=CPU=CUDA
    # Examples on two devices fold CPU:1 onto CUDA:0 when there is one GPU.
    if grep -q '"CPU:1"' "$f" && [ "$ndev" -lt 2 ]; then map=CPU:1=CUDA:0,CPU=CUDA; fi
    if out=$(timeout "$(cap 120)" "$HCQ" run "$f" --device-map "$map" --check --repeat 3 2>&1); then
      ROWS+=("check $(basename "$f" .json) ($map): $(echo "$out" | tail -1)")
    else
      echo "$out" | tail -20
      ROWS+=("check $(basename "$f" .json) ($map): FAILED")
      note_fail "hcq run $f --check on CUDA"
    fi
  done
fi

# ---- bench: eager against graph on CUDA ----
CHAIN=$B/chain1000.json
{
  echo '{ "format": "hcq-graph/1",'
  echo '  "buffers": { "x": { "device": "CPU:0", "bytes": 4096, "init": { "random": 1 } },'
  echo '               "x2": { "device": "CPU:0", "bytes": 4096, "init": { "random": 2 } },'
  echo '               "a": { "device": "CPU:0", "bytes": 4096, "init": "zeros" },'
  echo '               "b": { "device": "CPU:0", "bytes": 4096, "init": "zeros" } },'
  echo '  "programs": { "axpb": { "c": { "file": "'"$ROOT"'/examples/kernels/axpb.c" },'
  echo '                          "cuda": { "file": "'"$ROOT"'/examples/kernels/axpb.cu" } } },'
  echo '  "items": ['
  echo '    { "kernel": "axpb", "bufs": ["a", "x", "x"], "vals": [1024, 3, 1], "global": [4], "local": [256] }'
  for i in $(seq 1 999); do
    if [ $((i % 2)) = 1 ]; then d=b s=a; else d=a s=b; fi
    echo "   ,{ \"kernel\": \"axpb\", \"bufs\": [\"$d\", \"$s\", \"x\"], \"vals\": [1024, 1, $i], \"global\": [4], \"local\": [256] }"
  done
  echo '  ],'
  echo '  "inputs": ["x"],'
  echo '  "runs": [ {}, { "inputs": { "x": "x2" } } ] }'
} >"$CHAIN"
RESULTS=$OUTDIR/results.json
echo "[" >"$RESULTS"
first=1
bench() { # NAME FILE MAP
  local out
  spent 10 "hcq bench $1" && return
  if out=$(timeout "$(cap 120)" "$HCQ" bench "$2" --device-map "$3" --json 2>&1) && [ "${out#\{}" != "$out" ]; then
    [ $first = 1 ] || echo "," >>"$RESULTS"
    first=0
    printf '{"name": "%s", "device_map": "%s", "bench": %s}\n' "$1" "$3" "$out" >>"$RESULTS"
  else
    echo "$out" | tail -10
    note_fail "hcq bench $2 --device-map $3"
  fi
}
if [ "$have_gpu" = 1 ]; then
  echo "[$(elapsed)s] hcq bench, eager against graph, on CUDA"
  for f in examples/*.json; do
    map=CPU=CUDA
    if grep -q '"CPU:1"' "$f" && [ "$ndev" -lt 2 ]; then map=CPU:1=CUDA:0,CPU=CUDA; fi
    bench "$(basename "$f" .json)" "$f" "$map"
  done
  bench chain1000 "$CHAIN" CPU=CUDA
fi
bench "chain1000 on CPU (reference)" "$CHAIN" CPU=CPU
echo "]" >>"$RESULTS"

# ---- the decoder (hcq demo): eager against the CUDA graph on CUDA ----
DEMOS=$OUTDIR/demo.jsonl
: >"$DEMOS"
demo() { # LABEL ARGS...: one `hcq demo --json` object a line in demo.jsonl
  local label=$1 out
  shift
  spent 15 "hcq demo ($label)" && return
  if out=$(timeout "$(cap 150)" "$HCQ" demo "$@" --json 2>"$OUTDIR/demo-err.txt") && [ "${out#\{}" != "$out" ]; then
    printf '{"label": "%s", "demo": %s}\n' "$label" "$out" >>"$DEMOS"
  else
    tail -5 "$OUTDIR/demo-err.txt"
    note_fail "hcq demo $* (${label})"
  fi
}
if [ "$have_gpu" = 1 ]; then
  echo "[$(elapsed)s] hcq demo on CUDA, both shapes"
  demo "CUDA small" --device CUDA --size small
  demo "CUDA 15m" --device CUDA --size 15m --steps 64
fi

# ---- 5. the LLM race: hcq generate on CUDA (eager, CUDA graph) and llama.cpp CUDA, one file ----
LLM_TABLE=$OUTDIR/llm-table.txt
: >"$LLM_TABLE"
# find_lib SONAME: the folder of a library the machine has (the linker cache, CUDA toolkits, pip's
# nvidia packages in every Python site directory), or nothing.
find_lib() {
  local f d sites=""
  f=$(ldconfig -p 2>/dev/null | awk -v n="$1" '$1 == n {print $NF; exit}')
  [ -n "$f" ] && { dirname "$f"; return; }
  command -v python3 >/dev/null 2>&1 &&
    sites=$(python3 -c 'import site; print("\n".join(site.getsitepackages() + [site.getusersitepackages()]))' 2>/dev/null)
  for d in /usr/local/cuda/lib64 /usr/local/cuda-*/lib64 /usr/local/cuda*/targets/*/lib /opt/cuda/lib64 $sites \
    /usr/local/lib/python3*/dist-packages /opt/*/.venv/lib/python3*/site-packages; do
    for f in "$d/$1" "$d"/nvidia/cu[0-9]*/lib/"$1" "$d"/nvidia/cublas/lib/"$1"; do
      [ -e "$f" ] && { dirname "$(readlink -f "$f")"; return; }
    done
  done
}
llm_args=()
if [ "$STAND_IN" = 1 ]; then
  llm_args=(--quick --llamacpp-why "llama.cpp's CUDA backend needs NVIDIA's driver and a GPU; the stand-in plays only the driver calls hcq makes")
elif [ "$have_gpu" = 0 ]; then
  llm_args=(--llamacpp-why "no GPU")
elif [ -z "$LLAMACPP" ]; then
  llm_args=(--llamacpp-why "not carried: bash tools/gpu-check.sh --prepare-llamacpp here, then --pack")
else
  # The libraries llamacpp-bench needs beyond the carried cudart: the machine's cuBLAS and driver.
  ldirs=$LLAMACPP/lib missing=""
  read -r -a needed <<<"$(sed -n 's/^needed: //p' "$LLAMACPP/BUILD.txt")"
  for so in ${needed[@]+"${needed[@]}"}; do
    [ -e "$LLAMACPP/lib/$so" ] && continue
    case $so in libc.so* | libm.so* | libdl.so* | librt.so* | libpthread.so* | ld-linux*) continue ;; esac
    d=$(find_lib "$so")
    if [ -n "$d" ]; then
      case ":$ldirs:" in *":$d:"*) ;; *) ldirs=$ldirs:$d ;; esac
    else
      missing="$missing $so"
    fi
  done
  echo "llama.cpp: $(head -1 "$LLAMACPP/BUILD.txt"); libraries from $ldirs${missing:+; NOT FOUND:$missing}"
  if [ -n "$missing" ]; then
    llm_args=(--llamacpp-why "this machine has no$missing (a CUDA toolkit of the major version in .llamacpp/BUILD.txt, or pip's nvidia-cublas)")
  else
    # A small wrapper, so that only llama.cpp's process sees these libraries.
    # shellcheck disable=SC2016 # the wrapper expands them when it runs
    printf '#!/bin/sh\nLD_LIBRARY_PATH=%s${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH} exec %s "$@"\n' "$ldirs" \
      "$LLAMACPP/bin/llamacpp-bench" >"$OUTDIR/llamacpp-bench"
    chmod +x "$OUTDIR/llamacpp-bench"
    llm_args=(--llamacpp "$OUTDIR/llamacpp-bench" --targets)
  fi
fi
if [ "$have_gpu" = 0 ]; then
  echo "LLM on CUDA: no GPU" >"$LLM_TABLE"
elif [ -z "$MODEL" ]; then
  echo "LLM on CUDA: NOT RUN: no $MODEL_FILE here (bash tools/gpu-check.sh --pack carries it)" >"$LLM_TABLE"
elif ! command -v python3 >/dev/null 2>&1; then
  echo "LLM on CUDA: NOT RUN: no python3 (tools/llm-race.py)" >"$LLM_TABLE"
elif ! spent 30 "the LLM race on CUDA"; then
  echo "[$(elapsed)s] the LLM on CUDA: hcq generate eager against the CUDA graph, and llama.cpp (tools/llm-race.py)"
  # tools/llm-race.py's exit status 1: tokens differ, or hcq generate failed (not for want of kernels).
  t=$(cap 200)
  timeout "$t" python3 tools/llm-race.py --hcq "$HCQ" --device CUDA --model "$MODEL" "${llm_args[@]}" \
    --timeout 90 --budget $((t - 5)) --out "$OUTDIR" --title "LLM on CUDA (${gpu_names:-$driver})" >/dev/null ||
    note_fail "the LLM race on CUDA (see llm-table.txt)"
  [ -s "$LLM_TABLE" ] || echo "LLM on CUDA: FAILED: tools/llm-race.py printed no table (past its time?)" >"$LLM_TABLE"
  cat "$LLM_TABLE"
fi

# ---- 6. Vulkan on the same GPU: the bundle tools/vulkan-check.sh prepared here (carry .vkcarry) ----
if [ -n "$VKDIR" ] && ! spent 40 "the Vulkan suite (tools/vulkan-check.sh run)"; then
  echo "[$(elapsed)s] the Vulkan suite on NVIDIA's Vulkan driver (tools/vulkan-check.sh run)"
  OUT="$OUTDIR/vulkan" HCQ_VULKAN_CHECK_BUDGET=$(($(cap 300) - 5)) timeout "$(cap 300)" \
    bash tools/vulkan-check.sh run "$VKDIR" ${MODEL:+"$MODEL"} || note_fail "Vulkan suite"
  # Its decoder runs (demo_*.log: one `hcq demo --json` object each) join the demo table.
  for f in "$OUTDIR"/vulkan/demo_*.log; do
    [ -e "$f" ] || continue
    j=$(tail -1 "$f")
    [ "${j#\{}" != "$j" ] && printf '{"label": "VULKAN %s", "demo": %s}\n' "$(basename "$f" .log | sed 's/^demo_//')" "$j" >>"$DEMOS"
  done
fi

# ---- 7. the table ----
{
  echo "hcq gpu-check: $os; driver $driver; CUDA $cuda_version; NVRTC $nvrtc_version; $(elapsed)s"
  [ "$have_gpu" = 1 ] || echo "no GPU: only the CPU reference row and the tests that need no GPU ran"
  for r in ${ROWS[@]+"${ROWS[@]}"}; do echo "$r"; done
  if command -v python3 >/dev/null 2>&1; then
    python3 - "$RESULTS" <<'PY'
import json, sys
rows = json.load(open(sys.argv[1]))
print(f"{'workload':34} {'items':>5} {'eager us/run':>13} {'graph us/run':>13} {'eager ns/item':>14} {'graph ns/item':>14} "
      f"{'submit us':>10} {'speedup':>8} {'kind':>5} {'updates/replay':>15}")
for r in rows:
    b = r["bench"]
    upd = f"{b['graph_updates_per_replay']:.1f} / {b['graph_updates_alternating_runs']:.1f}"
    print(f"{r['name'][:34]:34} {b['items']:5d} {b['eager_us_per_run']:13.1f} {b['graph_us_per_run']:13.1f} "
          f"{b['per_item_eager_ns']:14.0f} {b['per_item_graph_ns']:14.0f} {b['graph_submit_us']:10.1f} "
          f"{b['speedup']:8.2f} {b['graph_kind']:>5} {upd:>15}")
print("updates/replay: driver parameter sets per replay with unchanged inputs / alternating the first two runs")
PY
    if [ -s "$DEMOS" ]; then
      python3 - "$DEMOS" <<'PY'
import json, sys
print()
print(f"{'hcq demo':14} {'steps':>5} {'kernels':>7} {'eager tok/s':>12} {'graph tok/s':>12} {'speedup':>8} "
      f"{'eager host us':>14} {'graph host us':>14} {'graph':>6} {'tokens':>9}")
for line in open(sys.argv[1]):
    r = json.loads(line)
    d = r["demo"]
    print(f"{r['label'][:14]:14} {d['steps']:5d} {d['kernels_per_token']:7d} {d['eager_tok_s']:12.1f} {d['graph_tok_s']:12.1f} "
          f"{d['graph_tok_s'] / d['eager_tok_s']:7.2f}x {d['host_us_per_token_eager']:14.2f} {d['host_us_per_token_graph']:14.2f} "
          f"{d['graph_kind']:>6} {'identical' if d['identical'] else 'DIFFER':>9}")
print("host us: the host's time to submit one step with the devices idle (eager: every launch; graph: one replay)")
PY
    fi
  else
    cat "$RESULTS"
  fi
  echo
  cat "$LLM_TABLE"
  if [ -s "$OUTDIR/vulkan/llm-table.txt" ]; then echo; cat "$OUTDIR/vulkan/llm-table.txt"; fi
  for r in ${SKIPPED[@]+"${SKIPPED[@]}"}; do echo "skipped (the ${BUDGET} s budget was spent): $r"; done
} | tee "$OUTDIR/table.txt"
echo "[$(elapsed)s] done; $([ $FAILED = 0 ] && echo "every check passed" || echo "SOME CHECKS FAILED"); files in $OUTDIR"
exit $FAILED
