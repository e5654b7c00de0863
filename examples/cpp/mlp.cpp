/* A small MLP (two dense layers, ReLU between them) through the C++ header: run once eagerly,
 * captured, then replayed for every new batch of inputs, each checked against the same MLP computed
 * on the host.
 *
 *   c++ -std=c++17 mlp.cpp $(pkg-config --cflags --libs hcq) -o mlp && ./mlp
 */
#include <hcq/hcq.hpp>

#include <cmath>
#include <cstdio>
#include <vector>

/* y[b][o] = act(bias[o] + sum_i w[o][i] * x[b][i]) for every (b, o) < (batch, n_out); act is ReLU
 * when relu is 1. bufs = {y, x, w, bias}, vals = {batch, n_in, n_out, relu}; one thread per output.
 */
static const char *const kDense =
    "void dense(void *const *bufs, const int32_t *vals, const hcq_launch_t *l) {\n"
    "  float *y = bufs[0]; const float *x = bufs[1], *w = bufs[2], *bias = bufs[3];\n"
    "  int32_t n_in = vals[1], n_out = vals[2];\n"
    "  for (uint32_t t = 0; t < l->lsz[0]; t++) {\n"
    "    int32_t k = (int32_t)(l->gid[0] * l->lsz[0] + t), b = k / n_out, o = k % n_out;\n"
    "    if (k >= vals[0] * n_out) return;\n"
    "    float s = bias[o];\n"
    "    for (int32_t i = 0; i < n_in; i++) s += w[o * n_in + i] * x[b * n_in + i];\n"
    "    y[k] = vals[3] && s < 0 ? 0 : s;\n"
    "  }\n"
    "}\n";

constexpr int kBatch = 8, kIn = 32, kHidden = 64, kOut = 10, kSteps = 20;

/* Deterministic values in [-1, 1). */
static std::vector<float> fill(size_t n, unsigned seed) {
  std::vector<float> v(n);
  for (auto &x : v) x = float((seed = seed * 1664525u + 1013904223u) >> 8) / float(1 << 23) - 1.0f;
  return v;
}

struct layer {
  std::vector<float> w, bias;
  int n_in, n_out;
};

/* The MLP on the host, the check for every device result. */
static std::vector<float> host_dense(const layer &l, const std::vector<float> &x, bool relu) {
  std::vector<float> y(size_t(kBatch) * l.n_out);
  for (int b = 0; b < kBatch; b++)
    for (int o = 0; o < l.n_out; o++) {
      float s = l.bias[o];
      for (int i = 0; i < l.n_in; i++) s += l.w[o * l.n_in + i] * x[b * l.n_in + i];
      y[b * l.n_out + o] = relu && s < 0 ? 0 : s;
    }
  return y;
}

static bool close_to(const std::vector<float> &got, const std::vector<float> &want) {
  for (size_t i = 0; i < want.size(); i++)
    if (std::fabs(got[i] - want[i]) > 1e-4f * (1 + std::fabs(want[i]))) return false;
  return true;
}

int main() try {
  const layer l1{fill(kHidden * kIn, 1), fill(kHidden, 2), kIn, kHidden};
  const layer l2{fill(kOut * kHidden, 3), fill(kOut, 4), kHidden, kOut};

  hcq::device dev("CPU:0");  // declared first: destroyed last, after what is made on it
  hcq::program dense(dev, "dense", kDense);
  hcq::buffer w1(dev, l1.w.size() * sizeof(float)), b1(dev, l1.bias.size() * sizeof(float));
  hcq::buffer w2(dev, l2.w.size() * sizeof(float)), b2(dev, l2.bias.size() * sizeof(float));
  w1.copyin(l1.w), b1.copyin(l1.bias), w2.copyin(l2.w), b2.copyin(l2.bias);
  hcq::buffer x(dev, kBatch * kIn * sizeof(float)), h(dev, kBatch * kHidden * sizeof(float));
  hcq::buffer y(dev, kBatch * kOut * sizeof(float));

  auto forward = [&] {
    constexpr uint32_t hidden_groups = (kBatch * kHidden + 63) / 64,
                       out_groups = (kBatch * kOut + 63) / 64;
    dense.launch({h, x, w1, b1}, {kBatch, kIn, kHidden, 1}, {hidden_groups}, {64},
                 {0});  // writes h only
    dense.launch({y, h, w2, b2}, {kBatch, kHidden, kOut, 0}, {out_groups}, {64}, {0});
  };
  auto expected = [&](const std::vector<float> &in) {
    return host_dense(l2, host_dense(l1, in, true), false);
  };

  std::vector<float> in = fill(kBatch * kIn, 100);
  x.copyin(in);
  forward();  // eager: kernel by kernel
  bool ok = close_to(y.read<float>(), expected(in));

  // Captured: forward() runs once more and is recorded; x is the input a replay may replace.
  hcq::jit step = hcq::capture(forward, {x});
  ok = ok && close_to(y.read<float>(), expected(in));

  hcq::buffer next(dev, x.size());  // replays read a new batch from here, in place of x
  for (unsigned s = 0; s < kSteps && ok; s++) {
    in = fill(kBatch * kIn, 200 + s);
    next.copyin(in);
    step.run({next});
    ok = close_to(y.read<float>(), expected(in));  // read waits for the replay
  }
  std::printf(
      "mlp: %d -> %d -> %d, batch %d: 1 eager pass, 1 captured, %d replays (%zu of %zu items "
      "graphed), %s\n",
      kIn, kHidden, kOut, kBatch, kSteps, step.report().graphed_items, step.report().items,
      ok ? "as expected" : "WRONG");
  return ok ? 0 : 1;
} catch (const hcq::error &e) {
  std::fprintf(stderr, "mlp: %s: %s\n", e.code_name(), e.what());
  return 1;
}
