# SDK tests (engineer A2): the Python SDK without a daemon (unit) and against a
# real musterd (integration); the C++ SDK against a real musterd.
muster_python_test(sdk_python_unit SCRIPT ${CMAKE_CURRENT_SOURCE_DIR}/sdk_python_unit_test.py LABEL unit TIMEOUT 120)
