#!/bin/sh
# Builds tests/test_cpp.cpp and examples/cpp/mlp.cpp with the C++ compiler CXX against the built
# LIBRARY (libhcq.so), warning-free under -Wall -Wextra -Wpedantic -Werror, in BUILD_DIR, and runs
# both. A missing compiler fails: `make test` installs g++ and clang++ (scripts/install-deps.sh).
# usage: run_with.sh CXX SOURCE_DIR BUILD_DIR LIBRARY
set -eu
cxx=$1 src=$2 dir=$3 lib=$4
if ! command -v "$cxx" >/dev/null 2>&1; then
  echo "FAIL: $cxx is not installed (scripts/install-deps.sh installs it)" >&2
  exit 1
fi
cmake -S "$src/tests/cpp" -B "$dir" -DCMAKE_CXX_COMPILER="$cxx" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DHCQ_LIBRARY="$lib" -DHCQ_INCLUDE_DIR="$src/include" >"$dir.log" 2>&1 || { cat "$dir.log"; exit 1; }
cmake --build "$dir" -j 2
"$dir/test_cpp"
"$dir/mlp"
