#!/usr/bin/env bash
# hcq as a user gets it: installs the already-built tree into a temporary prefix, checks what is
# there (files, SONAME, exported symbols, pkg-config output), then builds examples/c against the
# installed copy four ways (pkg-config and find_package(hcq), each against the shared and the static
# library), warning-free under -Wall -Wextra -Werror, and runs every program, and the installed hcq
# on a capture one of them saved. Also: every doc and example graph file is installed, the installed
# hcq runs the installed examples (the README's commands), `pkg-config --static --libs hcq` is a
# complete link line for libhcq.a, and a program linked against the prefix runs with an rpath or
# with LD_LIBRARY_PATH (the README's two ways). The C++ header builds examples/cpp with g++ and
# clang++; the installed hcq compile writes SPIR-V that examples/c/precompiled.c loads. Where hcq has
# its MPI layer: libhcq_mpi.so (linked to libhcq.so, which exports just the internals it needs, under
# HCQ_PRIVATE_<version>) and libhcq_mpi.a, and examples/c/mpi_pipeline.c built with mpicc through
# hcq-mpi / hcq-mpi-static and through find_package(hcq) + hcq::mpi, each run under mpirun -np 2.
#
# usage: test_install.sh BUILD_DIR SOURCE_DIR CC VERSION LIBDIR SHARED(ON|OFF) [SANITIZER [MPICC MPIEXEC]]
# SANITIZER (address, undefined or thread) is passed to the example builds, which must match an
# instrumented library. MPICC is empty when hcq was built without its MPI layer (then nothing of it
# may be installed); MPIEXEC empty builds the MPI example without running it.
set -euo pipefail

build=$1 src=$2 cc=$3 version=$4 libdir=$5 shared=$6 sanitize=${7:-} mpicc=${8:-} mpiexec=${9:-}
src=$(cd "$src" && pwd) # commands below run in other folders
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
mpi_files=("$libdir/libhcq_mpi.a" "$libdir/pkgconfig/hcq-mpi.pc" "$libdir/pkgconfig/hcq-mpi-static.pc"
           "$libdir/cmake/hcq/hcqMpiTargets.cmake")
[ "$shared" = ON ] && mpi_files+=("$libdir/libhcq_mpi.so" "$libdir/libhcq_mpi.so.$major" "$libdir/libhcq_mpi.so.$version")
if [ -n "$mpicc" ]; then
  expect+=("${mpi_files[@]}" share/doc/hcq/examples/c/mpi_pipeline.c)
else
  for f in "${mpi_files[@]}"; do
    [ -e "$prefix/$f" ] && fail "installed by an hcq built without its MPI layer: $f"
  done
fi
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
  if readelf -d "$so" | grep NEEDED | grep -qi mpi; then fail "libhcq.so links MPI: $(readelf -d "$so" | grep NEEDED | grep -i mpi)"; fi
  # NAME@@VERSION for versioned symbols: the public API has none, the internals below HCQ_PRIVATE_<version>.
  nm -D --defined-only "$so" | awk '$2 ~ /^[A-Z]$/ && $2 != "A" {print $3}' | sort >"$tmp/exported_versioned"
  private_node=HCQ_PRIVATE_$version
  grep '^hcq__' "$tmp/exported_versioned" >"$tmp/private_versioned" || true
  if grep -v "@@$private_node\$" "$tmp/private_versioned" | grep -q .; then
    fail "libhcq.so exports internals outside $private_node: $(grep -v "@@$private_node\$" "$tmp/private_versioned" | head -5 | tr '\n' ' ')"
  fi
  sed 's/@.*//' "$tmp/private_versioned" >"$tmp/private_exported"
  # Functions only: an exported variable's size would be part of what libhcq_mpi.so assumes.
  nm -D --defined-only "$so" | awk '$3 ~ /^hcq__/ && $2 != "T" {print $3}' >"$tmp/private_data"
  if [ -s "$tmp/private_data" ]; then fail "libhcq.so exports internal data: $(head -5 "$tmp/private_data" | tr '\n' ' ')"; fi
  # Exactly the internals declared HCQ__PRIVATE_EXPORT, no other hcq__ symbol.
  python3 "$src/tests/install/private_api.py" "$src" >"$tmp/private_declared"
  if ! diff "$tmp/private_declared" "$tmp/private_exported" >"$tmp/private.diff"; then
    fail "libhcq.so's hcq__ exports differ from HCQ__PRIVATE_EXPORT (< declared only, > exported only): $(grep '^[<>]' "$tmp/private.diff" | head -10 | tr '\n' ' ')"
  fi
  grep -v '^hcq__' "$tmp/exported_versioned" >"$tmp/exported" || true
  if grep -q '@' "$tmp/exported"; then fail "libhcq.so's public symbols carry versions: $(grep '@' "$tmp/exported" | head -5 | tr '\n' ' ')"; fi
  if grep -v '^hcq_' "$tmp/exported" | grep -q .; then fail "libhcq.so exports non-hcq symbols: $(grep -v '^hcq_' "$tmp/exported" | head -5 | tr '\n' ' ')"; fi
  # Both ways: every function the headers declare is exported (a header without the visibility
  # pragma would hide its functions), and nothing else is.
  python3 "$src/tests/install/public_api.py" "$cc" "$prefix/include" >"$tmp/declared"
  [ "$(wc -l <"$tmp/declared")" -gt 50 ] || fail "public_api.py found only $(wc -l <"$tmp/declared") functions"
  if ! diff "$tmp/declared" "$tmp/exported" >"$tmp/api.diff"; then
    fail "exports differ from the public headers (< declared only, > exported only): $(grep '^[<>]' "$tmp/api.diff" | head -10 | tr '\n' ' ')"
  fi
  echo "libhcq.so: SONAME libhcq.so.$major, $(wc -l <"$tmp/exported") symbols exported, $(wc -l <"$tmp/declared") declared in include/hcq; $(wc -l <"$tmp/private_exported") internals under $private_node"
fi

# libhcq_mpi.so: its own SONAME, hcq/mpi.h's functions exported and nothing else, and no copy of the
# core: it needs libhcq.so, defines none of its symbols, and what it takes from libhcq.so's internals
# is exactly what libhcq.so exports under HCQ_PRIVATE_<version> (so none is exported for nothing).
if [ "$shared" = ON ] && [ -n "$mpicc" ]; then
  mso=$prefix/$libdir/libhcq_mpi.so.$version
  [ "$(readlink "$prefix/$libdir/libhcq_mpi.so.$major")" = "libhcq_mpi.so.$version" ] || fail "libhcq_mpi.so.$major is not a link to libhcq_mpi.so.$version"
  [ "$(readlink "$prefix/$libdir/libhcq_mpi.so")" = "libhcq_mpi.so.$major" ] || fail "libhcq_mpi.so is not a link to libhcq_mpi.so.$major"
  readelf -d "$mso" | grep -q "Library soname: \[libhcq_mpi.so.$major\]" || fail "SONAME of $mso is not libhcq_mpi.so.$major"
  readelf -d "$mso" | grep -q "Shared library: \[libhcq.so.$major\]" || fail "libhcq_mpi.so does not link libhcq.so.$major"
  nm -D --defined-only "$mso" | awk '$2 ~ /^[A-Z]$/ && $2 != "A" {print $3}' | sort >"$tmp/mpi_exported"
  OMPI_CC=$cc MPICH_CC=$cc python3 "$src/tests/install/public_api.py" "$mpicc" "$prefix/include" hcq/mpi.h |
    comm -23 - "$tmp/declared" >"$tmp/mpi_declared"
  [ "$(wc -l <"$tmp/mpi_declared")" -gt 5 ] || fail "public_api.py found only $(wc -l <"$tmp/mpi_declared") functions in hcq/mpi.h"
  if ! diff "$tmp/mpi_declared" "$tmp/mpi_exported" >"$tmp/mpi_api.diff"; then
    fail "libhcq_mpi.so's exports differ from hcq/mpi.h (< declared only, > exported only): $(grep '^[<>]' "$tmp/mpi_api.diff" | head -10 | tr '\n' ' ')"
  fi
  nm --defined-only "$mso" | awk '{print $3}' | sort -u | comm -12 - <(sed 's/@.*//' "$tmp/exported_versioned" | sort -u) >"$tmp/mpi_dup"
  if [ -s "$tmp/mpi_dup" ]; then fail "libhcq_mpi.so carries its own copy of core symbols: $(head -5 "$tmp/mpi_dup" | tr '\n' ' ')"; fi
  nm -D --undefined-only "$mso" | awk '$1 == "U" && $2 ~ /^hcq__/ {print $2}' | sort >"$tmp/mpi_needs_versioned"
  if grep -v "@$private_node\$" "$tmp/mpi_needs_versioned" | grep -q .; then
    fail "libhcq_mpi.so takes internals not bound to $private_node: $(grep -v "@$private_node\$" "$tmp/mpi_needs_versioned" | head -5 | tr '\n' ' ')"
  fi
  if ! sed 's/@.*//' "$tmp/mpi_needs_versioned" | diff - "$tmp/private_exported" >"$tmp/mpi_needs.diff"; then
    fail "libhcq_mpi.so's needs differ from libhcq.so's private exports (< needed only, > exported only): $(grep '^[<>]' "$tmp/mpi_needs.diff" | head -10 | tr '\n' ' ')"
  fi
  echo "libhcq_mpi.so: SONAME libhcq_mpi.so.$major, $(wc -l <"$tmp/mpi_exported") symbols exported (hcq/mpi.h), $(wc -l <"$tmp/mpi_needs_versioned") internals taken from libhcq.so"
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

# examples/c/mpi_pipeline.c under mpirun -np 2 (tests/mpi/run_mpi_test.sh: the root variables,
# --oversubscribe, a timeout), from the prefix. Shared: it uses libhcq_mpi.so and libhcq.so, the one
# core; static: neither.
run_mpi_pipeline() { # BIN KIND(shared|static) HOW
  local bin=$1 kind=$2 how=$3
  if [ "$shared" = ON ]; then
    if [ "$kind" = shared ]; then
      for l in "libhcq_mpi.so.$major" "libhcq.so.$major"; do
        readelf -d "$bin" | grep -q "\[$l\]" || fail "$how: mpi_pipeline does not use $l"
      done
    elif readelf -d "$bin" | grep -q "libhcq"; then fail "$how: mpi_pipeline links a shared libhcq, not the archives"; fi
  fi
  if [ -z "$mpiexec" ]; then
    echo "$how: mpi_pipeline built; not run (no mpirun found)"
    return
  fi
  if ! (cd "$tmp" && LD_LIBRARY_PATH=$prefix/$libdir "$src/tests/mpi/run_mpi_test.sh" "$mpiexec" 2 shm "$bin") >"$tmp/run.log" 2>&1; then
    cat "$tmp/run.log" >&2
    fail "$how: mpirun -np 2 mpi_pipeline failed"
  elif ! grep -q "over 2 ranks, .*as expected" "$tmp/run.log"; then
    cat "$tmp/run.log" >&2
    fail "$how: mpi_pipeline did not say its result was as expected"
  else
    echo "$how: mpi_pipeline ran under mpirun -np 2: $(grep -o 'z\[1\] = .*' "$tmp/run.log")"
  fi
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
  # MPI comes from the wrapper (mpicc), hcq's layer from hcq-mpi; the same compiler as the library.
  if [ -n "$mpicc" ]; then
    module=hcq-mpi
    [ "$kind" = static ] && module=hcq-mpi-static
    quiet "pkg-config $module: mpicc mpi_pipeline.c" env OMPI_CC="$cc" MPICH_CC="$cc" "$mpicc" "${flags[@]}" \
      "$src/examples/c/mpi_pipeline.c" -o "$dir/mpi_pipeline" $(pkg-config --cflags --libs "$module") &&
      run_mpi_pipeline "$dir/mpi_pipeline" "$kind" "pkg-config $module"
  fi

  dir=$tmp/cmake-$kind
  static_opt=OFF
  [ "$kind" = static ] && static_opt=ON
  if quiet "find_package(hcq) $kind: configure" cmake -S "$src/examples/c" -B "$dir" -DCMAKE_PREFIX_PATH="$prefix" \
       -DCMAKE_C_COMPILER="$cc" -DCMAKE_C_FLAGS="${flags[*]}" -DHCQ_USE_STATIC_LIBS=$static_opt &&
     quiet "find_package(hcq) $kind: build" cmake --build "$dir" -j "$jobs"; then
    run_examples "$dir" "$kind" "find_package(hcq) $kind"
    if [ -n "$mpicc" ]; then
      if [ -x "$dir/mpi_pipeline" ]; then run_mpi_pipeline "$dir/mpi_pipeline" "$kind" "find_package(hcq) $kind, hcq::mpi"
      else fail "find_package(hcq) $kind: no hcq::mpi, so mpi_pipeline was not built"; fi
    elif [ -e "$dir/mpi_pipeline" ]; then fail "find_package(hcq) $kind: hcq::mpi from an hcq built without its MPI layer"; fi
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

# find_package(hcq) where the project has no MPI (CMAKE_DISABLE_FIND_PACKAGE_MPI stands for a machine
# without one): hcq::hcq still comes, hcq::mpi does not, and requiring the component says why.
mkdir -p "$tmp/nompi"
cat >"$tmp/nompi/CMakeLists.txt" <<'CMAKE'
cmake_minimum_required(VERSION 3.18)
project(nompi C)
find_package(hcq REQUIRED COMPONENTS ${WANT})
if(NOT TARGET hcq::hcq OR TARGET hcq::mpi)
  message(FATAL_ERROR "hcq::hcq missing or hcq::mpi present without MPI")
endif()
CMAKE
quiet "find_package(hcq) without MPI" cmake -S "$tmp/nompi" -B "$tmp/nompi/a" -DCMAKE_PREFIX_PATH="$prefix" \
  -DCMAKE_C_COMPILER="$cc" -DCMAKE_DISABLE_FIND_PACKAGE_MPI=ON -DWANT=
if cmake -S "$tmp/nompi" -B "$tmp/nompi/b" -DCMAKE_PREFIX_PATH="$prefix" -DCMAKE_C_COMPILER="$cc" \
     -DCMAKE_DISABLE_FIND_PACKAGE_MPI=ON -DWANT=mpi >"$tmp/nompi.log" 2>&1; then
  fail "find_package(hcq REQUIRED COMPONENTS mpi) succeeded without MPI"
elif ! grep -q "hcq's MPI layer (component mpi) is not available" "$tmp/nompi.log"; then
  cat "$tmp/nompi.log" >&2
  fail "find_package(hcq REQUIRED COMPONENTS mpi) without MPI did not say why"
else
  echo "find_package(hcq) without MPI: hcq::hcq, no hcq::mpi; COMPONENTS mpi fails saying why"
fi

# ---- the LLM library: libhcq_llm (hcq/llm.h), its pkg-config files and hcq::llm ----
# Installed whole: its own SONAME, linked to libhcq.so (no copy of the core), exporting exactly
# hcq/llm.h's functions; examples/c/llm_chat.c built through hcq-llm / hcq-llm-static (above, through
# find_package(hcq) with hcq::llm) and run on SmolLM2 where the llm_model test fetched it.
llm_files=("$libdir/libhcq_llm.a" "$libdir/pkgconfig/hcq-llm.pc" "$libdir/pkgconfig/hcq-llm-static.pc"
           "$libdir/cmake/hcq/hcqLlmTargets.cmake" include/hcq/llm.h share/doc/hcq/examples/c/llm_chat.c)
[ "$shared" = ON ] && llm_files+=("$libdir/libhcq_llm.so" "$libdir/libhcq_llm.so.$major" "$libdir/libhcq_llm.so.$version")
for f in "${llm_files[@]}"; do
  [ -e "$prefix/$f" ] || fail "not installed: $f"
done
if [ "$shared" = ON ]; then
  lso=$prefix/$libdir/libhcq_llm.so.$version
  readelf -d "$lso" | grep -q "Library soname: \[libhcq_llm.so.$major\]" || fail "SONAME of $lso is not libhcq_llm.so.$major"
  readelf -d "$lso" | grep -q "Shared library: \[libhcq.so.$major\]" || fail "libhcq_llm.so does not link libhcq.so.$major"
  nm -D --defined-only "$lso" | awk '$2 ~ /^[A-Z]$/ && $2 != "A" {print $3}' | sort >"$tmp/llm_exported"
  python3 "$src/tests/install/public_api.py" "$cc" "$prefix/include" hcq/llm.h | comm -23 - "$tmp/declared" >"$tmp/llm_declared"
  [ "$(wc -l <"$tmp/llm_declared")" -gt 10 ] || fail "public_api.py found only $(wc -l <"$tmp/llm_declared") functions in hcq/llm.h"
  if ! diff "$tmp/llm_declared" "$tmp/llm_exported" >"$tmp/llm_api.diff"; then
    fail "libhcq_llm.so's exports differ from hcq/llm.h (< declared only, > exported only): $(grep '^[<>]' "$tmp/llm_api.diff" | head -10 | tr '\n' ' ')"
  fi
  nm --defined-only "$lso" | awk '{print $3}' | sort -u | comm -12 - <(sed 's/@.*//' "$tmp/exported_versioned" | sort -u) >"$tmp/llm_dup"
  if [ -s "$tmp/llm_dup" ]; then fail "libhcq_llm.so carries its own copy of core symbols: $(head -5 "$tmp/llm_dup" | tr '\n' ' ')"; fi
  echo "libhcq_llm.so: SONAME libhcq_llm.so.$major, $(wc -l <"$tmp/llm_exported") symbols exported (hcq/llm.h)"
fi
data=${HCQ_DATA_DIR:-${XDG_DATA_HOME:-$HOME/.local/share}/hcq}
smollm2=$data/models/SmolLM2-135M-Instruct.Q4_1.gguf
llm_kinds=(static)
[ "$shared" = ON ] && llm_kinds=(shared static)
for kind in "${llm_kinds[@]}"; do
  module=hcq-llm
  [ "$kind" = static ] && module=hcq-llm-static
  bin=$tmp/pkg-config-$kind/llm_chat
  quiet "pkg-config $module: cc llm_chat.c" "$cc" "${flags[@]}" "$src/examples/c/llm_chat.c" -o "$bin" \
    $(pkg-config --cflags --libs "$module") || continue
  if [ "$kind" = shared ] && ! readelf -d "$bin" | grep -q "libhcq_llm.so.$major"; then fail "pkg-config hcq-llm: llm_chat does not use libhcq_llm.so.$major"; fi
  if [ "$kind" = static ] && readelf -d "$bin" | grep -q "libhcq"; then fail "pkg-config hcq-llm-static: llm_chat links a shared libhcq"; fi
  [ -x "$tmp/cmake-$kind/llm_chat" ] || fail "find_package(hcq) $kind: hcq::llm did not build llm_chat"
  if [ ! -e "$smollm2" ]; then
    echo "pkg-config $module: llm_chat built; not run (no SmolLM2 at $smollm2: the llm_model test fetches it)"
  elif ! LD_LIBRARY_PATH=$prefix/$libdir "$bin" "$smollm2" >"$tmp/llm.out" 2>"$tmp/llm.err" ||
       ! grep -q "stopped: " "$tmp/llm.err" || ! grep -qi "paris" "$tmp/llm.out"; then
    cat "$tmp/llm.out" "$tmp/llm.err" >&2
    fail "pkg-config $module: llm_chat on SmolLM2 did not answer (Paris)"
  else
    echo "pkg-config $module: llm_chat answered: $(head -c 80 "$tmp/llm.out" | tr '\n' ' ')"
  fi
done

if [ "$fails" -gt 0 ]; then
  echo "$fails check(s) failed" >&2
  exit 1
fi
echo "all install checks passed"
