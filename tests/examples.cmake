# examples/fashion_mnist end to end (tests/fashion_mnist_test.py), one ctest
# entry per mode: single process (integration), 2 ranks under mpirun (mpi),
# 1 muster-ps + 2 workers (integration). Each needs the program built.
muster_python_test(fashion_mnist_single_test SCRIPT ${CMAKE_CURRENT_SOURCE_DIR}/fashion_mnist_test.py
  LABEL integration TIMEOUT 240 ENV "PYTEST_ADDOPTS=-k test_single;OMP_NUM_THREADS=1")
muster_python_test(fashion_mnist_mpi_test SCRIPT ${CMAKE_CURRENT_SOURCE_DIR}/fashion_mnist_test.py
  LABEL mpi TIMEOUT 300 ENV "PYTEST_ADDOPTS=-k test_mpi;OMP_NUM_THREADS=1")
muster_python_test(fashion_mnist_ps_test SCRIPT ${CMAKE_CURRENT_SOURCE_DIR}/fashion_mnist_test.py
  LABEL integration TIMEOUT 300 ENV "PYTEST_ADDOPTS=-k test_ps;OMP_NUM_THREADS=1")

# The program's checkpoint format (its library, examples/fashion_mnist).
muster_gtest(fashion_mnist_checkpoint_test SOURCES fashion_mnist_checkpoint_test.cc
  DEPS fashion_mnist_checkpoint LABEL unit ENV "OMP_NUM_THREADS=1")
# examples/tf2_ps: TensorFlow 2's roles (chief, workers, evaluator) on a real musterd.
muster_python_test(tf2_example_test
  SCRIPT ${CMAKE_CURRENT_SOURCE_DIR}/tf2_example_test.py
  LABEL integration
  TIMEOUT 240)
