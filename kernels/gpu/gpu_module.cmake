# Shared by backends/cuda and backends/hip: compile the single-source GPU
# kernels plus one vendor file with the vendor compiler (nvcc or hipcc) as
# custom commands, and link the objects into a backend module that exports
# only ag_backend_module_get.
set(AG_GPU_DIR ${PROJECT_SOURCE_DIR}/kernels/gpu)
file(GLOB AG_GPU_KERNEL_SOURCES CONFIGURE_DEPENDS ${AG_GPU_DIR}/*.cu)
file(GLOB AG_GPU_HEADERS CONFIGURE_DEPENDS ${AG_GPU_DIR}/*.h ${AG_GPU_DIR}/*.cuh
     ${PROJECT_SOURCE_DIR}/include/anygrad/*.h)
option(AG_GPU_WERROR "Treat warnings as errors in GPU sources" ${AG_WERROR}) # off when embedded

# ag_gpu_objects(<out_var> <tag> <compiler> FLAGS <flags...> [PORTABLE_FLAGS <flags...>]
#                SOURCES <files...>)
# Each object's per-kernel resource report (registers, shared memory, spills:
# the compiler flags that print it are in FLAGS) is kept next to it as
# <object>.res for scripts/gpu_resources.py. The portable-numerics kernels
# (portable*.cu, docs/numerics.md) get PORTABLE_FLAGS after FLAGS: no
# contraction, IEEE division, square root and subnormals, while the other
# kernels keep the vendor's defaults (nvcc's -fmad=true).
function(ag_gpu_objects out tag compiler)
  cmake_parse_arguments(A "" "" "FLAGS;PORTABLE_FLAGS;SOURCES" ${ARGN})
  set(_objs)
  foreach(_src ${A_SOURCES})
    get_filename_component(_n ${_src} NAME_WE)
    set(_o ${CMAKE_CURRENT_BINARY_DIR}/${tag}_${_n}.o)
    set(_extra)
    if(_n MATCHES "^portable")
      set(_extra ${A_PORTABLE_FLAGS})
    endif()
    add_custom_command(OUTPUT ${_o}
      BYPRODUCTS ${_o}.res
      COMMAND sh ${AG_GPU_DIR}/compile_res.sh ${_o}.res ${compiler} ${A_FLAGS} ${_extra}
              -I${PROJECT_SOURCE_DIR}/include -I${AG_GPU_DIR} -c ${_src} -o ${_o}
      DEPENDS ${_src} ${AG_GPU_HEADERS} ${AG_GPU_DIR}/compile_res.sh
      COMMENT "${tag}: ${_n}"
      VERBATIM)
    list(APPEND _objs ${_o})
  endforeach()
  set(${out} ${_objs} PARENT_SCOPE)
endfunction()

function(ag_gpu_module name)
  ag_backend_module(${name} ${ARGN})
  set_target_properties(anygrad-${name} PROPERTIES LINKER_LANGUAGE C)
  target_link_options(anygrad-${name} PRIVATE -Wl,--version-script=${AG_GPU_DIR}/exports.map
                      -Wl,--exclude-libs,ALL -Wl,--no-undefined)
  set_property(TARGET anygrad-${name} APPEND PROPERTY LINK_DEPENDS ${AG_GPU_DIR}/exports.map)
endfunction()
