# Packaging: run-time version against the headers (tests/package_test.c), and
# an install into a scratch prefix whose CLI, modules, CMake package and
# anygrad.pc are checked without any environment variable
# (cmake/check_install.cmake).
add_executable(package_test ${CMAKE_CURRENT_SOURCE_DIR}/package_test.c)
target_include_directories(package_test PRIVATE ${AG_CMOCKA_INCLUDE})
target_compile_definitions(package_test PRIVATE AG_TEST_PROJECT_VERSION="${PROJECT_VERSION}")
target_link_libraries(package_test PRIVATE anygrad ${AG_CMOCKA_LIB})
add_test(NAME package_version COMMAND package_test)
set_tests_properties(package_version PROPERTIES TIMEOUT 60)

if(AG_INSTALL)
  add_test(NAME package_install
           COMMAND ${CMAKE_COMMAND} -DBUILD_DIR=${PROJECT_BINARY_DIR}
                   -DPREFIX=${CMAKE_CURRENT_BINARY_DIR}/install-prefix -DVERSION=${PROJECT_VERSION}
                   -DLIBDIR=${CMAKE_INSTALL_LIBDIR} -DBACKENDS=${AG_BUILT_BACKENDS}
                   -P ${PROJECT_SOURCE_DIR}/cmake/check_install.cmake)
  # `anygrad info` loads every module; PoCL's threads crash LeakSanitizer's
  # exit scan (see scripts/test.sh), which says nothing about the install.
  set_tests_properties(package_install PROPERTIES TIMEOUT 120
                       ENVIRONMENT "AG_BACKEND_PATH=;LD_LIBRARY_PATH=;ASAN_OPTIONS=detect_leaks=0")
endif()
