# PyTorch's own distributed test suite (torch/testing/_internal/distributed/distributed_test.py of
# the installed python3-torch, read from the package) against the "muster" backend, one entry per
# world size, each case once: tests/torch_suite.py (the launcher; `--backend gloo` is the baseline,
# not run here). A case passes on every rank or fails the entry; a skip must be the file's own
# (CUDA, world size, a gate naming gloo or MPI that torch_backend_extras_test covers).
foreach(np 2 3)
  add_test(NAME torch_suite_np${np} COMMAND /usr/bin/python3 ${CMAKE_CURRENT_SOURCE_DIR}/torch_suite.py --np ${np})
  set_tests_properties(torch_suite_np${np} PROPERTIES LABELS integration TIMEOUT 600
    ENVIRONMENT "PYTHONPATH=${CMAKE_SOURCE_DIR}/sdk/python;MUSTER_BINARY_DIR=${CMAKE_BINARY_DIR};OMP_NUM_THREADS=1")
endforeach()
# What the suite runs on gloo (or MPI) only, by name, held against the "muster" backend from torch's
# documentation: coalesced and object collectives, sparse all_reduce, PREMUL_SUM, get_future, DDP
# no_sync, point to point (shm and TCP), monitored_barrier, barrier timeouts; at 2 and 3 ranks.
muster_python_test(torch_backend_extras_test SCRIPT ${CMAKE_CURRENT_SOURCE_DIR}/torch_backend_extras_test.py
  LABEL integration TIMEOUT 600 ENV "OMP_NUM_THREADS=1")
