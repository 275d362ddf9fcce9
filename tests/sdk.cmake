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
endif()
