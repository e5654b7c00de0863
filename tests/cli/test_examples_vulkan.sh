#!/usr/bin/env bash
# Every example on Vulkan: `hcq run FILE --device-map CPU=VULKAN --check` (graph replays equal eager
# execution on Vulkan), and the final buffers equal those the CPU computes from the C kernels, byte
# for byte (the GLSL kernels are the C kernels' twins). Exit 77 (skipped) when Vulkan is absent.
set -u
HCQ=${1:?usage: test_examples_vulkan.sh path/to/hcq examples-dir}
EXAMPLES=${2:?usage: test_examples_vulkan.sh path/to/hcq examples-dir}
export HCQ_VULKAN_VIRTUAL=1
if ! "$HCQ" info | grep -q '^VULKAN *available'; then
  echo "skipped: $("$HCQ" info | grep '^VULKAN')"
  exit 77
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
passed=0 failed=0
for f in "$EXAMPLES"/*.json; do
  name=$(basename "$f" .json)
  if ! "$HCQ" run "$f" --out "$tmp/$name.cpu" >/dev/null; then
    echo "$name: the CPU run failed"; failed=$((failed + 1)); continue
  fi
  if ! "$HCQ" run "$f" --device-map CPU=VULKAN --check --repeat 2 >"$tmp/$name.log" 2>&1; then
    echo "$name: hcq run --device-map CPU=VULKAN --check failed:"; cat "$tmp/$name.log"; failed=$((failed + 1)); continue
  fi
  if ! "$HCQ" run "$f" --device-map CPU=VULKAN --out "$tmp/$name.vk" >/dev/null; then
    echo "$name: the Vulkan run failed"; failed=$((failed + 1)); continue
  fi
  ok=1
  for bin in "$tmp/$name.cpu"/*.bin; do
    if ! cmp -s "$bin" "$tmp/$name.vk/$(basename "$bin")"; then
      echo "$name: buffer $(basename "$bin" .bin) differs between CPU and Vulkan"; ok=0
    fi
  done
  if [ $ok = 1 ]; then echo "$name: ok"; passed=$((passed + 1)); else failed=$((failed + 1)); fi
done
echo "$passed passed, $failed failed"
[ $failed = 0 ]
