"""Buffers (include/hcq/buffer.h): device memory, host copies, mapping, DLPack, transfers.

A buffer is untyped bytes; it remembers a dtype and shape (from the array it was made from, or
uint8 and its size) as the defaults of numpy(), map() and DLPack export, as CuPy arrays do.
"""
import threading
from typing import Optional, Sequence

import numpy as np

from ._ffi import NULL, ffi, lib, text
from .device import Device, Owned
from .status import InvalidArgument, check

_DLPACK_CPU = 1  # kDLCPU
_WRAP_ALIGN = 16  # HCQ_WRAP_ALIGN: what hcq_buffer_wrap needs of host memory


def _shape_of(nbytes, dtype, shape):
    dtype = np.dtype(dtype)
    if shape is None:
        if nbytes % dtype.itemsize:
            raise InvalidArgument("a buffer of %d bytes is no whole number of %s items" % (nbytes, dtype))
        shape = (nbytes // dtype.itemsize,)
    shape = tuple(int(s) for s in (shape if isinstance(shape, Sequence) else (shape,)))
    if int(np.prod(shape, dtype=np.int64)) * dtype.itemsize > nbytes:
        raise InvalidArgument("shape %s of %s needs %d bytes; the buffer has %d"
                              % (shape, dtype, int(np.prod(shape)) * dtype.itemsize, nbytes))
    return dtype, shape


class _HostView:
    """Keeps a buffer alive for as long as a numpy array made over its mapped memory lives."""

    def __init__(self, buffer, address, dtype, shape):
        self.buffer = buffer
        self.__array_interface__ = {"data": (address, False), "typestr": dtype.str, "shape": shape, "version": 3}


# Wrapped host memory (hcq_buffer_wrap) keeps its Python owner here until hcq releases it.
_wrapped = {}
_wrapped_lock = threading.Lock()
_wrapped_next = [1]


@ffi.callback("void(void *, void *)")
def _on_wrap_release(ctx, host):
    with _wrapped_lock:
        _wrapped.pop(int(ffi.cast("uintptr_t", ctx)), None)


class Buffer(Owned):
    """Device memory of `nbytes` bytes with a 64-bit device address. Made by Device.buffer(),
    Buffer.view() or hcq.from_dlpack(). Released by close(), its device's close(), or collection
    (the memory is freed once the device's submitted work is done)."""

    _kind = "buffer"

    @classmethod
    def _wrap(cls, device, handle, dtype=np.uint8, shape=None):
        self = cls.__new__(cls)
        self._adopt(device, handle)
        self.nbytes = lib.hcq_buffer_size(handle)
        self.dtype, self.shape = _shape_of(self.nbytes, dtype, shape)
        return self

    @classmethod
    def _create(cls, device: Device, data, *, mapped, label, dtype, shape):
        out = ffi.new("hcq_buffer_t **")
        array = None
        if isinstance(data, (int, np.integer)):
            nbytes = int(data)
        else:
            array = np.ascontiguousarray(data, dtype=dtype)
            nbytes, dtype, shape = array.nbytes, array.dtype, array.shape if shape is None else shape
        if nbytes <= 0:
            raise InvalidArgument("a buffer needs at least one byte (asked for %d)" % nbytes)
        create = lib.hcq_buffer_create_mapped if mapped else lib.hcq_buffer_create
        check(create(device._live(), nbytes, out))
        self = cls._wrap(device, out[0], dtype or np.uint8, shape)
        if label:
            self.label = label
        if array is not None:
            self.copyin(array)
        return self

    def _release(self, handle):
        lib.hcq_buffer_release(handle)

    @property
    def address(self) -> int:
        """The device address of the first byte."""
        return lib.hcq_buffer_address(self._live())

    @property
    def label(self) -> str:
        """A name for messages ("buffer#3" unless set; at most 63 bytes kept)."""
        return text(lib.hcq_buffer_label(self._handle)) if self._handle != NULL else "closed buffer"

    @label.setter
    def label(self, value: str) -> None:
        lib.hcq_buffer_set_label(self._live(), value.encode())

    def view(self, offset: int, nbytes: int, *, dtype=np.uint8, shape=None) -> "Buffer":
        """A buffer aliasing [offset, offset + nbytes) of this one."""
        out = ffi.new("hcq_buffer_t **")
        check(lib.hcq_buffer_view_create(self._live(), offset, nbytes, out))
        return Buffer._wrap(self.device, out[0], dtype, shape)

    def copyin(self, data, offset: int = 0) -> None:
        """Copies host data (bytes, a numpy array, anything with the buffer protocol) into the
        buffer at offset, ordered after earlier work on the device."""
        src = np.ascontiguousarray(data) if not isinstance(data, (bytes, bytearray)) else data
        view = ffi.from_buffer(src)
        check(lib.hcq_buffer_copyin(self._live(), offset, view, len(view)))

    def copyout(self, out=None, offset: int = 0, nbytes: Optional[int] = None):
        """Copies bytes out once earlier work on the device finished: into `out` (a writable
        contiguous array or bytearray), or into new bytes (nbytes, default the rest of the buffer)."""
        if out is None:
            out = bytearray(self.nbytes - offset if nbytes is None else nbytes)
            check(lib.hcq_buffer_copyout(self._live(), offset, ffi.from_buffer(out), len(out)))
            return bytes(out)
        view = ffi.from_buffer(out, require_writable=True)
        check(lib.hcq_buffer_copyout(self._live(), offset, view, len(view)))
        return out

    def numpy(self, dtype=None, shape=None) -> np.ndarray:
        """A copy of the contents as a numpy array (default: the buffer's dtype and shape), after
        the device's earlier work."""
        dtype, shape = _shape_of(self.nbytes, dtype or self.dtype, shape or (None if dtype else self.shape))
        out = np.empty(shape, dtype)
        if out.nbytes:
            self.copyout(out)
        return out

    def map(self, dtype=None, shape=None) -> np.ndarray:
        """A zero-copy numpy view of the buffer's memory where the device maps it (CPU always; see
        hcq_buffer_map), else hcq.Unavailable. The view keeps the buffer alive. Coherence: wait for
        device work (a fence, synchronize) before reading what it writes."""
        dtype, shape = _shape_of(self.nbytes, dtype or self.dtype, shape or (None if dtype else self.shape))
        host = ffi.new("void **")
        check(lib.hcq_buffer_map(self._live(), host))
        return np.asarray(_HostView(self, int(ffi.cast("uintptr_t", host[0])), dtype, shape))

    def __dlpack__(self, stream=None, **kwargs):
        """DLPack export of the mapped memory (a CPU tensor; hcq.Unavailable where it does not map)."""
        return self.map().__dlpack__()

    def __dlpack_device__(self):
        return (_DLPACK_CPU, 0)

    def __len__(self) -> int:
        return self.nbytes

    def __repr__(self) -> str:
        return "hcq.Buffer(%s, %d bytes, %s%s)" % (self.label, self.nbytes, self.dtype, list(self.shape))


def from_dlpack(tensor, device=None) -> Buffer:
    """A buffer over a DLPack tensor's memory (numpy, torch, ...): zero-copy on a device that runs
    on host memory (CPU devices) when the tensor is contiguous and 16-byte aligned (the tensor stays
    alive while the buffer lives), else a copy. device: a Device or a name (default "CPU:0")."""
    array = np.from_dlpack(tensor) if hasattr(tensor, "__dlpack__") else np.asarray(tensor)
    if array.dtype.hasobject or array.nbytes == 0:
        raise InvalidArgument("from_dlpack: %r is not a tensor of numbers with at least one byte"
                              % type(tensor).__name__)
    if not isinstance(device, Device):
        device = Device(device or "CPU:0")
    contiguous = array.flags.c_contiguous and array.nbytes > 0
    if not (contiguous and device.caps["HOST_MEMORY"] and array.ctypes.data % _WRAP_ALIGN == 0):
        return device.buffer(np.ascontiguousarray(array))
    with _wrapped_lock:
        key = _wrapped_next[0]
        _wrapped_next[0] += 1
        _wrapped[key] = array
    out = ffi.new("hcq_buffer_t **")
    try:
        check(lib.hcq_buffer_wrap(device._live(), ffi.cast("void *", array.ctypes.data), array.nbytes,
                                  _on_wrap_release, ffi.cast("void *", key), out))
    except Exception:
        with _wrapped_lock:
            _wrapped.pop(key, None)
        raise
    return Buffer._wrap(device, out[0], array.dtype, array.shape)


def transfer(dst: Buffer, src: Buffer, nbytes: Optional[int] = None) -> None:
    """Device-to-device copy of nbytes (default: all of src) on the source device's copy queue,
    after both devices' earlier work (hcq_transfer)."""
    check(lib.hcq_transfer(dst._live(), src._live(), src.nbytes if nbytes is None else nbytes))
