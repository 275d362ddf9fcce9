# tests/fuzz: the libFuzzer targets, built with clang into build-fuzz by
# scripts/fuzz.sh (a fixture, so the clang build runs once per ctest run and
# ccache makes it cheap after the first). Each target runs over its
# checked-in corpus, then for a few seconds of random inputs; `make fuzz`
# runs them for longer.
#
# clang and libFuzzer are required (scripts/setup.sh installs them).
find_program(MUSTER_CLANGXX clang++ REQUIRED)
file(GLOB MUSTER_LIBFUZZER /usr/lib/llvm-*/lib/clang/*/lib/linux/libclang_rt.fuzzer-*.a)
if(NOT MUSTER_LIBFUZZER)
  message(FATAL_ERROR "libFuzzer not found (/usr/lib/llvm-*/lib/clang/*/lib/linux/libclang_rt.fuzzer-*.a): "
                      "install libclang-rt-14-dev (scripts/setup.sh)")
endif()
set(MUSTER_FUZZ_BUILD ${CMAKE_BINARY_DIR}/fuzz)
add_test(NAME fuzz_build COMMAND ${CMAKE_SOURCE_DIR}/scripts/fuzz.sh build)
set_tests_properties(fuzz_build PROPERTIES LABELS unit TIMEOUT 900 FIXTURES_SETUP fuzz_binaries
  ENVIRONMENT "FUZZ_BUILD=${MUSTER_FUZZ_BUILD}")
foreach(t rest_request tf_config hostfile ps_frame)
  add_test(NAME fuzz_${t} COMMAND ${CMAKE_SOURCE_DIR}/scripts/fuzz.sh smoke ${t} 5)
  set_tests_properties(fuzz_${t} PROPERTIES LABELS unit TIMEOUT 120 FIXTURES_REQUIRED fuzz_binaries
    ENVIRONMENT "FUZZ_BUILD=${MUSTER_FUZZ_BUILD}")
endforeach()
