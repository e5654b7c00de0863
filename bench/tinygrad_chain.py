"""The 1000-kernel chain with tinygrad's TinyJit on its CPU device: x = x + 1, realized 1000 times
inside one jitted function, so the capture holds 1000 kernels; replays are timed to completion.
Prints one row as JSON (bench/rows.h format). Run inside a venv that has tinygrad installed:

    python tinygrad_chain.py [REPLAYS]
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

CHAIN = 1000
replays = int(sys.argv[1]) if len(sys.argv) > 1 else 101


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
    "section": "chain of 1000, one device",
    "name": f"tinygrad {version} TinyJit ({device})",
    "value": statistics.median(times) * 1e6,
    "unit": "us",
    "note": f"{what}; one device, replay to completion",
}))
