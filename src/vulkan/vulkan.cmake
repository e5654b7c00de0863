# The Vulkan backend (docs/vulkan.md): built when the Vulkan headers are present; GLSL kernels need
# libshaderc too (Debian: libvulkan-dev, libshaderc-dev). The loader itself is opened at run time.
# Sets HCQ_VULKAN_SOURCES, HCQ_VULKAN_INCLUDES, HCQ_VULKAN_DEFINITIONS and HCQ_VULKAN_LIBS for the
# top-level CMakeLists.txt to add to the library.
find_path(HCQ_VULKAN_INCLUDE vulkan/vulkan.h)
find_path(HCQ_SHADERC_INCLUDE shaderc/shaderc.h)
# Debian's libshaderc.so.1 leaves glslang and SPIRV-Tools unresolved: link the static archives
# (position-independent, so they go into libhcq.so too).
find_library(HCQ_SHADERC_LIB NAMES libshaderc_combined.a shaderc_combined)
set(HCQ_SHADERC_DEPS glslang MachineIndependent OSDependent GenericCodeGen OGLCompiler SPIRV SPIRV-Tools-opt SPIRV-Tools)
set(HCQ_SHADERC_DEP_PATHS "")
set(HCQ_SHADERC_OK ${HCQ_SHADERC_LIB})
foreach(lib ${HCQ_SHADERC_DEPS})
  find_library(HCQ_SHADERC_DEP_${lib} NAMES lib${lib}.a ${lib})
  if(HCQ_SHADERC_DEP_${lib})
    list(APPEND HCQ_SHADERC_DEP_PATHS ${HCQ_SHADERC_DEP_${lib}})
  else()
    set(HCQ_SHADERC_OK "")
  endif()
endforeach()

set(HCQ_VULKAN_SOURCES src/vulkan/vk_source.c src/vulkan/vk_backend.c)
set(HCQ_VULKAN_INCLUDES "")
set(HCQ_VULKAN_DEFINITIONS "")
set(HCQ_VULKAN_LIBS "")
set(HCQ_VULKAN_PC_LIBS "") # the same for hcq-static.pc
if(HCQ_VULKAN_INCLUDE)
  list(APPEND HCQ_VULKAN_SOURCES src/vulkan/vk_loader.c src/vulkan/vk_device.c src/vulkan/vk_memory.c
              src/vulkan/vk_engine.c src/vulkan/vk_batch.c src/vulkan/vk_interp.c src/vulkan/vk_record.c
              src/vulkan/vk_fault.c src/vulkan/vk_compile.c)
  list(APPEND HCQ_VULKAN_INCLUDES ${HCQ_VULKAN_INCLUDE})
  if(HCQ_SHADERC_INCLUDE AND HCQ_SHADERC_OK)
    pkg_check_modules(HCQ_SHADERC_PC QUIET shaderc)
    set(HCQ_SHADERC_VERSION "${HCQ_SHADERC_PC_VERSION}")
    if(NOT HCQ_SHADERC_VERSION)
      set(HCQ_SHADERC_VERSION "unknown")
    endif()
    list(APPEND HCQ_VULKAN_DEFINITIONS HCQ_HAVE_SHADERC=1 HCQ_SHADERC_VERSION="shaderc-${HCQ_SHADERC_VERSION}")
    list(APPEND HCQ_VULKAN_INCLUDES ${HCQ_SHADERC_INCLUDE})
    list(APPEND HCQ_VULKAN_LIBS ${HCQ_SHADERC_LIB} ${HCQ_SHADERC_DEP_PATHS} stdc++ m)
    string(JOIN " " HCQ_VULKAN_PC_LIBS ${HCQ_SHADERC_LIB} ${HCQ_SHADERC_DEP_PATHS} -lstdc++ -lm)
    message(STATUS "hcq: Vulkan backend with GLSL kernels (libshaderc ${HCQ_SHADERC_VERSION})")
  else()
    list(APPEND HCQ_VULKAN_DEFINITIONS HCQ_HAVE_SHADERC=0)
    message(STATUS "hcq: Vulkan backend without libshaderc: SPIR-V kernels only")
  endif()
else()
  list(APPEND HCQ_VULKAN_SOURCES src/vulkan/vk_absent.c)
  message(STATUS "hcq: no Vulkan headers: VULKAN devices are absent")
endif()
