# The open backend registry (tests/registry_test.c, tests/extbackend/): the
# out-of-tree example module built here from its source against the public
# headers only, and variants of it under other names and ABI versions, each
# in a folder that the tests put on AG_BACKEND_PATH. Modules built from an
# older commit's headers and against other op tables: tests/gpu3_abi.cmake.
set(_ag_ext_dir ${CMAKE_CURRENT_BINARY_DIR}/extbackend)
set(_ag_abi_dir ${CMAKE_CURRENT_BINARY_DIR}/abi)
# name -> the version header it is built with
set(_ag_abi_minihost "AG_BACKEND_HEADER")
set(_ag_abi_abinext ".struct_size=sizeof(ag_backend),.abi_major=AG_BACKEND_ABI_MAJOR+1,.abi_minor=0")
set(_ag_abi_abi3 ".struct_size=3")
set(_ag_abi_abishort ".struct_size=64,.abi_major=AG_BACKEND_ABI_MAJOR,.abi_minor=0")
foreach(_m minihost abinext abi3 abishort)
  add_library(anygrad-${_m} MODULE ${CMAKE_CURRENT_SOURCE_DIR}/extbackend/minihost.c)
  set_target_properties(anygrad-${_m} PROPERTIES PREFIX "lib" C_VISIBILITY_PRESET hidden)
  # public headers only, as outside the tree
  target_include_directories(anygrad-${_m} PRIVATE ${PROJECT_SOURCE_DIR}/include)
  target_link_libraries(anygrad-${_m} PRIVATE anygrad m)
  if(_m STREQUAL "minihost")
    set_target_properties(anygrad-${_m} PROPERTIES LIBRARY_OUTPUT_DIRECTORY ${_ag_ext_dir})
  else()
    target_compile_definitions(anygrad-${_m} PRIVATE NAME="${_m}" "HEADER=${_ag_abi_${_m}}")
    set_target_properties(anygrad-${_m} PROPERTIES LIBRARY_OUTPUT_DIRECTORY ${_ag_abi_dir})
  endif()
endforeach()

add_executable(registry_test ${CMAKE_CURRENT_SOURCE_DIR}/registry_test.c)
target_include_directories(registry_test PRIVATE ${AG_CMOCKA_INCLUDE})
target_link_libraries(registry_test PRIVATE anygrad ${AG_CMOCKA_LIB} m)
add_dependencies(registry_test anygrad-minihost anygrad-abinext anygrad-abi3 anygrad-abishort)
add_test(NAME registry COMMAND registry_test)
# Labelled threads: the TSan stage runs it. Without OpenCL: PoCL's threads
# crash LeakSanitizer's exit scan (scripts/test.sh), and ag_device_best would
# start it.
set_tests_properties(registry PROPERTIES TIMEOUT 120 LABELS "threads" ENVIRONMENT
                     "AG_BACKEND_PATH=${_ag_abi_dir}:${_ag_ext_dir};AG_BACKENDS=cpu,gpuemu,minihost,abinext,abi3,abishort")

if(TARGET anygrad-cli)
  add_test(NAME registry_extbackend
           COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/extbackend/check.sh $<TARGET_FILE:anygrad-cli> ${_ag_ext_dir})
  # `anygrad info` starts every module, PoCL's included: no leak scan
  set_tests_properties(registry_extbackend PROPERTIES TIMEOUT 600 LABELS "cli" ENVIRONMENT "ASAN_OPTIONS=detect_leaks=0")
  # A refused module is listed with both versions as its reason.
  add_test(NAME registry_info_abi COMMAND $<TARGET_FILE:anygrad-cli> info)
  set_tests_properties(registry_info_abi PROPERTIES TIMEOUT 120 LABELS "cli"
                       ENVIRONMENT "AG_BACKEND_PATH=${_ag_abi_dir};ASAN_OPTIONS=detect_leaks=0"
                       PASS_REGULAR_EXPRESSION "abinext +unavailable: [^\n]*libanygrad-abinext.so: backend ABI [0-9]+\\.0, anygrad's is [0-9]+\\.[0-9]+")
endif()
