"""The profiler (include/hcq/trace.h): a process-wide recorder of graph replays and eager work,
written as a Chrome/Perfetto trace (JSON) or an SVG.

    with hcq.trace.Trace("run.json"):    # or hcq.trace.start() ... hcq.trace.stop()
        jit()
    hcq.trace.write_svg("run.svg")       # while it is on
"""
from typing import Dict, Optional

from ._ffi import NULL, ffi, lib
from .status import check

_path_keep = []


def start(path: Optional[str] = None, ring_slices: int = 0) -> None:
    """Turns the profiler on (hcq.FailedPrecondition when it is on). path: written at exit and by
    flush(). ring_slices: capacity (0: the default, 262144 slices)."""
    c_path = ffi.new("char[]", str(path).encode()) if path else NULL
    _path_keep[:] = [c_path]
    check(lib.hcq_trace_start(ffi.new("hcq_trace_options_t *", {"path": c_path, "ring_slices": ring_slices})))


def stop() -> None:
    """Turns the profiler off and drops what it recorded."""
    lib.hcq_trace_stop()


def active() -> bool:
    return bool(lib.hcq_trace_active())


def pause(paused: bool = True) -> None:
    """While paused, new work is not recorded."""
    lib.hcq_trace_pause(paused)


def flush() -> None:
    """Writes the trace to the path given to start()."""
    check(lib.hcq_trace_flush())


def write(path: str) -> None:
    """Writes the trace as Chrome trace event JSON (opens in Perfetto, chrome://tracing)."""
    check(lib.hcq_trace_write(str(path).encode()))


def write_svg(path: str) -> None:
    """Draws the trace as a self-contained SVG, one row per queue."""
    check(lib.hcq_trace_write_svg(str(path).encode()))


def stats() -> Dict[str, int]:
    """capacity, slices, dropped, graphs (zeros when off)."""
    out = ffi.new("hcq_trace_stats_t *")
    lib.hcq_trace_stats(out)
    return {f: getattr(out, f) for f in dir(out)}


class Trace:
    """start() on entry; on exit writes path (JSON, or SVG when it ends in .svg) and stops."""

    def __init__(self, path: Optional[str] = None, ring_slices: int = 0) -> None:
        self.path, self.ring_slices = path, ring_slices

    def __enter__(self) -> "Trace":
        start(None, self.ring_slices)
        return self

    def __exit__(self, *exc) -> None:
        try:
            if self.path:
                (write_svg if str(self.path).endswith(".svg") else write)(self.path)
        finally:
            stop()
