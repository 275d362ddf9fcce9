# Clusters in the daemon: request validation and the cluster
# manager's state machine (unit), real musterd + mpirun (integration).
muster_gtest(cluster_unit_test
  SOURCES cluster_request_test.cc cluster_manager_test.cc
  DEPS muster_clusters
  LABEL unit
  TIMEOUT 120)
# Every cluster mode (ps, mpi, torchrun, elastic) held to ClusterMode's contract (service/cluster/mode.h).
muster_gtest(cluster_mode_contract_test SOURCES cluster_mode_contract_test.cc DEPS muster_clusters LABEL unit TIMEOUT 60)
# mpirun's tagged output back into whole lines; its report of the first failed rank.
muster_gtest(mpi_output_test SOURCES mpi_output_test.cc DEPS muster_clusters LABEL unit TIMEOUT 60)
# A failed rank's exception and record from its lines; the root cause among a cluster's failed ranks.
muster_gtest(failure_report_test SOURCES failure_report_test.cc DEPS muster_service LABEL unit TIMEOUT 60)
# api/kernel.h: the agent and the MPI ranks run a script the same way.
muster_gtest(kernel_test SOURCES kernel_test.cc DEPS muster_clusters muster_agent_lib LABEL unit TIMEOUT 60)

# A tiny MPI program (allreduce of rank+1) that the mpi-mode test launches.
muster_executable(muster_mpi_hello SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/mpi_hello.cc DEPS MPI::MPI_C)
set_target_properties(muster_mpi_hello PROPERTIES OUTPUT_NAME muster-mpi-hello)
target_compile_definitions(muster_mpi_hello PRIVATE OMPI_SKIP_MPICXX=1 MPICH_SKIP_MPICXX=1)  # C API only

muster_python_test(cluster_integration_test
  SCRIPT ${CMAKE_CURRENT_SOURCE_DIR}/cluster_integration_test.py
  LABEL integration
  TIMEOUT 300)

# The real launcher forks processes: integration label.
muster_gtest(cluster_launcher_test SOURCES cluster_launcher_test.cc DEPS muster_clusters LABEL integration TIMEOUT 120)
add_dependencies(cluster_launcher_test muster_launcher)
# The root cause of a failed job, through a real musterd under load: rank 1 raises
# (or exits) while rank 0 waits in a collective, many runs in mpi and torchrun mode;
# the cluster must name rank 1 and its exception every time, rank 0 as "then failed".
muster_python_test(root_cause_test SCRIPT ${CMAKE_CURRENT_SOURCE_DIR}/root_cause_test.py
  LABEL integration TIMEOUT 900 ENV "OMP_NUM_THREADS=1;OMPI_ALLOW_RUN_AS_ROOT=1;OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1")
