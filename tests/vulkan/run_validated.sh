#!/usr/bin/env bash
# Runs a command with the Khronos validation layer and synchronisation validation on, and fails on
# any validation error it reports (or when the command fails):
#   run_validated.sh CANARY HCQ COMMAND...
# First the canary (tests/vulkan/validation_canary.c) makes one invalid call and one race under the
# same settings: unless the layer reports both, the check could not fail, and the run fails.
# Exit 77 (skipped, with the reason) when the layer is not installed (Debian:
# vulkan-validationlayers) or no Vulkan device is available.
set -u
canary=${1:?usage: run_validated.sh CANARY HCQ COMMAND...}
hcq=${2:?usage: run_validated.sh CANARY HCQ COMMAND...}
shift 2

manifest=""
IFS=: read -r -a dirs <<<"${VK_LAYER_PATH:-}:${XDG_DATA_DIRS:-/usr/local/share:/usr/share}"
for d in "${dirs[@]}" /etc/vulkan/explicit_layer.d; do
  [ -n "$d" ] || continue
  for f in "$d/VkLayer_khronos_validation.json" "$d/vulkan/explicit_layer.d/VkLayer_khronos_validation.json"; do
    [ -f "$f" ] && { manifest=$f; break 2; }
  done
done
if [ -z "$manifest" ]; then
  echo "SKIPPED: the Khronos validation layer is not installed (Debian: apt-get install vulkan-validationlayers)"
  exit 77
fi
if ! "$hcq" info 2>/dev/null | grep -q '^VULKAN *available'; then
  echo "SKIPPED: no Vulkan device: $("$hcq" info 2>&1 | grep '^VULKAN')"
  exit 77
fi

tmp=$(mktemp -d "${TMPDIR:-/tmp}/hcq-vkval.XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT
# Errors and warnings to standard output; synchronisation validation on (the layer of Debian 12,
# 1.3.239, reads this file; VK_LAYER_ENABLES is its older spelling of the last line).
cat >"$tmp/vk_layer_settings.txt" <<'SETTINGS'
khronos_validation.debug_action = VK_DBG_LAYER_ACTION_LOG_MSG
khronos_validation.report_flags = error,warn
khronos_validation.log_filename = stdout
khronos_validation.enables = VK_VALIDATION_FEATURE_ENABLE_SYNCHRONIZATION_VALIDATION_EXT
SETTINGS
export VK_INSTANCE_LAYERS=VK_LAYER_KHRONOS_validation
# Under AddressSanitizer the layer's own allocations that it keeps until exit are not hcq's leaks
# (a Vulkan object hcq forgot to destroy is still caught: the layer reports it at vkDestroyDevice).
supp=$(printf '%s\n' "${LSAN_OPTIONS:-}" | tr ':' '\n' | sed -n 's/^suppressions=//p' | tail -1)
{ [ -n "$supp" ] && [ -f "$supp" ] && cat "$supp"; echo "leak:libVkLayer_khronos_validation.so"; } >"$tmp/lsan.supp"
export LSAN_OPTIONS="${LSAN_OPTIONS:+$LSAN_OPTIONS:}suppressions=$tmp/lsan.supp"
export VK_LAYER_SETTINGS_PATH=$tmp/vk_layer_settings.txt
export VK_LAYER_ENABLES=VK_VALIDATION_FEATURE_ENABLE_SYNCHRONIZATION_VALIDATION_EXT

"$canary" >"$tmp/canary.log" 2>&1
rc=$?
if [ $rc = 77 ]; then
  echo "SKIPPED: $(tail -1 "$tmp/canary.log")"
  exit 77
fi
for want in VUID-VkBufferCreateInfo-size-00912 SYNC-HAZARD-WRITE-AFTER-WRITE; do
  if ! grep -q -- "$want" "$tmp/canary.log"; then
    echo "FAIL: the validation layer ($manifest) did not report the canary's $want: this check could not fail"
    cat "$tmp/canary.log"
    exit 1
  fi
done
echo "validation layer $manifest: the canary's invalid call and race were reported"

"$@" >"$tmp/run.log" 2>&1
rc=$?
errors=$(grep -c "Validation Error" "$tmp/run.log")
warnings=$(grep -c "Validation Warning" "$tmp/run.log")
if [ "$errors" -gt 0 ] || [ $rc != 0 ]; then
  cat "$tmp/run.log"
  echo "FAIL: $* exited with $rc under validation, $errors validation error(s), $warnings warning(s)"
  grep -o "VUID-[A-Za-z0-9_-]*\|SYNC-HAZARD-[A-Z-]*" "$tmp/run.log" | sort | uniq -c | sort -rn | head -20
  exit 1
fi
tail -3 "$tmp/run.log"
echo "no validation errors ($warnings warning(s)): $*"
