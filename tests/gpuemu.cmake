# The emulated GPU (backends/gpuemu): the emulator's own semantics
# (gpuemu_test), the kernel check against the CPU backend on both flavours
# (warp 32 with CUDA limits, warp 64 with HIP limits), `anygrad check` and
# `anygrad compare` against the CPU, and the pinned, loader, allocator and
# AMP tests with gpuemu:0 as their device (AG_TEST_DEVICE).
if(TARGET anygrad-gpuemu)
  enable_language(CXX)
  set(_gpu ${PROJECT_SOURCE_DIR}/kernels/gpu)
  set_source_files_properties(${CMAKE_CURRENT_SOURCE_DIR}/gpuemu_test.cu PROPERTIES LANGUAGE CXX
                              COMPILE_OPTIONS "-xc++")
  add_executable(gpuemu_test ${CMAKE_CURRENT_SOURCE_DIR}/gpuemu_test.cu ${_gpu}/emu/emu_exec.cc
                 ${_gpu}/emu/emu_runtime.cc)
  target_include_directories(gpuemu_test PRIVATE ${_gpu} ${AG_CMOCKA_INCLUDE})
  target_compile_definitions(gpuemu_test PRIVATE AG_GPU_HOST=1)
  target_compile_options(gpuemu_test PRIVATE -std=c++17 -ffp-contract=off -Wno-unknown-pragmas)
  set_target_properties(gpuemu_test PROPERTIES LINKER_LANGUAGE CXX)
  target_link_libraries(gpuemu_test PRIVATE anygrad ${AG_CMOCKA_LIB} Threads::Threads ${CMAKE_DL_LIBS})
  add_test(NAME gpuemu_exec COMMAND gpuemu_test)
  add_test(NAME gpuemu_deferred COMMAND gpuemu_test deferred)
  set_tests_properties(gpuemu_deferred PROPERTIES ENVIRONMENT "AG_GPUEMU_DEFERRED=1;AG_GPUEMU_DELAY_US=20000")
  if("address" IN_LIST AG_SANITIZE)
    # ASan sees device buffers: a kernel's out-of-bounds read is reported
    # with the kernel on the stack
    add_test(NAME gpuemu_asan_oob COMMAND gpuemu_test oob)
    set_tests_properties(gpuemu_asan_oob PROPERTIES PASS_REGULAR_EXPRESSION
                         "heap-buffer-overflow.*READ of size 4.*k_oob_read" LABELS gpuemu)
  endif()

  # a not-ready stream or event query leaves no error for the next launch
  # (HIP's recorded last error, modelled by gpuemu:1)
  add_executable(gpu_query_test ${CMAKE_CURRENT_SOURCE_DIR}/gpu_query_test.c)
  target_include_directories(gpu_query_test PRIVATE ${AG_CMOCKA_INCLUDE})
  target_link_libraries(gpu_query_test PRIVATE anygrad ${AG_CMOCKA_LIB} m)
  add_test(NAME gpu_query_gpuemu COMMAND gpu_query_test)
  set_tests_properties(gpu_query_gpuemu PROPERTIES ENVIRONMENT
                       "AG_GPUEMU_DEFERRED=1;AG_GPUEMU_DELAY_US=20000;AG_BACKEND_PATH=$<TARGET_FILE_DIR:anygrad-gpuemu>")

  # The checker (AG_GPUEMU_CHECK=1): a defective kernel per defect class,
  # compiled as the check module compiles kernels (anygrad-gpuemu-check
  # exists only in builds without sanitizers)
  if(TARGET anygrad-gpuemu-check)
    if(CMAKE_CXX_COMPILER_ID STREQUAL "GNU")
      set(_instr -fsanitize=thread --param=tsan-instrument-func-entry-exit=0)
    else()
      set(_instr -fsanitize=thread -mllvm -tsan-instrument-func-entry-exit=0)
    endif()
    add_executable(gpuemu_check_test ${CMAKE_CURRENT_SOURCE_DIR}/gpuemu_check_test.cu ${_gpu}/emu/emu_exec.cc
                   ${_gpu}/emu/emu_runtime.cc ${_gpu}/emu/emu_check.cc)
    set_source_files_properties(${CMAKE_CURRENT_SOURCE_DIR}/gpuemu_check_test.cu PROPERTIES LANGUAGE CXX
                                COMPILE_OPTIONS "-xc++;${_instr}")
    target_include_directories(gpuemu_check_test PRIVATE ${_gpu} ${AG_CMOCKA_INCLUDE})
    target_compile_definitions(gpuemu_check_test PRIVATE AG_GPU_HOST=1 AGEMU_CHECK=1)
    target_compile_options(gpuemu_check_test PRIVATE -std=c++17 -ffp-contract=off -Wno-unknown-pragmas)
    set_target_properties(gpuemu_check_test PROPERTIES LINKER_LANGUAGE CXX)
    target_link_libraries(gpuemu_check_test PRIVATE anygrad ${AG_CMOCKA_LIB} Threads::Threads ${CMAKE_DL_LIBS})
    add_test(NAME gpuemu_check_defects COMMAND gpuemu_check_test check)
    set_tests_properties(gpuemu_check_defects PROPERTIES ENVIRONMENT "AG_GPUEMU_CHECK=1")
    add_test(NAME gpuemu_check_plain COMMAND gpuemu_check_test plain)
    add_test(NAME gpuemu_check_reverse COMMAND gpuemu_check_test plain)
    set_tests_properties(gpuemu_check_reverse PROPERTIES ENVIRONMENT "AG_GPUEMU_SCHED=reverse")
    add_test(NAME gpuemu_check_random COMMAND gpuemu_check_test check)
    set_tests_properties(gpuemu_check_random PROPERTIES ENVIRONMENT "AG_GPUEMU_CHECK=1;AG_GPUEMU_SCHED=random:7")
    add_test(NAME gpuemu_sms COMMAND gpuemu_check_test sms 304)
    set_tests_properties(gpuemu_sms PROPERTIES ENVIRONMENT "AG_GPUEMU_SMS=304")
    add_test(NAME gpuemu_badenv_sms COMMAND gpuemu_check_test badenv)
    set_tests_properties(gpuemu_badenv_sms PROPERTIES ENVIRONMENT "AG_GPUEMU_SMS=12x")
    add_test(NAME gpuemu_badenv_sched COMMAND gpuemu_check_test badenv)
    set_tests_properties(gpuemu_badenv_sched PROPERTIES ENVIRONMENT "AG_GPUEMU_SCHED=random")
    add_test(NAME gpuemu_badenv_check COMMAND gpuemu_check_test badenv)
    set_tests_properties(gpuemu_badenv_check PROPERTIES ENVIRONMENT "AG_GPUEMU_CHECK=yes")
    set_tests_properties(gpuemu_check_defects gpuemu_check_plain gpuemu_check_reverse gpuemu_check_random
                         gpuemu_sms gpuemu_badenv_sms gpuemu_badenv_sched gpuemu_badenv_check
                         PROPERTIES LABELS gpuemu TIMEOUT 120)
  endif()

  # gpu_check is built with the benchmarks (AG_BENCH)
  if(TARGET gpu_check)
    add_test(NAME gpu_check_emu_cuda COMMAND gpu_check $<TARGET_FILE:anygrad-gpuemu> --device=0)
    # Under the sanitizers the warp-64 flavour runs every kernel kind in f32
    # and the integer dtypes (the half-precision cases, half of the suite,
    # run there on warp 32 and without sanitizers on both)
    set(_hip_filter "")
    if(AG_SANITIZE)
      set(_hip_filter "f32,i64,i32,bool,u8")
    endif()
    add_test(NAME gpu_check_emu_hip COMMAND gpu_check $<TARGET_FILE:anygrad-gpuemu> ${_hip_filter} --device=1)
    # an MI300X's 304 compute units: the launchers' grid and split choices
    # for a large device
    set_tests_properties(gpu_check_emu_hip PROPERTIES ENVIRONMENT "AG_GPUEMU_SMS=304")
    # deferred streams: the f16 third of the cases (every kind of kernel, copies
    # and the optimizer's staged tables) keeps the suite short
    add_test(NAME gpu_check_emu_deferred COMMAND gpu_check $<TARGET_FILE:anygrad-gpuemu> f16 --device=0)
    set_tests_properties(gpu_check_emu_deferred PROPERTIES ENVIRONMENT "AG_GPUEMU_DEFERRED=1")
  endif()
  # The kernel check in checking mode (AG_GPUEMU_CHECK=1), each flavour
  # under one non-default schedule and each schedule on one flavour (the
  # checker costs ~100 s per run on 2 cores): every case but the two GEMMs
  # whose grids go beyond 65535 blocks in y/z (their tens of thousands of
  # blocks' shared-memory traffic takes minutes under the checker; the plain
  # runs keep them)
  if(TARGET gpu_check AND TARGET anygrad-gpuemu-check)
    set(_checked)
    foreach(_pair "0;reverse" "1;random:1")
      list(GET _pair 0 _dev)
      list(GET _pair 1 _sched)
      string(REPLACE ":" "" _sn ${_sched})
      set(_name gpu_check_emu${_dev}_checked_${_sn})
      add_test(NAME ${_name} COMMAND gpu_check $<TARGET_FILE:anygrad-gpuemu> --device=${_dev}
               "--skip=grid beyond")
      set_tests_properties(${_name} PROPERTIES ENVIRONMENT "AG_GPUEMU_CHECK=1;AG_GPUEMU_SCHED=${_sched}")
      list(APPEND _checked ${_name})
    endforeach()
  endif()
  add_test(NAME check_gpuemu COMMAND $<TARGET_FILE:anygrad-cli> check --backend gpuemu:0,gpuemu:1)
  add_test(NAME compare_gpuemu_mlp COMMAND $<TARGET_FILE:anygrad-cli> compare --devices cpu,gpuemu:0,gpuemu:1
           --steps 20)
  add_test(NAME compare_gpuemu_gpt COMMAND $<TARGET_FILE:anygrad-cli> compare --devices cpu,gpuemu:0 --model gpt
           --steps 4 --batch 8)
  set(_emu_tests gpuemu_exec gpuemu_deferred gpu_query_gpuemu check_gpuemu compare_gpuemu_mlp compare_gpuemu_gpt)
  if(TARGET gpu_check)
    list(APPEND _emu_tests gpu_check_emu_cuda gpu_check_emu_hip gpu_check_emu_deferred ${_checked})
  endif()
  # amp and amp_ops run gpuemu:0 in their own device lists. The targets are
  # defined by fragments read after this one; add_test resolves them later.
  foreach(_t pinned loader alloc_cpu)
    add_test(NAME ${_t}_gpuemu COMMAND ${_t}_test)
    set_tests_properties(${_t}_gpuemu PROPERTIES SKIP_RETURN_CODE 77 ENVIRONMENT
                         "AG_TEST_DEVICE=gpuemu:0;AG_GPUEMU_DEFERRED=1;AG_CPU_STREAMS=threaded;AG_BACKEND_PATH=$<TARGET_FILE_DIR:anygrad-gpuemu>")
    list(APPEND _emu_tests ${_t}_gpuemu)
  endforeach()
  set_tests_properties(${_emu_tests} PROPERTIES TIMEOUT 900 LABELS gpuemu)
  # pinned's gate: a delay per queued item instead of big products
  set_property(TEST pinned_gpuemu APPEND PROPERTY ENVIRONMENT "AG_GPUEMU_DELAY_US=50000")
  # worker threads of deferred streams: also in the TSan configuration (-L
  # threads). Not gpuemu_deferred: it races with the worker on purpose (the
  # hazard it shows), which TSan rightly reports; pinned_gpuemu runs 1 MiB
  # kernels and takes 10 minutes there.
  set_tests_properties(loader_gpuemu PROPERTIES LABELS "gpuemu;threads")
  # the emulator's semantics under TSan: fibers as TSan fibers with barriers,
  # shuffles, block start and completion as the only orderings (about 5 s)
  set_tests_properties(gpuemu_exec PROPERTIES LABELS "gpuemu;threads")
endif()
