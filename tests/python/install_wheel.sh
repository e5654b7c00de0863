#!/bin/sh
# The one pip command of python/README.md in a fresh venv: pip install ./python builds libhcq into
# the wheel (scikit-build-core, from PyPI) and installs it; then the package imports outside the
# source tree, reports the library's version and runs a kernel. Minutes on 2 cores (a full build
# of the library); CTest label python_install, left out of the default `make test`.
#   tests/python/install_wheel.sh SOURCE_DIR WORK_DIR
set -eu
SRC=$(cd "${1:?usage: install_wheel.sh SOURCE_DIR WORK_DIR}" && pwd)
WORK=${2:?usage: install_wheel.sh SOURCE_DIR WORK_DIR}
rm -rf "$WORK/venv"
mkdir -p "$WORK"
python3 -m venv "$WORK/venv"
start=$(date +%s)
"$WORK/venv/bin/pip" install -q --disable-pip-version-check "$SRC/python"
echo "install_wheel: pip install ./python took $(( $(date +%s) - start )) s"
cd "$WORK"
env -u HCQ_LIBRARY "$WORK/venv/bin/python" - <<'PY'
import numpy as np
import hcq
assert "/venv/" in hcq._ffi.LIBRARY_PATH, hcq._ffi.LIBRARY_PATH
src = "void add1(void *const *b, const int32_t *v, const hcq_launch_t *l) { ((int32_t *)b[0])[l->gid[0]] += 1; }"
with hcq.Device("CPU:0") as dev:
    x = dev.buffer(np.arange(8, dtype=np.int32))
    dev.program(src, "add1").launch([x], global_size=8)
    assert x.numpy().tolist() == list(range(1, 9)), x.numpy()
hcq.llm._lib()  # libhcq_llm loads from the wheel too
print("install_wheel: hcq", hcq.__version__, "from", hcq._ffi.LIBRARY_PATH, "works")
PY
