# cmake --install of the runtime component into a temp prefix; a
# find_package(muster COMPONENTS runtime) consumer (tests/runtime_consumer)
# built against it and run under mpirun -np 2 (integration).
muster_python_test(runtime_install SCRIPT ${CMAKE_CURRENT_SOURCE_DIR}/runtime_install_test.py
  LABEL integration TIMEOUT 300 ENV "MUSTER_MPIEXEC=${MPIEXEC_EXECUTABLE}")
