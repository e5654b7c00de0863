"""Capture and replay (include/hcq/jit.h, fence.h): record eager launches once, replay them as
graphs with new input buffers and variable values.

    with hcq.capture(inputs=[x], values={n: 16}) as cap:
        prog.launch([x, y, n], global_size=n)
    cap.jit(inputs=[x2], values={n: 32})      # replay, wait for it
    fence = cap.jit.submit(inputs=[x3])       # replay, return at once; fence.wait() later

`@hcq.jit` (JitFunction) does the same for a Python function, as tinygrad's TinyJit.
"""
import warnings
from typing import Dict, List, Mapping, NamedTuple, Optional, Sequence, Tuple

from ._ffi import NULL, ffi, lib, text
from .buffer import Buffer
from .device import Owned, register_with_devices
from .status import Error, InvalidArgument, check, closed_error
from .symbolic import Expr, Var, bindings_of, capture_values, var_values


class HcqWarning(UserWarning):
    """A warning of the library (a capture that recorded less than the code did, an unused value)."""


@ffi.callback("void(void *, const char *)")
def _on_warning(ctx, message):
    warnings.warn(text(message), HcqWarning, stacklevel=3)


class Fence:
    """A point in device work the host can wait for or poll (include/hcq/fence.h). Returned by
    Jit.submit and Graph.submit; Fence.record(devices) arms one at all work so far."""

    def __init__(self) -> None:
        out = ffi.new("hcq_fence_t **")
        check(lib.hcq_fence_create(out))
        self._ptr = out[0]

    @classmethod
    def record(cls, devices) -> "Fence":
        """A fence reached once the devices finished everything submitted to them so far."""
        fence = cls()
        handles = ffi.new("hcq_device_t *[]", [d._live() for d in devices] or [NULL])
        check(lib.hcq_fence_record(fence._ptr, handles, len(devices)))
        return fence

    def wait(self, timeout: Optional[float] = None) -> None:
        """Waits until reached: timeout in seconds (None: the default wait timeout). hcq.Timeout
        names the device not done with its hang report; hcq.DeviceLost if it was lost."""
        check(lib.hcq_fence_wait(self._ptr, -1 if timeout is None else int(timeout * 1000)))

    def poll(self) -> bool:
        """Whether the fence is reached, without blocking."""
        done = ffi.new("bool *")
        check(lib.hcq_fence_poll(self._ptr, done))
        return bool(done[0])

    done = property(poll)

    def __del__(self):
        if getattr(self, "_ptr", NULL) != NULL:
            lib.hcq_fence_destroy(self._ptr)
            self._ptr = NULL


class JitReport(NamedTuple):
    """What a jit graphed and what it left eager, and why (hcq_jit_report_t)."""
    items: int
    graphed_items: int
    batches: int
    batch_sizes: Tuple[int, ...]
    eager_items: int
    host_copies: int
    unused_vars: int
    unused_inputs: int
    other_thread_work: int
    text: str


def _jit_options(opts: Mapping) -> object:
    known = {"first_batch_size", "profile", "eager_only", "strict_vars", "allow_unused_inputs", "inflight"}
    unknown = set(opts) - known
    if unknown:
        raise InvalidArgument("unknown jit option(s) %s (known: %s)" % (sorted(unknown), sorted(known)))
    out = ffi.new("hcq_jit_options_t *", dict(opts))
    out.on_warning = _on_warning
    return out


class Jit(Owned):
    """A captured (or built) list of items, replayed as graphs. Call it (or run()) to replay and
    wait; submit() to replay without waiting. One thread at a time."""

    _kind = "jit"
    _close_order = 0

    @classmethod
    def _made(cls, handle):
        self = cls.__new__(cls)
        self._handle = handle
        self.label = "jit"
        self._ninputs = lib.hcq_jit_input_count(handle)
        self._inputs = ffi.new("hcq_buffer_t *[]", max(self._ninputs, 1))
        self.device = None
        register_with_devices(self, _item_devices(handle))
        return self

    def _release(self, handle):
        check(lib.hcq_jit_destroy(handle))

    def _bind(self, inputs, values):
        array = self._inputs
        if inputs is None:
            for i in range(self._ninputs):
                array[i] = NULL
        else:
            if len(inputs) != self._ninputs:
                raise InvalidArgument("the jit was captured with %d inputs; %d given" % (self._ninputs, len(inputs)))
            for i, buf in enumerate(inputs):
                array[i] = NULL if buf is None else buf._live()
        if not values:
            return NULL, 0
        vals, keep = var_values(values)
        return vals, len(keep)

    def run(self, inputs: Optional[Sequence[Optional[Buffer]]] = None, values: Optional[Mapping[Var, int]] = None,
            wait: bool = True) -> int:
        """Replays with new input buffers (same count, sizes and devices as captured; None keeps an
        input's last binding) and variable values. With wait, returns once all of it finished, with
        the elapsed host nanoseconds; else 0 once it is queued."""
        vals, nvals = self._bind(inputs, values)
        elapsed = ffi.new("uint64_t *")
        check(lib.hcq_jit_run(self._live(), self._inputs, self._ninputs, vals, nvals, wait, elapsed))
        return elapsed[0]

    __call__ = run

    def submit(self, inputs: Optional[Sequence[Optional[Buffer]]] = None, values: Optional[Mapping[Var, int]] = None,
               fence: Optional[Fence] = None) -> Fence:
        """Replays as run() without waiting; returns a fence (the one given, re-armed, or a new one)
        reached once this replay and the work before it on the jit's devices finished."""
        vals, nvals = self._bind(inputs, values)
        fence = fence or Fence()
        check(lib.hcq_jit_submit(self._live(), self._inputs, self._ninputs, vals, nvals, fence._ptr))
        return fence

    @property
    def report(self) -> JitReport:
        """What was graphed, in how many batches, and why anything was left eager."""
        r = lib.hcq_jit_report(self._live())
        return JitReport(r.items, r.graphed_items, r.batches, tuple(r.batch_sizes[0:r.batches]), r.eager_items,
                         r.host_copies, r.unused_vars, r.unused_inputs, r.other_thread_work, text(r.text))

    @property
    def item_count(self) -> int:
        return lib.hcq_jit_item_count(self._live())

    @property
    def variables(self) -> Dict[str, int]:
        """Each variable's name and its value at the last replay (or at capture)."""
        h = self._live()
        return {text(lib.hcq_var_name(lib.hcq_jit_var(h, i))): lib.hcq_jit_var_value(h, i)
                for i in range(lib.hcq_jit_var_count(h))}

    def save(self, path: str) -> None:
        """Writes the jit as an hcq-graph/1 file (`hcq run FILE` runs it; hcq.GraphFile loads it)."""
        check(lib.hcq_jit_save(self._live(), str(path).encode()))

    def __repr__(self) -> str:
        return "hcq.Jit(%d items)" % self.item_count if self._handle != NULL else "hcq.Jit(closed)"


def _item_devices(jit_handle):
    handles = []
    for i in range(lib.hcq_jit_item_count(jit_handle)):
        item = lib.hcq_jit_item(jit_handle, i)
        if item.kind == lib.HCQ_ITEM_KERNEL:
            handles.append(lib.hcq_program_device(item.kernel.program))
        else:
            handles += [lib.hcq_buffer_device(item.transfer.dst), lib.hcq_buffer_device(item.transfer.src)]
    return handles


class Capture:
    """Records the calling thread's launches and transfers while open (a `with` block): leaving it
    builds `jit` from them, with `inputs` the buffers a replay may replace and `values` the
    variables' values during the capture (those of bound variables are added). An exception in the
    block drops the recording. Options: those of hcq_jit_options_t (first_batch_size, profile,
    eager_only, strict_vars, allow_unused_inputs, inflight)."""

    def __init__(self, inputs: Sequence[Buffer] = (), values: Optional[Mapping[Var, int]] = None, **options):
        self.inputs = list(inputs)
        self.values = dict(values or {})
        self._options = _jit_options(options)
        self._ptr = NULL
        self.jit: Optional[Jit] = None

    def __enter__(self) -> "Capture":
        out = ffi.new("hcq_capture_t **")
        check(lib.hcq_capture_begin(out))
        self._ptr = out[0]
        self._outer_values = getattr(capture_values, "values", None)
        capture_values.values = self.values
        return self

    @property
    def item_count(self) -> int:
        """Items recorded so far."""
        if self._ptr == NULL:
            raise closed_error("capture")
        return lib.hcq_capture_item_count(self._ptr)

    def __exit__(self, exc_type, exc, tb) -> None:
        capture, self._ptr = self._ptr, NULL
        capture_values.values = self._outer_values
        if exc_type is not None:
            lib.hcq_capture_abort(capture)
            return
        inputs = ffi.new("hcq_buffer_t *[]", [b._live() for b in self.inputs] or [NULL])
        vals, keep = var_values(self.values)
        out = ffi.new("hcq_jit_t **")
        check(lib.hcq_capture_end(capture, inputs, len(self.inputs), vals, len(keep), self._options, out))
        self.jit = Jit._made(out[0])


def capture(inputs: Sequence[Buffer] = (), values: Optional[Mapping[Var, int]] = None, **options) -> Capture:
    """`with hcq.capture(inputs=[...], values={...}) as cap:` records; then cap.jit replays."""
    return Capture(inputs, values, **options)


def _arg_signature(arg):
    if isinstance(arg, Buffer):
        return ("buffer", arg.nbytes, arg.device.name if arg.device else "", arg.dtype.str, tuple(arg.shape))
    if isinstance(arg, Var) and arg.bindings:
        return ("var", hash(arg))
    if isinstance(arg, Expr):
        return ("expr", str(arg))
    return ("value", arg)


def _describe(sig):
    if sig[0] == "buffer":
        return "a buffer of %d bytes (%s%s on %s)" % (sig[1], sig[3], list(sig[4]), sig[2])
    return {"var": "a bound variable", "expr": "expression %s" % (sig[1],)}.get(sig[0], "the value %r" % (sig[1],))


class JitFunction:
    """A Python function whose launches are captured and replayed (what @hcq.jit makes), as
    tinygrad's TinyJit: the first call runs eagerly, the second runs and captures, later calls
    replay the capture with the call's buffers as the new inputs and the values of its bound
    variables (hcq.sym(...).bind(v)). Buffer arguments are the inputs, in order; other arguments
    are constants of the capture. A call whose buffers differ in size, dtype, shape or device, or
    whose constants differ, raises hcq.InvalidArgument saying which, unless recapture=True, which
    captures again. Returned buffers that were inputs come back as the call's buffers."""

    def __init__(self, fn, *, recapture: bool = False, **options):
        self.fn = fn
        self.recapture = recapture
        self.options = dict(options)
        self.options.setdefault("allow_unused_inputs", True)
        self.calls = 0
        self.jit: Optional[Jit] = None
        self._signature = None
        self.__doc__ = getattr(fn, "__doc__", None)
        self.__name__ = getattr(fn, "__name__", "jit")

    def _check(self, signature):
        if len(signature) != len(self._signature):
            return "%d arguments, captured with %d" % (len(signature), len(self._signature))
        for i, (now, then) in enumerate(zip(signature, self._signature)):
            if now != then:
                return "argument %d is %s; it was captured as %s" % (i, _describe(now), _describe(then))
        return None

    def reset(self) -> None:
        """Drops the capture: the next call captures again."""
        if self.jit is not None:
            self.jit.close()
        self.jit, self._signature, self.calls = None, None, 1

    def __call__(self, *args, **kwargs):
        flat = list(args) + [kwargs[k] for k in sorted(kwargs)]
        buffers = [a for a in flat if isinstance(a, Buffer)]
        values = bindings_of(flat)
        if self.jit is not None:
            signature = [_arg_signature(a) for a in flat]
            problem = self._check(signature)
            if problem is None:
                self.jit.run(buffers, values, wait=False)
                return _swap_outputs(self._returned, self._captured_inputs, buffers)
            if not self.recapture:
                raise InvalidArgument("hcq.jit: %s() cannot replay this call: %s (a replay keeps the captured "
                                      "sizes and constants; use @hcq.jit(recapture=True) to capture again)"
                                      % (self.__name__, problem))
            self.reset()
        self.calls += 1
        if self.calls == 1:
            return self.fn(*args, **kwargs)
        with Capture(buffers, values, **self.options) as cap:
            returned = self.fn(*args, **kwargs)
        self.jit, self._signature = cap.jit, [_arg_signature(a) for a in flat]
        self._returned, self._captured_inputs = returned, buffers
        return returned


def _swap_outputs(returned, captured, now):
    if isinstance(returned, Buffer):
        for then, new in zip(captured, now):
            if then is returned:
                return new
        return returned
    if isinstance(returned, (tuple, list)):
        return type(returned)(_swap_outputs(r, captured, now) for r in returned)
    return returned


def jit(fn=None, *, recapture: bool = False, **options):
    """Decorator: `@hcq.jit` or `@hcq.jit(recapture=True, first_batch_size=...)` (JitFunction)."""
    if fn is None:
        return lambda f: JitFunction(f, recapture=recapture, **options)
    return JitFunction(fn, recapture=recapture, **options)
