/* include/hcq/hcq.hpp against the library: destructors give back what they own, moves never release
 * twice, failures become hcq::error with the C code and message, transfers copy the bytes of their
 * elements, and hcq::capture replays what ran eagerly. A plain program (no Criterion), so that it
 * builds the same with any C++17 compiler (tests/CMakeLists.txt builds it with g++ and clang++);
 * each check prints what failed, and the exit status counts the failures.
 *
 * It runs with HCQ_VALIDATE=1 (set here before the library reads it): a release of a handle that
 * was released already is then counted (hcq_validation_error_count) instead of being undefined,
 * which is what the move tests look at. */
#include <hcq/hcq.hpp>

#include <algorithm>
#include <array>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

static int failures = 0;
#define EXPECT(cond)                                                                         \
  do {                                                                                       \
    if (!(cond)) {                                                                           \
      std::fprintf(stderr, "%s:%d: %s: expected %s\n", __FILE__, __LINE__, __func__, #cond); \
      failures++;                                                                            \
    }                                                                                        \
  } while (0)

/* Runs body and expects an hcq::error with code and a message containing part. */
template <class F>
static void expect_error(const char *what, F body, hcq_status_code_t code, const char *part) {
  try {
    body();
    std::fprintf(stderr, "%s: no exception, expected %s\n", what, hcq_status_code_name(code));
    failures++;
  } catch (const hcq::error &e) {
    if (e.code() != code || !std::strstr(e.what(), part)) {
      std::fprintf(stderr, "%s: got %s \"%s\", expected %s with \"%s\"\n", what, e.code_name(),
                   e.what(), hcq_status_code_name(code), part);
      failures++;
    }
  }
}

static const char *const kAxpb =  // y[i] = y[i] * a + x[i] for i < n; bufs {y, x}, vals {n, a}
    "void axpb(void *const *bufs, const int32_t *vals, const hcq_launch_t *l) {\n"
    "  int32_t *y = bufs[0]; const int32_t *x = bufs[1];\n"
    "  for (uint32_t t = 0; t < l->lsz[0]; t++) {\n"
    "    int32_t i = (int32_t)(l->gid[0] * l->lsz[0] + t);\n"
    "    if (i < vals[0]) y[i] = y[i] * vals[1] + x[i];\n"
    "  }\n"
    "}\n";

static uint64_t buffer_bytes(hcq_device_t *dev) {
  hcq_memory_usage_t u;
  hcq::check(hcq_device_memory_usage(dev, &u));
  return u.buffers;
}

/* One C reference to CPU:0 keeps it open across the checks, so they can watch its counters. */
static void destructors_release(hcq_device_t *raw) {
  const uint64_t before = buffer_bytes(raw);
  {
    hcq::device dev("CPU:0");
    hcq::buffer a(dev, 4096);
    hcq::buffer view = a.view(1024, 1024);
    hcq::program p(dev, "axpb", kAxpb);
    hcq::signal s(dev, "cpp-test", 7);
    EXPECT(buffer_bytes(raw) == before + 4096);
    EXPECT(s.value() == 7);
    hcq::jit j = hcq::capture([&] { p.launch({a, a}, {16, 2}, {1}, {16}, {0}); }, {a});
    EXPECT(j.item_count() == 1);
  }
  // Everything above is gone: the counters are back, and the last close of CPU:0 (below, in main)
  // succeeds only when no buffer, program, signal or graph of it is alive.
  EXPECT(buffer_bytes(raw) == before);

  // The control: a handle given up with release() is not released by the destructor.
  hcq_buffer_t *kept;
  {
    hcq::device dev("CPU:0");
    hcq::buffer b(dev, 512);
    kept = b.release();
    EXPECT(!b);
  }
  EXPECT(buffer_bytes(raw) == before + 512);
  hcq_buffer_release(kept);
  EXPECT(buffer_bytes(raw) == before);

  // ~device() closes: a handle of a device that only the wrapper held is closed afterwards.
  hcq_device_t *gone;
  {
    hcq::device dev("CPU:7");
    gone = dev.get();
  }
  expect_error(
      "close after ~device()", [&] { hcq::check(hcq_device_close(gone)); }, HCQ_FAILED_PRECONDITION,
      "CPU:7 was closed");

  // close() reports what keeps the device open, and the device stays usable.
  hcq::device dev("CPU:6");
  {
    hcq::buffer b(dev, 64);
    b.set_label("still-here");
    expect_error(
        "close with a buffer alive", [&] { dev.close(); }, HCQ_FAILED_PRECONDITION, "still-here");
    EXPECT(dev.get() != nullptr);
  }
  dev.close();
  EXPECT(!dev);
}

static void moves_do_not_double_release(hcq_device_t *raw) {
  const unsigned long complaints = hcq_validation_error_count();
  const uint64_t before = buffer_bytes(raw);
  {
    hcq::device dev("CPU:0");
    hcq::buffer a(dev, 256);
    hcq_buffer_t *handle = a.get();
    hcq::buffer b(std::move(a));
    EXPECT(!a && a.get() == nullptr && b.get() == handle);
    hcq::buffer c;
    c = std::move(b);
    EXPECT(!b && c.get() == handle);
    hcq::buffer &alias =
        c;  // a self-move (through a reference, which compilers do not flag) keeps the handle
    c = std::move(alias);
    EXPECT(c.get() == handle);

    // Assigning over a live handle releases the old one.
    hcq::buffer d(dev, 128);
    EXPECT(buffer_bytes(raw) == before + 384);
    d = std::move(c);
    EXPECT(buffer_bytes(raw) == before + 256);

    // Copies of refcounted handles are references: the memory stays while one is alive.
    {
      hcq::buffer e = d;
      EXPECT(e.get() == d.get());
      d = hcq::buffer();
      EXPECT(buffer_bytes(raw) == before + 256);
      std::vector<int> v{1, 2, 3};
      e.copyin(v);
      EXPECT(e.read<int>(3) == v);
    }
    EXPECT(buffer_bytes(raw) == before);

    hcq::program p(dev, "axpb", kAxpb);
    hcq::program q = p, r = std::move(p);
    EXPECT(!p && q.get() == r.get());
    hcq::device moved = std::move(dev);
    EXPECT(!dev && moved.get() == raw);
    hcq::buffer tmp(moved, 64);
    hcq::jit j = hcq::capture([&] { q.launch({tmp, tmp}, {16, 1}, {1}, {16}); });
    hcq::jit k = std::move(j);
    EXPECT(!j && k);
    hcq::signal s(moved, "moved", 1);
    hcq::signal t(std::move(s));
    EXPECT(!s && t.value() == 1);
  }
  EXPECT(buffer_bytes(raw) == before);
  EXPECT(hcq_validation_error_count() == complaints);

  // The control: HCQ_VALIDATE does see a double release, so the count above means something.
  hcq_buffer_t *b;
  hcq::check(hcq_buffer_create(raw, 64, &b));
  hcq_buffer_release(b);
  std::fprintf(stderr, "(the next validation complaint is expected)\n");
  hcq_buffer_release(b);
  EXPECT(hcq_validation_error_count() == complaints + 1);
}

static void errors_are_exceptions() {
  expect_error(
      "open NOPE:0", [] { hcq::device d("NOPE:0"); }, HCQ_NOT_FOUND, "NOPE:0");
  hcq::device dev("CPU:0");
  expect_error(
      "compile error",
      [&] { hcq::program p(dev, "broken", "void broken(void) { undeclared_name; }"); },
      HCQ_COMPILE_ERROR, "undeclared_name");
  expect_error(
      "missing entry", [&] { hcq::program p(dev, "absent", kAxpb); }, HCQ_COMPILE_ERROR,
      "\"absent\"");
  hcq::buffer b(dev, 16);
  std::array<int, 8> big{};
  expect_error(
      "copy past the end", [&] { b.copyin(big); }, HCQ_OUT_OF_RANGE, "");
  expect_error(
      "variable range", [] { hcq::expr::var("n", 5, 1); }, HCQ_INVALID_ARGUMENT, "");
  try {
    hcq::device d("NOPE:1");
    failures++;
  } catch (const std::runtime_error &e) {  // catchable as the standard base too
    EXPECT(std::strstr(e.what(), "NOPE:1") != nullptr);
  }
  hcq::check(nullptr);  // success throws nothing
  EXPECT(std::string(hcq::error(HCQ_TIMEOUT, "m").code_name()) == "TIMEOUT");
}

/* Writes src with copyin at offset, reads the buffer back with the C call, compares the bytes. */
template <class C>
static void expect_bytes(hcq::buffer &buf, const C &src, uint64_t offset, const char *what) {
  std::vector<unsigned char> all(buf.size()), want(buf.size());
  buf.copyin(std::vector<unsigned char>(buf.size(), 0xee));
  buf.copyin(src, offset);
  hcq::check(hcq_buffer_copyout(buf.get(), 0, all.data(), all.size()));
  std::fill(want.begin(), want.end(), 0xee);
  const size_t bytes = std::size(src) * sizeof(*std::data(src));
  std::memcpy(want.data() + offset, std::data(src), bytes);
  if (all != want) {
    std::fprintf(stderr, "spans: %s: the buffer does not hold the %zu bytes at offset %llu\n", what,
                 bytes, (unsigned long long)offset);
    failures++;
  }
}

static void spans_copy_their_bytes() {
  hcq::device dev("CPU:0");
  hcq::buffer buf(dev, 256);
  struct pair {
    int32_t a;
    float b;
  };
  expect_bytes(buf, std::vector<uint8_t>{1, 2, 3, 250}, 3, "vector<uint8_t>");
  expect_bytes(buf, std::vector<int16_t>{-1, 300, -32768}, 2, "vector<int16_t>");
  expect_bytes(buf, std::array<float, 5>{1.5f, -2.25f, 3e8f, 0.f, -0.f}, 16, "array<float>");
  expect_bytes(buf, std::vector<double>(31, 3.25), 8, "vector<double>");
  expect_bytes(buf, std::vector<pair>{{1, 2.f}, {-3, 4.5f}}, 0, "vector<struct>");
  expect_bytes(buf, std::string("hello, hcq"), 100, "string");
  const uint64_t arr[3] = {1ull << 40, 2, 3};
  expect_bytes(buf, arr, 200, "C array of uint64_t");

  // Pointer and count: count elements, not bytes; a C array's second argument is the offset.
  const double d[4] = {1, 2, 3, 4};
  buf.copyin(hcq::span{d, 2}, 64);
  double back[3] = {};
  buf.copyout(hcq::span{back + 1, 2}, 64);
  EXPECT(back[0] == 0 && back[1] == 1 && back[2] == 2);
  expect_bytes(buf, hcq::span{d + 1, 3}, 40, "span<const double>");
  std::vector<int64_t> into(3);
  buf.copyin(std::vector<int64_t>{-7, 8, -9});
  buf.copyout(into);
  EXPECT((into == std::vector<int64_t>{-7, 8, -9}));
  EXPECT(buf.read<int64_t>().size() == 32);
  EXPECT((buf.read<int16_t>(2, 8) == std::vector<int16_t>{8, 0}));
}

static void capture_matches_eager() {
  hcq::device dev("CPU:0");
  hcq::program axpb(dev, "axpb", kAxpb);
  const int n = 100;
  std::vector<int32_t> x0(n), x1(n);
  for (int i = 0; i < n; i++) x0[i] = i, x1[i] = 1000 - 3 * i;
  hcq::buffer y(dev, n * 4), ye(dev, n * 4), x(dev, n * 4), other(dev, n * 4);
  x.copyin(x0), other.copyin(x1);

  // a: the multiplier as a variable, so replays set it; two launches, so the jit builds a graph.
  hcq::expr a = hcq::expr::var("a", 0, 10);
  auto step = [&](const hcq::buffer &out, const hcq::buffer &in, int64_t av) {
    axpb.launch_sym({out, in}, {n, a}, {(n + 63) / 64}, {64}, {a.bind(av)}, nullptr);
    axpb.launch({out, in}, {n, 1}, {(n + 63) / 64}, {64}, {0});
  };
  hcq::jit j = hcq::capture([&] { step(y, x, 2); }, {x}, {a.bind(2)});
  EXPECT(j.report().items == 2 && j.report().graphed_items == 2);
  step(ye, x, 2);  // eager twin, on its own buffer
  EXPECT(y.read<int32_t>() == ye.read<int32_t>());

  for (int64_t av = 0; av < 4; av++) {
    const hcq::buffer &in = av % 2 ? other : x;
    j.run({in}, {a.bind(av)});
    step(ye, in, av);
    EXPECT(y.read<int32_t>() == ye.read<int32_t>());
  }
  // Against the host too, so eager and replay cannot agree on a wrong answer.
  std::vector<int32_t> host(n, 0);
  for (int i = 0; i < n; i++) {
    for (int rep = 0; rep < 5; rep++) {  // capture (a=2), then replays a = 0..3
      const int av = rep == 0 ? 2 : rep - 1;
      const std::vector<int32_t> &in = rep >= 1 && av % 2 ? x1 : x0;
      host[i] = (host[i] * av + in[i]) * 1 + in[i];
    }
  }
  EXPECT(y.read<int32_t>() == host);

  // A body that throws leaves no capture open: the next one starts.
  expect_error(
      "body throws",
      [&] { hcq::capture([&] { throw hcq::error(HCQ_INTERNAL, "from the body"); }); }, HCQ_INTERNAL,
      "from the body");
  hcq::jit again = hcq::capture([&] { axpb.launch({y, x}, {n, 1}, {2}, {64}); });
  EXPECT(again.item_count() == 1);
  // Recording nothing is the C API's error, as an exception.
  expect_error(
      "empty capture", [] { hcq::capture([] {}); }, HCQ_FAILED_PRECONDITION, "recorded no");
}

/* Replays in flight with a fence each; outputs read through map(), the input wrapped in place. */
static void fences_and_mapped_buffers() {
  hcq::device dev("CPU:0");
  hcq::program axpb(dev, "axpb", kAxpb);
  const int n = 64;
  alignas(64) static int32_t input[n];
  for (int i = 0; i < n; i++) input[i] = i;
  {
    hcq::buffer x = hcq::buffer::wrap(dev, input, n);
    std::array<hcq::buffer, 2> out = {hcq::buffer::mapped(dev, n * 4),
                                      hcq::buffer::mapped(dev, n * 4)};
    hcq::span<int32_t> seen = out[1].map<int32_t>();
    EXPECT(seen.size() == size_t(n));
    hcq::expr a = hcq::expr::var("a", 0, 100);
    hcq::jit j = hcq::capture(
        [&] {
          axpb.launch_sym({out[0], x}, {n, a}, {1}, {64}, {a.bind(0)}, nullptr);
        },
        {out[0]}, {a.bind(0)});
    hcq::fence done[2];
    hcq::signal gate(dev, "gate");
    hcq::queue held(HCQ_QUEUE_COMPUTE);
    hcq::check(hcq_queue_wait(held.get(), hcq_imm(int64_t(gate.address())), hcq_imm(1)));
    j.submit(done[0], {out[0]}, {a.bind(1)});
    hcq::check(hcq_queue_submit(held.get(), dev.get(), nullptr, 0));  // replay 2 waits for the gate
    j.submit(done[1], {out[1]}, {a.bind(2)});
    done[0].wait();
    std::vector<int32_t> first(out[0].map<int32_t>().begin(), out[0].map<int32_t>().end());
    for (int i = 0; i < n; i++) EXPECT(first[size_t(i)] == 2 * i);  // the capture left x; x * 1 + x
    EXPECT(!done[1].done());
    expect_error(
        "fence of a held replay", [&] { done[1].wait(20); }, HCQ_TIMEOUT, "fence on CPU:0");
    gate.set(1);
    done[1].wait();
    EXPECT(done[1].done());
    for (int i = 0; i < n; i++) EXPECT(seen[size_t(i)] == i);  // out[1] was 0: 0 * 2 + x
    // Eager work, fenced by record().
    axpb.launch({out[1], x}, {n, 3}, {1}, {64});
    done[0].record({dev});
    done[0].wait();
    for (int i = 0; i < n; i++) EXPECT(seen[size_t(i)] == i * 3 + i);
  }
  dev.synchronize();  // the wrapped input's last user has finished
  expect_error(
      "wrap of misaligned memory", [&] { hcq::buffer::wrap(dev, input + 1, 4); },
      HCQ_INVALID_ARGUMENT, "not aligned");
}

/* Limits through device::limits; a jit replay's nullptr input keeps its binding (double-buffered
 * outputs, the input x captured and never passed again). */
static void limits_and_kept_bindings() {
  hcq::device dev("CPU:0");
  hcq_device_limits_t l = dev.limits();
  EXPECT(!l.portable && l.max_group_threads == UINT32_MAX &&
         l.max_kernel_buffers == HCQ_MAX_KERNEL_BUFS);
  hcq::program axpb(dev, "axpb", kAxpb);
  const int n = 64;
  alignas(64) static int32_t input[n];
  for (int i = 0; i < n; i++) input[i] = i;
  hcq::buffer x = hcq::buffer::wrap(dev, input, n);
  std::array<hcq::buffer, 2> out = {hcq::buffer::mapped(dev, n * 4),
                                    hcq::buffer::mapped(dev, n * 4)};
  hcq::jit j = hcq::capture([&] { axpb.launch({out[0], x}, {n, 2}, {1}, {64}); }, {out[0], x});
  j.run({out[1], nullptr}, {}, true);  // out[1] was 0: 0 * 2 + x
  j.run({out[1], nullptr}, {}, true);  // x * 2 + x
  dev.synchronize();
  hcq::span<int32_t> got = out[1].map<int32_t>();
  for (int i = 0; i < n; i++) EXPECT(got[size_t(i)] == 3 * i);
}

/* A precompiled kernel: SPIR-V from hcq_binary_compile on Vulkan where a device opens; CPU devices
 * load no binaries, which is an exception naming the kind. */
static void binaries() {
  hcq::device cpu("CPU:0");
  const std::vector<char> junk(64, 'x');
  expect_error(
      "a binary on CPU", [&] { hcq::program::binary(cpu, HCQ_BINARY_SPIRV, junk, "k"); },
      HCQ_INVALID_ARGUMENT, "CPU");
  hcq_device_t *raw = nullptr;
  hcq_status_t st = hcq_device_open("VULKAN:0", &raw);
  if (st) {
    std::printf("binaries: no Vulkan device (%s): SPIR-V not loaded\n", hcq_status_message(st));
    hcq_status_destroy(st);
    return;
  }
  hcq::device vk(raw);
  static const char *const kFill =
      "layout(buffer_reference, std430, buffer_reference_align = 4) buffer i32s { int v[]; };\n"
      "void main() {\n"
      "  uint i = gl_GlobalInvocationID.x;\n"
      "  if (i < uint(hcq_val(1))) i32s(hcq_buf(0)).v[i] = hcq_val(0);\n"
      "}\n";
  void *bytes = nullptr;
  size_t size = 0;
  hcq::check(hcq_binary_compile(HCQ_DEVICE_VULKAN, HCQ_BINARY_SPIRV, nullptr, "fill", kFill, &bytes,
                                &size));
  std::vector<unsigned char> spirv(static_cast<unsigned char *>(bytes),
                                   static_cast<unsigned char *>(bytes) + size);
  hcq_binary_free(bytes);
  hcq::program fill = hcq::program::binary(vk, HCQ_BINARY_SPIRV, spirv, "fill");
  hcq::buffer out(vk, 64 * 4);
  fill.launch({out}, {7, 64}, {1}, {64});
  for (int32_t v : out.read<int32_t>()) EXPECT(v == 7);
}

int main() {
  setenv("HCQ_VALIDATE", "1", 1);
  hcq_device_t *raw;
  hcq::check(hcq_device_open("CPU:0", &raw));
  try {
    errors_are_exceptions();
    destructors_release(raw);
    moves_do_not_double_release(raw);
    spans_copy_their_bytes();
    capture_matches_eager();
    fences_and_mapped_buffers();
    limits_and_kept_bindings();
    binaries();
  } catch (const hcq::error &e) {
    std::fprintf(stderr, "unexpected hcq::error %s: %s\n", e.code_name(), e.what());
    failures++;
  }
  // The last close fails, naming them, while anything made on CPU:0 above is still alive.
  hcq_status_t st = hcq_device_close(raw);
  if (st) {
    std::fprintf(stderr, "closing CPU:0 at the end: %s\n", hcq_status_message(st));
    hcq_status_destroy(st);
    failures++;
  }
  std::printf("test_cpp: %s (%d failure%s)\n", failures ? "FAILED" : "all checks passed", failures,
              failures == 1 ? "" : "s");
  return failures ? 1 : 0;
}
