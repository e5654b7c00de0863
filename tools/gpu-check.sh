#!/usr/bin/env bash
# tools/gpu-check.sh: build hcq on a GPU machine and check its CUDA device and CUDA graph there.
#
# In order, within 8 minutes:
#   1. prints the OS, NVIDIA driver, CUDA and NVRTC versions it finds;
#   2. unpacks the carried Debian packages (.gpu-debs/*.deb: Jansson, Criterion, xxHash and what they
#      need at run time, and pkgconf) with `dpkg -x` into a prefix under /tmp, never into /, and points
#      pkg-config and CMake at it (the GPU machine reaches no package registry and is not Debian);
#   3. builds hcq (tests on), runs the CUDA tests (ctest -L cuda: the suite on the real driver, the
#      same suite on the stand-in driver, NVRTC, the update planner is in -L graph), every example
#      with `hcq run --device-map CPU=CUDA --check`, and `hcq bench` eager against graph on CUDA for
#      every example and for a generated 1000-kernel chain;
#   4. prints a short table. Log and results go under $OUT when it is set (else ./gpu-check-out):
#      gpu-check.log, results.json (every bench object), table.txt.
# Without a GPU it says so in its first lines, still builds and runs what needs none (the stand-in
# driver's tests, NVRTC, the planner) and exits 0; the GPU rows of the table then read "no GPU".
# Exit status: 0 when every check that could run passed, 1 otherwise.
#
# Carrying it to the GPU machine (the device tool; /work/.library/device/README.md):
#   here, once per checkout (Debian, with apt):   bash tools/gpu-check.sh --download
#       downloads the .deb files into .gpu-debs/ (git-ignored, about 5 MB)
#   and, for the Vulkan suite too:              tools/vulkan-check.sh prepare
#       builds it with every library it needs into .vkcarry/ (git-ignored, about 40 MB)
#   then one call of the device tool's run, from the repository root:
#       command:  bash tools/gpu-check.sh
#       carry:    [".gpu-debs", ".vkcarry"]
#       timeout_s: 540
#   and read gpu-check.log, results.json and table.txt from the files that come back ($OUT).
set -u
cd "$(dirname "$0")/.." || exit 1
ROOT=$PWD

# Runtime closure of libcriterion3, libjansson4 and libxxhash0 beyond libc, their -dev packages
# (headers, .pc files, .so links), and pkgconf in case the machine has no pkg-config.
DEBS="libcriterion-dev libcriterion3 libjansson-dev libjansson4 libxxhash-dev libxxhash0 libffi8 libgit2-1.5
libnanomsg5 libcom-err2 libgssapi-krb5-2 libhttp-parser2.9 libk5crypto3 libkeyutils1 libkrb5-3 libkrb5support0
libmbedcrypto7 libmbedtls14 libmbedx509-1 libpcre2-8-0 libssh2-1 libssl3 zlib1g pkgconf-bin libpkgconf3"

if [ "${1:-}" = "--download" ]; then
  mkdir -p .gpu-debs && cd .gpu-debs || exit 1
  # shellcheck disable=SC2086
  apt-get download $DEBS || { echo "apt-get download failed (run apt-get update first?)" >&2; exit 1; }
  echo "downloaded $(ls ./*.deb | wc -l) packages into .gpu-debs/ ($(du -sh . | cut -f1))"
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

# ---- 1. what this machine has ----
os=$( (. /etc/os-release 2>/dev/null && echo "$PRETTY_NAME") || uname -sr)
driver=none gpus=0 gpu_names=""
if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then
  driver=$(nvidia-smi --query-gpu=driver_version --format=csv,noheader | head -1)
  gpus=$(nvidia-smi -L | grep -c '^GPU')
  gpu_names=$(nvidia-smi --query-gpu=name --format=csv,noheader | sort | uniq -c | sed 's/^ *//' | tr '\n' ';')
fi
# The CUDA version the driver supports and NVRTC's, asked of the libraries themselves.
lib_version() { # LIBRARY FUNCTION(int*[, int*])
  command -v python3 >/dev/null 2>&1 || { echo "?"; return; }
  python3 - "$1" "$2" <<'PY' 2>/dev/null || echo "?"
import ctypes, sys
lib = ctypes.CDLL(sys.argv[1])
a, b = ctypes.c_int(0), ctypes.c_int(0)
if sys.argv[2] == "nvrtcVersion":
    lib.nvrtcVersion(ctypes.byref(a), ctypes.byref(b)); print(f"{a.value}.{b.value}")
else:
    lib.cuDriverGetVersion(ctypes.byref(a)); print(f"{a.value // 1000}.{a.value % 1000 // 10}")
PY
}
cuda_version=none
[ "$driver" != none ] && cuda_version=$(lib_version libcuda.so.1 cuDriverGetVersion)
# NVRTC: hcq looks for libnvrtc.so.{13,12,11.2} and libnvrtc.so on the library path and under
# /usr/local/cuda/lib64; toolkits elsewhere (or pip's nvidia-cuda-nvrtc) are passed by path.
nvrtc=""
for cand in libnvrtc.so.13 libnvrtc.so.12 libnvrtc.so.11.2 libnvrtc.so; do
  if ldconfig -p 2>/dev/null | grep -q "$cand "; then nvrtc=$cand; break; fi
done
if [ -z "$nvrtc" ]; then
  nvrtc=$(ls /usr/local/cuda/lib64/libnvrtc.so.1[0-9]* /usr/local/cuda-*/lib*/libnvrtc.so.1[0-9]* \
    /usr/local/lib/python3*/dist-packages/nvidia/cu*/lib/libnvrtc.so.1[0-9]* \
    /opt/*/.venv/lib/python3*/site-packages/nvidia/cu*/lib/libnvrtc.so.1[0-9]* 2>/dev/null | grep -v builtins | head -1)
  [ -n "$nvrtc" ] && export HCQ_NVRTC_LIBRARY=$nvrtc
fi
nvrtc_version=none
[ -n "$nvrtc" ] && nvrtc_version="$(lib_version "$nvrtc" nvrtcVersion) ($nvrtc)"
echo "OS:     $os ($(uname -m), kernel $(uname -r))"
echo "driver: $driver${gpu_names:+, GPUs: $gpu_names}"
echo "CUDA:   $cuda_version (what the driver supports)$(command -v nvcc >/dev/null 2>&1 && echo "; nvcc $(nvcc --version | grep -o 'release [0-9.]*' | cut -d' ' -f2)")"
echo "NVRTC:  $nvrtc_version"
if [ "$driver" = none ]; then
  echo "GPU:    none found (no nvidia-smi or no device): the checks that need a GPU are skipped"
fi
echo

# ---- 2. the carried packages, unpacked into a prefix ----
PREFIX=/tmp/hcq-gpu-prefix
LIBDIR=$PREFIX/usr/lib/x86_64-linux-gnu
PKGCONF=$(command -v pkg-config || true)
if ls .gpu-debs/*.deb >/dev/null 2>&1; then
  rm -rf "$PREFIX" && mkdir -p "$PREFIX"
  for f in .gpu-debs/*.deb; do
    if command -v dpkg >/dev/null 2>&1; then
      dpkg -x "$f" "$PREFIX" || note_fail "dpkg -x $f"
    else # a .deb is an ar archive: its data.tar.* is what dpkg -x unpacks
      (cd "$PREFIX" && ar p "$ROOT/$f" "$(ar t "$ROOT/$f" | grep '^data.tar')" | tar -x -a -f - 2>/dev/null ||
        ar p "$ROOT/$f" "$(ar t "$ROOT/$f" | grep '^data.tar')" | tar -xJ) || note_fail "unpacking $f"
    fi
  done
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
  echo "unpacked $(ls .gpu-debs/*.deb | wc -l) packages into $PREFIX; pkg-config: $PKGCONF"
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
  ! timeout 300 cmake --build "$B" -j "$(nproc)" >"$OUTDIR/build.txt" 2>&1; then
  tail -30 "$OUTDIR/cmake.txt" "$OUTDIR/build.txt" 2>/dev/null
  note_fail "the build"
  exit 1
fi
rm -f "$OUTDIR/cmake.txt" "$OUTDIR/build.txt"
HCQ=$B/cli/hcq
export HCQ_CACHE_DIR=$B/kernel-cache
echo "[$(elapsed)s] built; criterion from: $(ldd "$B/tests/test_cuda" | grep -o '/[^ ]*libcriterion[^ ]*' || echo '?')"
"$HCQ" info
have_gpu=0
"$HCQ" info | grep -qE '^CUDA +available' && have_gpu=1
ndev=$("$HCQ" info | sed -n 's/^CUDA .*, \([0-9]*\) device(s).*/\1/p')
ndev=${ndev:-0}
echo

echo "[$(elapsed)s] CUDA tests (ctest -L 'cuda|graph')"
timeout 240 ctest --test-dir "$B" -L 'cuda|graph' --output-on-failure || note_fail "CUDA tests"
if [ "$have_gpu" = 1 ]; then
  echo "[$(elapsed)s] the CUDA suite on the GPU, test by test"
  timeout 120 "$B/tests/test_cuda" --verbose --jobs 1 2>&1 | grep -E '^\[(PASS|FAIL|SKIP|----)\]|Synthesis' ||
    note_fail "test_cuda"
fi
echo

# ---- examples with --check on CUDA ----
declare -a ROWS
if [ "$have_gpu" = 1 ]; then
  for f in examples/*.json; do
    map=CPU=CUDA
    # Examples on two devices fold CPU:1 onto CUDA:0 when there is one GPU.
    if grep -q '"CPU:1"' "$f" && [ "$ndev" -lt 2 ]; then map=CPU:1=CUDA:0,CPU=CUDA; fi
    if out=$(timeout 120 "$HCQ" run "$f" --device-map "$map" --check --repeat 3 2>&1); then
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
  if out=$(timeout 120 "$HCQ" bench "$2" --device-map "$3" --json 2>&1) && [ "${out#\{}" != "$out" ]; then
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

# ---- Vulkan on the same GPU: the bundle tools/vulkan-check.sh prepared here (carry ".vkcarry") ----
if [ -d .vkcarry ]; then
  echo "[$(elapsed)s] the Vulkan suite on NVIDIA's Vulkan driver (tools/vulkan-check.sh run)"
  OUT="$OUTDIR/vulkan" timeout 240 bash tools/vulkan-check.sh run .vkcarry || note_fail "Vulkan suite"
fi

# ---- 4. the table ----
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
  else
    cat "$RESULTS"
  fi
} | tee "$OUTDIR/table.txt"
echo "[$(elapsed)s] done; $([ $FAILED = 0 ] && echo "every check passed" || echo "SOME CHECKS FAILED"); files in $OUTDIR"
exit $FAILED
