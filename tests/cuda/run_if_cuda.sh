#!/bin/sh
# Runs a CUDA test binary when this machine has a usable CUDA driver; otherwise says why and exits
# 77 (CTest's SKIP_RETURN_CODE) after noting the reason in SKIP_LOG for the summary `make test` prints.
# usage: run_if_cuda.sh HCQ_CLI SKIP_LOG TEST [ARGS...]
hcq=$1 log=$2
shift 2
line=$("$hcq" info | grep '^CUDA ')
case "$line" in
  *" available "*) exec "$@" ;;
esac
reason="CUDA absent: $(printf '%s' "$line" | sed 's/^CUDA *absent *//')"
echo "SKIPPED $(basename "$1"): $reason"
echo "$(basename "$1"): $reason" >>"$log"
exit 77
