"""A two-layer MLP (y = relu(x W1) W2) as hcq kernels: run eagerly, captured once, then replayed
for new inputs; checked against numpy.   python3 examples/python/mlp.py"""
import numpy as np

import hcq

MATMUL_RELU = """
void matmul(void *const *bufs, const int32_t *vals, const hcq_launch_t *l) {
  const float *x = bufs[0], *w = bufs[1]; float *y = bufs[2];
  int k = vals[0], n = vals[1], relu = vals[2], row = l->gid[0];
  for (int j = 0; j < n; j++) {
    float s = 0.0f;
    for (int i = 0; i < k; i++) s += x[row * k + i] * w[i * n + j];
    y[row * n + j] = relu && s < 0.0f ? 0.0f : s;
  }
}
"""
BATCH, DIN, HIDDEN, DOUT = 8, 16, 32, 4
rng = np.random.default_rng(0)
w1, w2 = rng.standard_normal((DIN, HIDDEN), np.float32), rng.standard_normal((HIDDEN, DOUT), np.float32)

with hcq.Device("CPU:0") as dev:
    matmul = dev.program(MATMUL_RELU, "matmul", nbufs=3, nvals=3)
    x = dev.buffer(rng.standard_normal((BATCH, DIN), np.float32))
    w1b, w2b = dev.buffer(w1), dev.buffer(w2)
    hidden, y = dev.buffer(BATCH * HIDDEN * 4, dtype=np.float32), dev.buffer(BATCH * DOUT * 4, dtype=np.float32)

    def forward(inp):
        matmul.launch([inp, w1b, hidden, DIN, HIDDEN, 1], global_size=BATCH)
        matmul.launch([hidden, w2b, y, HIDDEN, DOUT, 0], global_size=BATCH)

    with hcq.capture(inputs=[x]) as cap:
        forward(x)
    for step in range(3):
        batch = rng.standard_normal((BATCH, DIN), np.float32)
        cap.jit(inputs=[dev.buffer(batch)])
        want = np.maximum(batch @ w1, 0) @ w2
        np.testing.assert_allclose(y.numpy().reshape(BATCH, DOUT), want, rtol=1e-4, atol=1e-4)
    print("mlp: 3 replays match numpy;", cap.jit.report.text.splitlines()[0])
