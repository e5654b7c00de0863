/* hcq for C++17: owning handles, exceptions and a capture helper over the C API (hcq/hcq.h).
 * Header-only: it adds no symbols to libhcq, and links like the C API (pkg-config hcq, or
 * find_package(hcq) and hcq::hcq), compiled as C++17 or later.
 *
 *   hcq::device dev("CPU:0");
 *   hcq::program scale(dev, "scale", kSource);             // C kernel, CPU ABI in hcq/program.h
 *   hcq::buffer y(dev, n * sizeof(float));
 *   y.copyin(host);                                        // a container, or hcq::span{p, n}
 *   scale.launch({y}, {n, 3}, {(n + 63) / 64}, {64});      // bufs, 32-bit values, grid, group size
 *   hcq::jit step = hcq::capture([&] { forward(); }, {x}); // runs forward() once and records it
 *   step.run({other_x});                                   // a replay, with another input buffer
 *   y.copyout(host);                                       // waits for the work before it
 *   hcq::fence done;                                       // replays in flight, each waited:
 *   step.submit(done, {next_x});                           //   queued, done armed at this replay
 *   done.wait();                                           //   then out.map<float>() reads
 *
 * Argument lists are braced lists, which do not narrow: a value or dim that is not a constant must
 * have the parameter's type (int32_t values, uint32_t dims) or be cast to it.
 *
 * Ownership. Every class owns one C handle and gives it back in its destructor; get() returns the
 * handle (still owned: do not release it), release() hands it over to the caller, so C++ and C
 * calls mix freely. Objects the C API reference-counts and lets callers retain (buffer, program,
 * expr) are copyable: a copy is one more reference (hcq_*_retain), like std::shared_ptr. The others
 * are move-only, like std::unique_ptr: device (each open is one reference that only a close drops;
 * there is no retain), signal, fence, queue, graph, jit and graph_file (one owner, freed once). A
 * moved-from handle holds nothing and its destructor does nothing.
 *
 * Order of destruction: the last close of a device fails while buffers, programs, signals or graphs
 * of it are alive, so declare the device before what is made on it (C++ destroys in reverse order).
 * Destructors cannot throw: a device whose close fails in ~device() (objects still alive, work that
 * does not finish) stays open and the failure is printed on stderr; a graph or jit whose destroy
 * times out is left alive the same way. Call close() / destroy() to get those errors as exceptions.
 *
 * Errors are exceptions. Every C call that returns hcq_status_t goes through hcq::check(), which
 * frees the status and throws hcq::error (a std::runtime_error) carrying its code (code(),
 * code_name()) and its message (what()). Exceptions, not a result type: failures of this API are
 * rare and mostly end what the caller was doing (a kernel that does not compile, a device that is
 * missing or lost, a timeout), and the C API already names the object at fault in the message, so
 * there is nothing for a caller to branch on along the usual path. Calls that cannot fail in C
 * (getters) do not throw.
 *
 * Transfers: copyin/copyout take any contiguous container of trivially copyable elements
 * (std::vector, std::array, std::string, a C array: whatever std::data and std::size accept) or
 * hcq::span{pointer, count}; the byte count is count * sizeof(element), the offset is in bytes.
 *
 * Threads: as the C API (each module header says so): devices, buffers and programs may be used
 * from any thread; a graph, a jit, a queue and a capture from one thread at a time. A capture
 * records the calling thread's work only. Handles are not synchronised: do not move or assign one
 * while another thread uses it.
 *
 * Lost devices, HCQ_VALIDATE and the rest of the semantics are those of the C calls each method
 * names; read the C headers for them.
 *
 * Layout: one section per C module, in hcq.h's order. A new handle type is a class over
 * detail::unique_handle (or detail::shared_handle when C has a retain) given the C call that ends
 * it; a new call is a method that passes its status to check(). */
#ifndef HCQ_HCQ_HPP
#define HCQ_HCQ_HPP

#if !defined(__cplusplus) || __cplusplus < 201703L
#error "hcq/hcq.hpp needs C++17 or later; C programs include hcq/hcq.h"
#endif

#include <array>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <initializer_list>
#include <iterator>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

/* g++ -Wshadow says that a C function named like its struct (hcq_jit_report, hcq_device_memory...)
 * "hides the constructor" of the struct: harmless in C, and names of the stable C API. */
#if defined(__GNUC__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wshadow"
#endif
#include "hcq/hcq.h"
#if defined(__GNUC__)
#pragma GCC diagnostic pop
#endif

namespace hcq {

/* ---- errors ---- */

class error : public std::runtime_error {
 public:
  error(hcq_status_code_t code, const std::string &message)
      : std::runtime_error(message), code_(code) {}
  hcq_status_code_t code() const noexcept { return code_; }
  /* "NOT_FOUND", "COMPILE_ERROR", ... */
  const char *code_name() const noexcept { return hcq_status_code_name(code_); }

 private:
  hcq_status_code_t code_;
};

/* Throws hcq::error for a failure status and frees it (also when copying its message throws). */
inline void check(hcq_status_t status) {
  if (!status) return;
  struct owner {
    hcq_status_t s;
    ~owner() { hcq_status_destroy(s); }
  } own{status};
  throw error(hcq_status_code(status), hcq_status_message(status));
}

namespace detail {

/* The one move-only owner every handle class builds on: Free is the C call that ends the handle. */
template <class T, void (*Free)(T *)>
class unique_handle {
 public:
  unique_handle() noexcept = default;
  explicit unique_handle(T *raw) noexcept : raw_(raw) {}
  unique_handle(unique_handle &&other) noexcept : raw_(other.release()) {}
  unique_handle &operator=(unique_handle &&other) noexcept {
    if (this != &other) reset(other.release());
    return *this;
  }
  unique_handle(const unique_handle &) = delete;
  unique_handle &operator=(const unique_handle &) = delete;
  ~unique_handle() { reset(); }

  T *get() const noexcept { return raw_; }
  explicit operator bool() const noexcept { return raw_ != nullptr; }
  /* Hands the C handle to the caller, who must end it. */
  T *release() noexcept { return std::exchange(raw_, nullptr); }
  void reset(T *raw = nullptr) noexcept {
    if (T *old = std::exchange(raw_, raw)) Free(old);
  }

 private:
  T *raw_ = nullptr;
};

/* A copyable owner for objects with a C retain: a copy takes one more reference. */
template <class T, T *(*Retain)(T *), void (*Free)(T *)>
class shared_handle : public unique_handle<T, Free> {
  using base = unique_handle<T, Free>;

 public:
  using base::base;
  shared_handle(const shared_handle &other) noexcept
      : base(other.get() ? Retain(other.get()) : nullptr) {}
  shared_handle &operator=(const shared_handle &other) noexcept {
    if (this != &other) this->reset(other.get() ? Retain(other.get()) : nullptr);
    return *this;
  }
  shared_handle(shared_handle &&) noexcept = default;
  shared_handle &operator=(shared_handle &&) noexcept = default;
  ~shared_handle() = default;
};

/* The C destroy and release calls have varied signatures; these give them the one Free shape. */
inline void destroy_signal(hcq_signal_t *s) { hcq_signal_destroy(s); }
inline void destroy_queue(hcq_queue_t *q) { hcq_queue_destroy(q); }
inline void destroy_graph_file(hcq_graph_file_t *f) { hcq_graph_file_destroy(f); }
inline void destroy_fence(hcq_fence_t *f) { hcq_fence_destroy(f); }
inline void release_buffer(hcq_buffer_t *b) { hcq_buffer_release(b); }
inline void release_program(hcq_program_t *p) { hcq_program_release(p); }
inline void release_expr(hcq_expr_t *e) { hcq_expr_release(e); }
inline hcq_expr_t *retain_expr(hcq_expr_t *e) { return hcq_expr_retain(e); }
/* Destructors cannot throw: a failure is printed, and the object stays alive (see the top). */
inline void report(const char *what, hcq_status_t st) noexcept {
  if (!st) return;
  std::fprintf(stderr, "hcq: %s failed: %s\n", what, hcq_status_message(st));
  hcq_status_destroy(st);
}
inline void close_device(hcq_device_t *d) {
  report("hcq_device_close in ~device()", hcq_device_close(d));
}
inline void destroy_graph(hcq_graph_t *g) {
  report("hcq_graph_destroy in ~graph()", hcq_graph_destroy(g));
}
inline void destroy_jit(hcq_jit_t *j) { report("hcq_jit_destroy in ~jit()", hcq_jit_destroy(j)); }

/* Argument lists are short; they are copied into an array on the stack (the heap past 16). */
template <class T>
class small_array {
 public:
  template <class Src>
  explicit small_array(std::initializer_list<Src> src) : n_(src.size()) {
    if (n_ > stack_.size()) heap_.resize(n_);
    T *out = data();
    for (const Src &s : src) *out++ = s.get();
  }
  T *data() noexcept { return n_ > stack_.size() ? heap_.data() : stack_.data(); }
  size_t size() const noexcept { return n_; }

 private:
  size_t n_;
  std::array<T, 16> stack_{};
  std::vector<T> heap_;
};

template <class C>
using element_t = std::remove_pointer_t<decltype(std::data(std::declval<C &>()))>;

}  // namespace detail

/* count elements at data: the pointer form of a transfer (C++17 has no std::span). A raw pointer
 * alone is not accepted there, so that a count is never mistaken for an offset. */
template <class T>
class span {
 public:
  constexpr span(T *data, size_t count) noexcept : data_(data), size_(count) {}
  constexpr T *data() const noexcept { return data_; }
  constexpr size_t size() const noexcept { return size_; }
  constexpr T &operator[](size_t i) const noexcept { return data_[i]; }
  constexpr T *begin() const noexcept { return data_; }
  constexpr T *end() const noexcept { return data_ + size_; }

 private:
  T *data_;
  size_t size_;
};

class device;
class buffer;

/* A non-owning buffer argument: an hcq::buffer or a raw C handle, for mixing the two. */
class buffer_ref {
 public:
  buffer_ref(const buffer &b) noexcept;  // NOLINT: implicit on purpose, for {a, b} argument lists
  buffer_ref(hcq_buffer_t *b) noexcept : raw_(b) {}  // NOLINT
  /* No buffer: in a jit replay's inputs, the input keeps its last binding (hcq_jit_run). */
  buffer_ref(std::nullptr_t) noexcept : raw_(nullptr) {}  // NOLINT
  hcq_buffer_t *get() const noexcept { return raw_; }

 private:
  hcq_buffer_t *raw_;
};

/* ---- devices (hcq/device.h) ---- */

class device : public detail::unique_handle<hcq_device_t, detail::close_device> {
 public:
  device() noexcept = default;
  /* Takes over a C handle from hcq_device_open (one reference). */
  explicit device(hcq_device_t *raw) noexcept : unique_handle(raw) {}
  /* hcq_device_open / hcq_device_open_ex: "CPU:0", "VULKAN:0", "CUDA:0"... */
  explicit device(const char *name, const hcq_device_options_t *options = nullptr) {
    hcq_device_t *d = nullptr;
    check(options ? hcq_device_open_ex(name, options, &d) : hcq_device_open(name, &d));
    reset(d);
  }
  explicit device(const std::string &name) : device(name.c_str()) {}

  /* hcq_device_close with its error: objects of the device still alive, work that does not finish.
   * On failure the handle is kept (the device stays open), so the destructor tries again. */
  void close() {
    check(hcq_device_close(get()));
    release();
  }
  void synchronize() const { check(hcq_device_synchronize(get())); }
  const char *name() const noexcept { return hcq_device_name(get()); }
  hcq_device_kind_t kind() const noexcept { return hcq_device_kind(get()); }
  uint32_t caps() const noexcept { return hcq_device_caps(get()); }
  /* hcq_device_limits: what launches and buffers are checked against (portable mode included). */
  hcq_device_limits_t limits() const {
    hcq_device_limits_t l;
    check(hcq_device_limits(get(), &l));
    return l;
  }
  /* hcq/memory.h: hcq's own bytes by class, and the driver's view. */
  hcq_memory_usage_t memory_usage() const {
    hcq_memory_usage_t u;
    check(hcq_device_memory_usage(get(), &u));
    return u;
  }
  hcq_device_memory_t memory() const {
    hcq_device_memory_t m;
    check(hcq_device_memory(get(), &m));
    return m;
  }
};

/* ---- buffers (hcq/buffer.h) ---- */

class buffer
    : public detail::shared_handle<hcq_buffer_t, hcq_buffer_retain, detail::release_buffer> {
 public:
  buffer() noexcept = default;
  /* Takes over one reference the caller holds. */
  explicit buffer(hcq_buffer_t *raw) noexcept : shared_handle(raw) {}
  /* hcq_buffer_create: bytes of device memory, zeros. */
  buffer(const device &dev, uint64_t bytes) {
    hcq_buffer_t *b = nullptr;
    check(hcq_buffer_create(dev.get(), bytes, &b));
    reset(b);
  }
  /* hcq_buffer_create_mapped: memory both the device's kernels and the host reach (see map()). */
  static buffer mapped(const device &dev, uint64_t bytes) {
    hcq_buffer_t *b = nullptr;
    check(hcq_buffer_create_mapped(dev.get(), bytes, &b));
    return buffer(b);
  }
  /* hcq_buffer_wrap: the caller's count elements at data, used in place (devices whose kernels run
   * on host memory). The memory must outlive the buffer and the work using it: hcq_buffer_wrap's
   * rules, with on_release NULL (synchronize the device after the last release). */
  template <class T>
  static buffer wrap(const device &dev, T *data, size_t count) {
    hcq_buffer_t *b = nullptr;
    check(hcq_buffer_wrap(dev.get(), static_cast<void *>(data), uint64_t(count) * sizeof(T),
                          nullptr, nullptr, &b));
    return buffer(b);
  }
  /* hcq_buffer_view_create: bytes [offset, offset + size) of this one. */
  buffer view(uint64_t offset, uint64_t size) const {
    hcq_buffer_t *v = nullptr;
    check(hcq_buffer_view_create(get(), offset, size, &v));
    return buffer(v);
  }

  uint64_t size() const noexcept { return hcq_buffer_size(get()); }
  uint64_t address() const noexcept { return hcq_buffer_address(get()); }
  const char *label() const noexcept { return hcq_buffer_label(get()); }
  void set_label(const char *label) const noexcept { hcq_buffer_set_label(get(), label); }

  /* hcq_buffer_copyin of src's elements (std::size(src) * sizeof(element) bytes) to byte offset.
   * src is any contiguous container of trivially copyable elements, or hcq::span{pointer, count}.
   */
  template <class C, class T = detail::element_t<const C>>
  void copyin(const C &src, uint64_t offset = 0) const {
    static_assert(std::is_trivially_copyable<T>::value,
                  "copyin copies bytes: elements must be trivially copyable");
    check(hcq_buffer_copyin(get(), offset, std::data(src), uint64_t(std::size(src)) * sizeof(T)));
  }
  /* hcq_buffer_copyout into dst's elements from byte offset; returns when dst holds them. */
  template <class C, class T = detail::element_t<std::remove_reference_t<C>>>
  void copyout(C &&dst, uint64_t offset = 0) const {
    static_assert(std::is_trivially_copyable<T>::value,
                  "copyout copies bytes: elements must be trivially copyable");
    static_assert(!std::is_const<T>::value, "copyout writes into dst: it cannot be const");
    check(hcq_buffer_copyout(get(), offset, std::data(dst), uint64_t(std::size(dst)) * sizeof(T)));
  }
  /* hcq_buffer_map: the buffer's bytes seen as size() / sizeof(T) elements of T, in place. Read
   * what device work wrote only after waiting for it (a fence), as buffer.h's coherence rules say.
   */
  template <class T>
  span<T> map() const {
    static_assert(std::is_trivially_copyable<T>::value,
                  "mapped bytes are read as trivially copyable elements");
    void *host = nullptr;
    check(hcq_buffer_map(get(), &host));
    return span<T>{static_cast<T *>(host), size_t(size() / sizeof(T))};
  }
  /* count elements from byte offset; count 0: as many as fit in the rest of the buffer. */
  template <class T>
  std::vector<T> read(size_t count = 0, uint64_t offset = 0) const {
    if (count == 0) count = size_t((size() - offset) / sizeof(T));
    std::vector<T> out(count);
    copyout(out, offset);
    return out;
  }
};

inline buffer_ref::buffer_ref(const buffer &b) noexcept : raw_(b.get()) {}

/* hcq_transfer: device to device, size bytes (all of src when 0). */
inline void transfer(const buffer &dst, const buffer &src, uint64_t size = 0) {
  check(hcq_transfer(dst.get(), src.get(), size ? size : src.size()));
}

/* ---- symbolic integers (hcq/symbolic.h) ---- */

class expr : public detail::shared_handle<hcq_expr_t, detail::retain_expr, detail::release_expr> {
 public:
  expr() noexcept = default;
  explicit expr(hcq_expr_t *raw) noexcept : shared_handle(raw) {}
  /* hcq_var_create: a variable named name taking values in [min, max]. */
  static expr var(const char *name, int64_t min, int64_t max) {
    hcq_expr_t *v = nullptr;
    check(hcq_var_create(name, min, max, &v));
    return expr(v);
  }
  /* hcq_expr_parse: "(n + 63) // 64" over the given variables. */
  static expr parse(const char *text,
                    std::initializer_list<std::reference_wrapper<const expr>> vars) {
    std::vector<const hcq_expr_t *> raw;
    for (const expr &v : vars) raw.push_back(v.get());
    hcq_expr_t *e = nullptr;
    check(hcq_expr_parse(text, raw.data(), raw.size(), &e));
    return expr(e);
  }
  /* The binding of this variable to value, for runs, replays and symbolic launches. */
  hcq_var_value_t bind(int64_t value) const noexcept { return hcq_var_value_t{get(), value}; }
  int64_t eval(std::initializer_list<hcq_var_value_t> vals) const {
    int64_t v = 0;
    check(hcq_expr_eval(get(), vals.begin(), vals.size(), &v));
    return v;
  }
  std::string str() const {
    std::string s(hcq_expr_format(get(), nullptr, 0) + 1, '\0');
    s.resize(hcq_expr_format(get(), &s[0], s.size()));
    return s;
  }
};

/* An operand of a symbolic launch: a constant, or an expression (borrowed for the call). */
struct operand {
  operand(int64_t value) noexcept : op(hcq_imm(value)) {}    // NOLINT: implicit, for {n, e} lists
  operand(const expr &e) noexcept : op(hcq_sym(e.get())) {}  // NOLINT
  hcq_operand_t op;
};

/* A launch's grid (in work-groups) or group size; dims left out are 1. */
struct dims {
  uint32_t x = 1, y = 1, z = 1;
};
struct sym_dims {
  operand x = 1, y = 1, z = 1;
};

/* ---- programs and eager launches (hcq/program.h, hcq/jit.h) ---- */

class program
    : public detail::shared_handle<hcq_program_t, hcq_program_retain, detail::release_program> {
 public:
  program() noexcept = default;
  explicit program(hcq_program_t *raw) noexcept : shared_handle(raw) {}
  /* hcq_program_create: compiles source (C on CPU devices) and looks up entry. */
  program(const device &dev, const char *entry, const char *source) {
    hcq_program_t *p = nullptr;
    check(hcq_program_create(dev.get(), entry, source, &p));
    reset(p);
  }
  program(const device &dev, const std::string &entry, const std::string &source)
      : program(dev, entry.c_str(), source.c_str()) {}
  /* hcq_program_create_fn: a C function as a CPU kernel. */
  program(const device &dev, const char *name, hcq_cpu_kernel_fn fn) {
    hcq_program_t *p = nullptr;
    check(hcq_program_create_fn(dev.get(), name, fn, &p));
    reset(p);
  }
  /* hcq_program_create_binary: a precompiled kernel (SPIR-V, PTX, cubin, fatbin, metallib) from
   * any contiguous container of bytes (a std::vector<char> read from `hcq compile`'s file). */
  template <class C, class T = detail::element_t<const C>>
  static program binary(const device &dev, hcq_binary_format_t format, const C &bytes,
                        const char *entry) {
    hcq_program_t *p = nullptr;
    check(hcq_program_create_binary(dev.get(), format, std::data(bytes),
                                    std::size(bytes) * sizeof(T), entry, &p));
    return program(p);
  }
  const char *name() const noexcept { return hcq_program_name(get()); }
  void declare_args(size_t nbufs, size_t nvals) const {
    check(hcq_program_declare_args(get(), nbufs, nvals));
  }

  /* hcq_launch: every buffer counts as written. Returns once queued. */
  void launch(std::initializer_list<buffer_ref> bufs, std::initializer_list<int32_t> vals,
              dims global, dims local = {}) const {
    launch_(bufs, vals, global, local, nullptr, 0);
  }
  /* The same with the indices of the buffers the kernel writes (outs; {} for none). */
  void launch(std::initializer_list<buffer_ref> bufs, std::initializer_list<int32_t> vals,
              dims global, dims local, std::initializer_list<uint32_t> outs) const {
    static const uint32_t none = 0;
    launch_(bufs, vals, global, local, outs.size() ? outs.begin() : &none, outs.size());
  }
  /* hcq_launch_sym: values and dims may be expressions; at binds their variables. A capture
   * records the expressions, so replays compute them from the replay's values. outs as above,
   * nullptr for every buffer. */
  void launch_sym(std::initializer_list<buffer_ref> bufs, std::initializer_list<operand> vals,
                  sym_dims global, sym_dims local, std::initializer_list<hcq_var_value_t> at,
                  const std::vector<uint32_t> *outs = nullptr) const {
    detail::small_array<hcq_buffer_t *> b(bufs);
    std::vector<hcq_operand_t> v;
    v.reserve(vals.size());
    for (const operand &o : vals) v.push_back(o.op);
    static const uint32_t none = 0;
    hcq_launch_sym_desc_t d = {get(),
                               b.data(),
                               b.size(),
                               v.data(),
                               v.size(),
                               {global.x.op, global.y.op, global.z.op},
                               {local.x.op, local.y.op, local.z.op},
                               outs ? (outs->empty() ? &none : outs->data()) : nullptr,
                               outs ? outs->size() : 0};
    check(hcq_launch_sym(&d, at.begin(), at.size()));
  }

 private:
  void launch_(std::initializer_list<buffer_ref> bufs, std::initializer_list<int32_t> vals,
               dims global, dims local, const uint32_t *outs, size_t nouts) const {
    detail::small_array<hcq_buffer_t *> b(bufs);
    hcq_launch_desc_t d = {get(),
                           b.data(),
                           b.size(),
                           vals.begin(),
                           vals.size(),
                           {global.x, global.y, global.z},
                           {local.x, local.y, local.z},
                           outs,
                           nouts};
    check(hcq_launch(&d));
  }
};

/* ---- signals (hcq/signal.h) ---- */

class signal : public detail::unique_handle<hcq_signal_t, detail::destroy_signal> {
 public:
  signal() noexcept = default;
  explicit signal(hcq_signal_t *raw) noexcept : unique_handle(raw) {}
  signal(const device &dev, const char *name, uint64_t initial_value = 0) {
    hcq_signal_t *s = nullptr;
    check(hcq_signal_create(dev.get(), name, initial_value, &s));
    reset(s);
  }
  uint64_t value() const noexcept { return hcq_signal_value(get()); }
  void set(uint64_t value) const noexcept { hcq_signal_set(get(), value); }
  /* Waits until value() >= value; timeout_ms < 0: the default. A timeout throws (TIMEOUT). */
  void wait(uint64_t value, int64_t timeout_ms = HCQ_TIMEOUT_DEFAULT) const {
    check(hcq_signal_wait(get(), value, timeout_ms));
  }
  uint64_t address() const noexcept { return hcq_signal_address(get()); }
};

/* ---- fences (hcq/fence.h) ---- */

class fence : public detail::unique_handle<hcq_fence_t, detail::destroy_fence> {
 public:
  /* hcq_fence_create: covers nothing yet (reached). */
  fence() {
    hcq_fence_t *f = nullptr;
    check(hcq_fence_create(&f));
    reset(f);
  }
  explicit fence(hcq_fence_t *raw) noexcept : unique_handle(raw) {}
  /* hcq_fence_record: all work submitted so far to these devices. */
  void record(std::initializer_list<std::reference_wrapper<const device>> devices) const {
    std::vector<hcq_device_t *> devs;
    for (const device &d : devices) devs.push_back(d.get());
    check(hcq_fence_record(get(), devs.data(), devs.size()));
  }
  /* hcq_fence_wait; timeout_ms < 0: the default. A timeout throws (TIMEOUT). */
  void wait(int64_t timeout_ms = HCQ_TIMEOUT_DEFAULT) const {
    check(hcq_fence_wait(get(), timeout_ms));
  }
  /* hcq_fence_poll: never blocks; a lost device throws (DEVICE_LOST). */
  bool done() const {
    bool d = false;
    check(hcq_fence_poll(get(), &d));
    return d;
  }
};

/* ---- queues (hcq/queue.h): record with the C calls on get() ---- */

class queue : public detail::unique_handle<hcq_queue_t, detail::destroy_queue> {
 public:
  queue() noexcept = default;
  explicit queue(hcq_queue_t *raw) noexcept : unique_handle(raw) {}
  explicit queue(hcq_queue_kind_t kind) {
    hcq_queue_t *q = nullptr;
    check(hcq_queue_create(kind, &q));
    reset(q);
  }
};

/* ---- graphs (hcq/graph.h) ---- */

class graph : public detail::unique_handle<hcq_graph_t, detail::destroy_graph> {
 public:
  graph() noexcept = default;
  explicit graph(hcq_graph_t *raw) noexcept : unique_handle(raw) {}
  /* hcq_graph_create from C exec items (copied; the graph retains what they use). */
  graph(const std::vector<hcq_exec_item_t> &items, std::initializer_list<buffer_ref> inputs = {},
        std::initializer_list<hcq_var_value_t> vals = {},
        const hcq_graph_options_t *options = nullptr) {
    detail::small_array<hcq_buffer_t *> in(inputs);
    hcq_graph_t *g = nullptr;
    check(hcq_graph_create(items.data(), items.size(), in.data(), in.size(), vals.begin(),
                           vals.size(), options, &g));
    reset(g);
  }
  /* hcq_graph_run: inputs replace the build's (same count), vals set variables. With wait, returns
   * the replay's host time in ns once it finished; without, 0 once it is queued. */
  uint64_t run(std::initializer_list<buffer_ref> inputs = {},
               std::initializer_list<hcq_var_value_t> vals = {}, bool wait = false) const {
    detail::small_array<hcq_buffer_t *> in(inputs);
    uint64_t ns = 0;
    check(hcq_graph_run(get(), in.data(), in.size(), vals.begin(), vals.size(), wait, &ns));
    return ns;
  }
  /* hcq_graph_submit: queues the replay and arms f at it. */
  void submit(const fence &f, std::initializer_list<buffer_ref> inputs = {},
              std::initializer_list<hcq_var_value_t> vals = {}) const {
    detail::small_array<hcq_buffer_t *> in(inputs);
    check(hcq_graph_submit(get(), in.data(), in.size(), vals.begin(), vals.size(), f.get()));
  }
  /* hcq_graph_destroy with its error (a timeout keeps the graph). */
  void destroy() {
    check(hcq_graph_destroy(get()));
    release();
  }
  size_t item_count() const noexcept { return hcq_graph_item_count(get()); }
};

/* ---- capture and the JIT (hcq/jit.h) ---- */

class jit : public detail::unique_handle<hcq_jit_t, detail::destroy_jit> {
 public:
  jit() noexcept = default;
  explicit jit(hcq_jit_t *raw) noexcept : unique_handle(raw) {}
  /* hcq_jit_run, as graph::run; an input given as nullptr keeps its last binding. */
  uint64_t run(std::initializer_list<buffer_ref> inputs = {},
               std::initializer_list<hcq_var_value_t> vals = {}, bool wait = false) const {
    detail::small_array<hcq_buffer_t *> in(inputs);
    uint64_t ns = 0;
    check(hcq_jit_run(get(), in.data(), in.size(), vals.begin(), vals.size(), wait, &ns));
    return ns;
  }
  /* hcq_jit_submit, as graph::submit. */
  void submit(const fence &f, std::initializer_list<buffer_ref> inputs = {},
              std::initializer_list<hcq_var_value_t> vals = {}) const {
    detail::small_array<hcq_buffer_t *> in(inputs);
    check(hcq_jit_submit(get(), in.data(), in.size(), vals.begin(), vals.size(), f.get()));
  }
  void destroy() {
    check(hcq_jit_destroy(get()));
    release();
  }
  /* What was graphed and why anything was left eager (valid until the next replay). */
  const hcq_jit_report_t &report() const noexcept { return *hcq_jit_report(get()); }
  size_t item_count() const noexcept { return hcq_jit_item_count(get()); }
  void save(const char *path) const { check(hcq_jit_save(get(), path)); }
};

/* Runs body() once, recording the calling thread's launches and transfers (hcq_capture_begin), and
 * returns them as a jit to replay (hcq_capture_end): inputs are the buffers replays may replace,
 * vals the variable values body used. If body throws, the capture is dropped (hcq_capture_abort)
 * and the exception goes on; work body already queued still runs. */
template <class F>
jit capture(F &&body, std::initializer_list<buffer_ref> inputs = {},
            std::initializer_list<hcq_var_value_t> vals = {},
            const hcq_jit_options_t *options = nullptr) {
  detail::small_array<hcq_buffer_t *> in(inputs);  // before recording: nothing may throw after body
  hcq_capture_t *cap = nullptr;
  check(hcq_capture_begin(&cap));
  struct aborter {
    hcq_capture_t *c;
    ~aborter() { hcq_capture_abort(c); }
  } guard{cap};
  std::forward<F>(body)();
  guard.c = nullptr;  // hcq_capture_end consumes the capture, whether or not it succeeds
  hcq_jit_t *j = nullptr;
  check(hcq_capture_end(cap, in.data(), in.size(), vals.begin(), vals.size(), options, &j));
  return jit(j);
}

/* ---- graph files (hcq/graphfile.h) ---- */

class graph_file : public detail::unique_handle<hcq_graph_file_t, detail::destroy_graph_file> {
 public:
  graph_file() noexcept = default;
  explicit graph_file(hcq_graph_file_t *raw) noexcept : unique_handle(raw) {}
  explicit graph_file(const char *path, const hcq_graph_file_options_t *options = nullptr) {
    hcq_graph_file_t *f = nullptr;
    check(hcq_graph_file_load(path, options, &f));
    reset(f);
  }
};

}  // namespace hcq

#endif
