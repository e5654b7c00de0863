#!/bin/sh
# Runs the Python package's tests (tests/python, pytest) against the build tree's libraries with the
# first Python that has cffi, numpy and pytest (Debian's python3-cffi, python3-numpy and
# python3-pytest: scripts/install-deps.sh); without one, skips (77) saying why.
#   tests/python/run_tests.sh SOURCE_DIR BUILD_DIR [pytest arguments]
SRC=$1
BUILD=$2
shift 2
for py in python3 /usr/bin/python3; do
  if "$py" -c 'import cffi, numpy, pytest' 2>/dev/null; then
    export HCQ_LIBRARY="$BUILD/libhcq.so" HCQ_LLM_LIBRARY="$BUILD/models/llm/libhcq_llm.so"
    export PYTHONPATH="$SRC/python${PYTHONPATH:+:$PYTHONPATH}" HCQ_CLI="$BUILD/cli/hcq"
    exec "$py" -m pytest -q -p no:cacheprovider -rs "$SRC/tests/python" "$@"
  fi
done
why="python: no python3 with cffi, numpy and pytest (apt install python3-cffi python3-numpy python3-pytest)"
echo "$why"
[ -n "${HCQ_SKIP_LOG:-}" ] && echo "$why" >>"$HCQ_SKIP_LOG"
exit 77
