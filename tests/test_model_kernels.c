/* A device kind's kernel language as the backend row names it (hcq_device_kind_kernel_caps), and
 * the models' one kernel-building helper (models/common/model_kernels.h) that picks sources by it:
 * the source per language, the define header and prefix before the body, uploads. */
#include "model_kernels.h"
#include "test_util.h"

TestSuite(model_kernels, .timeout = 60);

/* Hand-written from each backend's row: the language its devices compile, and host-callable C. */
Test(model_kernels, kind_kernel_caps_name_the_language) {
  cr_expect_eq(hcq_device_kind_kernel_caps(HCQ_DEVICE_CPU),
               HCQ_CAP_HOST_CALLABLE | HCQ_CAP_COMPILE_C);
  cr_expect_eq(hcq_device_kind_kernel_caps(HCQ_DEVICE_VULKAN), HCQ_CAP_COMPILE_GLSL);
  cr_expect_eq(hcq_device_kind_kernel_caps(HCQ_DEVICE_CUDA), HCQ_CAP_COMPILE_CUDA);
  cr_expect_eq(hcq_device_kind_kernel_caps(HCQ_DEVICE_METAL), HCQ_CAP_COMPILE_METAL);
  cr_expect_eq(hcq_device_kind_kernel_caps(HCQ_DEVICE_KIND_COUNT), 0u);
  cr_expect_eq(hcq_device_kind_kernel_caps((hcq_device_kind_t)-1), 0u);
  cr_expect_eq(hcq_device_kind_kernel_caps((hcq_device_kind_t)1000), 0u);
}

Test(model_kernels, language_follows_the_row) {
  cr_expect_eq(model_kernel_lang(HCQ_DEVICE_CPU), MODEL_KERNELS_C);
  cr_expect_eq(model_kernel_lang(HCQ_DEVICE_VULKAN), MODEL_KERNELS_GLSL);
  cr_expect_eq(model_kernel_lang(HCQ_DEVICE_CUDA), MODEL_KERNELS_CUDA);
  cr_expect_eq(model_kernel_lang(HCQ_DEVICE_METAL), MODEL_KERNELS_MSL);
  cr_expect_eq(model_kernel_lang(HCQ_DEVICE_KIND_COUNT), MODEL_KERNELS_NONE);
  cr_expect_str_eq(model_kernel_lang_name(MODEL_KERNELS_MSL), "MSL");
  cr_expect_str_eq(model_kernel_lang_name(MODEL_KERNELS_NONE), "no kernel language");
}

Test(model_kernels, source_per_language_or_refusal) {
  const char *const sources[MODEL_KERNELS_NONE] = {"c body", "glsl body", "cuda body", NULL};
  const char *body = NULL;
  OK(model_kernel_source("toy", sources, HCQ_DEVICE_VULKAN, &body));
  cr_expect_str_eq(body, "glsl body");
  OK(model_kernel_source("toy", sources, HCQ_DEVICE_CPU, &body));
  cr_expect_str_eq(body, "c body");
  FAILS(model_kernel_source("toy", sources, HCQ_DEVICE_METAL, &body), HCQ_UNIMPLEMENTED,
        "toy: no kernels for METAL devices, which compile MSL (the model's kernels: C, GLSL, CUDA "
        "C)");
  cr_expect_null(body);
  FAILS(model_kernel_source("toy", sources, HCQ_DEVICE_KIND_COUNT, &body), HCQ_UNIMPLEMENTED,
        "no kernels for UNKNOWN devices, which compile no kernel language");
}

/* The program is the define header, then the prefix, then the body: a body that uses a macro of
 * each writes their sum, and the upload's bytes and label arrive. */
Test(model_kernels, program_is_defines_prefix_body_and_upload_labels) {
  hcq_device_t *dev = test_open("CPU:0");
  int32_t init[4] = {1, 2, 3, 4}, got[4];
  hcq_buffer_t *buf = NULL;
  OK(model_upload(dev, init, sizeof(init), "weights", 3, &buf));
  cr_expect_str_eq(hcq_buffer_label(buf), "weights[3]");
  test_read(buf, got, sizeof(got));
  cr_assert_arr_eq(got, init, sizeof(got));
  hcq_program_t *prog = NULL;
  OK(model_program_create(
      dev, model_kernel_lang(HCQ_DEVICE_CPU), "#define FROM_DEFINES 40\n",
      "#define FROM_PREFIX 2\n",
      "void add_both(void *const *b, const int32_t *v, const hcq_launch_t *l) {\n"
      "  (void)v, (void)l; int32_t *out = b[0];\n"
      "  for (int i = 0; i < 4; i++) out[i] += FROM_DEFINES + FROM_PREFIX;\n"
      "}\n",
      "add_both", &prog));
  hcq_launch_desc_t l = {prog, &buf, 1, NULL, 0, {1, 1, 1}, {1, 1, 1}};
  OK(hcq_launch(&l));
  test_read(buf, got, sizeof(got));
  for (int i = 0; i < 4; i++) cr_expect_eq(got[i], init[i] + 42);
  hcq_buffer_t *zeros = NULL;
  OK(model_upload(dev, NULL, 0, "empty", -1, &zeros));
  cr_expect_str_eq(hcq_buffer_label(zeros), "empty");
  hcq_buffer_release(zeros);
  hcq_program_release(prog);
  hcq_buffer_release(buf);
  test_close(dev);
}
