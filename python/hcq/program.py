"""Programs (include/hcq/program.h): compiled kernels and eager launches.

CPU kernels are C functions of the CPU ABI (hcq/program.h):
    void NAME(void *const *bufs, const int32_t *vals, const hcq_launch_t *launch);
called once per work-group; `launch->gid`, `gsz` and `lsz` say which group of which grid.
"""
from typing import Mapping, Optional, Sequence

from ._ffi import NULL, ffi, lib, text
from .buffer import Buffer
from .device import Owned
from .status import InvalidArgument, check
from .symbolic import Expr, bindings_of, var_values


def _dims(size, what):
    dims = list(size) if isinstance(size, (tuple, list)) else [size]
    if not 1 <= len(dims) <= 3:
        raise InvalidArgument("%s must have 1 to 3 dimensions, not %d" % (what, len(dims)))
    return dims + [1] * (3 - len(dims))


def _int32(value, what):
    if not -2**31 <= value < 2**32:
        raise InvalidArgument("%s = %d does not fit a 32-bit kernel value" % (what, value))
    return value - 2**32 if value >= 2**31 else value


class Program(Owned):
    """A kernel compiled for one device (Device.program, Device.program_binary)."""

    _kind = "program"
    _close_order = 1

    @classmethod
    def _compile(cls, device, source, entry, nbufs, nvals):
        out = ffi.new("hcq_program_t **")
        check(lib.hcq_program_create(device._live(), entry.encode(), source.encode(), out))
        return cls._made(device, out[0], nbufs, nvals)

    @classmethod
    def _from_binary(cls, device, data, format, entry):
        fmt = ffi.new("hcq_binary_format_t *")
        if not lib.hcq_binary_format_parse(format.encode(), fmt):
            raise InvalidArgument("unknown binary format %r (spirv, ptx, cubin, fatbin, metallib)" % format)
        out = ffi.new("hcq_program_t **")
        check(lib.hcq_program_create_binary(device._live(), fmt[0], data, len(data), entry.encode(), out))
        return cls._made(device, out[0], None, None)

    @classmethod
    def _made(cls, device, handle, nbufs, nvals):
        self = cls.__new__(cls)
        self._adopt(device, handle)
        if nbufs is not None or nvals is not None:
            self.declare_args(nbufs or 0, nvals or 0)
        return self

    def _release(self, handle):
        lib.hcq_program_release(handle)

    @property
    def name(self) -> str:
        return text(lib.hcq_program_name(self._live()))

    label = name

    @property
    def source(self) -> Optional[str]:
        """The source text it was compiled from (binaries: "#FORMAT" and base64)."""
        src = lib.hcq_program_source(self._live())
        return None if src == NULL else text(src)

    def declare_args(self, nbufs: int, nvals: int) -> None:
        """Declares how many buffers and 32-bit values every launch must pass."""
        check(lib.hcq_program_declare_args(self._live(), nbufs, nvals))

    def launch(self, args: Sequence = (), global_size=1, local_size=1, *, outs: Optional[Sequence[int]] = None,
               values: Optional[Mapping] = None) -> None:
        """Launches the kernel eagerly (queued; returns before it runs). args: Buffers (the kernel's
        bufs, in order) and ints or symbolic expressions (its 32-bit vals, in order). global_size is
        the grid in work-groups, local_size the group size (1 to 3 dims; missing dims are 1).
        Symbolic values or sizes take their values from bound variables and `values`; a capture
        records them symbolically. outs: indices into the buffers the kernel writes (default all)."""
        bufs = [a for a in args if isinstance(a, Buffer)]
        vals = [a for a in args if not isinstance(a, Buffer)]
        glob, loc = _dims(global_size, "global_size"), _dims(local_size, "local_size")
        buf_array = ffi.new("hcq_buffer_t *[]", [b._live() for b in bufs] or [NULL])
        out_array = NULL if outs is None else ffi.new("uint32_t[]", list(outs) or [0])
        nouts = 0 if outs is None else len(outs)
        symbolic = [v for v in vals + glob + loc if isinstance(v, Expr)]
        if not symbolic:
            val_array = ffi.new("int32_t[]", [_int32(int(v), "value %d" % i) for i, v in enumerate(vals)] or [0])
            desc = ffi.new("hcq_launch_desc_t *", {
                "program": self._live(), "bufs": buf_array, "nbufs": len(bufs), "vals": val_array,
                "nvals": len(vals), "global": glob, "local": loc, "outs": out_array, "nouts": nouts})
            check(lib.hcq_launch(desc))
            return
        ops = ffi.new("hcq_operand_t[]", max(len(vals), 1))
        desc = ffi.new("hcq_launch_sym_desc_t *", {
            "program": self._live(), "bufs": buf_array, "nbufs": len(bufs), "vals": ops, "nvals": len(vals),
            "outs": out_array, "nouts": nouts})
        for i, v in enumerate(vals):
            _operand(ops[i], v)
        for i in range(3):
            _operand(getattr(desc, "global")[i], glob[i])
            _operand(desc.local[i], loc[i])
        array, keep = var_values({**bindings_of(symbolic), **(values or {})})
        check(lib.hcq_launch_sym(desc, array, len(keep)))

    def __call__(self, *args, global_size=1, local_size=1, **kw) -> None:
        """prog(a, b, n, global_size=...) is prog.launch([a, b, n], global_size=...)."""
        self.launch(args, global_size, local_size, **kw)

    def __repr__(self) -> str:
        return "hcq.Program(%r on %s)" % (self.name if self._handle != NULL else "closed", self.device.name)


def _operand(slot, value):
    if isinstance(value, Expr):
        slot.sym = value._ptr
    else:
        slot.sym = NULL
        slot.value = int(value)
