# The REST contract: api/openapi.yaml through standard OpenAPI
# validators (npm, tests/openapi/), and the Python loader the integration
# tests validate every response with (tests/openapi_contract.py).
add_test(NAME openapi_document COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/openapi/check.sh ${CMAKE_SOURCE_DIR}/api/openapi.yaml)
set_tests_properties(openapi_document PROPERTIES LABELS unit TIMEOUT 120)
muster_python_test(openapi_contract SCRIPT ${CMAKE_CURRENT_SOURCE_DIR}/openapi_contract_test.py LABEL unit TIMEOUT 60)
# A real musterd (local backend) against requests generated from the document.
muster_python_test(openapi_boundary SCRIPT ${CMAKE_CURRENT_SOURCE_DIR}/openapi_boundary_test.py
  LABEL integration TIMEOUT 300)
