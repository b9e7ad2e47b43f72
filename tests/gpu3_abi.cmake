# The op tables in the backend ABI (tests/gpu3_abi_test.c): the example
# module (tests/extbackend/minihost.c) built
#   abi41      from the headers of an older commit, kept in
#              tests/extbackend/abi_old/ (dfcea3c, ABI 4.1, before ffd11fb
#              inserted hypot and fmod ahead of the unary ops' backward
#              sub-ops)
#   oldtables  from today's headers with only that commit's op table, as a
#              module built against an older minor's tables
#   badtables  with tables of another call layout (tests/gpu3_abi_badtables.c)
#   kcallnew   as a newer minor: a longer table, and a kernel call 8 bytes
#              longer than the core's
# in one folder that the test puts on AG_BACKEND_PATH.
set(_ag_abi3_dir ${CMAKE_CURRENT_BINARY_DIR}/gpu3_abi)
set(_ag_abi3_old ${CMAKE_CURRENT_SOURCE_DIR}/extbackend/abi_old)
# only the old table, in a folder of its own, ahead of include/
configure_file(${_ag_abi3_old}/anygrad/optable.h ${_ag_abi3_dir}/oldtables/anygrad/optable.h COPYONLY)
set(_ag_abi3_inc_abi41 ${_ag_abi3_old})
set(_ag_abi3_inc_oldtables ${_ag_abi3_dir}/oldtables)
set(_ag_abi3_src_badtables ${CMAKE_CURRENT_SOURCE_DIR}/gpu3_abi_badtables.c)
set(_ag_abi3_def_kcallnew
    "HEADER=.struct_size=sizeof(ag_backend)+8,.abi_major=AG_BACKEND_ABI_MAJOR,.abi_minor=AG_BACKEND_ABI_MINOR+1,.tables=AG_BACKEND_TABLES"
    "KCALL_NEED=sizeof(ag_kernel_call)+8")
set(_ag_abi3_mods abi41 oldtables badtables kcallnew)
foreach(_m ${_ag_abi3_mods})
  if(DEFINED _ag_abi3_src_${_m})
    add_library(anygrad-${_m} MODULE ${_ag_abi3_src_${_m}})
    target_include_directories(anygrad-${_m} PRIVATE ${CMAKE_CURRENT_SOURCE_DIR})
  else()
    add_library(anygrad-${_m} MODULE ${CMAKE_CURRENT_SOURCE_DIR}/extbackend/minihost.c)
    target_compile_definitions(anygrad-${_m} PRIVATE NAME="${_m}" ${_ag_abi3_def_${_m}})
  endif()
  set_target_properties(anygrad-${_m} PROPERTIES PREFIX "lib" C_VISIBILITY_PRESET hidden
                                                 LIBRARY_OUTPUT_DIRECTORY ${_ag_abi3_dir})
  if(DEFINED _ag_abi3_inc_${_m})
    # BEFORE: ahead of the tests' include/ and anygrad's own
    target_include_directories(anygrad-${_m} BEFORE PRIVATE ${_ag_abi3_inc_${_m}})
  endif()
  target_link_libraries(anygrad-${_m} PRIVATE anygrad m)
endforeach()

add_executable(gpu3_abi_test ${CMAKE_CURRENT_SOURCE_DIR}/gpu3_abi_test.c)
target_link_libraries(gpu3_abi_test PRIVATE anygrad ${AG_CMOCKA_LIB} m)
foreach(_m ${_ag_abi3_mods})
  add_dependencies(gpu3_abi_test anygrad-${_m})
endforeach()
add_test(NAME gpu3_abi COMMAND gpu3_abi_test)
string(REPLACE ";" "," _ag_abi3_list "${_ag_abi3_mods}")
set_tests_properties(gpu3_abi PROPERTIES TIMEOUT 60 LABELS "abi" ENVIRONMENT
                     "AG_BACKEND_PATH=${_ag_abi3_dir};AG_BACKENDS=cpu,${_ag_abi3_list}")
