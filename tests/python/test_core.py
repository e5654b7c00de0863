"""The package against hand-computed results: devices, buffers, programs, errors, lifetimes."""
import re

import numpy as np
import pytest

import hcq


def test_version_is_the_library_version():
    with open(__file__.rsplit("/tests/", 1)[0] + "/include/hcq/hcq.h") as f:
        parts = re.findall(r"#define HCQ_VERSION_(?:MAJOR|MINOR|PATCH) +(\d+)", f.read())
    assert hcq.__version__ == ".".join(parts)


def test_devices_lists_the_cpu():
    kinds = {d.kind: d for d in hcq.devices()}
    assert kinds["CPU"].available and kinds["CPU"].count >= 1


def test_unknown_device_is_not_found_naming_it():
    with pytest.raises(hcq.NotFound) as error:
        hcq.Device("NOPE:0")
    assert error.value.code == "NOT_FOUND" and "NOPE" in error.value.message
    assert isinstance(error.value, hcq.Error) and isinstance(error.value, LookupError)


def test_device_facts(dev):
    assert dev.name == "CPU:0" and dev.kind == "CPU"
    assert dev.caps["HOST_MEMORY"] and dev.caps["COMPILE_C"]
    assert dev.limits()["max_kernel_buffers"] >= 30
    dev.synchronize()
    assert "CPU:0" in repr(dev)


def test_buffer_round_trip_and_defaults(dev):
    data = np.arange(12, dtype=np.float32).reshape(3, 4)
    buf = dev.buffer(data)
    assert buf.nbytes == 48 and buf.dtype == np.float32 and buf.shape == (3, 4)
    np.testing.assert_array_equal(buf.numpy(), data)
    np.testing.assert_array_equal(buf.numpy(np.int32, (12,)), data.view(np.int32).ravel())
    zeros = dev.buffer(16)
    assert zeros.copyout() == bytes(16)
    zeros.copyin(b"\x01\x02", offset=3)
    assert zeros.copyout(nbytes=6) == b"\x00\x00\x00\x01\x02\x00"


def test_buffer_shape_mismatch_is_an_error(dev):
    buf = dev.buffer(10)
    with pytest.raises(hcq.InvalidArgument, match="no whole number"):
        buf.numpy(np.float32)
    with pytest.raises(hcq.InvalidArgument, match="needs 16 bytes"):
        buf.numpy(np.float32, (4,))
    with pytest.raises(hcq.InvalidArgument, match="at least one byte"):
        dev.buffer(0)


def test_map_is_zero_copy_and_keeps_the_buffer_alive(dev):
    buf = dev.buffer(np.zeros(4, np.int32))
    view = buf.map()
    view[2] = 7
    assert buf.numpy().tolist() == [0, 0, 7, 0]
    buf.copyin(np.array([1, 2, 3, 4], np.int32))
    dev.synchronize()  # a copy-in is device work: wait for it before reading the mapped memory
    assert view.tolist() == [1, 2, 3, 4]


def test_view_aliases_its_base(dev):
    base = dev.buffer(np.arange(8, dtype=np.uint8))
    part = base.view(2, 4)
    assert part.copyout() == bytes([2, 3, 4, 5])
    part.copyin(b"\xff")
    assert base.copyout()[2] == 255


def test_launch_computes_and_checks_declared_counts(dev, add_scaled):
    a = dev.buffer(np.array([1, 2, 3, 4], np.float32))
    b = dev.buffer(np.array([10, 20, 30, 40], np.float32))
    out = dev.buffer(16, dtype=np.float32)
    add_scaled.launch([a, b, out, 3], global_size=4)
    assert out.numpy().tolist() == [31, 62, 93, 124]
    with pytest.raises(hcq.InvalidArgument, match="add_scaled"):
        add_scaled.launch([a, b, out], global_size=4)


def test_compile_error_carries_the_compiler_output(dev):
    with pytest.raises(hcq.CompileError) as error:
        dev.program("void k(void *const *b, const int32_t *v, const hcq_launch_t *l) { nope; }", "k")
    assert "nope" in error.value.message


def test_transfer_copies_between_devices(dev):
    with hcq.Device("CPU:1") as other:
        src = dev.buffer(np.arange(4, dtype=np.int32))
        dst = other.buffer(16, dtype=np.int32)
        hcq.transfer(dst, src)
        assert dst.numpy().tolist() == [0, 1, 2, 3]


def test_close_releases_and_use_after_close_is_an_error():
    dev = hcq.Device("CPU:0")
    buf = dev.buffer(8)
    dev.close()  # releases buf first, so the device's last close does not fail on it
    with pytest.raises(hcq.FailedPrecondition, match="buffer 'buffer#[0-9]+' was closed"):
        buf.numpy()
    dev.close()  # idempotent


def test_symbolic_expressions_follow_python_floor_semantics():
    n = hcq.sym("n", -100, 100)
    expr = (n + 255) // 256
    assert str(expr) == "(n+255)//256"
    assert expr.eval({n: 1}) == 1 and (n // 2).eval({n: -7}) == -4 and (n % 2).eval({n: -7}) == 1
    assert n.min(3).eval({n: 9}) == 3
    with pytest.raises(hcq.NotFound):
        expr.eval()
    with pytest.raises(hcq.OutOfRange):
        n.bind(101)
    with pytest.raises(hcq.InvalidArgument):
        hcq.sym("not a name")
    assert (n.bind(5) * 2).eval() == 10


def test_symbolic_launch_reads_bound_values(dev, add_one):
    x = dev.buffer(np.zeros(8, np.int32))
    n = hcq.sym("n", 0, 8)
    add_one.launch([x, n.bind(3)])
    add_one.launch([x, n], values={n: 5})
    assert x.numpy().tolist() == [2, 2, 2, 1, 1, 0, 0, 0]
