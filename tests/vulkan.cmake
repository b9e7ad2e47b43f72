# The Vulkan backend, run for real on any Vulkan device (lavapipe in CI)
# under the Khronos validation layers with synchronization validation: the
# module counts every warning or error the layers report, fails the next
# synchronization and makes the process exit with status 97, so any message
# fails the test. Every test skips (77, or 2 for gpu_check) where no Vulkan
# device exists. Under ASan, leaks inside lavapipe, LLVM and the validation
# layer are suppressed (lsan_vulkan.supp); anygrad's own are reported.
# Added CI time on 2 cores: see docs/vulkan.md.
if(TARGET anygrad-vulkan)
  set(_vk_env "VK_INSTANCE_LAYERS=VK_LAYER_KHRONOS_validation"
      "VK_LAYER_ENABLES=VK_VALIDATION_FEATURE_ENABLE_SYNCHRONIZATION_VALIDATION_EXT"
      "AG_BACKEND_PATH=$<TARGET_FILE_DIR:anygrad-vulkan>"
      "LSAN_OPTIONS=suppressions=${CMAKE_CURRENT_SOURCE_DIR}/lsan_vulkan.supp")
  set(_vk_run ${CMAKE_CURRENT_SOURCE_DIR}/vulkan_run.sh $<TARGET_FILE:anygrad-cli>)
  if(TARGET anygrad_models)
    add_executable(vulkan_test ${CMAKE_CURRENT_SOURCE_DIR}/vulkan_test.c)
    target_link_libraries(vulkan_test PRIVATE anygrad anygrad_models ${AG_CMOCKA_LIB} m)
    add_dependencies(vulkan_test anygrad-vulkan)
    add_test(NAME vulkan_api COMMAND vulkan_test)
    # the loader absent: listed as unavailable with the reason
    add_test(NAME vulkan_no_loader COMMAND $<TARGET_FILE:anygrad-cli> info)
    set_tests_properties(vulkan_no_loader PROPERTIES LABELS vulkan
                         ENVIRONMENT "AG_VULKAN_LIBRARY=libvulkan-absent.so.1"
                         PASS_REGULAR_EXPRESSION "vulkan  unavailable: .*cannot load the Vulkan loader libvulkan-absent")
  endif()
  if(TARGET gpu_check)
    # the f32 cases of every family (Philox bits, loop limits, grids) keep CI short
    add_test(NAME gpu_check_vulkan COMMAND gpu_check $<TARGET_FILE:anygrad-vulkan> " f32 ,f32 [")
    set_tests_properties(gpu_check_vulkan PROPERTIES SKIP_RETURN_CODE 2)
  endif()
  # The whole conformance matrix and the op-table sweep run lavapipe's JIT
  # for every op and dtype: in the release stage only. Under the sanitizers
  # the backend's host code runs through vulkan_api, gpu_check_vulkan and the
  # training runs below.
  if(NOT AG_SANITIZE)
    add_test(NAME check_vulkan COMMAND ${_vk_run} $<TARGET_FILE:anygrad-cli> check --backend vulkan:0)
  endif()
  add_test(NAME compare_vulkan COMMAND ${_vk_run} $<TARGET_FILE:anygrad-cli> compare --devices cpu,vulkan:0
           --model gpt --steps 2)
  add_test(NAME train_vulkan COMMAND ${_vk_run} $<TARGET_FILE:anygrad-cli> train --device vulkan:0 --steps 10)
  # every (sub-op, dtype) of the op table against tools/op_ref.h, or refused
  if(TARGET optable_test AND NOT AG_SANITIZE)
    add_test(NAME optable_vulkan0 COMMAND optable_test)
    set_tests_properties(optable_vulkan0 PROPERTIES ENVIRONMENT "AG_TEST_DEVICE=vulkan:0")
  endif()
  # the CNN (conv2d, pooling, batch norm): 32 steps, where the images are installed
  if(EXISTS /usr/share/datasets/fashion-mnist)
    add_test(NAME train_fashion_vulkan COMMAND ${_vk_run} $<TARGET_FILE:anygrad-cli> train --task fashion-mnist
             --device vulkan:0 --epochs 1 --train-limit 2048 --test-limit 512 --batch 64 --channels 4,8
             --out ${CMAKE_CURRENT_BINARY_DIR}/vulkan_cnn.safetensors)
  endif()
  foreach(_t vulkan_api gpu_check_vulkan check_vulkan compare_vulkan train_vulkan train_fashion_vulkan optable_vulkan0)
    if(TEST ${_t})
      set_property(TEST ${_t} APPEND PROPERTY LABELS vulkan)
      set_property(TEST ${_t} APPEND PROPERTY ENVIRONMENT ${_vk_env})
      set_property(TEST ${_t} PROPERTY TIMEOUT 900)
      if(NOT _t STREQUAL "gpu_check_vulkan")
        set_property(TEST ${_t} PROPERTY SKIP_RETURN_CODE 77)
      endif()
    endif()
  endforeach()
endif()
