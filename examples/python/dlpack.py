"""numpy (and torch, where installed) through DLPack, both ways, without copies.
    python3 examples/python/dlpack.py"""
import numpy as np

import hcq

NEGATE = "void negate(void *const *b, const int32_t *v, const hcq_launch_t *l) { ((float *)b[0])[l->gid[0]] *= -1; }"
with hcq.Device("CPU:0") as dev:
    negate = dev.program(NEGATE, "negate")
    host = np.arange(8, dtype=np.float32)
    buf = hcq.from_dlpack(host, dev)     # hcq works on numpy's memory
    negate.launch([buf], global_size=8)
    dev.synchronize()
    print("numpy after the kernel:", host)
    view = np.from_dlpack(buf)            # numpy sees hcq's memory
    print("np.from_dlpack(buffer):", view)
    try:
        import torch
    except ImportError:
        print("torch is not installed: its half is skipped")
    else:
        t = torch.ones(8)
        negate.launch([hcq.from_dlpack(t, dev)], global_size=8)
        dev.synchronize()
        print("torch after the kernel:", t)
