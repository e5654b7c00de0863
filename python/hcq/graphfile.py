"""Graph files (include/hcq/graphfile.h, docs/graph-format.md) and graphs (graph.h).

`hcq.GraphFile(path)` loads an hcq-graph/1 file (what `Jit.save` and `hcq run` write and read):
its buffers by name, inputs and variables; `file.graph()` builds the graph and `graph.run()`
replays it. Save a capture with `Jit.save(path)`.
"""
from typing import Dict, List, Optional, Sequence

from ._ffi import NULL, ffi, lib, text
from .buffer import Buffer
from .device import Device, Owned, register_with_devices
from .jit import Fence
from .status import InvalidArgument, check
from .symbolic import Var, var_values


class GraphFile(Owned):
    """A loaded graph file. device_map renames devices ("CPU=VULKAN", "CPU:1=CPU:0");
    skip_compile validates without compiling; max_total_bytes refuses larger files."""

    _kind = "graph file"
    _close_order = 0

    def __init__(self, path: str, *, device_map: Optional[str] = None, skip_compile: bool = False,
                 max_total_bytes: int = 0) -> None:
        self.label = str(path)
        self._map = ffi.new("char[]", (device_map or "").encode())
        options = ffi.new("hcq_graph_file_options_t *", {"device_map": self._map, "skip_compile": skip_compile,
                                                          "max_total_bytes": max_total_bytes})
        out = ffi.new("hcq_graph_file_t **")
        check(lib.hcq_graph_file_load(str(path).encode(), options, out))
        self._handle = out[0]
        h = self._handle
        self.devices = [Device(text(lib.hcq_device_name(lib.hcq_graph_file_device(h, i))))
                        for i in range(lib.hcq_graph_file_device_count(h))]
        self.device = self.devices[0] if self.devices else None
        register_with_devices(self, [d._handle for d in self.devices])
        by_ptr = {}
        self.buffers: Dict[str, Buffer] = {}
        for i in range(lib.hcq_graph_file_buffer_count(h)):
            handle = lib.hcq_graph_file_buffer(h, i)
            buffer = by_ptr[int(ffi.cast("uintptr_t", handle))] = self._borrow(handle)
            self.buffers[text(lib.hcq_graph_file_buffer_name(h, i))] = buffer
        inputs = lib.hcq_graph_file_inputs(h)
        self.inputs: List[Buffer] = [by_ptr.get(int(ffi.cast("uintptr_t", inputs[i]))) or self._borrow(inputs[i])
                                     for i in range(lib.hcq_graph_file_input_count(h))]
        vals = lib.hcq_graph_file_vars(h)
        self.values: Dict[Var, int] = {Var(lib.hcq_expr_retain(vals[i].var)): vals[i].value
                                       for i in range(lib.hcq_graph_file_var_count(h))}

    def _borrow(self, handle) -> Buffer:
        device = next(d for d in self.devices if d._handle == lib.hcq_buffer_device(handle))
        return Buffer._wrap(device, lib.hcq_buffer_retain(handle))

    def _release(self, handle):
        lib.hcq_graph_file_destroy(handle)

    @property
    def item_count(self) -> int:
        return lib.hcq_graph_file_item_count(self._live())

    def reset(self) -> None:
        """Rewrites every buffer with its initial contents (after earlier work)."""
        check(lib.hcq_graph_file_reset(self._live()))

    def graph(self, *, profile: bool = False, inflight: int = 0) -> "Graph":
        """Builds the file's items into a graph (its declared inputs and variable values)."""
        h = self._live()
        vals, keep = var_values(self.values)
        options = ffi.new("hcq_graph_options_t *", {"profile": profile, "inflight": inflight})
        out = ffi.new("hcq_graph_t **")
        check(lib.hcq_graph_create(lib.hcq_graph_file_items(h), lib.hcq_graph_file_item_count(h),
                                   lib.hcq_graph_file_inputs(h), lib.hcq_graph_file_input_count(h), vals, len(keep),
                                   options, out))
        return Graph._made(out[0], [b._live() for b in self.inputs])


class Graph(Owned):
    """A built graph (hcq_graph_t), replayed with new inputs and values."""

    _kind = "graph"
    _close_order = 0

    @classmethod
    def _made(cls, handle, inputs):
        self = cls.__new__(cls)
        self._handle, self.label, self.device = handle, "graph", None
        self._ninputs = len(inputs)
        self._inputs = ffi.new("hcq_buffer_t *[]", inputs or [NULL])  # the built inputs until a run swaps them
        devices = [lib.hcq_graph_device(handle, i) for i in range(lib.hcq_graph_device_count(handle))]
        register_with_devices(self, devices)
        return self

    def _release(self, handle):
        check(lib.hcq_graph_destroy(handle))

    @property
    def kind(self) -> str:
        """"hcq" (the HCQ graph) or "cuda"."""
        return text(lib.hcq_graph_kind(self._live()))

    @property
    def item_count(self) -> int:
        return lib.hcq_graph_item_count(self._live())

    def _bind(self, inputs, values):
        if inputs is not None:
            if len(inputs) != self._ninputs:
                raise InvalidArgument("the graph has %d inputs; %d given" % (self._ninputs, len(inputs)))
            for i, buf in enumerate(inputs):
                self._inputs[i] = buf._live()
        vals, keep = var_values(values or {})
        return self._inputs, self._ninputs, vals, len(keep)

    def run(self, inputs: Optional[Sequence[Buffer]] = None, values=None, wait: bool = True) -> int:
        """Replays (inputs: all of them, or None for the last ones); with wait, returns the elapsed
        host nanoseconds once it finished."""
        ins, nins, vals, nvals = self._bind(inputs, values)
        elapsed = ffi.new("uint64_t *")
        check(lib.hcq_graph_run(self._live(), ins, nins, vals, nvals, wait, elapsed))
        return elapsed[0]

    __call__ = run

    def submit(self, inputs: Optional[Sequence[Buffer]] = None, values=None, fence: Optional[Fence] = None) -> Fence:
        """Replays without waiting; returns a fence reached when this replay finished."""
        ins, nins, vals, nvals = self._bind(inputs, values)
        fence = fence or Fence()
        check(lib.hcq_graph_submit(self._live(), ins, nins, vals, nvals, fence._ptr))
        return fence

    def write_dot(self, path: str) -> None:
        """Writes the graph's items and dependencies as Graphviz dot."""
        graphs = ffi.new("hcq_graph_t *[]", [self._live()])
        check(lib.hcq_graph_write_dot(graphs, 1, str(path).encode()))
