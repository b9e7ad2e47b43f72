# libFuzzer harnesses (tests/fuzz/): the safetensors reader, the IDX reader,
# the DLPack/from_blob entry points and the BPE reader, built with clang's
# -fsanitize=fuzzer,address,undefined when AG_FUZZ is ON (scripts/test.sh's
# clang14 stage). Each CTest test runs one harness for a few seconds from its
# seed corpus (tests/fuzz/corpus/<name>, read only; what it finds new goes
# to the build tree). The core is compiled once more with coverage and
# sanitizer instrumentation for them (anygrad_fuzz).
if(AG_FUZZ)
  include(CheckCSourceCompiles)
  set(CMAKE_REQUIRED_FLAGS "-fsanitize=fuzzer,address,undefined")
  set(CMAKE_REQUIRED_LINK_OPTIONS "-fsanitize=fuzzer,address,undefined")
  check_c_source_compiles("#include <stddef.h>
    #include <stdint.h>
    int LLVMFuzzerTestOneInput(const uint8_t *d, size_t n) { (void)d; (void)n; return 0; }" AG_HAVE_LIBFUZZER)
  unset(CMAKE_REQUIRED_FLAGS)
  unset(CMAKE_REQUIRED_LINK_OPTIONS)
  if(NOT AG_HAVE_LIBFUZZER)
    message(WARNING "AG_FUZZ: ${CMAKE_C_COMPILER} cannot build libFuzzer programs (clang with libclang-rt-dev): "
                    "no fuzzers")
  else()
    set(_ag_fz -fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer)
    add_library(anygrad_fuzz STATIC ${AG_CORE_SOURCES})
    target_compile_options(anygrad_fuzz PRIVATE -fsanitize=fuzzer-no-link ${_ag_fz})
    target_include_directories(anygrad_fuzz PUBLIC ${PROJECT_SOURCE_DIR}/include PRIVATE ${PROJECT_SOURCE_DIR}/core
                               $<TARGET_PROPERTY:anygrad_obj,INCLUDE_DIRECTORIES>)
    target_compile_definitions(anygrad_fuzz PRIVATE $<TARGET_PROPERTY:anygrad_obj,COMPILE_DEFINITIONS>)
    target_link_libraries(anygrad_fuzz PUBLIC $<TARGET_PROPERTY:anygrad_static,INTERFACE_LINK_LIBRARIES>)
    foreach(_h safetensors idx dlpack bpe)
      add_executable(fuzz_${_h} ${CMAKE_CURRENT_SOURCE_DIR}/fuzz/fuzz_${_h}.c)
      target_compile_options(fuzz_${_h} PRIVATE -fsanitize=fuzzer ${_ag_fz})
      target_link_options(fuzz_${_h} PRIVATE -fsanitize=fuzzer ${_ag_fz})
      target_compile_definitions(fuzz_${_h} PRIVATE _GNU_SOURCE) # memfd_create
      target_link_libraries(fuzz_${_h} PRIVATE anygrad_fuzz)
      set(_work ${CMAKE_CURRENT_BINARY_DIR}/fuzz_${_h})
      add_test(NAME fuzz_${_h}
               COMMAND ${CMAKE_COMMAND} -E env ASAN_OPTIONS=detect_leaks=1:abort_on_error=0
                       UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
                       sh -c "mkdir -p '${_work}/new' '${_work}/crashes' && exec \"$0\" \"$@\""
                       $<TARGET_FILE:fuzz_${_h}> -max_total_time=5 -runs=2000000 -timeout=10 -rss_limit_mb=2048
                       -max_len=4096 -print_final_stats=1 -artifact_prefix=${_work}/crashes/
                       ${_work}/new ${CMAKE_CURRENT_SOURCE_DIR}/fuzz/corpus/${_h})
      set_tests_properties(fuzz_${_h} PROPERTIES TIMEOUT 120 LABELS "fuzz")
    endforeach()
    # The text task's resume check (models/text_ckpt.c, compiled in with the
    # harness's instrumentation). Its seeds are whole small checkpoints
    # (about 30 KB: the MLP is at least 256 wide), hence the larger max_len.
    add_executable(fuzz_textckpt ${CMAKE_CURRENT_SOURCE_DIR}/fuzz/fuzz_textckpt.c
                                 ${PROJECT_SOURCE_DIR}/models/text_ckpt.c)
    target_include_directories(fuzz_textckpt PRIVATE ${PROJECT_SOURCE_DIR}/models)
    target_compile_options(fuzz_textckpt PRIVATE -fsanitize=fuzzer ${_ag_fz})
    target_link_options(fuzz_textckpt PRIVATE -fsanitize=fuzzer ${_ag_fz})
    target_compile_definitions(fuzz_textckpt PRIVATE _GNU_SOURCE) # memfd_create
    target_link_libraries(fuzz_textckpt PRIVATE anygrad_fuzz m)
    set(_work ${CMAKE_CURRENT_BINARY_DIR}/fuzz_textckpt)
    add_test(NAME fuzz_textckpt
             COMMAND ${CMAKE_COMMAND} -E env ASAN_OPTIONS=detect_leaks=1:abort_on_error=0
                     UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
                     sh -c "mkdir -p '${_work}/new' '${_work}/crashes' && exec \"$0\" \"$@\""
                     $<TARGET_FILE:fuzz_textckpt> -max_total_time=5 -runs=2000000 -timeout=10 -rss_limit_mb=2048
                     -max_len=65536 -print_final_stats=1 -artifact_prefix=${_work}/crashes/
                     ${_work}/new ${CMAKE_CURRENT_SOURCE_DIR}/fuzz/corpus/textckpt)
    set_tests_properties(fuzz_textckpt PROPERTIES TIMEOUT 120 LABELS "fuzz")
    # The Hugging Face layout's JSON (core/hf/): each input as a
    # tokenizer.json and as a config.json. Its seeds (tokenizer.json of a
    # small BPE, anygrad's and transformers' config.json) need max_len 16 KiB.
    add_executable(fuzz_hfjson ${CMAKE_CURRENT_SOURCE_DIR}/fuzz/fuzz_hfjson.c)
    target_compile_options(fuzz_hfjson PRIVATE -fsanitize=fuzzer ${_ag_fz})
    target_link_options(fuzz_hfjson PRIVATE -fsanitize=fuzzer ${_ag_fz})
    target_compile_definitions(fuzz_hfjson PRIVATE _GNU_SOURCE) # memfd_create
    target_link_libraries(fuzz_hfjson PRIVATE anygrad_fuzz)
    set(_work ${CMAKE_CURRENT_BINARY_DIR}/fuzz_hfjson)
    add_test(NAME fuzz_hfjson
             COMMAND ${CMAKE_COMMAND} -E env ASAN_OPTIONS=detect_leaks=1:abort_on_error=0
                     UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
                     sh -c "mkdir -p '${_work}/new' '${_work}/crashes' && exec \"$0\" \"$@\""
                     $<TARGET_FILE:fuzz_hfjson> -max_total_time=5 -runs=2000000 -timeout=10 -rss_limit_mb=2048
                     -max_len=16384 -print_final_stats=1 -artifact_prefix=${_work}/crashes/
                     ${_work}/new ${CMAKE_CURRENT_SOURCE_DIR}/fuzz/corpus/hfjson)
    set_tests_properties(fuzz_hfjson PROPERTIES TIMEOUT 120 LABELS "fuzz")
  endif()
endif()
