/* NVRTC compile and the on-disk cache of CUDA kernels (no GPU needed), and the PTX parameter rules
 * of docs/cuda.md. Every compiling test skips, saying why, where NVRTC does not load. */
#include <sys/stat.h>

#include "cuda/cuda_internal.h"
#include "cuda/nvrtc.h"
#include "cuda/nvrtc_testing.h"
#include "test_util.h"

TestSuite(nvrtc, .timeout = 120);

static const char k_axpb[] =
    "extern \"C\" __global__ void axpb(unsigned *y, const unsigned *x, const unsigned *w, int n, "
    "int a, int b) {\n"
    "  int i = blockIdx.x * blockDim.x + threadIdx.x;\n"
    "  if (i < n) y[i] = x[i] * (unsigned)a + w[i] + (unsigned)b;\n"
    "}\n";

/* A private cache directory for this test (options are read once per test process). */
static void fresh_cache(const char *name) {
  const char *base = getenv("HCQ_TEST_TMP");
  char dir[512];
  snprintf(dir, sizeof(dir), "%s/nvrtc-%s-%d", base && *base ? base : "/tmp", name, (int)getpid());
  setenv("HCQ_CACHE_DIR", dir, 1);
  const char *why;
  if (!hcq__cuda_nvrtc_available(&why)) cr_skip_test("NVRTC is not available here: %s", why);
}

static void compile(const char *entry, const char *src, int arch, hcq__cuda_image_t *img) {
  OK(hcq__cuda_nvrtc_compile(entry, src, arch, img));
}

Test(nvrtc, compiles_cuda_c_for_an_architecture_and_caches_the_result) {
  fresh_cache("cache");
  hcq__cuda_image_t a, b;
  compile("axpb", k_axpb, 90, &a);
  cr_assert_not(a.from_cache);
  cr_assert_eq(a.arch, 90);
  cr_assert(strstr(a.ptx, ".entry axpb"), "PTX of the kernel:\n%s", a.ptx);
  cr_assert(strstr(a.ptx, "sm_90"));
  cr_assert_not_null(a.cubin, "sm_90 is a real architecture: a cubin");
  cr_assert_gt(a.cubin_len, 64u);
  compile("axpb", k_axpb, 90, &b);
  cr_assert(b.from_cache, "the second compile reads the cache");
  cr_assert_eq(b.ptx_len, a.ptx_len);
  cr_assert_str_eq(b.ptx, a.ptx);
  cr_assert_eq(b.cubin_len, a.cubin_len);
  cr_assert_arr_eq(b.cubin, a.cubin, a.cubin_len);
  char path[1300];
  OK(hcq__cuda_nvrtc_cache_path("axpb", k_axpb, 90, path, sizeof(path)));
  struct stat st;
  cr_assert_eq(stat(path, &st), 0, "%s", path);
  cr_assert_eq(st.st_mode & 0777, 0600u, "cache files are private");
  char *slash = strrchr(path, '/');
  *slash = '\0';
  cr_assert_eq(stat(path, &st), 0);
  cr_assert_eq(st.st_mode & 0777, 0700u, "the cache directory is private");
  hcq__cuda_image_free(&a);
  hcq__cuda_image_free(&b);
}

Test(nvrtc, the_key_covers_source_entry_and_architecture) {
  fresh_cache("key");
  char p1[1300], p2[1300], p3[1300], p4[1300];
  OK(hcq__cuda_nvrtc_cache_path("axpb", k_axpb, 90, p1, sizeof(p1)));
  OK(hcq__cuda_nvrtc_cache_path("axpb", k_axpb, 80, p2, sizeof(p2)));
  OK(hcq__cuda_nvrtc_cache_path("axpb2", k_axpb, 90, p3, sizeof(p3)));
  char src2[sizeof(k_axpb) + 8];
  snprintf(src2, sizeof(src2), "%s\n", k_axpb);
  OK(hcq__cuda_nvrtc_cache_path("axpb", src2, 90, p4, sizeof(p4)));
  cr_assert_str_neq(p1, p2);
  cr_assert_str_neq(p1, p3);
  cr_assert_str_neq(p1, p4);
  hcq__cuda_image_t a;
  compile("axpb", k_axpb, 80, &a);
  cr_assert(strstr(a.ptx, "sm_80"));
  hcq__cuda_image_free(&a);
}

/* Damaged, foreign or exposed cache entries are never loaded: the kernel is compiled again. */
Test(nvrtc, a_damaged_or_foreign_cache_file_is_ignored) {
  fresh_cache("tamper");
  hcq__cuda_image_t a, b;
  compile("axpb", k_axpb, 90, &a);
  char path[1300];
  OK(hcq__cuda_nvrtc_cache_path("axpb", k_axpb, 90, path, sizeof(path)));
  FILE *f = fopen(path, "r+b");
  cr_assert_not_null(f);
  fseek(f, -3, SEEK_END);
  int c = fgetc(f);
  fseek(f, -3, SEEK_END);
  fputc(c ^ 0x5A, f);
  fclose(f);
  /* Damage is said once, naming the file; the file is then replaced, and read silently. */
  char err[4000];
  int saved = test_stderr_begin();
  compile("axpb", k_axpb, 90, &b);
  test_stderr_end(saved, err, sizeof(err));
  cr_assert_not(b.from_cache, "a flipped byte fails the checksum");
  cr_assert_arr_eq(b.cubin, a.cubin, a.cubin_len, "compiled again, the same");
  cr_assert(strstr(err, "hcq: warning") && strstr(err, path) && strstr(err, "damaged"),
            "no warning: %s", err);
  cr_assert_null(strstr(strstr(err, "hcq: warning") + 1, "hcq: warning"),
                 "more than one warning: %s", err);
  hcq__cuda_image_free(&b);
  saved = test_stderr_begin();
  compile("axpb", k_axpb, 90, &b);
  test_stderr_end(saved, err, sizeof(err));
  cr_assert(b.from_cache, "the recompiled file replaced the damaged one");
  cr_assert_null(strstr(err, "hcq: warning"), "%s", err);
  hcq__cuda_image_free(&b);
  cr_assert_eq(truncate(path, 100), 0);
  saved = test_stderr_begin();
  compile("axpb", k_axpb, 90, &b);
  test_stderr_end(saved, err, sizeof(err));
  cr_assert_not(b.from_cache, "a truncated file is ignored");
  cr_assert(strstr(err, path) && strstr(err, "damaged"), "no warning: %s", err);
  hcq__cuda_image_free(&b);
  cr_assert_eq(chmod(path, 0666), 0);
  compile("axpb", k_axpb, 90, &b);
  cr_assert_not(b.from_cache, "a file others may write is ignored");
  hcq__cuda_image_free(&b);
  if (geteuid() == 0) {
    compile("axpb", k_axpb, 90, &b); /* rewritten: ours and private again */
    hcq__cuda_image_free(&b);
    cr_assert_eq(chown(path, 4242, 4242), 0);
    compile("axpb", k_axpb, 90, &b);
    cr_assert_not(b.from_cache, "a file of another user is ignored");
    hcq__cuda_image_free(&b);
  }
  hcq__cuda_image_free(&a);
}

Test(nvrtc, an_exposed_cache_directory_is_not_used) {
  fresh_cache("exposed");
  hcq__cuda_image_t a;
  compile("axpb", k_axpb, 90, &a);
  hcq__cuda_image_free(&a);
  char path[1300];
  OK(hcq__cuda_nvrtc_cache_path("axpb", k_axpb, 90, path, sizeof(path)));
  *strrchr(path, '/') = '\0';
  cr_assert_eq(chmod(path, 0777), 0);
  for (int i = 0; i < 2; i++) {
    compile("axpb", k_axpb, 90, &a);
    cr_assert_not(a.from_cache,
                  "compile %d: a world-writable cache directory is neither read nor written", i);
    hcq__cuda_image_free(&a);
  }
  char p2[1300];
  FAILS(hcq__cuda_nvrtc_cache_path("axpb", k_axpb, 90, p2, sizeof(p2)), HCQ_UNAVAILABLE,
        "not usable");
}

Test(nvrtc, a_compile_error_carries_the_compiler_log) {
  fresh_cache("error");
  hcq__cuda_image_t a;
  FAILS(
      hcq__cuda_nvrtc_compile(
          "bad", "extern \"C\" __global__ void bad(int *y) { y[0] = undefined_thing; }\n", 90, &a),
      HCQ_COMPILE_ERROR, "bad.cu", "undefined_thing", "NVRTC");
  cr_assert_null(a.ptx);
}

Test(nvrtc, an_architecture_nvrtc_does_not_know_gets_ptx_for_the_newest_below_it) {
  fresh_cache("arch");
  hcq__cuda_image_t a;
  compile("axpb", k_axpb, 95, &a); /* no sm_95: compute_90 PTX, compiled by the driver at load */
  cr_assert_eq(a.arch, 90);
  cr_assert_null(a.cubin);
  cr_assert(strstr(a.ptx, ".entry axpb"));
  hcq__cuda_image_free(&a);
  FAILS(hcq__cuda_nvrtc_compile("axpb", k_axpb, 10, &a), HCQ_UNAVAILABLE, "compute capability 1.0");
}

Test(nvrtc, ptx_parameters_follow_the_spec_layout) {
  const char *ok =
      ".version 8.0\n.target sm_90\n.address_size 64\n"
      ".visible .entry k(\n .param .u64 .ptr .global .align 4 k_param_0,\n .param .u64 k_param_1,\n"
      " .param .u32 k_param_2,\n .param .f32 k_param_3\n)\n{ ret; }\n"
      ".visible .entry none()\n{ ret; }\n";
  uint32_t np = 9, nv = 9;
  OK(hcq__cuda_ptx_params(ok, "k", &np, &nv));
  cr_assert_eq(np, 2u);
  cr_assert_eq(nv, 2u);
  OK(hcq__cuda_ptx_params(ok, "none", &np, &nv));
  cr_assert_eq(np + nv, 0u);
  FAILS(hcq__cuda_ptx_params(ok, "missing", &np, &nv), HCQ_COMPILE_ERROR, "\"missing\"");
  const char *late = ".version 8.0\n.entry k(.param .u32 a, .param .u64 b)\n{ ret; }\n";
  FAILS(hcq__cuda_ptx_params(late, "k", &np, &nv), HCQ_COMPILE_ERROR, "parameter 1",
        "pointers) first");
  const char *byval = ".version 8.0\n.entry k(.param .align 8 .b8 s[16])\n{ ret; }\n";
  FAILS(hcq__cuda_ptx_params(byval, "k", &np, &nv), HCQ_COMPILE_ERROR, "parameter 0");
  cr_assert(hcq__cuda_is_ptx("// generated\n/* x */\n  .version 8.0\n"));
  cr_assert_not(hcq__cuda_is_ptx("extern \"C\" __global__ void k() {}"));
}
