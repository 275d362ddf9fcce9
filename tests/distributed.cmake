# DistributedOptimizer (runtime/distributed/): unit tests with in-process
# ranks on threads, and the same behaviours over real MPI ranks.
muster_gtest(fusion_bucket_test SOURCES fusion_bucket_test.cc DEPS muster_distributed LABEL unit TIMEOUT 60)
muster_gtest(timeline_test SOURCES timeline_test.cc DEPS muster_distributed nlohmann_json::nlohmann_json
  LABEL unit TIMEOUT 60)
muster_gtest(distributed_optimizer_test SOURCES distributed_optimizer_test.cc DEPS muster_distributed
  nlohmann_json::nlohmann_json LABEL unit TIMEOUT 120)

add_executable(distributed_mpi_test distributed_mpi_test.cc)
muster_target_defaults(distributed_mpi_test)
target_link_libraries(distributed_mpi_test PRIVATE muster_distributed GTest::gtest)
muster_mpi_test(distributed_mpi_np2 NP 2 TARGET distributed_mpi_test TIMEOUT 120)
muster_mpi_test(distributed_mpi_np3 NP 3 TARGET distributed_mpi_test TIMEOUT 120)

# A rank killed or stalled mid-step: the test drives mpirun itself.
add_executable(distributed_fault_worker distributed_fault_worker.cc)
muster_target_defaults(distributed_fault_worker)
target_link_libraries(distributed_fault_worker PRIVATE muster_distributed)
muster_gtest(distributed_fault_test SOURCES distributed_fault_test.cc DEPS muster_base LABEL mpi TIMEOUT 180
  ENV "MUSTER_MPIEXEC=${MPIEXEC_EXECUTABLE}")
add_dependencies(distributed_fault_test distributed_fault_worker)
