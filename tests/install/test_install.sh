#!/usr/bin/env bash
# hcq as a user gets it: installs the already-built tree into a temporary prefix, checks what is
# there (files, SONAME, exported symbols, pkg-config output), then builds examples/c against the
# installed copy four ways (pkg-config and find_package(hcq), each against the shared and the static
# library), warning-free under -Wall -Wextra -Werror, and runs every program, and the installed hcq
# on a capture one of them saved. Also: every doc and example graph file is installed, the installed
# hcq runs the installed examples (the README's commands), `pkg-config --static --libs hcq` is a
# complete link line for libhcq.a, and a program linked against the prefix runs with an rpath or
# with LD_LIBRARY_PATH (the README's two ways). The C++ header builds examples/cpp with g++ and clang++.
#
# usage: test_install.sh BUILD_DIR SOURCE_DIR CC VERSION LIBDIR SHARED(ON|OFF) [SANITIZER]
# SANITIZER (address, undefined or thread) is passed to the example builds, which must match an
# instrumented library.
set -euo pipefail

build=$1 src=$2 cc=$3 version=$4 libdir=$5 shared=$6 sanitize=${7:-}
major=${version%%.*}
jobs=2

tmp=$(mktemp -d "${TMPDIR:-/tmp}/hcq-install.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
prefix=$tmp/prefix
fails=0
fail() {
  echo "FAIL: $*" >&2
  fails=$((fails + 1))
}
# Runs a command quietly; on failure shows its output and counts the failure.
quiet() {
  local what=$1
  shift
  if ! "$@" >"$tmp/out.log" 2>&1; then
    cat "$tmp/out.log" >&2
    fail "$what"
    return 1
  fi
}

flags=(-Wall -Wextra -Werror)
case "$sanitize" in
  "") ;;
  undefined) flags+=(-fsanitize=undefined -fno-sanitize-recover=all) ;;
  address | thread) flags+=("-fsanitize=$sanitize") ;;
  *) echo "unknown sanitizer $sanitize" >&2; exit 2 ;;
esac

quiet "cmake --install $build --prefix $prefix" cmake --install "$build" --prefix "$prefix" || exit 1
echo "installed into a temporary prefix"

# ---- what is installed ----
expect=(include/hcq/hcq.h include/hcq/jit.h "$libdir/libhcq.a" bin/hcq share/man/man1/hcq.1
        "$libdir/pkgconfig/hcq.pc" "$libdir/pkgconfig/hcq-static.pc" "$libdir/cmake/hcq/hcqConfig.cmake"
        "$libdir/cmake/hcq/hcqConfigVersion.cmake" "$libdir/cmake/hcq/hcqTargets.cmake"
        share/doc/hcq/examples/c/capture_loop.c share/doc/hcq/README.md share/hcq/examples/README.md)
[ "$shared" = ON ] && expect+=("$libdir/libhcq.so" "$libdir/libhcq.so.$major" "$libdir/libhcq.so.$version")
for f in "${expect[@]}"; do
  [ -e "$prefix/$f" ] || fail "not installed: $f"
done
# Every doc, where the README's links point; every graph file and kernel the README's commands use.
for d in "$src"/docs/*.md "$src"/docs/*.svg; do
  cmp -s "$d" "$prefix/share/doc/hcq/docs/$(basename "$d")" || fail "doc docs/$(basename "$d") not installed as it is"
done
for e in "$src"/examples/*.json "$src"/examples/kernels/*; do
  cmp -s "$e" "$prefix/share/hcq/examples/${e#"$src"/examples/}" || fail "example ${e#"$src"/} not installed in share/hcq/examples"
done
for h in "$src"/include/hcq/*.h; do
  cmp -s "$h" "$prefix/include/hcq/$(basename "$h")" || fail "header $(basename "$h") not installed as it is"
done

if [ "$shared" = ON ]; then
  so=$prefix/$libdir/libhcq.so.$version
  [ "$(readlink "$prefix/$libdir/libhcq.so.$major")" = "libhcq.so.$version" ] || fail "libhcq.so.$major is not a link to libhcq.so.$version"
  [ "$(readlink "$prefix/$libdir/libhcq.so")" = "libhcq.so.$major" ] || fail "libhcq.so is not a link to libhcq.so.$major"
  readelf -d "$so" | grep -q "Library soname: \[libhcq.so.$major\]" || fail "SONAME of $so is not libhcq.so.$major"
  nm -D --defined-only "$so" | awk '$2 ~ /^[A-Z]$/ && $2 != "A" {print $3}' | sort >"$tmp/exported"
  if grep -q '^hcq__' "$tmp/exported"; then fail "libhcq.so exports internal symbols: $(grep '^hcq__' "$tmp/exported" | head -5 | tr '\n' ' ')"; fi
  if grep -v '^hcq_' "$tmp/exported" | grep -q .; then fail "libhcq.so exports non-hcq symbols: $(grep -v '^hcq_' "$tmp/exported" | head -5 | tr '\n' ' ')"; fi
  # Both ways: every function the headers declare is exported (a header without the visibility
  # pragma would hide its functions), and nothing else is.
  python3 "$src/tests/install/public_api.py" "$cc" "$prefix/include" >"$tmp/declared"
  [ "$(wc -l <"$tmp/declared")" -gt 50 ] || fail "public_api.py found only $(wc -l <"$tmp/declared") functions"
  if ! diff "$tmp/declared" "$tmp/exported" >"$tmp/api.diff"; then
    fail "exports differ from the public headers (< declared only, > exported only): $(grep '^[<>]' "$tmp/api.diff" | head -10 | tr '\n' ' ')"
  fi
  echo "libhcq.so: SONAME libhcq.so.$major, $(wc -l <"$tmp/exported") symbols exported, $(wc -l <"$tmp/declared") declared in include/hcq"
fi

export PKG_CONFIG_PATH=$prefix/$libdir/pkgconfig
[ "$(pkg-config --modversion hcq)" = "$version" ] || fail "pkg-config --modversion hcq is not $version"
static_libs=$(pkg-config --static --libs hcq)
for l in -lhcq -ljansson -lxxhash -lpthread -ldl; do
  [[ " $static_libs " == *" $l "* ]] || fail "pkg-config --static --libs hcq lacks $l: $static_libs"
done
# ... and it is the whole line: libhcq.a (picked by name, as -lhcq would pick the .so) links with it
# alone into a program that runs without libhcq.so.
quiet "cc graph.c with pkg-config --static --libs hcq" "$cc" "${flags[@]}" "$src/examples/c/graph.c" -o "$tmp/graph-static-pc" \
  $(pkg-config --cflags hcq) ${static_libs/-lhcq/-l:libhcq.a} &&
  if readelf -d "$tmp/graph-static-pc" | grep -q "libhcq.so"; then fail "pkg-config --static: graph links libhcq.so";
  else quiet "pkg-config --static: graph runs" "$tmp/graph-static-pc"; fi

# The README's commands, from the prefix: the installed tool on the installed example files.
for ex in pipeline_two_devices chain; do
  if ! (cd "$tmp" && "$prefix/bin/hcq" run "$prefix/share/hcq/examples/$ex.json" --check) >"$tmp/run.log" 2>&1 ||
     ! grep -q " passed, 0 failed" "$tmp/run.log"; then
    cat "$tmp/run.log" >&2
    fail "hcq run PREFIX/share/hcq/examples/$ex.json --check"
  fi
done
quiet "hcq bench PREFIX/share/hcq/examples/chain.json --json" "$prefix/bin/hcq" bench "$prefix/share/hcq/examples/chain.json" --json
echo "the installed hcq ran the installed example files"

# A program linked against the private prefix's libhcq.so runs the two ways the README gives: an
# rpath set at link time, or LD_LIBRARY_PATH (without either the loader does not find it).
if [ "$shared" = ON ]; then
  quiet "cc graph.c with an rpath" "$cc" "${flags[@]}" "$src/examples/c/graph.c" -o "$tmp/graph-rpath" \
    $(pkg-config --cflags --libs hcq) -Wl,-rpath,"$(pkg-config --variable=libdir hcq)" &&
    quiet "a program with an rpath to the prefix runs" env -u LD_LIBRARY_PATH "$tmp/graph-rpath"
  quiet "cc graph.c" "$cc" "${flags[@]}" "$src/examples/c/graph.c" -o "$tmp/graph-plain" $(pkg-config --cflags --libs hcq) &&
    quiet "a program run with LD_LIBRARY_PATH=PREFIX/lib runs" env LD_LIBRARY_PATH="$prefix/$libdir" "$tmp/graph-plain"
  if env -u LD_LIBRARY_PATH "$tmp/graph-plain" >/dev/null 2>&1; then
    fail "a program linked against the prefix ran without rpath or LD_LIBRARY_PATH: the check above proves nothing"
  fi
fi

# ---- the examples, built against the installed copy ----
examples=(eager graph capture_loop capture_save fences)
run_examples() { # DIR KIND(shared|static) HOW
  local dir=$1 kind=$2 how=$3 ex
  for ex in "${examples[@]}"; do
    local bin=$dir/$ex
    if [ "$shared" = ON ]; then
      if [ "$kind" = shared ] && ! readelf -d "$bin" | grep -q "libhcq.so.$major"; then fail "$how: $ex does not use libhcq.so.$major"; fi
      if [ "$kind" = static ] && readelf -d "$bin" | grep -q "libhcq.so"; then fail "$how: $ex links libhcq.so, not libhcq.a"; fi
    fi
    local args=()
    [ "$ex" = capture_save ] && args=("$dir/step.json")
    if ! (cd "$dir" && LD_LIBRARY_PATH=$prefix/$libdir "$bin" "${args[@]}") >"$tmp/run.log" 2>&1; then
      cat "$tmp/run.log" >&2
      fail "$how: $ex failed"
    elif ! grep -qE "as expected|saved to" "$tmp/run.log"; then
      cat "$tmp/run.log" >&2
      fail "$how: $ex did not say its result was as expected"
    fi
  done
  # The capture that capture_save wrote, replayed by the installed tool and checked against eager.
  if ! "$prefix/bin/hcq" run "$dir/step.json" --check >"$tmp/run.log" 2>&1 || ! grep -q "1 passed, 0 failed" "$tmp/run.log"; then
    cat "$tmp/run.log" >&2
    fail "$how: hcq run step.json --check"
  fi
  echo "$how: ${#examples[@]} examples built and ran; hcq run --check passed on the saved capture"
}

kinds=(static)
[ "$shared" = ON ] && kinds=(shared static)
for kind in "${kinds[@]}"; do
  dir=$tmp/pkg-config-$kind
  mkdir -p "$dir"
  module=hcq
  [ "$kind" = static ] && module=hcq-static
  ok=1
  for ex in "${examples[@]}"; do
    quiet "pkg-config $module: cc $ex.c" "$cc" "${flags[@]}" "$src/examples/c/$ex.c" -o "$dir/$ex" \
      $(pkg-config --cflags --libs "$module") || ok=0
  done
  [ $ok = 1 ] && run_examples "$dir" "$kind" "pkg-config $module"

  dir=$tmp/cmake-$kind
  static_opt=OFF
  [ "$kind" = static ] && static_opt=ON
  if quiet "find_package(hcq) $kind: configure" cmake -S "$src/examples/c" -B "$dir" -DCMAKE_PREFIX_PATH="$prefix" \
       -DCMAKE_C_COMPILER="$cc" -DCMAKE_C_FLAGS="${flags[*]}" -DHCQ_USE_STATIC_LIBS=$static_opt &&
     quiet "find_package(hcq) $kind: build" cmake --build "$dir" -j "$jobs"; then
    run_examples "$dir" "$kind" "find_package(hcq) $kind"
    # The README: CMake gives what it builds against the package an rpath to the prefix.
    [ "$kind" = shared ] && { quiet "find_package(hcq) shared: eager runs without LD_LIBRARY_PATH" \
      env -u LD_LIBRARY_PATH "$dir/eager" || true; }
  fi
done

# ---- C++: hcq/hcq.hpp and examples/cpp/mlp.cpp against the installed copy, with g++ and clang++ ----
# Through pkg-config and find_package(hcq), warning-free under -Wpedantic too. Under a sanitizer only
# the compiler of CC's family builds them: g++ and clang++ have different sanitizer runtimes.
cmp -s "$src/include/hcq/hcq.hpp" "$prefix/include/hcq/hcq.hpp" || fail "header hcq.hpp not installed as it is"
[ -e "$prefix/share/doc/hcq/examples/cpp/mlp.cpp" ] || fail "not installed: share/doc/hcq/examples/cpp/mlp.cpp"
cxxs=(g++ clang++)
if [ -n "$sanitize" ]; then
  case "$("$cc" --version)" in *clang*) cxxs=(clang++) ;; *) cxxs=(g++) ;; esac
fi
module=hcq
[ "$shared" = ON ] || module=hcq-static
for cxx in "${cxxs[@]}"; do
  dir=$tmp/cpp-$cxx
  mkdir -p "$dir"
  expect_mlp() { # HOW BIN
    if ! LD_LIBRARY_PATH=$prefix/$libdir "$2" >"$tmp/run.log" 2>&1 || ! grep -q "as expected" "$tmp/run.log"; then
      cat "$tmp/run.log" >&2
      fail "$1: mlp did not say its result was as expected"
    fi
  }
  quiet "pkg-config $module: $cxx mlp.cpp" "$cxx" -std=c++17 -Wpedantic "${flags[@]}" "$src/examples/cpp/mlp.cpp" \
    -o "$dir/mlp-pc" $(pkg-config --cflags --libs "$module") && expect_mlp "pkg-config $module, $cxx" "$dir/mlp-pc"
  quiet "find_package(hcq) $cxx: configure" cmake -S "$src/examples/cpp" -B "$dir/cmake" -DCMAKE_PREFIX_PATH="$prefix" \
    -DCMAKE_CXX_COMPILER="$cxx" -DCMAKE_CXX_FLAGS="-Wpedantic ${flags[*]}" &&
    quiet "find_package(hcq) $cxx: build" cmake --build "$dir/cmake" -j "$jobs" &&
    expect_mlp "find_package(hcq), $cxx" "$dir/cmake/mlp"
done
echo "examples/cpp/mlp.cpp built against the installed hcq.hpp with ${cxxs[*]} (pkg-config, find_package) and ran"

# ---- precompiled kernels: the installed hcq compile writes SPIR-V, and examples/c/precompiled.c,
# built against the prefix (above, by CMake; here by pkg-config), loads it with
# hcq_program_create_binary and runs it. Needs a Vulkan device; without one the reason is said. ----
pre=$tmp/precompiled
mkdir -p "$pre"
if ! "$prefix/bin/hcq" compile --device VULKAN --out "$pre/axpb.spv" "$prefix/share/hcq/examples/kernels/axpb.glsl" \
     >"$tmp/out.log" 2>&1; then
  if grep -q "no libshaderc\|no Vulkan backend" "$tmp/out.log"; then
    echo "skipped precompiled kernels: this build cannot compile GLSL ($(head -c 200 "$tmp/out.log"))"
  else
    cat "$tmp/out.log" >&2
    fail "installed hcq compile --device VULKAN"
  fi
elif quiet "pkg-config hcq: cc precompiled.c" "$cc" "${flags[@]}" "$src/examples/c/precompiled.c" -o "$pre/precompiled" \
       $(pkg-config --cflags --libs "$([ "$shared" = ON ] && echo hcq || echo hcq-static)"); then
  for bin in "$pre/precompiled" "$tmp/cmake-static/precompiled"; do
    [ -x "$bin" ] || continue
    rc=0
    LD_LIBRARY_PATH=$prefix/$libdir "$bin" "$pre/axpb.spv" >"$tmp/run.log" 2>&1 || rc=$?
    if [ "$rc" = 77 ]; then
      echo "skipped running precompiled: $(cat "$tmp/run.log")"
    elif [ "$rc" != 0 ] || ! grep -q "as expected" "$tmp/run.log"; then
      cat "$tmp/run.log" >&2
      fail "precompiled ($bin) on the installed hcq compile's SPIR-V"
    else
      echo "hcq compile wrote SPIR-V; $(cat "$tmp/run.log")"
    fi
  done
fi

if [ "$fails" -gt 0 ]; then
  echo "$fails check(s) failed" >&2
  exit 1
fi
echo "all install checks passed"
