# Horovod's own PyTorch test file (test/parallel/test_torch.py) against
# muster.torch, run as Horovod's CI runs it: the whole file in one pytest per
# rank under `mpirun -np N`. Horovod's code is never kept here: point
# MUSTER_HOROVOD_TESTS (environment at test time, or this cache variable at
# configure time) at a Horovod checkout; without one the tests skip, saying so.
set(MUSTER_HOROVOD_TESTS "$ENV{MUSTER_HOROVOD_TESTS}" CACHE PATH
  "A Horovod checkout (or its test/ folder) whose test_torch.py the horovod_suite tests run")
foreach(np 2 3)
  add_test(NAME horovod_suite_np${np}
    COMMAND /usr/bin/python3 ${CMAKE_CURRENT_SOURCE_DIR}/horovod_suite.py --np ${np} --quiet)
  set(suite_env "PYTHONPATH=${CMAKE_SOURCE_DIR}/sdk/python;MUSTER_BINARY_DIR=${CMAKE_BINARY_DIR};MUSTER_MPIEXEC=${MPIEXEC_EXECUTABLE}")
  if(MUSTER_HOROVOD_TESTS)
    list(APPEND suite_env "MUSTER_HOROVOD_TESTS=${MUSTER_HOROVOD_TESTS}")
  endif()
  set_tests_properties(horovod_suite_np${np} PROPERTIES LABELS mpi TIMEOUT 1800 SKIP_RETURN_CODE 77
    RESOURCE_LOCK torch_mpirun ENVIRONMENT "${suite_env}")
endforeach()
