# SDK tests (engineer A2): the Python SDK without a daemon (unit) and against a
# real musterd (integration); the C++ SDK against a real musterd.
muster_python_test(sdk_python_unit SCRIPT ${CMAKE_CURRENT_SOURCE_DIR}/sdk_python_unit_test.py LABEL unit TIMEOUT 120)
muster_gtest(sdk_cpp_types_test SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/sdk_cpp_types_test.cc DEPS muster_sdk
  LABEL unit TIMEOUT 60)

# Integration: a real musterd started by the test (needs musterd and muster-agent built).
if(TARGET musterd)
  muster_python_test(sdk_python_integration SCRIPT ${CMAKE_CURRENT_SOURCE_DIR}/sdk_python_integration_test.py
    LABEL integration TIMEOUT 240)
  muster_python_test(sdk_python_cluster SCRIPT ${CMAKE_CURRENT_SOURCE_DIR}/sdk_python_cluster_test.py
    LABEL integration TIMEOUT 240)
  muster_gtest(sdk_cpp_test SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/sdk_cpp_test.cc DEPS muster_sdk
    LABEL integration TIMEOUT 240)
  # Every answer sdk_cpp_test's clients got (recorded through
  # Client::set_response_observer) against api/openapi.yaml.
  set_tests_properties(sdk_cpp_test PROPERTIES FIXTURES_SETUP sdk_cpp_responses)
  add_test(NAME sdk_cpp_conformance COMMAND /usr/bin/python3 ${CMAKE_CURRENT_SOURCE_DIR}/openapi_check_log.py
    ${CMAKE_BINARY_DIR}/sdk_cpp_test.responses.jsonl)
  set_tests_properties(sdk_cpp_conformance PROPERTIES LABELS integration TIMEOUT 60
    FIXTURES_REQUIRED sdk_cpp_responses ENVIRONMENT "MUSTER_SOURCE_DIR=${CMAKE_SOURCE_DIR}")
endif()
