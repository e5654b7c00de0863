"""Capture, replay, fences, the @hcq.jit decorator, graph files, traces and DLPack, each against
what eager launches or hand computation give."""
import json

import numpy as np
import pytest

import hcq


def _chain(add_one, x, n, length):
    for _ in range(length):
        add_one.launch([x, n])


def test_capture_replays_with_new_inputs_and_values(dev, add_one):
    x = dev.buffer(np.zeros(8, np.int32))
    n = hcq.sym("n", 0, 8)
    with hcq.capture(inputs=[x], values={n: 2}) as cap:
        _chain(add_one, x, n, 40)
    assert x.numpy().tolist() == [40, 40, 0, 0, 0, 0, 0, 0]  # the capture ran too
    report = cap.jit.report
    assert report.items == 40 and report.graphed_items == 40 and sum(report.batch_sizes) == 40
    y = dev.buffer(np.full(8, 100, np.int32))
    cap.jit(inputs=[y], values={n: 5})
    assert y.numpy().tolist() == [140] * 5 + [100] * 3
    assert x.numpy().tolist()[:2] == [40, 40]  # the captured input is untouched by the replay
    fence = cap.jit.submit(values={n: 1})  # None inputs: y stays bound
    fence.wait()
    assert fence.done and y.numpy()[0] == 180
    assert cap.jit.variables == {"n": 1}


def test_capture_errors(dev, add_one):
    x, unused = dev.buffer(32), dev.buffer(32)
    with pytest.raises(hcq.InvalidArgument, match="input"):
        with hcq.capture(inputs=[unused]):
            add_one.launch([x, 1])
    with pytest.raises(hcq.FailedPrecondition, match="recorded no launches"):
        with hcq.capture():
            pass
    with pytest.raises(ZeroDivisionError):  # an exception in the block drops the recording
        with hcq.capture(inputs=[x]):
            add_one.launch([x, 1])
            1 // 0
    with hcq.capture(inputs=[x]) as cap:  # and a new capture can start on this thread
        add_one.launch([x, 1])
    with pytest.raises(hcq.InvalidArgument, match="1 inputs; 2 given"):
        cap.jit([x, x])
    with pytest.raises(hcq.InvalidArgument):
        cap.jit([dev.buffer(64)])  # another size than the captured input


def test_jit_decorator_is_tinyjit_like(dev, add_one):
    n = hcq.sym("n", 0, 8)

    @hcq.jit
    def step(x, count):
        _chain(add_one, x, count, 3)
        return x

    bufs = [dev.buffer(np.zeros(8, np.int32)) for _ in range(4)]
    for i, buf in enumerate(bufs):
        returned = step(buf, n.bind(i + 1))
        assert returned is buf
    assert step.calls == 2 and step.jit is not None
    for i, buf in enumerate(bufs):
        want = [3] * (i + 1) + [0] * (7 - i)
        assert buf.numpy().tolist() == want, i
    with pytest.raises(hcq.InvalidArgument, match="argument 0 is a buffer of 64 bytes"):
        step(dev.buffer(64), n.bind(1))
    again = hcq.jit(recapture=True)(step.fn)
    small, big = dev.buffer(np.zeros(8, np.int32)), dev.buffer(np.zeros(16, np.int32))
    again(small, n.bind(1)), again(small, n.bind(1)), again(big, n.bind(2))
    assert big.numpy().tolist()[:3] == [3, 3, 0]


def test_jit_decorator_refuses_other_constants(dev, add_one):
    @hcq.jit
    def step(x, count):
        add_one.launch([x, count])

    x = dev.buffer(np.zeros(4, np.int32))
    step(x, 1), step(x, 1), step(x, 1)
    with pytest.raises(hcq.InvalidArgument, match="argument 1 is the value 2; it was captured as the value 1"):
        step(x, 2)
    assert x.numpy().tolist() == [3, 0, 0, 0]


def test_save_and_load_a_graph_file(dev, add_one, tmp_path):
    x = dev.buffer(np.zeros(4, np.int32))
    n = hcq.sym("n", 0, 4)
    with hcq.capture(inputs=[x], values={n: 2}) as cap:
        _chain(add_one, x, n, 3)
    path = tmp_path / "chain.json"
    cap.jit.save(path)
    assert json.loads(path.read_text())["format"] == "hcq-graph/1"
    with hcq.GraphFile(path) as graph_file:
        assert graph_file.item_count == 3 and len(graph_file.inputs) == 1
        assert list(graph_file.values.values()) == [2]
        start = graph_file.inputs[0].numpy(np.int32).tolist()
        graph = graph_file.graph()
        graph.run()
        assert graph_file.inputs[0].numpy(np.int32).tolist() == [v + 3 for v in start[:2]] + start[2:]
    with pytest.raises(hcq.Error):
        hcq.GraphFile(tmp_path / "missing.json")


def test_trace_writes_perfetto_json_and_svg(dev, add_one, tmp_path):
    x = dev.buffer(16)
    with hcq.trace.Trace(tmp_path / "t.json"):
        add_one.launch([x, 1])
        dev.synchronize()
        hcq.trace.write_svg(tmp_path / "t.svg")
    assert "traceEvents" in (tmp_path / "t.json").read_text()
    assert (tmp_path / "t.svg").read_text().lstrip().startswith("<")
    assert not hcq.trace.active()


def test_dlpack_both_ways_is_zero_copy(dev, add_one):
    buf = dev.buffer(np.zeros(4, np.int32))
    array = np.from_dlpack(buf)
    add_one.launch([buf, 2])
    dev.synchronize()
    assert array.tolist() == [1, 1, 0, 0]  # numpy sees the kernel's writes: the same memory
    host = np.zeros(64, np.int32)  # numpy's allocations are 16-byte aligned
    wrapped = hcq.from_dlpack(host, dev)
    add_one.launch([wrapped, 3])
    dev.synchronize()
    assert host[:4].tolist() == [1, 1, 1, 0]
    odd = np.zeros(9, np.uint8)[1:]  # misaligned: copied
    copy = hcq.from_dlpack(odd, dev)
    assert copy.nbytes == 8
    with pytest.raises(hcq.InvalidArgument, match="not a tensor"):
        hcq.from_dlpack(object(), dev)


def test_torch_through_dlpack(dev, add_one):
    torch = pytest.importorskip("torch", reason="torch is not installed")
    t = torch.zeros(4, dtype=torch.int32)
    add_one.launch([hcq.from_dlpack(t, dev), 2])
    dev.synchronize()
    assert t.tolist() == [1, 1, 0, 0]
