# A model trained on any device exports as one trained on the CPU
# (docs/export.md): tests/export_devices.py trains the same small Llama on
# cpu, opencl:0 and vulkan:0 with portable numerics, writes the Hugging Face
# folder, ONNX and GGUF (f32, q8_0) files of each, requires them equal byte
# for byte to the CPU's, and has tokenizers, ONNX Runtime and the gguf reader
# read the device-trained files. Runs with the virtual environment of
# scripts/deps.sh --test and skips (77) without it; not in sanitizer builds
# (the same paths run instrumented in the onnx_export, gguf_export and
# hf_layout tests).
set(AG_TEST_VENV "${PROJECT_SOURCE_DIR}/.venv" CACHE PATH "virtual environment with the Python test packages")
if(TARGET anygrad-cli AND AG_HAVE_ONNX AND NOT AG_SANITIZE)
  set(_ag_xd_devices cpu)
  if(TARGET anygrad-opencl)
    list(APPEND _ag_xd_devices opencl:0)
  endif()
  if(TARGET anygrad-vulkan)
    list(APPEND _ag_xd_devices vulkan:0)
  endif()
  add_test(NAME export_devices
           COMMAND sh -c "p=\"$0/bin/python3\"; [ -x \"$p\" ] || p=/usr/bin/python3; exec \"$p\" \"$@\""
                   ${AG_TEST_VENV} ${CMAKE_CURRENT_SOURCE_DIR}/export_devices.py $<TARGET_FILE:anygrad-cli>
                   ${CMAKE_CURRENT_BINARY_DIR}/export_devices ${_ag_xd_devices})
  set_tests_properties(export_devices PROPERTIES TIMEOUT 300 SKIP_RETURN_CODE 77 LABELS "cli"
                       ENVIRONMENT "AG_NUM_THREADS=1;OMP_NUM_THREADS=1;AG_BACKEND_PATH=${PROJECT_BINARY_DIR}/lib")
endif()
