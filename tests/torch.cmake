# muster.torch: Horovod's PyTorch API over the runtime extension,
# run as real `mpirun -np N /usr/bin/python3` jobs (label mpi). Needs the
# extension built and Debian's python3-torch; torch's import costs seconds
# per rank, so each job checks many calls.
# Every API call at 1, 2 and 3 ranks (gradient equivalence, async handles,
# fp16 error bound included).
foreach(np 1 2 3)
  add_test(NAME torch_api_np${np}
    COMMAND /usr/bin/python3 ${CMAKE_CURRENT_SOURCE_DIR}/torch_mpirun.py ${np} torch_api_worker.py)
  set_tests_properties(torch_api_np${np} PROPERTIES LABELS mpi TIMEOUT 300
    ENVIRONMENT "PYTHONPATH=${CMAKE_SOURCE_DIR}/sdk/python;MUSTER_BINARY_DIR=${CMAKE_BINARY_DIR};MUSTER_MPIEXEC=${MPIEXEC_EXECUTABLE}")
endforeach()
# The Horovod-documentation script: 2 ranks == 1 rank on the same global batch.
muster_python_test(torch_equivalence SCRIPT ${CMAKE_CURRENT_SOURCE_DIR}/torch_equivalence_test.py LABEL mpi
  TIMEOUT 300 ENV "MUSTER_MPIEXEC=${MPIEXEC_EXECUTABLE}")
# Mismatched parameters, a mismatched collective, a killed rank.
muster_python_test(torch_fault SCRIPT ${CMAKE_CURRENT_SOURCE_DIR}/torch_fault_test.py LABEL mpi
  TIMEOUT 400 ENV "MUSTER_MPIEXEC=${MPIEXEC_EXECUTABLE}")
# Horovod's semantics (name matching, mismatch errors, join, reducescatter,
# alltoall, gradients, scaling, sparse, SyncBatchNorm, Adasum, timeline) at
# 2 and 3 ranks; HOROVOD_TIMELINE=DYNAMIC as Horovod's own test file sets it.
foreach(np 2 3)
  add_test(NAME torch_semantics_np${np}
    COMMAND /usr/bin/python3 ${CMAKE_CURRENT_SOURCE_DIR}/torch_mpirun.py ${np} torch_semantics_worker.py)
  set_tests_properties(torch_semantics_np${np} PROPERTIES LABELS mpi TIMEOUT 400 RESOURCE_LOCK torch_mpirun
    ENVIRONMENT "PYTHONPATH=${CMAKE_SOURCE_DIR}/sdk/python;MUSTER_BINARY_DIR=${CMAKE_BINARY_DIR};MUSTER_MPIEXEC=${MPIEXEC_EXECUTABLE};HOROVOD_TIMELINE=DYNAMIC")
endforeach()
# Where the DistributedOptimizer keeps gradients (huge pages), for any host's THP modes.
muster_python_test(torch_settings_unit_test SCRIPT ${CMAKE_CURRENT_SOURCE_DIR}/torch_settings_unit_test.py LABEL unit)
# The same semantics with the DistributedOptimizer's gradients in private
# tensors (what a host with huge pages for torch's memory only gets).
add_test(NAME torch_semantics_np2_private_gradients
  COMMAND /usr/bin/python3 ${CMAKE_CURRENT_SOURCE_DIR}/torch_mpirun.py 2 torch_semantics_worker.py)
set_tests_properties(torch_semantics_np2_private_gradients PROPERTIES LABELS mpi TIMEOUT 400
  RESOURCE_LOCK torch_mpirun
  ENVIRONMENT "PYTHONPATH=${CMAKE_SOURCE_DIR}/sdk/python;MUSTER_BINARY_DIR=${CMAKE_BINARY_DIR};MUSTER_MPIEXEC=${MPIEXEC_EXECUTABLE};HOROVOD_TIMELINE=DYNAMIC;MUSTER_SHARED_GRADIENTS=0")
# The negotiation table alone: rounds fed by hand, no processes.
muster_python_test(torch_negotiation SCRIPT ${CMAKE_CURRENT_SOURCE_DIR}/torch_negotiation_test.py LABEL unit)
set_tests_properties(torch_api_np1 torch_api_np2 torch_api_np3 torch_equivalence torch_fault PROPERTIES
  RESOURCE_LOCK torch_mpirun)
