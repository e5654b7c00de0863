"""Loading libhcq (and libhcq_llm) through cffi's ABI mode.

The declarations come from hcq.cdef, which the build writes from the public headers with the C
preprocessor (python/gen_cdef.py), so no C declaration is repeated here by hand. The library and
its hcq.cdef are looked up, in order:
  1. HCQ_LIBRARY: the path of libhcq.so (hcq.cdef next to it, or HCQ_CDEF);
  2. the package's own _lib/ folder (what the wheel installs, also through `pip install -e`);
  3. the build tree of a source checkout (build/libhcq.so, for the tests and examples).
libhcq_llm is HCQ_LLM_LIBRARY, else libhcq_llm.so.0 beside libhcq, else models/llm/ of a build tree.
"""
import os
import sys

import cffi

ffi = cffi.FFI()

# The package's folders: its own, and under `pip install -e` also the one in site-packages that
# holds the built _lib/ (scikit-build-core's editable install lists both in hcq.__path__).
_PACKAGE_DIRS = [os.path.dirname(os.path.abspath(__file__))]
_PACKAGE_DIRS += [p for p in getattr(sys.modules.get(__package__), "__path__", []) if p not in _PACKAGE_DIRS]


def _candidates():
    env = os.environ.get("HCQ_LIBRARY")
    if env:
        yield env
        return
    for pkg in _PACKAGE_DIRS:
        yield os.path.join(pkg, "_lib", "libhcq.so.0")
    source_root = os.path.dirname(os.path.dirname(_PACKAGE_DIRS[0]))  # python/hcq -> the checkout
    yield os.path.join(source_root, "build", "libhcq.so")


def _find_library():
    tried = []
    for path in _candidates():
        cdef = os.environ.get("HCQ_CDEF") or os.path.join(os.path.dirname(path), "hcq.cdef")
        if os.path.exists(path) and os.path.exists(cdef):
            return path, cdef
        tried.append(path)
    raise ImportError("hcq: libhcq.so and its hcq.cdef were not found (tried %s); build the library "
                      "(cmake --build build --target hcq_python) or set HCQ_LIBRARY" % ", ".join(tried))


LIBRARY_PATH, CDEF_PATH = _find_library()
with open(CDEF_PATH) as _f:
    _CDEF_TEXT = _f.read()
_CORE_CDEF, _, _LLM_CDEF = _CDEF_TEXT.partition("/* ---- llm ---- */")
# The first line says which library version the declarations were written from.
VERSION = _CDEF_TEXT.split()[2].rstrip(":")

ffi.cdef(_CORE_CDEF)
ffi.cdef(_LLM_CDEF)
lib = ffi.dlopen(LIBRARY_PATH)
NULL = ffi.NULL

_llm_lib = None


def llm_lib():
    """libhcq_llm, loaded on first use (the core package works without it)."""
    global _llm_lib
    if _llm_lib is None:
        here = os.path.dirname(LIBRARY_PATH)
        paths = [os.environ.get("HCQ_LLM_LIBRARY"), os.path.join(here, "libhcq_llm.so.0"),
                 os.path.join(here, "models", "llm", "libhcq_llm.so")]
        found = [p for p in paths if p and os.path.exists(p)]
        if not found:
            raise ImportError("hcq.llm: libhcq_llm.so was not found (tried %s); set HCQ_LLM_LIBRARY"
                              % ", ".join(p for p in paths if p))
        _llm_lib = ffi.dlopen(found[0])
    return _llm_lib


def text(ptr):
    """A C string as str ('' for NULL)."""
    return ffi.string(ptr).decode("utf-8", "replace") if ptr != NULL else ""
