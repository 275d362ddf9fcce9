# README.md followed literally: every fenced snippet in one shell, a musterd
# started as the README says (no PYTHONPATH), its notebook and Horovod ranks
# (tests/readme_test.py). Root only: it skips (exit 77, reason printed)
# without a private network namespace.
add_test(NAME readme COMMAND /usr/bin/python3 ${CMAKE_CURRENT_SOURCE_DIR}/readme_test.py)
set_tests_properties(readme PROPERTIES LABELS integration TIMEOUT 1800 SKIP_RETURN_CODE 77
  ENVIRONMENT "MUSTER_SOURCE_DIR=${CMAKE_SOURCE_DIR};MUSTER_BINARY_DIR=${CMAKE_BINARY_DIR}")
