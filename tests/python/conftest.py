"""Shared fixtures: a CPU device per test and the kernels the tests launch."""
import os

import pytest

import hcq

# out[i] = a[i] + b[i] * vals[0], one element per work-group.
ADD_SCALED = """
void add_scaled(void *const *bufs, const int32_t *vals, const hcq_launch_t *l) {
  const float *a = bufs[0], *b = bufs[1]; float *out = bufs[2];
  uint32_t i = l->gid[0];
  out[i] = a[i] + b[i] * (float)vals[0];
}
"""
# x[i] += 1 for i < vals[0] (a chain item whose length can be symbolic).
ADD_ONE = """
void add_one(void *const *bufs, const int32_t *vals, const hcq_launch_t *l) {
  int32_t *x = bufs[0];
  for (int32_t i = 0; i < vals[0]; i++) x[i] += 1;
  (void)l;
}
"""


@pytest.fixture
def dev():
    with hcq.Device("CPU:0") as device:
        yield device


@pytest.fixture
def add_scaled(dev):
    return dev.program(ADD_SCALED, "add_scaled", nbufs=3, nvals=1)


@pytest.fixture
def add_one(dev):
    return dev.program(ADD_ONE, "add_one")


@pytest.fixture
def tmp_out(tmp_path):
    return tmp_path
