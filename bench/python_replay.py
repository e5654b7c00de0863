"""make bench: a 100-item graph replay from Python (the hcq package) against the C call, and
tinygrad's TinyJit on its CPU device replaying the same chain of tiny kernels (x = x + 1).

    python3 bench/python_replay.py hcq HCQ_CLI [REPLAYS]     (the package importable: PYTHONPATH, HCQ_LIBRARY)
(tinygrad's side: bench/tinygrad_chain.py REPLAYS 100 SECTION, in a venv with tinygrad)

Prints rows as JSON lines (bench/rows.h format). Host time: the median time for the call that
queues one replay to return, with the device idle (wait=False, then a synchronize outside the
clock); replay: the median time of one replay to completion. The C rows: the same capture saved as
a graph file and timed by `hcq bench` (one graph, C all the way), and hcq_jit_run called straight
through cffi (the C call with nothing of the package around it).
"""
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

CHAIN = 100
SECTION = "python: replay of a chain of 100 tiny kernels, CPU"
ADD_ONE = ("void add_one(void *const *b, const int32_t *v, const hcq_launch_t *l) "
           "{ ((int32_t *)b[0])[0] += 1; (void)v; (void)l; }")


def row(name, value, unit, note):
    print(json.dumps({"section": SECTION, "name": name, "value": value, "unit": unit, "note": note}), flush=True)


def median_us(fn, after, replays):
    times = []
    for _ in range(replays):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
        after()
    return statistics.median(times) * 1e6


def bench_hcq(cli, replays):
    import numpy as np
    import hcq
    from hcq._ffi import ffi, lib

    with hcq.Device("CPU:0") as dev:
        x = dev.buffer(np.zeros(4, np.int32))
        add_one = dev.program(ADD_ONE, "add_one")
        with hcq.capture(inputs=[x], first_batch_size=128) as cap:  # one graph of all 100 items
            for _ in range(CHAIN):
                add_one.launch([x])
        jit = cap.jit
        assert jit.report.batches == 1 and jit.report.graphed_items == CHAIN, jit.report.text
        for _ in range(20):
            jit.run([x])
        before = int(x.numpy()[0])
        inputs = ffi.new("hcq_buffer_t *[]", [x._handle])
        raw_submit = lambda: lib.hcq_jit_run(jit._handle, inputs, 1, ffi.NULL, 0, False, ffi.NULL)  # noqa: E731
        py_submit = lambda: jit.run([x], wait=False)  # noqa: E731
        rounds = {"raw": [], "py": [], "py_done": []}
        for _ in range(5):  # interleaved rounds, medians of each: the machine's load hits both alike
            rounds["raw"].append(median_us(raw_submit, dev.synchronize, replays))
            rounds["py"].append(median_us(py_submit, dev.synchronize, replays))
            rounds["py_done"].append(median_us(lambda: jit.run([x]), lambda: None, replays))
        done = before + CHAIN * replays * 15
        assert int(x.numpy()[0]) == done, (int(x.numpy()[0]), done)
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "chain100.json")
            jit.save(path)
            c = json.loads(subprocess.run([cli, "bench", path, "--json"], check=True, capture_output=True,
                                          text=True).stdout)
    raw, py, py_done = (statistics.median(rounds[k]) for k in ("raw", "py", "py_done"))
    row("hcq C: hcq bench, graph submit", c["graph_submit_us"], "us", "host time to queue one replay of the saved "
        "capture (one graph of %d items), C only" % c["items"])
    row("hcq C call through cffi: hcq_jit_run", raw, "us", "host time; hcq_jit_run(wait=false) straight from cffi")
    row("hcq Python: Jit.run(wait=False)", py, "us", "host time; %.2f us over the C call through cffi, %.2f us over "
        "hcq bench's" % (py - raw, py - c["graph_submit_us"]))
    row("hcq C: hcq bench, replay to completion", c["graph_us_per_run"], "us", "%.0f ns per item"
        % (c["graph_us_per_run"] * 1e3 / CHAIN))
    row("hcq Python: Jit.run(), replay to completion", py_done, "us", "%.0f ns per item" % (py_done * 1e3 / CHAIN))


if __name__ == "__main__":
    bench_hcq(sys.argv[2], int(sys.argv[3]) if len(sys.argv) > 3 else 201)
