#!/bin/sh
# Builds tests/test_cpp.cpp and examples/cpp/mlp.cpp with the C++ compiler CXX against the built
# LIBRARY (libhcq.so) in BUILD_DIR, warning-free under -Wall -Wextra -Wpedantic -Werror, and runs both.
# A missing compiler skips (exit 77, CTest's SKIP_RETURN_CODE) with the reason noted in SKIP_LOG.
# usage: run_with.sh CXX SOURCE_DIR BUILD_DIR LIBRARY SKIP_LOG
set -eu
cxx=$1 src=$2 dir=$3 lib=$4 log=$5
if ! command -v "$cxx" >/dev/null 2>&1; then
  echo "SKIPPED: $cxx is not installed (scripts/install-deps.sh installs it)"
  echo "cpp with $cxx: $cxx is not installed" >>"$log"
  exit 77
fi
cmake -S "$src/tests/cpp" -B "$dir" -DCMAKE_CXX_COMPILER="$cxx" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DHCQ_LIBRARY="$lib" -DHCQ_INCLUDE_DIR="$src/include" >"$dir.log" 2>&1 || { cat "$dir.log"; exit 1; }
cmake --build "$dir" -j 2
"$dir/test_cpp"
"$dir/mlp"
