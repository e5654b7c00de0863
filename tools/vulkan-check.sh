#!/usr/bin/env bash
# The Vulkan suite on a machine with a GPU (NVIDIA's Vulkan driver), for tools/gpu-check.sh to call.
#
#   tools/vulkan-check.sh prepare [DIR]   here (Debian 12, with `make deps` done): build the Vulkan
#                                          suite, the hcq command and the examples into DIR
#                                          (default .vkcarry) with every shared library they need,
#                                          the Vulkan loader and the dynamic linker included, so the
#                                          GPU machine needs nothing installed but its driver and
#                                          Python 3 (for the LLM rows)
#   tools/vulkan-check.sh run [DIR] [MODEL]
#                                          on the GPU machine: the Vulkan conformance suite, the
#                                          Vulkan tests, every example (--check, and bytes equal to
#                                          the CPU's), the LLM rows when MODEL (SmolLM2-135M-Instruct
#                                          Q4_1, the GGUF of `make demo`) is given: `hcq generate
#                                          --device VULKAN --bench` eager launches against HCQ graph
#                                          replays, decode and prompt tok/s, host us per token,
#                                          identical tokens (tools/llm-race.py, the rows
#                                          tools/gpu-check.sh makes on CUDA), hcq bench rows eager
#                                          vs graph, the llama2 decoder (hcq demo, both shapes);
#                                          logs, llm-table.txt and a summary under $OUT (or DIR/out)
#
# DIR must travel with the working tree: tools/gpu-check.sh --pack packs it with the rest (or name
# it in the device tool's `carry` when it fits). The run uses the machine's Vulkan driver (its ICD
# file; the NVIDIA one under /usr/local/nvidia is used when the loader finds none),
# HCQ_VULKAN_VIRTUAL=1 so multi-device scenarios open several logical devices on the one GPU, and
# exits non-zero when anything failed (a speed figure is not a check). Every step runs under what
# is left of HCQ_VULKAN_CHECK_BUDGET seconds (default 300); one that finds less than 10 s left is
# skipped, saying so.
set -u
mode=${1:-}
dir=${2:-.vkcarry}
model=${3:-}

bundle_libs() { # bundle_libs DEST GLIBC_DEST BINARY...: every shared library the binaries load; the C
  # library and its dynamic linker apart (used only when the machine's own C library is too old)
  local dest=$1 glibc=$2; shift 2
  mkdir -p "$dest" "$glibc"
  for bin in "$@"; do
    ldd "$bin" | awk '/=> \// {print $3} /^\t\/lib/ {print $1}' | while read -r lib; do
      case $(basename "$lib") in
        libc.so.*|libm.so.*|libpthread.so.*|libdl.so.*|librt.so.*|libresolv.so.*|ld-linux*) cp -L -n "$lib" "$glibc/" ;;
        *) cp -L -n "$lib" "$dest/" ;;
      esac
    done
  done
  cp -L -n /lib64/ld-linux-x86-64.so.2 "$glibc/" 2>/dev/null || true
  # The loader is opened at run time, so ldd does not list it.
  local path
  path=$(ldconfig -p | awk '$1 == "libvulkan.so.1" && /x86-64/ {print $NF; exit}')
  [ -n "$path" ] && cp -L -n "$path" "$dest/"
}

case "$mode" in
  prepare)
    set -e
    root=$(cd "$(dirname "$0")/.." && pwd)
    scripts/install-deps.sh
    cmake -S "$root" -B "$root/build-gpu" -DCMAKE_BUILD_TYPE=Release -DHCQ_BUILD_BENCH=OFF >/dev/null
    cmake --build "$root/build-gpu" -j "$(nproc)" --target test_conformance test_vulkan hcq_cli
    rm -rf "$dir"
    mkdir -p "$dir/bin" "$dir/lib" "$dir/glibc"
    for b in tests/test_conformance tests/test_vulkan cli/hcq; do
      cp "$root/build-gpu/$b" "$dir/bin/"
      strip "$dir/bin/$(basename "$b")"
    done
    bundle_libs "$dir/lib" "$dir/glibc" "$dir"/bin/*
    cp -r "$root/examples" "$dir/examples"
    cp "$root/tests/cli/test_examples_vulkan.sh" "$dir/bin/"
    cp "$0" "$dir/bin/vulkan-check.sh"
    # The LLM rows' driver and its inputs (it imports bench/llm_peers.py from beside its folder).
    cp "$root/tools/llm-race.py" "$dir/bin/"
    mkdir -p "$dir/bench" && cp "$root/bench/llm_peers.py" "$dir/bench/"
    du -sh "$dir"
    echo "prepared $dir: carry it and run tools/vulkan-check.sh run $dir there"
    ;;
  run)
    out=${OUT:-$dir/out}
    mkdir -p "$out"
    bin=$(cd "$dir/bin" && pwd)
    lib=$(cd "$dir/lib" && pwd)
    glibc=$(cd "$dir/glibc" && pwd)
    export HCQ_VULKAN_VIRTUAL=1 HCQ_CACHE_DIR=$out/kernel-cache HCQ_TEST_TMP=$out/tmp
    export LD_LIBRARY_PATH="$lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    nv_icd=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
    # Run a bundled binary: directly when this machine's C library is new enough, else through the
    # bundled dynamic linker.
    runner=()
    if ! "$bin/hcq" info >/dev/null 2>&1; then
      runner=("$glibc/ld-linux-x86-64.so.2" --library-path "$lib:$glibc")
    fi
    hcq() { "${runner[@]}" "$bin/hcq" "$@"; }
    hcq info | tee "$out/info.txt"
    if ! grep -q '^VULKAN *available' "$out/info.txt" && [ -f "$nv_icd" ]; then
      export VK_DRIVER_FILES=$nv_icd VK_ICD_FILENAMES=$nv_icd
      hcq info | tee "$out/info.txt"
    fi
    failed=0
    start=$(date +%s)
    budget=${HCQ_VULKAN_CHECK_BUDGET:-300}
    left() { echo $((budget - ($(date +%s) - start))); }
    step() { # step NAME COMMAND...: runs under what is left of the budget, logs, counts failures
      local name=$1; shift
      echo "== $name"
      if [ "$(left)" -lt 10 ]; then
        echo "skipped: less than 10 s of the $budget s budget left" | tee "$out/$name.log"
        return
      fi
      if timeout "$(left)" "$@" >"$out/$name.log" 2>&1; then echo "ok"; else echo "FAILED (see $name.log)"; failed=$((failed + 1)); fi
      tail -3 "$out/$name.log"
    }
    step conformance "${runner[@]}" "$bin/test_conformance" --filter='conformance_VULKAN/*' --jobs 1 --verbose
    step vulkan "${runner[@]}" "$bin/test_vulkan" --jobs 1 --verbose
    hcq_wrapper="$out/hcq"
    printf '#!/bin/sh\nexec %s "%s" "$@"\n' "${runner[*]}" "$bin/hcq" >"$hcq_wrapper"
    chmod +x "$hcq_wrapper"
    step examples bash "$bin/test_examples_vulkan.sh" "$hcq_wrapper" "$dir/examples"
    # The LLM: eager launches against HCQ graph replays (llama.cpp's row is CUDA's, in gpu-check.sh).
    race=$bin/llm-race.py
    [ -f "$race" ] || race=$(dirname "$0")/llm-race.py
    if [ -z "$model" ]; then
      echo "LLM on VULKAN: NOT RUN: no model given (tools/vulkan-check.sh run DIR MODEL)" >"$out/llm-table.txt"
    elif ! command -v python3 >/dev/null 2>&1; then
      echo "LLM on VULKAN: NOT RUN: no python3" >"$out/llm-table.txt"
    else
      step llm python3 "$race" --hcq "$hcq_wrapper" --device VULKAN --model "$model" --budget $(($(left) - 5)) --out "$out" \
        --llamacpp-why "llama.cpp runs on CUDA: its row is in the CUDA table" --title "LLM on VULKAN ($(sed -n 's/^VULKAN.*VULKAN:0 is \([^;]*\).*/\1/p' "$out/info.txt" | head -1))"
      [ -s "$out/llm-table.txt" ] || echo "LLM on VULKAN: FAILED: no table (see llm.log)" >"$out/llm-table.txt"
    fi
    for f in "$dir"/examples/*.json; do
      name=$(basename "$f" .json)
      step "bench_$name" "$hcq_wrapper" bench "$f" --device-map CPU=VULKAN --json
      step "bench_cpu_$name" "$hcq_wrapper" bench "$f" --json
    done
    # The decoder, eager against HCQ graph replays (one JSON object each; tools/gpu-check.sh tabulates them).
    step demo_small "$hcq_wrapper" demo --device VULKAN --size small --json
    step demo_15m "$hcq_wrapper" demo --device VULKAN --size 15m --steps 64 --json
    {
      echo "device: $(grep '^VULKAN' "$out/info.txt")"
      for f in "$out"/bench_*.log "$out"/demo_*.log; do echo "$(basename "$f" .log): $(tail -1 "$f")"; done
      [ -s "$out/llm-table.txt" ] && cat "$out/llm-table.txt"
      echo "$failed step(s) failed"
    } | tee "$out/summary.txt"
    [ "$failed" = 0 ]
    ;;
  *)
    echo "usage: tools/vulkan-check.sh prepare [DIR] | run [DIR] [MODEL]" >&2
    exit 2
    ;;
esac
