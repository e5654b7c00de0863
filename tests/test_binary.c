/* Precompiled kernels (hcq_program_create_binary, hcq_binary_compile, graph files' "binary"):
 * SPIR-V on Vulkan (lavapipe here), PTX, cubins and fatbins on the CUDA stand-in (tests/fake_cuda,
 * whose NVRTC-made images come from the real NVRTC), metallibs on the Metal stand-in
 * (tests/fake_metal), and every way a binary can be wrong. Each backend's tests skip, saying why,
 * where it is absent. */
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/binary.h"
#include "test_util.h"

TestSuite(binary, .timeout = 120);

static const char k_glsl[] =
    "layout(buffer_reference, std430, buffer_reference_align = 4) buffer u32s { uint v[]; };\n"
    "void main() {\n"
    "  uint i = gl_GlobalInvocationID.x;\n"
    "  if (i < uint(hcq_val(0))) u32s(hcq_buf(0)).v[i] = u32s(hcq_buf(1)).v[i] + "
    "uint(hcq_val(1));\n"
    "}\n";

/* add_const is one of the CUDA stand-in's host twins (y = x + k for i < n). */
static const char k_cuda[] =
    "extern \"C\" __global__ void add_const(unsigned *y, const unsigned *x, int n, int k) {\n"
    "  long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;\n"
    "  if (i < n) y[i] = x[i] + (unsigned)k;\n"
    "}\n";

static hcq_device_t *open_or_skip(const char *name) {
  hcq_device_t *d = NULL;
  hcq_status_t st = hcq_device_open(name, &d);
  if (st) {
    char why[600];
    snprintf(why, sizeof(why), "%s", hcq_status_message(st));
    hcq_status_destroy(st);
    cr_skip_test("%s absent here: %s", name, why);
  }
  return d;
}

/* hcq_binary_compile (what hcq compile runs), or a skip when the compiler is missing here. */
static uint8_t *compile_or_skip(hcq_device_kind_t kind, hcq_binary_format_t fmt, const char *arch,
                                const char *entry, const char *src, size_t *size) {
  void *bytes = NULL;
  hcq_status_t st = hcq_binary_compile(kind, fmt, arch, entry, src, &bytes, size);
  if (st && (hcq_status_code(st) == HCQ_UNAVAILABLE || hcq_status_code(st) == HCQ_UNIMPLEMENTED)) {
    char why[600];
    snprintf(why, sizeof(why), "%s", hcq_status_message(st));
    hcq_status_destroy(st);
    cr_skip_test("cannot compile here: %s", why);
  }
  OK(st);
  cr_assert(*size > 0);
  return bytes;
}

/* y = x + k for i < n, launched with bufs {y, x} and vals {n, k} (the kernel's ABI on every kind),
 * twice with different n and k, checked against the host each time. */
static void check_add(hcq_device_t *d, hcq_program_t *p, uint32_t local) {
  enum { N = 3000 };
  static uint32_t x[N], y[N];
  for (uint32_t i = 0; i < N; i++) x[i] = i * 2654435761u;
  hcq_buffer_t *bx = test_buffer(d, sizeof(x)), *by = test_buffer(d, sizeof(y));
  OK(hcq_buffer_copyin(bx, 0, x, sizeof(x)));
  const int32_t runs[2][2] = {{N, 7}, {1000, -3}};
  for (int r = 0; r < 2; r++) {
    memset(y, 0, sizeof(y));
    OK(hcq_buffer_copyin(by, 0, y, sizeof(y)));
    hcq_buffer_t *bufs[] = {by, bx};
    hcq_launch_desc_t desc = {.program = p,
                              .bufs = bufs,
                              .nbufs = 2,
                              .vals = runs[r],
                              .nvals = 2,
                              .global = {(uint32_t)(runs[r][0] + local - 1) / local, 1, 1},
                              .local = {local, 1, 1}};
    OK(hcq_launch(&desc));
    test_read(by, y, sizeof(y));
    for (uint32_t i = 0; i < N; i++) {
      uint32_t want = (int32_t)i < runs[r][0] ? x[i] + (uint32_t)runs[r][1] : 0;
      cr_assert_eq(y[i], want, "run %d, y[%u] = %u, want %u", r, i, y[i], want);
    }
  }
  hcq_buffer_release(bx);
  hcq_buffer_release(by);
}

/* The same program in a two-replay graph with n as a variable: graphs take binary programs too. */
static void check_graph(hcq_device_t *d, hcq_program_t *p, uint32_t local) {
  enum { N = 2048 };
  static uint32_t x[N], y[N];
  for (uint32_t i = 0; i < N; i++) x[i] = i ^ 0x5a5a5a5au;
  hcq_buffer_t *bx = test_buffer(d, sizeof(x)), *by = test_buffer(d, sizeof(y));
  OK(hcq_buffer_copyin(bx, 0, x, sizeof(x)));
  hcq_expr_t *n, *groups;
  OK(hcq_var_create("n", 1, N, &n));
  char text[64];
  snprintf(text, sizeof(text), "(n+%u)//%u", local - 1, local);
  OK(hcq_expr_parse(text, (const hcq_expr_t *[]){n}, 1, &groups));
  hcq_buffer_t *bufs[] = {by, bx};
  static const uint32_t outs[] = {0};
  hcq_operand_t vals[] = {hcq_sym(n), hcq_imm(11)};
  hcq_exec_item_t item = {.kind = HCQ_ITEM_KERNEL,
                          .kernel = {p,
                                     bufs,
                                     2,
                                     outs,
                                     1,
                                     vals,
                                     2,
                                     {hcq_sym(groups), hcq_imm(1), hcq_imm(1)},
                                     {hcq_imm(local), hcq_imm(1), hcq_imm(1)}}};
  hcq_var_value_t at_build[] = {{n, N}};
  hcq_graph_t *g;
  OK(hcq_graph_create(&item, 1, NULL, 0, at_build, 1, NULL, &g));
  for (int r = 0; r < 2; r++) {
    int64_t count = r ? 700 : N;
    hcq_var_value_t at[] = {{n, count}};
    OK(hcq_graph_run(g, NULL, 0, at, 1, true, NULL));
    test_read(by, y, sizeof(y));
    for (uint32_t i = 0; i < (uint32_t)count; i++)
      cr_assert_eq(y[i], x[i] + 11u, "replay %d, y[%u]", r, i);
  }
  OK(hcq_graph_destroy(g));
  hcq_expr_release(groups);
  hcq_expr_release(n);
  hcq_buffer_release(bx);
  hcq_buffer_release(by);
}

/* ---- names and the text form ---- */

Test(binary, format_names_and_text_form) {
  hcq_binary_format_t f;
  cr_assert(hcq_binary_format_parse("SPIRV", &f) && f == HCQ_BINARY_SPIRV);
  cr_assert(hcq_binary_format_parse("metallib", &f) && f == HCQ_BINARY_METALLIB);
  cr_assert(!hcq_binary_format_parse("so", &f) && !hcq_binary_format_parse("", &f) &&
            !hcq_binary_format_parse(NULL, &f));
  cr_assert_str_eq(hcq_binary_format_name(HCQ_BINARY_FATBIN), "fatbin");
  cr_assert_str_eq(hcq_binary_format_name((hcq_binary_format_t)99), "?");
  const uint8_t bytes[] = {0, 1, 2, 0xff, 0x7f, 'E', 'L'};
  char *text = hcq__binary_text(HCQ_BINARY_CUBIN, bytes, sizeof(bytes));
  cr_assert_not_null(text);
  cr_assert_eq(hcq__binary_of_source(text), HCQ_BINARY_CUBIN);
  uint8_t *back = NULL;
  size_t len = 0;
  OK(hcq__binary_decode(text, "k", &back, &len));
  cr_assert(len == sizeof(bytes) && !memcmp(back, bytes, len));
  free(back);
  free(text);
  cr_assert_eq(hcq__binary_of_source("#cubinx\n"), HCQ_BINARY_NONE);
  cr_assert_eq(hcq__binary_of_source("#version 460\n"), HCQ_BINARY_NONE);
  FAILS(hcq__binary_decode("#ptx\n$$$", "k", &back, &len), HCQ_COMPILE_ERROR, "ptx kernel k",
        "not base64");
}

/* ---- CPU ---- */

Test(binary, cpu_loads_no_binaries) {
  hcq_device_t *d = test_open("CPU:0");
  hcq_program_t *p = NULL;
  FAILS(hcq_program_create_binary(d, HCQ_BINARY_SPIRV, "\x03\x02\x23\x07", 4, "k", &p),
        HCQ_INVALID_ARGUMENT, "CPU:0", "CPU devices load no precompiled kernels",
        "hcq_program_create");
  cr_assert_null(p);
  /* Nor does the text form sneak through the source path. */
  FAILS(hcq_program_create(d, "k", "#cubin\nAAAA", &p), HCQ_INVALID_ARGUMENT, "CPU:0", "cubin",
        "does not load on CPU devices");
  void *bytes = NULL;
  size_t size = 0;
  FAILS(hcq_binary_compile(HCQ_DEVICE_CPU, HCQ_BINARY_NONE, NULL, "k", "void k(void){}", &bytes,
                           &size),
        HCQ_INVALID_ARGUMENT, "CPU devices load no precompiled kernels");
  FAILS(hcq_binary_compile(HCQ_DEVICE_METAL, HCQ_BINARY_NONE, NULL, "k", "kernel void k() {}",
                           &bytes, &size),
        HCQ_UNIMPLEMENTED, "Apple's toolchain", "xcrun");
  FAILS(hcq_binary_compile(HCQ_DEVICE_VULKAN, HCQ_BINARY_CUBIN, NULL, "k", k_glsl, &bytes, &size),
        HCQ_INVALID_ARGUMENT, "a cubin does not load on VULKAN devices", "spirv");
  FAILS(
      hcq_binary_compile(HCQ_DEVICE_VULKAN, HCQ_BINARY_SPIRV, "sm_90", "k", k_glsl, &bytes, &size),
      HCQ_INVALID_ARGUMENT, "for CUDA only");
  FAILS(hcq_binary_compile(HCQ_DEVICE_CUDA, HCQ_BINARY_PTX, "sm_x", "k", k_cuda, &bytes, &size),
        HCQ_INVALID_ARGUMENT, "\"sm_x\" is not sm_XY");
  FAILS(
      hcq_binary_compile(HCQ_DEVICE_CUDA, HCQ_BINARY_PTX, NULL, "not-an-id", k_cuda, &bytes, &size),
      HCQ_INVALID_ARGUMENT, "not a C identifier");
  cr_assert_null(bytes);
  test_close(d);
}

/* ---- Vulkan ---- */

Test(binary, vulkan_spirv_runs_like_glsl) {
  hcq_device_t *d = open_or_skip("VULKAN:0");
  size_t size = 0;
  uint8_t *spv = compile_or_skip(HCQ_DEVICE_VULKAN, HCQ_BINARY_NONE, NULL, "add1", k_glsl, &size);
  cr_assert_eq(hcq__binary_sniff(spv, size), HCQ_BINARY_SPIRV);
  hcq_program_t *p = NULL;
  OK(hcq_program_create_binary(d, HCQ_BINARY_SPIRV, spv, size, "add1", &p));
  memset(spv, 0, size); /* the program holds its own copy */
  cr_assert(!strncmp(hcq_program_source(p), "#spirv\n", 7));
  check_add(d, p, 64);
  check_graph(d, p, 64);
  hcq_program_release(p);
  free(spv);
  test_close(d);
}

Test(binary, vulkan_bad_spirv_errors) {
  hcq_device_t *d = open_or_skip("VULKAN:0");
  size_t size = 0;
  uint8_t *spv = compile_or_skip(HCQ_DEVICE_VULKAN, HCQ_BINARY_NONE, NULL, "add1", k_glsl, &size);
  hcq_program_t *p = NULL;
  FAILS(hcq_program_create_binary(d, HCQ_BINARY_SPIRV, spv, size, "nope", &p), HCQ_COMPILE_ERROR,
        "entry point is \"add1\", not \"nope\"");
  FAILS(hcq_program_create_binary(d, HCQ_BINARY_CUBIN, spv, size, "add1", &p), HCQ_INVALID_ARGUMENT,
        "a cubin does not load on VULKAN devices, which load: spirv");
  FAILS(hcq_program_create_binary(d, HCQ_BINARY_SPIRV, spv, size - 2, "add1", &p),
        HCQ_COMPILE_ERROR, "not a whole number of words");
  /* Cut at every word boundary past the header: never loads, never crashes. */
  for (size_t cut = 24; cut < size; cut += 4 * (1 + cut / 400)) {
    hcq_status_t st = hcq_program_create_binary(d, HCQ_BINARY_SPIRV, spv, cut, "add1", &p);
    cr_assert(st, "%zu of %zu bytes loaded", cut, size);
    cr_assert_eq(hcq_status_code(st), HCQ_COMPILE_ERROR, "%zu bytes: %s", cut,
                 hcq_status_message(st));
    hcq_status_destroy(st);
  }
  static const char ptx[] = ".version 9.0\n.target sm_90\n.address_size 64\n";
  FAILS(hcq_program_create_binary(d, HCQ_BINARY_SPIRV, ptx, sizeof(ptx) - 1, "add1", &p),
        HCQ_COMPILE_ERROR, "not a SPIR-V module", "PTX text (format ptx)");
  uint8_t garbage[256];
  for (size_t i = 0; i < sizeof(garbage); i++) garbage[i] = (uint8_t)(i * 37 + 11);
  FAILS(hcq_program_create_binary(d, HCQ_BINARY_SPIRV, garbage, sizeof(garbage), "add1", &p),
        HCQ_COMPILE_ERROR, "not a SPIR-V module", "256 bytes starting 0b 30");
  /* A whole module with one word changed in its body: the validator, not the driver, says no. */
  uint8_t *bad = malloc(size);
  memcpy(bad, spv, size);
  uint32_t w = 0xdeadbeefu;
  memcpy(bad + size - 8, &w, 4);
  hcq_status_t st = hcq_program_create_binary(d, HCQ_BINARY_SPIRV, bad, size, "add1", &p);
  cr_assert(st, "a damaged module loaded");
  cr_assert_eq(hcq_status_code(st), HCQ_COMPILE_ERROR, "%s", hcq_status_message(st));
  hcq_status_destroy(st);
  FAILS(hcq_program_create_binary(d, HCQ_BINARY_SPIRV, NULL, 4, "add1", &p), HCQ_INVALID_ARGUMENT,
        "bytes is NULL");
  FAILS(hcq_program_create_binary(d, HCQ_BINARY_SPIRV, spv, 0, "add1", &p), HCQ_INVALID_ARGUMENT,
        "size is 0");
  FAILS(hcq_program_create_binary(d, (hcq_binary_format_t)42, spv, size, "add1", &p),
        HCQ_INVALID_ARGUMENT, "format 42 is not a binary format");
  FAILS(hcq_program_create_binary(d, HCQ_BINARY_SPIRV, spv, size, "add 1", &p),
        HCQ_INVALID_ARGUMENT, "not a C identifier");
  cr_assert_null(p);
  free(bad);
  free(spv);
  test_close(d);
}

/* ---- CUDA (the stand-in driver; NVRTC real) ---- */

static hcq_device_t *cuda_or_skip(void) {
  const char *lib = getenv("HCQ_CUDA_LIBRARY");
  if (!lib || !strstr(lib, "fake"))
    cr_skip_test("runs against the CUDA stand-in (HCQ_CUDA_LIBRARY)");
  return open_or_skip("CUDA:0");
}

Test(binary, cuda_ptx_and_cubin_run) {
  hcq_device_t *d = cuda_or_skip();
  size_t nptx = 0, ncubin = 0;
  uint8_t *ptx =
      compile_or_skip(HCQ_DEVICE_CUDA, HCQ_BINARY_PTX, "sm_90", "add_const", k_cuda, &nptx);
  uint8_t *cubin =
      compile_or_skip(HCQ_DEVICE_CUDA, HCQ_BINARY_NONE, "9.0", "add_const", k_cuda, &ncubin);
  cr_assert_eq(hcq__binary_sniff(ptx, nptx), HCQ_BINARY_PTX);
  cr_assert_eq(hcq__binary_sniff(cubin, ncubin), HCQ_BINARY_CUBIN,
               "the default CUDA format is a cubin");
  const struct {
    hcq_binary_format_t f;
    const uint8_t *b;
    size_t n;
  } cases[] = {{HCQ_BINARY_PTX, ptx, nptx}, {HCQ_BINARY_CUBIN, cubin, ncubin}};
  for (size_t c = 0; c < 2; c++) {
    hcq_program_t *p = NULL;
    OK(hcq_program_create_binary(d, cases[c].f, cases[c].b, cases[c].n, "add_const", &p));
    /* The parameter list is read from the binary: 2 pointers, 2 values. */
    size_t nb = 0, nv = 0;
    cr_assert(hcq_program_args(p, &nb, &nv) && nb == 2 && nv == 2, "%s: %zu buffers, %zu values",
              hcq_binary_format_name(cases[c].f), nb, nv);
    FAILS(hcq_program_declare_args(p, 3, 2), HCQ_INVALID_ARGUMENT,
          "compiled parameter list takes 2 and 2");
    check_add(d, p, 128);
    check_graph(d, p, 128);
    hcq_program_release(p);
  }
  free(ptx);
  free(cubin);
  test_close(d);
}

/* A fatbin as nvcc -fatbin lays it out (cuda_binary.c): a 16-byte header, then 64-byte entry
 * headers each followed by its payload. */
static size_t fatbin_add(uint8_t *out, size_t at, uint16_t kind, uint32_t arch, uint64_t flags,
                         const void *p, size_t n) {
  uint8_t h[64] = {0};
  memcpy(h, &kind, 2);
  h[2] = 1, h[3] = 1;
  uint32_t hs = 64;
  uint64_t size = n;
  memcpy(h + 4, &hs, 4);
  memcpy(h + 8, &size, 8);
  memcpy(h + 28, &arch, 4);
  memcpy(h + 40, &flags, 8);
  memcpy(out + at, h, 64);
  memcpy(out + at + 64, p, n);
  return at + 64 + n;
}
static size_t fatbin_header(uint8_t *out, size_t total) {
  uint32_t magic = 0xBA55ED50u;
  uint16_t version = 1, hs = 16;
  uint64_t fat = total - 16;
  memcpy(out, &magic, 4);
  memcpy(out + 4, &version, 2);
  memcpy(out + 6, &hs, 2);
  memcpy(out + 8, &fat, 8);
  return total;
}

Test(binary, cuda_fatbin_picks_the_devices_code) {
  hcq_device_t *d = cuda_or_skip();
  size_t n80 = 0, n90 = 0, nptx = 0;
  uint8_t *c80 =
      compile_or_skip(HCQ_DEVICE_CUDA, HCQ_BINARY_CUBIN, "sm_80", "add_const", k_cuda, &n80);
  uint8_t *c90 =
      compile_or_skip(HCQ_DEVICE_CUDA, HCQ_BINARY_CUBIN, "sm_90", "add_const", k_cuda, &n90);
  uint8_t *ptx =
      compile_or_skip(HCQ_DEVICE_CUDA, HCQ_BINARY_PTX, "sm_90", "add_const", k_cuda, &nptx);
  uint8_t *fb = calloc(1, 16 + 3 * 64 + n80 + n90 + nptx);
  hcq_program_t *p = NULL;
  /* sm_80 and sm_90 cubins: the device (9.0) runs the second. */
  size_t at = fatbin_add(fb, 16, 2, 80, 0x11, c80, n80);
  size_t size = fatbin_header(fb, fatbin_add(fb, at, 2, 90, 0x11, c90, n90));
  OK(hcq_program_create_binary(d, HCQ_BINARY_FATBIN, fb, size, "add_const", &p));
  check_add(d, p, 256);
  hcq_program_release(p);
  /* Only PTX for it: the driver compiles that (and hcq reads its parameters from the text). */
  size = fatbin_header(
      fb, fatbin_add(fb, fatbin_add(fb, 16, 2, 80, 0x11, c80, n80), 1, 90, 0x11, ptx, nptx));
  OK(hcq_program_create_binary(d, HCQ_BINARY_FATBIN, fb, size, "add_const", &p));
  check_add(d, p, 256);
  hcq_program_release(p);
  /* Nothing for sm_90. */
  size = fatbin_header(fb, fatbin_add(fb, 16, 2, 80, 0x11, c80, n80));
  FAILS(hcq_program_create_binary(d, HCQ_BINARY_FATBIN, fb, size, "add_const", &p),
        HCQ_COMPILE_ERROR, "no code that runs on CUDA:0 (sm_90)", "cubin sm_80");
  /* Compressed PTX only: its parameters cannot be read. */
  size = fatbin_header(fb, fatbin_add(fb, 16, 1, 90, 0x8011, ptx, nptx));
  FAILS(hcq_program_create_binary(d, HCQ_BINARY_FATBIN, fb, size, "add_const", &p),
        HCQ_COMPILE_ERROR, "compressed", "parameter list");
  /* Truncated: the header promises more than there is; an entry that reaches past the end. */
  size = fatbin_header(fb, fatbin_add(fb, 16, 2, 90, 0x11, c90, n90));
  FAILS(hcq_program_create_binary(d, HCQ_BINARY_FATBIN, fb, size - 100, "add_const", &p),
        HCQ_COMPILE_ERROR, "truncated");
  uint64_t fat = size;
  memcpy(fb + 8, &fat, 8);
  FAILS(hcq_program_create_binary(d, HCQ_BINARY_FATBIN, fb, size + 16, "add_const", &p),
        HCQ_COMPILE_ERROR, "truncated");
  FAILS(hcq_program_create_binary(d, HCQ_BINARY_FATBIN, c90, n90, "add_const", &p),
        HCQ_COMPILE_ERROR, "not a fatbin", "a CUDA ELF cubin (format cubin)");
  cr_assert_null(p);
  free(fb);
  free(c80);
  free(c90);
  free(ptx);
  test_close(d);
}

/* What nvcc itself writes, where a toolkit is installed: cubins for sm_80 and sm_90 and PTX (which
 * CUDA 13's nvcc compresses) in one fatbin; and a fatbin of compressed PTX only. */
static uint8_t *nvcc_fatbin(const char *dir, const char *gencode, size_t *size) {
  char cmd[2048], path[1100];
  snprintf(path, sizeof(path), "%s/k.cu", dir);
  FILE *f = fopen(path, "w");
  cr_assert_not_null(f);
  fputs(k_cuda, f);
  fclose(f);
  snprintf(cmd, sizeof(cmd),
           "cd '%s' && /usr/local/cuda/bin/nvcc -fatbin %s k.cu -o k.fatbin >nvcc.log 2>&1", dir,
           gencode);
  cr_assert_eq(system(cmd), 0, "%s failed", cmd);
  snprintf(path, sizeof(path), "%s/k.fatbin", dir);
  f = fopen(path, "rb");
  cr_assert_not_null(f);
  uint8_t *b = malloc(1 << 20);
  *size = fread(b, 1, 1 << 20, f);
  fclose(f);
  return b;
}

static void make_dir(char *dir, size_t size);

Test(binary, cuda_fatbin_from_nvcc, .timeout = 300) {
  if (access("/usr/local/cuda/bin/nvcc", X_OK)) cr_skip_test("no nvcc at /usr/local/cuda/bin");
  hcq_device_t *d = cuda_or_skip();
  char dir[600];
  make_dir(dir, sizeof(dir));
  size_t size = 0;
  uint8_t *fb = nvcc_fatbin(
      dir, "-gencode arch=compute_80,code=sm_80 -gencode arch=compute_90,code=[sm_90,compute_90]",
      &size);
  hcq_program_t *p = NULL;
  OK(hcq_program_create_binary(d, HCQ_BINARY_FATBIN, fb, size, "add_const", &p));
  check_add(d, p, 128);
  hcq_program_release(p);
  free(fb);
  fb = nvcc_fatbin(dir, "-gencode arch=compute_90,code=compute_90", &size);
  FAILS(hcq_program_create_binary(d, HCQ_BINARY_FATBIN, fb, size, "add_const", &p),
        HCQ_COMPILE_ERROR, "PTX compute_90 (compressed)",
        "cannot read the kernel's parameter list");
  free(fb);
  test_close(d);
}

Test(binary, cuda_bad_binaries_errors) {
  hcq_device_t *d = cuda_or_skip();
  size_t n80 = 0, n90 = 0, nptx = 0;
  uint8_t *c80 =
      compile_or_skip(HCQ_DEVICE_CUDA, HCQ_BINARY_CUBIN, "sm_80", "add_const", k_cuda, &n80);
  uint8_t *c90 =
      compile_or_skip(HCQ_DEVICE_CUDA, HCQ_BINARY_CUBIN, "sm_90", "add_const", k_cuda, &n90);
  uint8_t *ptx =
      compile_or_skip(HCQ_DEVICE_CUDA, HCQ_BINARY_PTX, "sm_90", "add_const", k_cuda, &nptx);
  hcq_program_t *p = NULL;
  FAILS(hcq_program_create_binary(d, HCQ_BINARY_CUBIN, c80, n80, "add_const", &p),
        HCQ_COMPILE_ERROR, "built for sm_80", "does not run on CUDA:0 (sm_90", "--arch sm_90");
  FAILS(hcq_program_create_binary(d, HCQ_BINARY_CUBIN, c90, n90, "add_cons", &p), HCQ_COMPILE_ERROR,
        "no kernel named add_cons", "its kernels: add_const");
  FAILS(hcq_program_create_binary(d, HCQ_BINARY_PTX, ptx, nptx, "nope", &p), HCQ_COMPILE_ERROR,
        "\"nope\" is not a kernel");
  FAILS(hcq_program_create_binary(d, HCQ_BINARY_CUBIN, ptx, nptx, "add_const", &p),
        HCQ_COMPILE_ERROR, "not a cubin", "PTX text (format ptx)");
  FAILS(hcq_program_create_binary(d, HCQ_BINARY_PTX, c90, n90, "add_const", &p), HCQ_COMPILE_ERROR,
        "not PTX text", "a CUDA ELF cubin (format cubin)");
  FAILS(hcq_program_create_binary(d, HCQ_BINARY_SPIRV, c90, n90, "add_const", &p),
        HCQ_INVALID_ARGUMENT,
        "a spirv does not load on CUDA devices, which load: ptx, cubin, fatbin");
  /* A cubin cut anywhere is refused before the driver reads it (it takes no size). */
  for (size_t cut = 1; cut < n90; cut += 1 + cut / 7) {
    hcq_status_t st = hcq_program_create_binary(d, HCQ_BINARY_CUBIN, c90, cut, "add_const", &p);
    cr_assert(st, "%zu of %zu bytes loaded", cut, n90);
    cr_assert_eq(hcq_status_code(st), HCQ_COMPILE_ERROR, "%zu bytes: %s", cut,
                 hcq_status_message(st));
    hcq_status_destroy(st);
  }
  /* PTX with a NUL inside, PTX cut before its kernel. */
  uint8_t *holed = malloc(nptx);
  memcpy(holed, ptx, nptx);
  holed[nptx / 2] = 0;
  FAILS(hcq_program_create_binary(d, HCQ_BINARY_PTX, holed, nptx, "add_const", &p),
        HCQ_COMPILE_ERROR, "not PTX text");
  const char *e = strstr((const char *)ptx, ".entry");
  cr_assert_not_null(e);
  FAILS(hcq_program_create_binary(d, HCQ_BINARY_PTX, ptx, (size_t)(e - (const char *)ptx),
                                  "add_const", &p),
        HCQ_COMPILE_ERROR, "not a kernel");
  cr_assert_null(p);
  free(holed);
  free(c80);
  free(c90);
  free(ptx);
  test_close(d);
}

/* ---- Metal (the stand-in) ---- */

/* A metallib as the metallib tool lays it out (metal_device.c, fake_metal.c): "MTLB", its size at
 * 16, the function list's offset and size at 24 and 32; the list holds a count and, per function,
 * its byte count and tags up to ENDT, the name in NAME. */
static size_t metallib(uint8_t *out, const char *const *names, size_t n) {
  memset(out, 0, 88);
  memcpy(out, "MTLB", 4);
  size_t at = 88, list = at;
  uint32_t count = (uint32_t)n;
  memcpy(out + at, &count, 4);
  at += 4;
  for (size_t i = 0; i < n; i++) {
    size_t start = at;
    at += 4;
    uint16_t len = (uint16_t)(strlen(names[i]) + 1);
    memcpy(out + at, "NAME", 4);
    memcpy(out + at + 4, &len, 2);
    memcpy(out + at + 6, names[i], len);
    at += 6 + len;
    memcpy(out + at, "ENDT", 4);
    at += 4;
    uint32_t fsize = (uint32_t)(at - start);
    memcpy(out + start, &fsize, 4);
  }
  uint64_t total = at, off = list, lsize = at - list;
  memcpy(out + 16, &total, 8);
  memcpy(out + 24, &off, 8);
  memcpy(out + 32, &lsize, 8);
  return at;
}

Test(binary, metal_metallib_runs_and_errors) {
  const char *lib = getenv("HCQ_METAL_FRAMEWORK");
  if (!lib || !strstr(lib, "fake"))
    cr_skip_test("runs against the Metal stand-in (HCQ_METAL_FRAMEWORK)");
  hcq_device_t *d = open_or_skip("METAL:0");
  uint8_t ml[512];
  size_t size = metallib(ml, (const char *const[]){"mul_add", "add_scalar"}, 2);
  hcq_program_t *p = NULL;
  OK(hcq_program_create_binary(d, HCQ_BINARY_METALLIB, ml, size, "add_scalar", &p));
  /* add_scalar: out[i] = a[i] + v[0] for i < v[1]. */
  enum { N = 1000 };
  static int32_t a[N], out[N];
  for (int i = 0; i < N; i++) a[i] = i * 3 - 500;
  hcq_buffer_t *ba = test_buffer(d, sizeof(a)), *bo = test_buffer(d, sizeof(out));
  OK(hcq_buffer_copyin(ba, 0, a, sizeof(a)));
  hcq_buffer_t *bufs[] = {bo, ba};
  for (int r = 0; r < 2; r++) {
    int32_t vals[2] = {r ? -9 : 42, r ? 300 : N};
    hcq_launch_desc_t desc = {.program = p,
                              .bufs = bufs,
                              .nbufs = 2,
                              .vals = vals,
                              .nvals = 2,
                              .global = {(N + 63) / 64, 1, 1},
                              .local = {64, 1, 1}};
    OK(hcq_launch(&desc));
    test_read(bo, out, sizeof(out));
    for (int i = 0; i < vals[1]; i++) cr_assert_eq(out[i], a[i] + vals[0], "run %d, out[%d]", r, i);
  }
  hcq_buffer_release(ba);
  hcq_buffer_release(bo);
  hcq_program_release(p);
  FAILS(hcq_program_create_binary(d, HCQ_BINARY_METALLIB, ml, size, "add2", &p), HCQ_COMPILE_ERROR,
        "no kernel function named add2");
  FAILS(hcq_program_create_binary(d, HCQ_BINARY_METALLIB, ml, size - 10, "add_scalar", &p),
        HCQ_COMPILE_ERROR, "truncated", "header says");
  FAILS(hcq_program_create_binary(d, HCQ_BINARY_METALLIB, "not a metallib at all, just text", 32,
                                  "add_scalar", &p),
        HCQ_COMPILE_ERROR, "not a Metal library", "text starting");
  FAILS(hcq_program_create_binary(d, HCQ_BINARY_PTX, ml, size, "add_scalar", &p),
        HCQ_INVALID_ARGUMENT, "a ptx does not load on METAL devices, which load: metallib");
  /* Whole by its header, damaged inside: Metal's own refusal comes back. */
  uint64_t bogus = 1u << 20;
  memcpy(ml + 24, &bogus, 8);
  FAILS(hcq_program_create_binary(d, HCQ_BINARY_METALLIB, ml, size, "add_scalar", &p),
        HCQ_COMPILE_ERROR, "Metal rejected the metallib", "Invalid library file");
  cr_assert_null(p);
  test_close(d);
}

/* ---- graph files ---- */

static void make_dir(char *dir, size_t size) {
  const char *base = getenv("HCQ_TEST_TMP");
  char root[512];
  snprintf(root, sizeof(root), "%s", base && *base ? base : "/tmp");
  mkdir(root, 0700);
  snprintf(dir, size, "%s/binary-XXXXXX", root);
  cr_assert_not_null(mkdtemp(dir));
}

static void write_file(const char *dir, const char *name, const void *data, size_t n) {
  char path[1100];
  snprintf(path, sizeof(path), "%s/%s", dir, name);
  FILE *f = fopen(path, "wb");
  cr_assert_not_null(f, "cannot write %s", path);
  cr_assert_eq(fwrite(data, 1, n, f), n);
  fclose(f);
}

static hcq_status_t load_json(const char *dir, const char *json, hcq_graph_file_t **gf) {
  write_file(dir, "g.json", json, strlen(json));
  char path[1100];
  snprintf(path, sizeof(path), "%s/g.json", dir);
  return hcq_graph_file_load(path, NULL, gf);
}

#define GRAPH_WITH(program)                                                                        \
  "{\"format\": \"hcq-graph/1\", \"buffers\": {"                                                   \
  "  \"x\": {\"device\": \"VULKAN:0\", \"bytes\": 4096, \"init\": \"iota32\"},"                    \
  "  \"y\": {\"device\": \"VULKAN:0\", \"bytes\": 4096, \"init\": \"zeros\"}},"                    \
  " \"programs\": {\"add1\": " program                                                             \
  "},"                                                                                             \
  " \"items\": [{\"kernel\": \"add1\", \"bufs\": [\"y\", \"x\"], \"outs\": [0], \"vals\": [1024, " \
  "5],"                                                                                            \
  "   \"global\": [16, 1, 1], \"local\": [64, 1, 1]}], \"runs\": [{}]}"

Test(binary, graph_file_names_a_binary) {
  hcq_device_t *d = open_or_skip("VULKAN:0");
  test_close(d);
  size_t size = 0;
  uint8_t *spv = compile_or_skip(HCQ_DEVICE_VULKAN, HCQ_BINARY_NONE, NULL, "add1", k_glsl, &size);
  char dir[600];
  make_dir(dir, sizeof(dir));
  write_file(dir, "add1.spv", spv, size);
  write_file(dir, "add1.bin", spv, size);
  hcq_graph_file_t *gf = NULL;
  /* The format from the extension, or given. */
  const char *const good[] = {
      GRAPH_WITH("{\"glsl\": {\"binary\": \"add1.spv\"}}"),
      GRAPH_WITH("{\"glsl\": {\"binary\": \"add1.bin\", \"format\": \"spirv\"}}")};
  char saved[1100];
  snprintf(saved, sizeof(saved), "%s/saved.json", dir);
  for (int g = 0; g < 3; g++) {
    if (g < 2)
      OK(load_json(dir, good[g], &gf));
    else
      OK(hcq_graph_file_load(saved, NULL, &gf)); /* what the first file saved as */
    hcq_jit_t *jit;
    OK(hcq_jit_create(hcq_graph_file_items(gf), hcq_graph_file_item_count(gf), NULL, 0, NULL, 0,
                      NULL, &jit));
    OK(hcq_jit_run(jit, NULL, 0, NULL, 0, true, NULL));
    uint32_t y[1024];
    for (size_t i = 0; i < hcq_graph_file_buffer_count(gf); i++)
      if (!strcmp(hcq_graph_file_buffer_name(gf, i), "y"))
        test_read(hcq_graph_file_buffer(gf, i), y, sizeof(y));
    for (uint32_t i = 0; i < 1024; i++)
      cr_assert_eq(y[i], i + 5, "file %d, y[%u] = %u", g, i, y[i]);
    if (g == 0) OK(hcq_jit_save(jit, saved));
    OK(hcq_jit_destroy(jit));
    hcq_graph_file_destroy(gf);
    gf = NULL;
  }
  /* The saved file carries the module inline, in its text form. */
  FILE *f = fopen(saved, "r");
  cr_assert_not_null(f);
  char *text = calloc(1, 1 << 20);
  size_t got = fread(text, 1, (1 << 20) - 1, f);
  fclose(f);
  cr_assert(got > 0);
  cr_assert_not_null(strstr(text, "\"glsl\": \"#spirv\\n"), "the saved file has no inline SPIR-V");
  free(text);
  /* Errors name the JSON path. */
  FAILS(load_json(dir, GRAPH_WITH("{\"glsl\": {\"binary\": \"add1.bin\"}}"), &gf),
        HCQ_INVALID_ARGUMENT, "programs.add1.glsl.binary",
        "cannot tell the format of \"add1.bin\"");
  FAILS(load_json(dir, GRAPH_WITH("{\"glsl\": {\"binary\": \"add1.spv\", \"format\": \"elf\"}}"),
                  &gf),
        HCQ_INVALID_ARGUMENT, "programs.add1.glsl.format", "\"elf\" is not a binary format");
  FAILS(load_json(dir, GRAPH_WITH("{\"glsl\": {\"binary\": \"add1.spv\", \"format\": \"cubin\"}}"),
                  &gf),
        HCQ_INVALID_ARGUMENT, "programs.add1.glsl.format",
        "a cubin does not load on VULKAN devices");
  FAILS(load_json(dir, GRAPH_WITH("{\"c\": {\"binary\": \"add1.spv\"}}"), &gf),
        HCQ_INVALID_ARGUMENT, "programs.add1.c.binary", "does not load on CPU devices");
  FAILS(load_json(dir, GRAPH_WITH("{\"glsl\": {\"binary\": \"missing.spv\"}}"), &gf), HCQ_NOT_FOUND,
        "programs.add1.glsl.binary", "missing.spv");
  FAILS(load_json(dir, GRAPH_WITH("{\"glsl\": {\"binary\": \"add1.spv\", \"file\": \"x\"}}"), &gf),
        HCQ_INVALID_ARGUMENT, "programs.add1.glsl", "file");
  FAILS(load_json(dir, GRAPH_WITH("{\"glsl\": 7}"), &gf), HCQ_INVALID_ARGUMENT,
        "programs.add1.glsl", "{\"binary\": path}");
  /* A FIFO is refused by type, without blocking the loader. */
  char fifo[1100];
  snprintf(fifo, sizeof(fifo), "%s/k.spv", dir);
  cr_assert_eq(mkfifo(fifo, 0600), 0);
  FAILS(load_json(dir, GRAPH_WITH("{\"glsl\": {\"binary\": \"k.spv\"}}"), &gf),
        HCQ_INVALID_ARGUMENT, "programs.add1.glsl.binary",
        "is a FIFO (named pipe), not a regular file");
  /* A damaged binary fails when the item compiles it, under the item's path. */
  write_file(dir, "half.spv", spv, size / 2);
  FAILS(load_json(dir, GRAPH_WITH("{\"glsl\": {\"binary\": \"half.spv\"}}"), &gf),
        HCQ_COMPILE_ERROR, "items[0]", "truncated or damaged");
  cr_assert_null(gf);
  free(spv);
}
