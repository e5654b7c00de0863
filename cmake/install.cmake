# What `cmake --install` (and `make install`, `make deb`) puts where: the public headers, libhcq.a,
# libhcq.so.*, the hcq tool and its man page, hcq.pc / hcq-static.pc, the CMake package
# (find_package(hcq) gives hcq::hcq), the docs, the C and C++ examples and the example graph files;
# the LLM library: libhcq_llm.a, libhcq_llm.so.*, hcq-llm.pc / hcq-llm-static.pc and hcq::llm;
# where the MPI layer is built, libhcq_mpi.a, libhcq_mpi.so.*, hcq-mpi.pc / hcq-mpi-static.pc and hcq::mpi.
include(CMakePackageConfigHelpers)

set(HCQ_CMAKE_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/hcq)
set(HCQ_PKGCONFIG_DIR ${CMAKE_INSTALL_LIBDIR}/pkgconfig)

install(DIRECTORY include/hcq DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(TARGETS ${HCQ_INSTALL_TARGETS} EXPORT hcqTargets
  ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
  LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
  INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(TARGETS hcq_cli RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
install(FILES docs/hcq.1 DESTINATION ${CMAKE_INSTALL_MANDIR}/man1)
# Every doc, laid out as in the repository so the README's links (docs/...) hold; the graph files
# and kernels the README's and docs' commands use go to share/hcq/examples (the kernels' paths in
# the files are relative to the file, so they run from there).
install(FILES README.md DESTINATION ${CMAKE_INSTALL_DOCDIR})
install(DIRECTORY docs/ DESTINATION ${CMAKE_INSTALL_DOCDIR}/docs FILES_MATCHING PATTERN "*.md" PATTERN "*.svg")
install(DIRECTORY examples/c examples/cpp DESTINATION ${CMAKE_INSTALL_DOCDIR}/examples)
file(GLOB HCQ_EXAMPLE_GRAPHS ${CMAKE_CURRENT_SOURCE_DIR}/examples/*.json)
install(FILES ${HCQ_EXAMPLE_GRAPHS} examples/README.md DESTINATION ${CMAKE_INSTALL_DATADIR}/hcq/examples)
install(DIRECTORY examples/kernels DESTINATION ${CMAKE_INSTALL_DATADIR}/hcq/examples)

install(EXPORT hcqTargets NAMESPACE hcq:: DESTINATION ${HCQ_CMAKE_DIR})
# The MPI layer's targets in a file of their own: they name MPI::MPI_C, which hcqConfig.cmake
# defines (find_package(MPI)) only for a project that has MPI, and hcq::hcq must work without.
if(HCQ_HAVE_MPI)
  install(TARGETS ${HCQ_MPI_INSTALL_TARGETS} EXPORT hcqMpiTargets
    ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
    LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
    INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
  install(EXPORT hcqMpiTargets NAMESPACE hcq:: DESTINATION ${HCQ_CMAKE_DIR})
endif()
# The LLM library (include/hcq/llm.h): libhcq_llm.a / libhcq_llm.so.* and hcq::llm.
install(TARGETS ${HCQ_LLM_INSTALL_TARGETS} EXPORT hcqLlmTargets
  ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
  LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
  INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(EXPORT hcqLlmTargets NAMESPACE hcq:: DESTINATION ${HCQ_CMAKE_DIR})
configure_package_config_file(cmake/hcqConfig.cmake.in ${CMAKE_CURRENT_BINARY_DIR}/hcqConfig.cmake
  INSTALL_DESTINATION ${HCQ_CMAKE_DIR})
# 0.x: a minor release may change the API, so only the same MAJOR.MINOR satisfies a request.
write_basic_package_version_file(${CMAKE_CURRENT_BINARY_DIR}/hcqConfigVersion.cmake COMPATIBILITY SameMinorVersion)
install(FILES ${CMAKE_CURRENT_BINARY_DIR}/hcqConfig.cmake ${CMAKE_CURRENT_BINARY_DIR}/hcqConfigVersion.cmake
  DESTINATION ${HCQ_CMAKE_DIR})

# The .pc files find the prefix from their own place (${pcfiledir}), so an installed tree can be
# moved or unpacked anywhere (cmake --install --prefix, dpkg -x) and still be used.
if(IS_ABSOLUTE "${CMAKE_INSTALL_LIBDIR}")
  message(FATAL_ERROR "hcq: CMAKE_INSTALL_LIBDIR must be relative to the prefix (got ${CMAKE_INSTALL_LIBDIR})")
endif()
file(RELATIVE_PATH HCQ_PC_PREFIX_FROM_PCFILEDIR "/p/${HCQ_PKGCONFIG_DIR}" "/p")
string(REGEX REPLACE "/$" "" HCQ_PC_PREFIX_FROM_PCFILEDIR "${HCQ_PC_PREFIX_FROM_PCFILEDIR}")
configure_file(cmake/hcq.pc.in ${CMAKE_CURRENT_BINARY_DIR}/hcq.pc @ONLY)
configure_file(cmake/hcq-static.pc.in ${CMAKE_CURRENT_BINARY_DIR}/hcq-static.pc @ONLY)
configure_file(cmake/hcq-llm.pc.in ${CMAKE_CURRENT_BINARY_DIR}/hcq-llm.pc @ONLY)
configure_file(cmake/hcq-llm-static.pc.in ${CMAKE_CURRENT_BINARY_DIR}/hcq-llm-static.pc @ONLY)
install(FILES ${CMAKE_CURRENT_BINARY_DIR}/hcq.pc ${CMAKE_CURRENT_BINARY_DIR}/hcq-static.pc
  ${CMAKE_CURRENT_BINARY_DIR}/hcq-llm.pc ${CMAKE_CURRENT_BINARY_DIR}/hcq-llm-static.pc DESTINATION ${HCQ_PKGCONFIG_DIR})
if(HCQ_HAVE_MPI)
  configure_file(cmake/hcq-mpi.pc.in ${CMAKE_CURRENT_BINARY_DIR}/hcq-mpi.pc @ONLY)
  configure_file(cmake/hcq-mpi-static.pc.in ${CMAKE_CURRENT_BINARY_DIR}/hcq-mpi-static.pc @ONLY)
  install(FILES ${CMAKE_CURRENT_BINARY_DIR}/hcq-mpi.pc ${CMAKE_CURRENT_BINARY_DIR}/hcq-mpi-static.pc
    DESTINATION ${HCQ_PKGCONFIG_DIR})
endif()

# make deb: one Debian package with everything above under /usr. Kernels for CPU devices are compiled
# at run time, so it needs a C compiler; hcq.pc names jansson and libxxhash (Requires.private).
set(CPACK_GENERATOR DEB)
set(CPACK_PACKAGE_NAME hcq)
set(CPACK_PACKAGE_VENDOR hcq)
set(CPACK_PACKAGE_CONTACT "hcq maintainers <hcq@localhost>")
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY "record kernel launches once, replay them as graphs (library and tool)")
set(CPACK_PACKAGE_DESCRIPTION "hcq records kernel launches and buffer copies once and replays them as a graph
with almost no host work per replay. This package holds the C library (shared and static), its
headers, pkg-config and CMake files, and the hcq command.")
set(CPACK_PACKAGING_INSTALL_PREFIX /usr)
set(CPACK_PACKAGE_DIRECTORY ${CMAKE_BINARY_DIR}/package)
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_PACKAGE_SECTION devel)
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
set(CPACK_DEBIAN_PACKAGE_DEPENDS "gcc | c-compiler, pkgconf | pkg-config, libjansson-dev, libxxhash-dev")
include(CPack)
