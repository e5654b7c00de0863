/* Vulkan programs: GLSL compute shaders compiled with libshaderc after the GLSL prelude
 * (docs/design.md, "Programs and kernel ABIs"), or SPIR-V given directly ("#spirv" and base64),
 * cached on disk as SPIR-V; pipelines per group size.
 *
 * The cache is the kernel cache's "spirv" blob directory (core/kcache.h): trusted the way the CPU
 * backend's cache is, files written whole and checked against their hash on load. Anything
 * suspicious means compiling again, never trusting the file. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <xxhash.h>

#if HCQ_HAVE_SHADERC
#include <shaderc/shaderc.h>
#endif

#include "core/binary.h"
#include "core/device.h"
#include "core/kcache.h"
#include "core/status.h"
#include "vulkan/vk_internal.h"
#include "vulkan/vk_source.h"

#define SPIRV_MAGIC 0x07230203u
#define SPIRV_OP_ENTRY_POINT 15u
#define SPIRV_EXEC_GLCOMPUTE 5u
#define CACHE_MAGIC \
  "HCQSPV02" /* the kernel cache's blob tag (HCQSPV01: before blobs recorded their key) */

/* ---- SPIR-V: checks and the entry point's name ---- */

/* The name of the first GLCompute entry point (up to size bytes): 1; 0 when there is none; -1 when
 * an instruction runs past the module's end (a truncated or damaged module), its word index in
 * *bad. If rename is given, rewrites the module (a new allocation in *io) so that the entry point
 * is called rename. */
static int spirv_entry(uint32_t **io, size_t *nwords, char *name, size_t size, const char *rename,
                       size_t *bad) {
  uint32_t *w = *io;
  size_t n = *nwords;
  for (size_t i = 5; i < n;) {
    uint32_t count = w[i] >> 16, op = w[i] & 0xffffu;
    if (count == 0 || i + count > n) {
      if (bad) *bad = i;
      return -1;
    }
    if (op == SPIRV_OP_ENTRY_POINT && count >= 4 && w[i + 1] == SPIRV_EXEC_GLCOMPUTE) {
      const char *s = (const char *)&w[i + 3];
      size_t max = (count - 3) * 4, len = strnlen(s, max);
      if (len == max) {
        if (bad) *bad = i;
        return -1;
      }
      snprintf(name, size, "%.*s", (int)len, s);
      if (!rename) return 1;
      size_t name_words = len / 4 + 1, new_name_words = strlen(rename) / 4 + 1;
      size_t rest = count - 3 - name_words, new_count = 3 + new_name_words + rest;
      uint32_t *out = calloc(n - count + new_count, sizeof(uint32_t));
      if (!out) return 0;
      memcpy(out, w, i * 4);
      out[i] = (uint32_t)(new_count << 16) | op;
      out[i + 1] = w[i + 1];
      out[i + 2] = w[i + 2];
      memcpy(&out[i + 3], rename, strlen(rename)); /* calloc'd: NUL-padded */
      memcpy(&out[i + 3 + new_name_words], &w[i + 3 + name_words], rest * 4);
      memcpy(&out[i + new_count], &w[i + count], (n - i - count) * 4);
      *io = out;
      *nwords = n - count + new_count;
      return 1;
    }
    i += count;
  }
  return 0;
}

/* ---- GLSL ---- */

#if HCQ_HAVE_SHADERC
static pthread_mutex_t g_shaderc_lock = PTHREAD_MUTEX_INITIALIZER;

static hcq_status_t compile_glsl(const char *entry, const char *source, uint32_t **out,
                                 size_t *out_words) {
  /* HCQ_KERNEL_<entry> lets one file hold several kernels, each under its #ifdef. */
  char line[160];
  bool ident = (entry[0] < '0' || entry[0] > '9');
  for (const char *c = entry; *c; c++)
    ident &= (*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') || (*c >= '0' && *c <= '9') ||
             *c == '_';
  snprintf(line, sizeof(line), "%s%s%s#line 1\n", ident ? "#define HCQ_KERNEL_" : "",
           ident ? entry : "", ident ? " 1\n" : "");
  size_t plen = strlen(hcq__vk_glsl_prelude()), llen = strlen(line), slen = strlen(source);
  char *text = malloc(plen + llen + slen + 2);
  if (!text) return hcq_status_make(HCQ_OUT_OF_MEMORY, "out of memory compiling %s", entry);
  memcpy(text, hcq__vk_glsl_prelude(), plen);
  memcpy(text + plen, line, llen);
  memcpy(text + plen + llen, source, slen);
  text[plen + llen + slen] = '\n';
  text[plen + llen + slen + 1] = '\0';
  char file[96];
  snprintf(file, sizeof(file), "%s.comp", entry);
  hcq_status_t st = NULL;
  pthread_mutex_lock(&g_shaderc_lock);
  shaderc_compiler_t c = shaderc_compiler_initialize();
  shaderc_compile_options_t o = shaderc_compile_options_initialize();
  if (!c || !o) {
    st = hcq_status_make(HCQ_OUT_OF_MEMORY, "cannot start libshaderc to compile %s", entry);
  } else {
    shaderc_compile_options_set_target_env(o, shaderc_target_env_vulkan,
                                           shaderc_env_version_vulkan_1_2);
    shaderc_compile_options_set_optimization_level(o, shaderc_optimization_level_performance);
    shaderc_compilation_result_t r =
        shaderc_compile_into_spv(c, text, strlen(text), shaderc_compute_shader, file, "main", o);
    if (!r || shaderc_result_get_compilation_status(r) != shaderc_compilation_status_success) {
      st = hcq_status_make(HCQ_COMPILE_ERROR, "compiling GLSL kernel %s failed (libshaderc):\n%s",
                           entry, r ? shaderc_result_get_error_message(r) : "no result");
    } else {
      size_t n = shaderc_result_get_length(r);
      *out = malloc(n ? n : 4);
      if (!*out)
        st = hcq_status_make(HCQ_OUT_OF_MEMORY, "out of memory compiling %s", entry);
      else
        memcpy(*out, shaderc_result_get_bytes(r), n);
      *out_words = n / 4;
    }
    if (r) shaderc_result_release(r);
  }
  if (o) shaderc_compile_options_release(o);
  if (c) shaderc_compiler_release(c);
  pthread_mutex_unlock(&g_shaderc_lock);
  free(text);
  return st;
}
#endif

/* SPIR-V from outside hcq is validated (SPIRV-Tools, linked with libshaderc) before a driver sees
 * it: a module that is whole but wrong would otherwise be undefined behaviour in the driver. */
#if HCQ_HAVE_SHADERC && __has_include(<spirv-tools/libspirv.h>)
#include <spirv-tools/libspirv.h>
#include <string.h>
static hcq_status_t validate_spirv(const char *entry, const uint32_t *words, size_t n) {
  spv_context ctx = spvContextCreate(SPV_ENV_VULKAN_1_2);
  if (!ctx) return hcq_status_make(HCQ_OUT_OF_MEMORY, "out of memory validating %s", entry);
  spv_diagnostic diag = NULL;
  spv_result_t r = spvValidateBinary(ctx, words, n, &diag);
  hcq_status_t st = NULL;
  if (r != SPV_SUCCESS)
    st = hcq_status_make(HCQ_COMPILE_ERROR,
                         "SPIR-V kernel %s: the module is not valid SPIR-V for Vulkan 1.2 "
                         "(SPIRV-Tools validator): %s",
                         entry, diag && diag->error ? diag->error : "no reason given");
  spvDiagnosticDestroy(diag);
  spvContextDestroy(ctx);
  return st;
}
#else
static hcq_status_t validate_spirv(const char *entry, const uint32_t *words, size_t n) {
  (void)entry, (void)words, (void)n; /* no validator in this build: the framing checks above only */
  return NULL;
}
#endif

/* A "#spirv" source, decoded: its framing, its entry point's name and every instruction's bounds
 * are checked here, since a driver trusts the module it is given. */
static hcq_status_t spirv_from_binary(const char *entry, const char *source, uint32_t **out,
                                      size_t *out_words) {
  uint8_t *bytes = NULL;
  size_t len = 0;
  hcq_status_t st = hcq__binary_decode(source, entry, &bytes, &len);
  if (st) return st;
  uint32_t magic = 0;
  if (len >= 4) memcpy(&magic, bytes, 4);
  if (len % 4 || len < 20 || magic != SPIRV_MAGIC) {
    char what[128];
    hcq__binary_describe(bytes, len, what, sizeof(what));
    free(bytes);
    return hcq_status_make(
        HCQ_COMPILE_ERROR,
        "SPIR-V kernel %s: %zu bytes are not a SPIR-V module (magic 0x%08x, want 0x%08x): %s%s",
        entry, len, magic, SPIRV_MAGIC, what,
        magic == SPIRV_MAGIC ? (len % 4 ? ", not a whole number of words: truncated?"
                                        : ", shorter "
                                          "than the 5-word header")
                             : "");
  }
  *out = (uint32_t *)(void *)bytes;
  *out_words = len / 4;
  char name[128];
  size_t bad = 0;
  int found = spirv_entry(out, out_words, name, sizeof(name), NULL, &bad);
  if (found <= 0) {
    free(bytes);
    if (found < 0)
      return hcq_status_make(
          HCQ_COMPILE_ERROR,
          "SPIR-V kernel %s: the module is truncated or damaged: the instruction "
          "at word %zu runs past its end (%zu words)",
          entry, bad, len / 4);
    return hcq_status_make(HCQ_COMPILE_ERROR,
                           "SPIR-V kernel %s: the module has no GLCompute entry point", entry);
  }
  if (strcmp(name, entry)) {
    free(bytes);
    return hcq_status_make(HCQ_COMPILE_ERROR,
                           "SPIR-V kernel %s: the module's compute entry point is \"%s\", not "
                           "\"%s\"",
                           entry, name, entry);
  }
  /* Every instruction in bounds, not only those up to the entry point: drivers trust the module
   * (validating it is the application's job), so a cut one must stop here. */
  for (size_t i = 5; i < len / 4; i += (*out)[i] >> 16)
    if (!((*out)[i] >> 16) || i + ((*out)[i] >> 16) > len / 4) {
      free(bytes);
      return hcq_status_make(HCQ_COMPILE_ERROR,
                             "SPIR-V kernel %s: the module is truncated or damaged: the "
                             "instruction at word %zu runs past its end (%zu words)",
                             entry, i, len / 4);
    }
  if ((st = validate_spirv(entry, *out, len / 4))) free(bytes);
  return st;
}

/* GLSL: SPIR-V from the cache, else compiled (and cached), its entry point renamed from main to
 * entry. */
static hcq_status_t spirv_from_glsl(const char *entry, const char *source, uint32_t **out,
                                    size_t *out_words) {
#if HCQ_HAVE_SHADERC
  XXH3_state_t *hs = XXH3_createState();
  if (!hs) return hcq_status_make(HCQ_OUT_OF_MEMORY, "out of memory hashing %s", entry);
  XXH3_128bits_reset(hs);
  const char *parts[] = {"hcq-vulkan-spirv/1", HCQ_SHADERC_VERSION, hcq__vk_glsl_prelude(), source,
                         entry};
  for (size_t i = 0; i < sizeof(parts) / sizeof(parts[0]); i++)
    XXH3_128bits_update(hs, parts[i], strlen(parts[i]) + 1);
  XXH128_hash_t h = XXH3_128bits_digest(hs);
  XXH3_freeState(hs);
  char dir[PATH_MAX], path[PATH_MAX + 64], key[HCQ__KCACHE_KEY + 1];
  snprintf(key, sizeof(key), "%016" PRIx64 "%016" PRIx64, (uint64_t)h.high64, (uint64_t)h.low64);
  bool cached = hcq__kcache_blob_dir("spirv", dir, sizeof(dir));
  if (cached) {
    snprintf(path, sizeof(path), "%s/%s.spv", dir, key);
    size_t bytes = 0;
    if ((*out = hcq__kcache_blob_load(path, CACHE_MAGIC, key, HCQ__VK_MAX_SPIRV_BYTES, &bytes))) {
      *out_words = bytes / 4;
      char name[128];
      if (bytes % 4 == 0 && bytes > 20 &&
          spirv_entry(out, out_words, name, sizeof(name), NULL, NULL) == 1 && !strcmp(name, entry))
        return NULL;
      free(*out); /* not what it should be: compile again, and replace it */
      hcq__kcache_warn_damaged(
          path, "it is not a SPIR-V module whose compute entry point is this kernel's");
    }
  }
  uint32_t *words = NULL;
  size_t n = 0;
  hcq_status_t st = compile_glsl(entry, source, &words, &n);
  if (st) return st;
  char name[128];
  uint32_t *renamed = words;
  if (spirv_entry(&renamed, &n, name, sizeof(name), entry, NULL) != 1) {
    free(words);
    return hcq_status_make(HCQ_COMPILE_ERROR,
                           "GLSL kernel %s: the compiled module has no compute entry point", entry);
  }
  if (renamed != words) free(words);
  if (cached) hcq__kcache_blob_store(dir, path, CACHE_MAGIC, key, renamed, n * 4);
  *out = renamed;
  *out_words = n;
  return NULL;
#else
  (void)source, (void)out, (void)out_words;
  return hcq_status_make(
      HCQ_UNIMPLEMENTED,
      "GLSL kernel %s: this build has no libshaderc (install libshaderc-dev and rebuild), so only "
      "\"#spirv\" sources load",
      entry);
#endif
}

/* SPIR-V for source: decoded ("#spirv") or from GLSL. */
static hcq_status_t spirv_for(const char *entry, const char *source, uint32_t **out,
                              size_t *out_words) {
  if (hcq__binary_of_source(source) == HCQ_BINARY_SPIRV)
    return spirv_from_binary(entry, source, out, out_words);
  return spirv_from_glsl(entry, source, out, out_words);
}

hcq_status_t hcq__vk_binary_compile(const char *entry, const char *source,
                                    hcq_binary_format_t format, const char *arch, void **out,
                                    size_t *out_size) {
  (void)format, (void)arch; /* SPIR-V, the only one; no architectures (the core checked both) */
  uint32_t *words = NULL;
  size_t n = 0;
  hcq_status_t st = spirv_for(entry, source, &words, &n);
  if (st) return st;
  *out = words;
  *out_size = n * 4;
  return NULL;
}

hcq_status_t hcq__vk_program_compile(hcq_device_t *dev, const char *entry, const char *source,
                                     hcq__program_impl_t *out) {
  vk_device_t *vd = dev->backend;
  if (strlen(entry) >= sizeof(((vk_program_t *)0)->entry))
    return hcq_status_make(HCQ_INVALID_ARGUMENT, "kernel name %.32s... is too long", entry);
  uint32_t *words = NULL;
  size_t n = 0;
  hcq_status_t st = spirv_for(entry, source, &words, &n);
  if (st) return st;
  vk_program_t *p = calloc(1, sizeof(*p));
  if (!p) {
    free(words);
    return hcq_status_make(HCQ_OUT_OF_MEMORY, "out of memory loading %s", entry);
  }
  p->vd = vd;
  snprintf(p->entry, sizeof(p->entry), "%s", entry);
  pthread_mutex_init(&p->lock, NULL);
  VkShaderModuleCreateInfo ci = {
      .sType = VK_STRUCTURE_TYPE_SHADER_MODULE_CREATE_INFO, .codeSize = n * 4, .pCode = words};
  VkResult r = vd->fn.vkCreateShaderModule(vd->device, &ci, NULL, &p->module);
  free(words);
  if (r != VK_SUCCESS) {
    pthread_mutex_destroy(&p->lock);
    free(p);
    return hcq_status_make(HCQ_COMPILE_ERROR, "%s: vkCreateShaderModule for %s failed: %s",
                           dev->name, entry, hcq__vk_result_name(r));
  }
  /* A pipeline now, for the common group size: a kernel that cannot become a pipeline fails here,
   * with its name, rather than later inside a queue engine. */
  VkPipeline unused;
  if ((st = hcq__vk_pipeline(p, (const uint32_t[3]){64, 1, 1}, &unused))) {
    hcq__program_impl_t impl = {(uint64_t)(uintptr_t)p, p};
    hcq__vk_program_unload(dev, &impl);
    return st;
  }
  out->handle = (uint64_t)(uintptr_t)p;
  out->object = p;
  return NULL;
}

void hcq__vk_program_unload(hcq_device_t *dev, hcq__program_impl_t *impl) {
  vk_program_t *p = impl->object;
  if (!p) return;
  vk_device_t *vd = dev->backend;
  for (size_t i = 0; i < p->nvariants; i++)
    vd->fn.vkDestroyPipeline(vd->device, p->variants[i].pipeline, NULL);
  vd->fn.vkDestroyShaderModule(vd->device, p->module, NULL);
  free(p->variants);
  pthread_mutex_destroy(&p->lock);
  free(p);
  impl->object = NULL;
}

/* local must fit the device's group size limits. */
static hcq_status_t check_group_size(const vk_program_t *p, const uint32_t local[3]) {
  const vk_device_t *vd = p->vd;
  const VkPhysicalDeviceLimits *lim = &vd->props.limits;
  uint64_t invocations = (uint64_t)local[0] * local[1] * local[2];
  for (int i = 0; i < 3; i++)
    if (local[i] == 0 || local[i] > lim->maxComputeWorkGroupSize[i])
      return hcq_status_make(
          HCQ_OUT_OF_RANGE, "kernel %s: group size %ux%ux%u is outside %s's limits %ux%ux%u",
          p->entry, local[0], local[1], local[2], vd->dev->name, lim->maxComputeWorkGroupSize[0],
          lim->maxComputeWorkGroupSize[1], lim->maxComputeWorkGroupSize[2]);
  if (invocations > lim->maxComputeWorkGroupInvocations)
    return hcq_status_make(HCQ_OUT_OF_RANGE,
                           "kernel %s: group size %ux%ux%u has %" PRIu64
                           " invocations, more than %s allows (%u)",
                           p->entry, local[0], local[1], local[2], invocations, vd->dev->name,
                           lim->maxComputeWorkGroupInvocations);
  return NULL;
}

/* A new variant of p for group size local (p's lock held). */
static hcq_status_t add_variant(vk_program_t *p, const uint32_t local[3], VkPipeline *out) {
  vk_device_t *vd = p->vd;
  HCQ__TRY(check_group_size(p, local));
  if (p->nvariants == p->cap) {
    size_t cap = p->cap ? 2 * p->cap : 4;
    vk_variant_t *v = realloc(p->variants, cap * sizeof(*v));
    if (!v)
      return hcq_status_make(HCQ_OUT_OF_MEMORY, "out of memory making a pipeline for %s", p->entry);
    p->variants = v, p->cap = cap;
  }
  VkSpecializationMapEntry map[3] = {{0, 0, 4}, {1, 4, 4}, {2, 8, 4}};
  VkSpecializationInfo spec = {3, map, 12, local};
  VkComputePipelineCreateInfo ci = {
      .sType = VK_STRUCTURE_TYPE_COMPUTE_PIPELINE_CREATE_INFO,
      .stage = {.sType = VK_STRUCTURE_TYPE_PIPELINE_SHADER_STAGE_CREATE_INFO,
                .stage = VK_SHADER_STAGE_COMPUTE_BIT,
                .module = p->module,
                .pName = p->entry,
                .pSpecializationInfo = &spec},
      .layout = vd->layout};
  VkPipeline pipe;
  VkResult r = vd->fn.vkCreateComputePipelines(vd->device, VK_NULL_HANDLE, 1, &ci, NULL, &pipe);
  if (r != VK_SUCCESS)
    return hcq_status_make(
        HCQ_COMPILE_ERROR,
        "%s: kernel %s with group size %ux%ux%u: vkCreateComputePipelines failed: %s",
        vd->dev->name, p->entry, local[0], local[1], local[2], hcq__vk_result_name(r));
  vk_variant_t *v = &p->variants[p->nvariants++];
  memcpy(v->local, local, sizeof(v->local));
  v->pipeline = pipe;
  *out = pipe;
  return NULL;
}

hcq_status_t hcq__vk_pipeline(vk_program_t *p, const uint32_t local[3], VkPipeline *out) {
  pthread_mutex_lock(&p->lock);
  for (size_t i = 0; i < p->nvariants; i++)
    if (!memcmp(p->variants[i].local, local, sizeof(p->variants[i].local))) {
      *out = p->variants[i].pipeline;
      pthread_mutex_unlock(&p->lock);
      return NULL;
    }
  hcq_status_t st = add_variant(p, local, out);
  pthread_mutex_unlock(&p->lock);
  return st;
}
