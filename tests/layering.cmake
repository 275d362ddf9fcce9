# The layers (docs/ARCHITECTURE.md, "Layers"): every #include must name a
# header of the including target itself or of a target it links, and no layer
# may include a higher one. tests/layering/check_layering.py reads what CMake
# knows from its File API: the codemodel-v2 query below is written at
# configure time, and CMake answers it from the next configure on (the check
# re-runs `cmake <build>` once when a fresh build dir has no reply yet).
set(MUSTER_CODEMODEL_QUERY ${CMAKE_BINARY_DIR}/.cmake/api/v1/query/codemodel-v2)
if(NOT EXISTS ${MUSTER_CODEMODEL_QUERY})
  file(WRITE ${MUSTER_CODEMODEL_QUERY} "")
endif()
add_test(NAME layering COMMAND /usr/bin/python3 ${CMAKE_CURRENT_SOURCE_DIR}/layering/check_layering.py
  --source ${CMAKE_SOURCE_DIR} --build ${CMAKE_BINARY_DIR})
set_tests_properties(layering PROPERTIES LABELS unit TIMEOUT 120)
# The checker itself, on a tiny fabricated tree and codemodel: each kind of
# violation is caught and named.
muster_python_test(layering_checker SCRIPT ${CMAKE_CURRENT_SOURCE_DIR}/layering/check_layering_test.py
  LABEL unit TIMEOUT 60)
# The Python package's layers and import cycles (sdk REST-only, the runtime's
# module and its extension), and the checker itself on fabricated packages.
add_test(NAME layering_python COMMAND /usr/bin/python3 ${CMAKE_CURRENT_SOURCE_DIR}/layering/check_python_imports.py
  --package ${CMAKE_SOURCE_DIR}/sdk/python)
set_tests_properties(layering_python PROPERTIES LABELS unit TIMEOUT 60)
muster_python_test(layering_python_checker SCRIPT ${CMAKE_CURRENT_SOURCE_DIR}/layering/check_python_imports_test.py
  LABEL unit TIMEOUT 60)
