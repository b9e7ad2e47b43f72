# Caching allocator: white-box tests over a fake backend, and the public API on
# the CPU backend. Both are meaningful under -DAG_SANITIZE=thread (threads).
add_executable(alloc_fake_test ${CMAKE_CURRENT_SOURCE_DIR}/alloc_fake_test.c)
target_include_directories(alloc_fake_test PRIVATE ${AG_CMOCKA_INCLUDE} ${PROJECT_SOURCE_DIR}/core)
target_link_libraries(alloc_fake_test PRIVATE anygrad_static ${AG_CMOCKA_LIB})
add_test(NAME alloc_fake COMMAND alloc_fake_test)
set_tests_properties(alloc_fake PROPERTIES ENVIRONMENT "AG_ALLOC_CONF=" TIMEOUT 120 LABELS threads)

if(EXISTS ${CMAKE_CURRENT_SOURCE_DIR}/alloc_cpu_test.c)
  add_executable(alloc_cpu_test ${CMAKE_CURRENT_SOURCE_DIR}/alloc_cpu_test.c)
  target_include_directories(alloc_cpu_test PRIVATE ${AG_CMOCKA_INCLUDE} ${PROJECT_SOURCE_DIR}/core)
  target_link_libraries(alloc_cpu_test PRIVATE anygrad_static ${AG_CMOCKA_LIB})
  add_test(NAME alloc_cpu COMMAND alloc_cpu_test)
  set_tests_properties(alloc_cpu PROPERTIES ENVIRONMENT "AG_ALLOC_CONF=" TIMEOUT 120)
endif()

# `anygrad memory` end to end; the snapshot must be valid JSON.
if(TARGET anygrad-cli)
  add_test(NAME alloc_cli COMMAND anygrad-cli memory --device cpu --exercise
           --json ${CMAKE_CURRENT_BINARY_DIR}/alloc_cli_snapshot.json)
  set_tests_properties(alloc_cli PROPERTIES ENVIRONMENT "AG_ALLOC_CONF="
                       PASS_REGULAR_EXPRESSION "Allocated memory.*parameters.*snapshot written"
                       FIXTURES_SETUP alloc_snapshot)
  find_program(AG_PYTHON3 NAMES python3)
  if(AG_PYTHON3)
    add_test(NAME alloc_cli_json COMMAND ${AG_PYTHON3} -m json.tool
             ${CMAKE_CURRENT_BINARY_DIR}/alloc_cli_snapshot.json)
    set_tests_properties(alloc_cli_json PROPERTIES FIXTURES_REQUIRED alloc_snapshot)
  endif()
endif()

# The launch workspace service (ag_kernel_call.workspace, cuDNN's): in the
# allocator's statistics, AG_ERR_OOM on a full device, then granted again.
add_executable(workspace_test ${CMAKE_CURRENT_SOURCE_DIR}/workspace_test.c)
target_include_directories(workspace_test PRIVATE ${AG_CMOCKA_INCLUDE} ${PROJECT_SOURCE_DIR}/core)
target_link_libraries(workspace_test PRIVATE anygrad_static ${AG_CMOCKA_LIB})
add_test(NAME alloc_workspace COMMAND workspace_test)
set_tests_properties(alloc_workspace PROPERTIES ENVIRONMENT "AG_ALLOC_CONF=" TIMEOUT 60)
