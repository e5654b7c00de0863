"""Devices (include/hcq/device.h): opening by name, capabilities, limits, synchronisation.

A `Device` holds one reference to the process-wide device of its name ("CPU:0", "VULKAN:0", ...).
Everything made through it (buffers, programs, jits, graphs) is tracked, so `close()` (or leaving
a `with` block) releases them first and the device's last close cannot fail on objects Python
still holds; those objects then raise `hcq.FailedPrecondition` when used.
"""
import weakref
from typing import Dict, List, NamedTuple, Optional

from ._ffi import NULL, ffi, lib, text
from .status import Closeable, check, closed_error

CAPS = {name: getattr(lib, "HCQ_CAP_" + name) for name in (
    "IN_ORDER_QUEUES", "COPY_QUEUE", "HOST_CALLABLE", "COMPILE_C", "COMPILE_CUDA", "HOST_MEMORY",
    "COPIES_HOST_MEMORY", "COMPILE_GLSL", "COMPILE_METAL")}


class DeviceInfo(NamedTuple):
    """One device kind of this machine (hcq_device_query)."""
    kind: str
    count: int
    available: bool
    description: str


def devices() -> List[DeviceInfo]:
    """The device kinds this machine has: each with how many devices, whether it is usable and a
    one-line description (driver version, or why it is absent)."""
    infos = ffi.new("hcq_device_info_t[]", 16)
    n = min(lib.hcq_device_query(infos, 16), 16)
    return [DeviceInfo(text(lib.hcq_device_kind_name(i.kind)), i.count, bool(i.available), text(i.description))
            for i in infos[0:n]]


class Owned(Closeable):
    """An object holding one C handle, made through a device: released by close(), by the device's
    close(), or when collected."""

    _handle = NULL
    _close_order = 2  # lower closes first: jits and graphs (0) before programs (1) and buffers (2)
    _kind = "object"

    def _adopt(self, device: "Device", handle) -> None:
        self._handle = handle
        self.device = device
        device._children.add(self)

    def _live(self):
        if self._handle == NULL:
            raise closed_error("%s %r" % (self._kind, getattr(self, "_label_at_close", "")))
        return self._handle

    def _release(self, handle) -> None:  # the C release call of the subclass
        raise NotImplementedError

    def close(self) -> None:
        """Releases the C object now (idempotent). Further use raises hcq.FailedPrecondition."""
        if self._handle != NULL:
            self._label_at_close = self.label
        handle, self._handle = self._handle, NULL
        if handle != NULL:
            self._release(handle)


_open_devices = weakref.WeakSet()


def register_with_devices(obj, device_handles) -> None:
    """Makes obj (spanning several devices: a jit, a graph) one of the children of every open
    Device object on those devices, so that each one's close() releases it first."""
    keys = {int(ffi.cast("uintptr_t", h)) for h in device_handles}
    for device in list(_open_devices):
        if device._handle != NULL and int(ffi.cast("uintptr_t", device._handle)) in keys:
            device._children.add(obj)


class Device(Closeable):
    """An hcq device, opened by name: "CPU:0" (or "CPU"), "CPU:1", "VULKAN:0", "CUDA:0", "METAL:0".

    Opening a name twice gives the same device (reference counted). Options (threads, isolate,
    portable) apply when this open creates the device; giving them for an open device is
    hcq.FailedPrecondition. Unknown names raise hcq.NotFound, devices without a driver
    hcq.Unavailable. Use as a context manager, or call close(). Any thread."""

    def __init__(self, name: str = "CPU:0", *, threads: int = 0, isolate: bool = False,
                 portable: bool = False) -> None:
        self._handle = NULL
        self._children = weakref.WeakSet()
        out = ffi.new("hcq_device_t **")
        if threads or isolate or portable:
            options = ffi.new("hcq_device_options_t *", {"threads": threads, "isolate": isolate,
                                                         "portable": portable})
            check(lib.hcq_device_open_ex(name.encode(), options, out))
        else:
            check(lib.hcq_device_open(name.encode(), out))
        self._handle = out[0]
        self.name = text(lib.hcq_device_name(self._handle))
        _open_devices.add(self)

    def _live(self):
        if self._handle == NULL:
            raise closed_error("device %s" % self.name)
        return self._handle

    @property
    def kind(self) -> str:
        """"CPU", "CUDA", "METAL" or "VULKAN"."""
        return text(lib.hcq_device_kind_name(lib.hcq_device_kind(self._live())))

    @property
    def caps(self) -> Dict[str, bool]:
        """The capability flags (HCQ_CAP_*), by name without the prefix."""
        bits = lib.hcq_device_caps(self._live())
        return {name: bool(bits & bit) for name, bit in CAPS.items()}

    def limits(self) -> Dict[str, object]:
        """What a launch or a buffer may use here (hcq_device_limits_t's fields)."""
        out = ffi.new("hcq_device_limits_t *")
        check(lib.hcq_device_limits(self._live(), out))
        fields = {f: getattr(out, f) for f in dir(out)}
        return {f: (list(v) if isinstance(v, ffi.CData) else v) for f, v in fields.items()}

    def synchronize(self) -> None:
        """Waits until all work submitted to the device so far has finished (hcq.Timeout after the
        wait timeout, with the hang report)."""
        check(lib.hcq_device_synchronize(self._live()))

    def report(self) -> str:
        """The hang report: one line per queue, what it runs or waits for and for how long."""
        size = lib.hcq_device_report(self._live(), NULL, 0) + 1
        out = ffi.new("char[]", size)
        lib.hcq_device_report(self._handle, out, size)
        return text(out)

    def memory_usage(self) -> Dict[str, int]:
        """Bytes the device holds, by what holds them (hcq_memory_usage_t's fields)."""
        out = ffi.new("hcq_memory_usage_t *")
        check(lib.hcq_device_memory_usage(self._live(), out))
        return {f: getattr(out, f) for f in dir(out)}

    def buffer(self, data, *, mapped: bool = False, label: Optional[str] = None, dtype=None, shape=None):
        """A new buffer: `buffer(nbytes)` (zeros) or `buffer(array)` (a copy of a numpy array or
        anything numpy takes; its dtype and shape become the buffer's defaults). mapped=True makes
        it in memory the host can map (hcq_buffer_create_mapped)."""
        from .buffer import Buffer
        return Buffer._create(self, data, mapped=mapped, label=label, dtype=dtype, shape=shape)

    def program(self, source: str, entry: str, *, nbufs: Optional[int] = None, nvals: Optional[int] = None):
        """Compiles source (C on CPU devices, GLSL on Vulkan, CUDA C, MSL) for its function entry
        (hcq.CompileError with the compiler's output). nbufs/nvals declare the argument counts every
        launch must then pass (hcq_program_declare_args)."""
        from .program import Program
        return Program._compile(self, source, entry, nbufs, nvals)

    def program_binary(self, data: bytes, format: str, entry: str):
        """A program from a precompiled kernel: format "spirv", "ptx", "cubin", "fatbin" or
        "metallib" (hcq_program_create_binary says which kinds load which)."""
        from .program import Program
        return Program._from_binary(self, data, format, entry)

    def close(self) -> None:
        """Releases what was made through this object (jits and graphs first), then drops the
        device reference. Idempotent. hcq.Timeout when its work does not finish in time."""
        if self._handle == NULL:
            return
        for child in sorted(list(self._children), key=lambda c: c._close_order):
            child.close()
        handle, self._handle = self._handle, NULL
        check(lib.hcq_device_close(handle))

    def __enter__(self) -> "Device":
        return self

    def __repr__(self) -> str:
        return "hcq.Device(%r)%s" % (self.name, "" if self._handle != NULL else " (closed)")
