# The portable f32 math library, include/anygrad/pmath.h (tests/pmath_test.c):
# accuracy of every function against libm in double, C99 special values,
# the built division and square root bit for bit against IEEE, the f16/bf16
# conversions and the header's constants. The sweep is long under
# sanitizers: label "pmath" (scripts/test.sh may skip it there).
add_executable(pmath_test ${CMAKE_CURRENT_SOURCE_DIR}/pmath_test.c)
target_include_directories(pmath_test PRIVATE ${AG_CMOCKA_INCLUDE})
target_compile_definitions(pmath_test PRIVATE PMATH_HEADER="${PROJECT_SOURCE_DIR}/include/anygrad/pmath.h")
target_compile_options(pmath_test PRIVATE -ffp-contract=off)
target_link_libraries(pmath_test PRIVATE anygrad ${AG_CMOCKA_LIB} m)
add_test(NAME pmath COMMAND pmath_test)
set_tests_properties(pmath PROPERTIES TIMEOUT 300 LABELS "pmath;slow")

# The same header text in the other kernel languages: a GLSL compute shader
# (glslc), OpenCL C 1.2 (clang -fsyntax-only), CUDA (nvcc, with the CUDA
# backend) and HIP (hipcc, with the HIP backend).
find_program(AG_GLSLC_PMATH glslc)
if(AG_GLSLC_PMATH)
  add_test(NAME pmath_glsl COMMAND ${AG_GLSLC_PMATH} -fshader-stage=comp --target-env=vulkan1.1
           -I${PROJECT_SOURCE_DIR}/include ${CMAKE_CURRENT_SOURCE_DIR}/pmath_check.comp -o
           ${CMAKE_CURRENT_BINARY_DIR}/pmath_check.spv)
  set_tests_properties(pmath_glsl PROPERTIES TIMEOUT 120 LABELS "pmath")
  # and its SPIR-V: every float + - * NoContraction, no OpFDiv, no inexact
  # GLSL.std.450 instruction
  find_package(Python3 COMPONENTS Interpreter QUIET)
  if(Python3_Interpreter_FOUND)
    add_test(NAME pmath_glsl_spirv COMMAND ${Python3_EXECUTABLE} ${CMAKE_CURRENT_SOURCE_DIR}/pmath_spirv_check.py
             ${AG_GLSLC_PMATH} ${PROJECT_SOURCE_DIR}/include ${CMAKE_CURRENT_SOURCE_DIR}/pmath_vk.comp)
    set_tests_properties(pmath_glsl_spirv PROPERTIES TIMEOUT 120 LABELS "pmath")
  endif()
endif()
find_program(AG_CLANG_PMATH NAMES clang clang-14)
if(AG_CLANG_PMATH)
  add_test(NAME pmath_opencl_c COMMAND ${AG_CLANG_PMATH} -x cl -cl-std=CL1.2 -fsyntax-only -Werror
           -I${PROJECT_SOURCE_DIR}/include ${CMAKE_CURRENT_SOURCE_DIR}/pmath_check.cl)
  set_tests_properties(pmath_opencl_c PROPERTIES TIMEOUT 120 LABELS "pmath")
endif()
if(NOT AG_CUDA STREQUAL "OFF" AND AG_NVCC)
  add_test(NAME pmath_cuda COMMAND ${AG_NVCC} -x cu -c -fmad=false -I${PROJECT_SOURCE_DIR}/include
           ${CMAKE_CURRENT_SOURCE_DIR}/pmath_check.cu -o ${CMAKE_CURRENT_BINARY_DIR}/pmath_check.o)
  set_tests_properties(pmath_cuda PROPERTIES TIMEOUT 300 LABELS "pmath")
endif()
if(NOT AG_HIP STREQUAL "OFF" AND AG_HIPCC)
  set(_pm_hip_arch)
  foreach(_a ${AG_HIP_ARCHS})
    list(APPEND _pm_hip_arch --offload-arch=${_a})
  endforeach()
  add_test(NAME pmath_hip COMMAND ${AG_HIPCC} -x hip ${_pm_hip_arch} -c -ffp-contract=off -Wall -Wextra -Werror
           -I${PROJECT_SOURCE_DIR}/include ${CMAKE_CURRENT_SOURCE_DIR}/pmath_check.cu -o
           ${CMAKE_CURRENT_BINARY_DIR}/pmath_check_hip.o)
  set_tests_properties(pmath_hip PROPERTIES TIMEOUT 300 LABELS "pmath")
endif()

# The same functions run on the OpenCL device (PoCL here) with FP_CONTRACT
# OFF and correctly rounded division and square root: the same bits as the
# C build on 10^6 inputs per function (skips without a device).
if(NOT AG_OPENCL STREQUAL "OFF")
  find_package(OpenCL QUIET)
  if(OpenCL_FOUND)
    add_executable(pmath_opencl_test ${CMAKE_CURRENT_SOURCE_DIR}/pmath_opencl_test.c)
    target_compile_definitions(pmath_opencl_test PRIVATE PMATH_INCLUDE="${PROJECT_SOURCE_DIR}/include")
    target_include_directories(pmath_opencl_test PRIVATE ${CMAKE_CURRENT_SOURCE_DIR})
    target_compile_options(pmath_opencl_test PRIVATE -ffp-contract=off)
    target_link_libraries(pmath_opencl_test PRIVATE OpenCL::OpenCL m)
    add_test(NAME pmath_opencl COMMAND pmath_opencl_test)
    set_tests_properties(pmath_opencl PROPERTIES TIMEOUT 600 SKIP_RETURN_CODE 77 LABELS "pmath;opencl")
  endif()
endif()

# The same functions compiled by glslc and run on the Vulkan device
# (lavapipe here): every float operation NoContraction, division and square
# root built; the same bits as the C build on 10^6 inputs per function.
if(NOT AG_VULKAN STREQUAL "OFF" AND AG_GLSLC_PMATH)
  find_package(Vulkan QUIET)
  if(Vulkan_FOUND)
    set(_pm_spv ${CMAKE_CURRENT_BINARY_DIR}/pmath_vk.spv)
    add_custom_command(OUTPUT ${_pm_spv}
      COMMAND ${AG_GLSLC_PMATH} -fshader-stage=comp --target-env=vulkan1.1 -I${PROJECT_SOURCE_DIR}/include
              ${CMAKE_CURRENT_SOURCE_DIR}/pmath_vk.comp -o ${_pm_spv}
      DEPENDS ${CMAKE_CURRENT_SOURCE_DIR}/pmath_vk.comp ${PROJECT_SOURCE_DIR}/include/anygrad/pmath.h
      COMMENT "Compiling pmath_vk.comp" VERBATIM)
    add_executable(pmath_vulkan_test ${CMAKE_CURRENT_SOURCE_DIR}/pmath_vulkan_test.c ${_pm_spv})
    target_compile_options(pmath_vulkan_test PRIVATE -ffp-contract=off)
    target_include_directories(pmath_vulkan_test PRIVATE ${CMAKE_CURRENT_SOURCE_DIR})
    target_link_libraries(pmath_vulkan_test PRIVATE Vulkan::Vulkan m)
    add_test(NAME pmath_vulkan COMMAND pmath_vulkan_test ${_pm_spv})
    set_tests_properties(pmath_vulkan PROPERTIES TIMEOUT 600 SKIP_RETURN_CODE 77 LABELS "pmath;vulkan")
    if("address" IN_LIST AG_SANITIZE)
      # The program drives Vulkan alone (no anygrad code) and destroys its
      # instance, so the loader unloads lavapipe before exit: Mesa
      # 22.3.6's 128-byte block left from the driver then has no module to
      # match tests/lsan_vulkan.supp against ("<unknown module>"). ASan
      # and UBSan still check the program; only the exit-time leak scan is off.
      set_tests_properties(pmath_vulkan PROPERTIES ENVIRONMENT "ASAN_OPTIONS=detect_leaks=0")
    endif()
  endif()
endif()
