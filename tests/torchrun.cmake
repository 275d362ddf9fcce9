# torchrun mode (muster.torchrun) and the "muster" torch.distributed backend.
# Unit: torchrun's environment and line (clusterspec/torchrun.h).
muster_gtest(torchrun_line_test SOURCES torchrun_line_test.cc DEPS muster_clusterspec LABEL unit TIMEOUT 60)
# Integration: torchrun mode through a real musterd (local backend): every
# process's environment, the torchrun line, gloo scripts unchanged, killed ranks,
# the CLI.
muster_python_test(torchrun_cluster_test SCRIPT ${CMAKE_CURRENT_SOURCE_DIR}/torchrun_cluster_test.py
  LABEL integration TIMEOUT 900 ENV "OMP_NUM_THREADS=1")
# The same on the container backend (root: network namespaces; exit 77 = skipped).
muster_python_test(torchrun_container_test SCRIPT ${CMAKE_CURRENT_SOURCE_DIR}/torchrun_container_test.py
  LABEL integration TIMEOUT 900 ENV "OMP_NUM_THREADS=1")
set_tests_properties(torchrun_container_test PROPERTIES SKIP_RETURN_CODE 77)
# The "muster" torch.distributed backend (muster.torch.distributed): every
# collective against gloo, DDP against gloo and one process, a killed rank.
# Rank processes with torchrun's environment; needs _muster_runtime with
# Communicator(store=...) (exit 77 = skipped, naming why) and python3-torch.
muster_python_test(torch_distributed_test SCRIPT ${CMAKE_CURRENT_SOURCE_DIR}/torch_distributed_test.py
  LABEL integration TIMEOUT 900 ENV "OMP_NUM_THREADS=1")
set_tests_properties(torch_distributed_test PROPERTIES SKIP_RETURN_CODE 77)
# The DDP notebook (examples/notebook/ddp_training.ipynb: gloo, then the muster backend).
muster_python_test(sdk_python_notebook_ddp SCRIPT ${CMAKE_CURRENT_SOURCE_DIR}/sdk_python_notebook_test.py
  LABEL integration TIMEOUT 600 ENV "PYTEST_ADDOPTS=-k ddp_training;OMP_NUM_THREADS=1")
set_tests_properties(sdk_python_notebook_ddp PROPERTIES SKIP_RETURN_CODE 77)
# A DDP job's end on the "muster" backend: PyTorch's tutorial shape (DDP, barrier,
# destroy_process_group, the model alive at exit) run many times at 2 and 3 ranks,
# on an idle and on a busy host; no rank may abort at interpreter exit.
muster_python_test(ddp_end_stress_test SCRIPT ${CMAKE_CURRENT_SOURCE_DIR}/ddp_end_stress_test.py
  LABEL integration TIMEOUT 900 ENV "OMP_NUM_THREADS=1")
