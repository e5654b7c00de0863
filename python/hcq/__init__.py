"""hcq from Python: devices, buffers, programs, captures, graphs, traces and the LLM.

hcq records kernel launches and buffer copies once and replays them as graphs with almost no
host work per replay. This package calls libhcq (the C library, shipped inside the wheel) through
cffi; each module follows one C header: device, buffer, program, symbolic, jit (capture, jit,
fence), graphfile (graph files, graphs), trace, llm (hcq.llm: GGUF language models).

    import hcq, numpy as np
    with hcq.Device("CPU:0") as dev:
        x = dev.buffer(np.arange(4, dtype=np.float32))
        double = dev.program(SOURCE, "double_it")
        double.launch([x], global_size=4)
        print(x.numpy())
"""
from ._ffi import VERSION as __version__
from .buffer import Buffer, from_dlpack, transfer
from .device import Device, DeviceInfo, devices
from .graphfile import Graph, GraphFile
from .jit import Capture, Fence, HcqWarning, Jit, JitFunction, JitReport, capture, jit
from .program import Program
from .status import (CompileError, DeviceError, DeviceLost, Error, FailedPrecondition, Internal, InvalidArgument,
                     NotFound, OutOfMemory, OutOfRange, Timeout, Unavailable, Unimplemented)
from .symbolic import Expr, Var, sym
from . import llm, trace

__all__ = ["__version__", "Buffer", "Capture", "CompileError", "Device", "DeviceError", "DeviceInfo", "DeviceLost",
           "Error", "Expr", "FailedPrecondition", "Fence", "Graph", "GraphFile", "HcqWarning", "Internal",
           "InvalidArgument", "Jit", "JitFunction", "JitReport", "NotFound", "OutOfMemory", "OutOfRange", "Program",
           "Timeout", "Unavailable", "Unimplemented", "Var", "capture", "devices", "from_dlpack", "jit", "sym",
           "llm", "trace", "transfer"]
