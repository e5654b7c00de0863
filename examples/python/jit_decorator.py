"""@hcq.jit as tinygrad's TinyJit: the first call runs, the second captures, later calls replay
with the new buffers and the values of bound variables.   python3 examples/python/jit_decorator.py"""
import numpy as np

import hcq

SAXPY = """
void saxpy(void *const *bufs, const int32_t *vals, const hcq_launch_t *l) {
  float *y = bufs[0]; const float *x = bufs[1];
  y[l->gid[0]] += (float)vals[0] * x[l->gid[0]];
}
"""
with hcq.Device("CPU:0") as dev:
    saxpy = dev.program(SAXPY, "saxpy")
    n = hcq.sym("n", 1, 1024)  # how many elements: a variable of the capture

    @hcq.jit
    def step(y, x, count):
        for a in (1, 2, 3):
            saxpy.launch([y, x, a], global_size=count)
        return y

    for i in range(5):
        y, x = dev.buffer(np.zeros(1024, np.float32)), dev.buffer(np.ones(1024, np.float32))
        out = step(y, x, n.bind(100 + i))
        values = out.numpy()
        assert values[: 100 + i].tolist() == [6.0] * (100 + i) and values[100 + i] == 0.0
    print("jit_decorator: %d calls, the last 3 replays of a %d-item capture" % (5, step.jit.item_count))
    try:
        step(dev.buffer(16), dev.buffer(16), n.bind(4))
    except hcq.InvalidArgument as error:
        print("jit_decorator: a call with other sizes is refused:", error.message[:90], "...")
