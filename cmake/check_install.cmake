# Installs the build into PREFIX and checks the layout a user relies on:
# libanygrad.so -> .so.MAJOR -> .so.VERSION with its SONAME, the CLI that runs
# from the prefix and reports the version, every built backend module found by
# the installed library without AG_BACKEND_PATH, the CMake package and pc file,
# and the examples beside the docs (share/doc/anygrad/examples).
file(REMOVE_RECURSE ${PREFIX})
execute_process(COMMAND ${CMAKE_COMMAND} --install ${BUILD_DIR} --prefix ${PREFIX}
                RESULT_VARIABLE rc OUTPUT_QUIET)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "cmake --install failed (${rc})")
endif()
string(REGEX MATCH "^[0-9]+" major ${VERSION})
set(lib ${PREFIX}/${LIBDIR})
foreach(f ${lib}/libanygrad.so ${lib}/libanygrad.so.${major} ${lib}/libanygrad.so.${VERSION}
          ${PREFIX}/include/anygrad/anygrad.h ${PREFIX}/include/anygrad/version.h
          ${lib}/cmake/anygrad/anygradConfig.cmake ${lib}/cmake/anygrad/anygradConfigVersion.cmake
          ${lib}/pkgconfig/anygrad.pc ${PREFIX}/bin/anygrad ${PREFIX}/share/doc/anygrad/README.md
          ${PREFIX}/share/doc/anygrad/examples/mlp_words.c ${PREFIX}/share/doc/anygrad/examples/CMakeLists.txt
          ${PREFIX}/share/doc/anygrad/examples/interop/dlpack_torch.py)
  if(NOT EXISTS ${f})
    message(FATAL_ERROR "not installed: ${f}")
  endif()
endforeach()
file(READ_SYMLINK ${lib}/libanygrad.so.${major} target)
if(NOT target STREQUAL "libanygrad.so.${VERSION}")
  message(FATAL_ERROR "libanygrad.so.${major} -> ${target}, expected libanygrad.so.${VERSION}")
endif()
execute_process(COMMAND readelf -d ${lib}/libanygrad.so.${VERSION} OUTPUT_VARIABLE dyn RESULT_VARIABLE rc)
if(rc EQUAL 0 AND NOT dyn MATCHES "SONAME\\) +Library soname: \\[libanygrad\\.so\\.${major}\\]")
  message(FATAL_ERROR "SONAME is not libanygrad.so.${major}:\n${dyn}")
endif()
execute_process(COMMAND ${PREFIX}/bin/anygrad --version OUTPUT_VARIABLE out RESULT_VARIABLE rc)
if(NOT rc EQUAL 0 OR NOT out STREQUAL "anygrad ${VERSION}\n")
  message(FATAL_ERROR "anygrad --version: rc ${rc}, '${out}'")
endif()
execute_process(COMMAND ${PREFIX}/bin/anygrad info OUTPUT_VARIABLE out ERROR_VARIABLE err RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "anygrad info failed (${rc}): ${out}${err}")
endif()
foreach(b ${BACKENDS})
  if(NOT b STREQUAL "cpu" AND NOT EXISTS ${lib}/anygrad/libanygrad-${b}.so)
    message(FATAL_ERROR "backend module ${b} not installed in ${lib}/anygrad")
  endif()
  # a module found but without devices reads "<name>: ..." rather than "not found"
  if(out MATCHES "${b} +unavailable: libanygrad-${b}.so not found")
    message(FATAL_ERROR "installed library does not find its ${b} module:\n${out}")
  endif()
endforeach()
file(READ ${lib}/pkgconfig/anygrad.pc pc)
if(NOT pc MATCHES "Version: ${VERSION}\n")
  message(FATAL_ERROR "anygrad.pc has no 'Version: ${VERSION}':\n${pc}")
endif()
message(STATUS "installed layout in ${PREFIX} is complete")
