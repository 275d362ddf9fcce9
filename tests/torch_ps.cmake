# muster.torch.ps (runtime/python/ps, sdk/python/muster/torch/ps.py) with real
# muster-ps processes and Python workers (tests/torch_ps_test.py), and
# examples/pytorch started from the notebook example through a real musterd
# (tests/pytorch_example_test.py), one ctest entry per mode.
muster_python_test(torch_ps_test SCRIPT ${CMAKE_CURRENT_SOURCE_DIR}/torch_ps_test.py
  LABEL integration TIMEOUT 240 ENV "OMP_NUM_THREADS=1")
muster_python_test(pytorch_example_single_test SCRIPT ${CMAKE_CURRENT_SOURCE_DIR}/pytorch_example_test.py
  LABEL integration TIMEOUT 300 ENV "PYTEST_ADDOPTS=-k single;OMP_NUM_THREADS=1")
muster_python_test(pytorch_example_ps_test SCRIPT ${CMAKE_CURRENT_SOURCE_DIR}/pytorch_example_test.py
  LABEL integration TIMEOUT 300 ENV "PYTEST_ADDOPTS=-k ps;OMP_NUM_THREADS=1")
muster_python_test(pytorch_example_allreduce_test SCRIPT ${CMAKE_CURRENT_SOURCE_DIR}/pytorch_example_test.py
  LABEL mpi TIMEOUT 300 ENV "PYTEST_ADDOPTS=-k allreduce;OMP_NUM_THREADS=1")
