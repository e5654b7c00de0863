"""A chain of tiny kernels with tinygrad's TinyJit on its CPU device: x = x + 1, realized CHAIN
times (1000 by default) inside one jitted function, so the capture holds CHAIN kernels; replays are
timed to completion. Prints one row as JSON (bench/rows.h format) in SECTION (by default the
1000-kernel chain's). Run inside a venv that has tinygrad installed:

    python tinygrad_chain.py [REPLAYS [CHAIN [SECTION]]]
"""
import json
import os
import statistics
import sys
import time

import importlib.metadata as md
version = md.version("tinygrad")
from tinygrad import Device, Tensor, TinyJit  # noqa: E402

# The CPU device is CLANG in 0.10.x and CPU later; tensors name it, so nothing else needs it.

device = "CLANG" if "CLANG" in Device._devices else "CPU"

replays = int(sys.argv[1]) if len(sys.argv) > 1 else 101
CHAIN = int(sys.argv[2]) if len(sys.argv) > 2 else 1000
SECTION = sys.argv[3] if len(sys.argv) > 3 else "chain of 1000, one device"


@TinyJit
def chain(x):
    for _ in range(CHAIN):
        x = (x + 1).realize()
    return x


x = Tensor([0], dtype="int32", device=device).realize()
for _ in range(3):  # run, capture, first replay
    out = chain(x)
Device[device].synchronize()
times = []
for _ in range(replays):
    t0 = time.perf_counter()
    out = chain(x)
    Device[device].synchronize()
    times.append(time.perf_counter() - t0)
value = int(out.tolist()[0])
assert value == CHAIN, f"chain computed {value}, expected {CHAIN}"
captured = getattr(chain, "captured", None)
cache = getattr(captured, "jit_cache", None)
if cache is not None:  # 0.10.x: a list of exec items, each with its runner
    what = "%d captured items (%s)" % (len(cache), ", ".join(sorted({type(ei.prg).__name__ for ei in cache})))
else:  # later versions keep the capture as one linearized program
    what = "captured as %s" % type(captured).__name__
print(json.dumps({
    "section": SECTION,
    "name": f"tinygrad {version} TinyJit ({device})",
    "value": statistics.median(times) * 1e6,
    "unit": "us",
    "note": f"{what}; one device, replay to completion, {statistics.median(times) * 1e9 / CHAIN:.0f} ns per item",
}))
