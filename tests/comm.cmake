# Collectives (runtime/comm): unit tests without MPI, and suites run under real
# mpirun at 2, 3 and 4 ranks (odd counts exercise uneven ring chunks).
function(muster_comm_mpi_program name)
  add_executable(${name} ${ARGN})
  muster_target_defaults(${name})
  target_link_libraries(${name} PRIVATE muster_comm GTest::gtest)
endfunction()

muster_comm_mpi_program(comm_allreduce_test comm_allreduce_test.cc)
muster_mpi_test(comm_allreduce_np2 NP 2 TARGET comm_allreduce_test TIMEOUT 300)
muster_mpi_test(comm_allreduce_np3 NP 3 TARGET comm_allreduce_test TIMEOUT 300)
muster_mpi_test(comm_allreduce_np4 NP 4 TARGET comm_allreduce_test TIMEOUT 300)
# The ring's MPI point-to-point transport (what ranks on different hosts use).
muster_mpi_test(comm_allreduce_mpi_links_np3 NP 3 TARGET comm_allreduce_test ARGS --transport=mpi TIMEOUT 300)

# The ring over muster's TCP transport (what ranks on different hosts use),
# forced onto loopback on one host: ring cases of every op x dtype x size
# (1 MB + 3 elements is two blocks), then the TCP-specific suite.
foreach(np 2 3 4)
  muster_mpi_test(comm_allreduce_tcp_np${np} NP ${np} TARGET comm_allreduce_test TIMEOUT 120
    ARGS --transport=tcp "--gtest_filter=AllOpsDtypesSizes/*_ring:AllreduceAsync.*")
endforeach()
# The same with the TCP links' bytes moved by I/O threads (what hosts with
# cores to spare run; this 2-core machine's default is inline).
muster_mpi_test(comm_allreduce_tcp_threads_np3 NP 3 TARGET comm_allreduce_test TIMEOUT 120
  ARGS --transport=tcp "--gtest_filter=AllOpsDtypesSizes/*_ring:AllreduceAsync.*" ENV MUSTER_COMM_TCP_THREADS=1)
muster_comm_mpi_program(comm_tcp_test comm_tcp_test.cc)
muster_mpi_test(comm_tcp_np2 NP 2 TARGET comm_tcp_test ARGS --transport=tcp TIMEOUT 120 ENV MUSTER_COMM_TCP_THREADS=0)
muster_mpi_test(comm_tcp_np3 NP 3 TARGET comm_tcp_test ARGS --transport=tcp TIMEOUT 120 ENV MUSTER_COMM_TCP_THREADS=0)
muster_mpi_test(comm_tcp_threads_np3 NP 3 TARGET comm_tcp_test ARGS --transport=tcp TIMEOUT 120
  ENV MUSTER_COMM_TCP_THREADS=1)

# Shared buffers and the direct allreduce; over MPI links the same checks run
# through the ring (the peers do not map the memory).
muster_comm_mpi_program(comm_shared_test comm_shared_test.cc)
muster_mpi_test(comm_shared_np2 NP 2 TARGET comm_shared_test TIMEOUT 300)
muster_mpi_test(comm_shared_np3 NP 3 TARGET comm_shared_test TIMEOUT 300)
muster_mpi_test(comm_shared_np4 NP 4 TARGET comm_shared_test TIMEOUT 300)
muster_mpi_test(comm_shared_mpi_links_np2 NP 2 TARGET comm_shared_test ARGS --transport=mpi TIMEOUT 300)

muster_comm_mpi_program(comm_collectives_test comm_collectives_test.cc)
muster_mpi_test(comm_collectives_np2 NP 2 TARGET comm_collectives_test TIMEOUT 120)
muster_mpi_test(comm_collectives_np3 NP 3 TARGET comm_collectives_test TIMEOUT 120)
muster_mpi_test(comm_collectives_np4 NP 4 TARGET comm_collectives_test TIMEOUT 120)

# Without mpirun: conversions, kernels, the ring on threads, a world of one.
muster_gtest(comm_half_test SOURCES comm_half_test.cc DEPS muster_comm LABEL unit)
muster_gtest(comm_reduce_test SOURCES comm_reduce_test.cc DEPS muster_comm LABEL unit)
muster_gtest(comm_ring_test SOURCES comm_ring_test.cc DEPS muster_comm LABEL unit)
muster_gtest(comm_single_process_test SOURCES comm_single_process_test.cc DEPS muster_comm LABEL unit)
muster_gtest(comm_tcp_link_test SOURCES comm_tcp_link_test.cc DEPS muster_comm LABEL unit TIMEOUT 60)
# Ops run in order, on a waiting caller's thread when nothing runs before them.
muster_gtest(comm_progress_thread_test SOURCES comm_progress_thread_test.cc DEPS muster_comm LABEL unit TIMEOUT 120)
# The small-message engine (shm/small_ops.h) with ranks on threads.
muster_gtest(comm_small_ops_test SOURCES comm_small_ops_test.cc DEPS muster_comm LABEL unit TIMEOUT 120)

add_executable(comm_fault_worker comm_fault_worker.cc)
muster_target_defaults(comm_fault_worker)
target_link_libraries(comm_fault_worker PRIVATE muster_comm)
# Drives mpirun itself (a rank killed or stalled mid-run), so it is a plain
# gtest that needs the worker built; label mpi like the other mpirun suites.
muster_gtest(comm_fault_test SOURCES comm_fault_test.cc DEPS muster_base LABEL mpi TIMEOUT 180
  ENV "MUSTER_MPIEXEC=${MPIEXEC_EXECUTABLE}")
add_dependencies(comm_fault_test comm_fault_worker)

# NCCL (device buffers): only where CUDA and NCCL were found; the test skips
# itself (ctest shows "Skipped") on hosts without one GPU per rank. np1 runs
# the whole device path on a one-GPU machine, np2 the exchange between GPUs.
if(MUSTER_WITH_NCCL)
  muster_comm_mpi_program(comm_nccl_test comm_nccl_test.cc)
  foreach(np 1 2)
    muster_mpi_test(comm_nccl_np${np} NP ${np} TARGET comm_nccl_test TIMEOUT 120)
    set_tests_properties(comm_nccl_np${np} PROPERTIES SKIP_REGULAR_EXPRESSION "\\[  SKIPPED \\]")
  endforeach()
endif()

# Ranks on threads over KvBootstrap and an in-process store (no mpirun): every
# collective x transport (shm, tcp, two hosts) x world size x size x dtype x op.
muster_gtest(comm_world_test SOURCES comm_world_test.cc DEPS muster_comm LABEL unit TIMEOUT 600)
# Checked ops (mismatches on every rank, the world usable after), process
# sets, broken worlds torn down and formed again: ranks on threads.
muster_gtest(comm_checks_test SOURCES comm_checks_test.cc DEPS muster_comm LABEL unit TIMEOUT 600)
# The small-message path of a one-host world (results at every limit,
# mismatches across paths, departed and stalled peers, teardown): ranks on threads.
muster_gtest(comm_small_world_test SOURCES comm_small_world_test.cc DEPS muster_comm LABEL unit TIMEOUT 300)
# Point-to-point messages (send/recv outside the collectives' order): sizes, tags, any source,
# unexpected messages, mismatches, timeouts, closed peers, on shm / tcp / two hosts: ranks on threads.
muster_gtest(comm_point_to_point_test SOURCES comm_point_to_point_test.cc DEPS muster_comm LABEL unit TIMEOUT 300)

# The mpirun suites again without mpirun: N processes started by
# comm_store_launch.sh form their world over a file store (KvBootstrap).
function(muster_comm_store_test name)
  cmake_parse_arguments(ARG "" "NP;TARGET;TIMEOUT" "ARGS" ${ARGN})
  add_test(NAME ${name} COMMAND sh ${CMAKE_CURRENT_SOURCE_DIR}/comm_store_launch.sh ${ARG_NP}
    $<TARGET_FILE:${ARG_TARGET}> ${ARG_ARGS})
  set_tests_properties(${name} PROPERTIES LABELS unit TIMEOUT ${ARG_TIMEOUT}
    ENVIRONMENT "MUSTER_SOURCE_DIR=${CMAKE_SOURCE_DIR};MUSTER_BINARY_DIR=${CMAKE_BINARY_DIR}")
endfunction()
muster_comm_store_test(comm_collectives_store_np3 NP 3 TARGET comm_collectives_test TIMEOUT 120)
muster_comm_store_test(comm_allreduce_store_np3 NP 3 TARGET comm_allreduce_test TIMEOUT 300
  ARGS "--gtest_filter=-*_mpi:*Mpi*")
muster_comm_store_test(comm_allreduce_store_tcp_np4 NP 4 TARGET comm_allreduce_test TIMEOUT 300
  ARGS --transport=tcp "--gtest_filter=AllOpsDtypesSizes/*_ring:AllOpsDtypesSizes/*_auto:AllreduceAsync.*")
muster_comm_store_test(comm_shared_store_np3 NP 3 TARGET comm_shared_test TIMEOUT 300 ARGS "--gtest_filter=-*Mpi*")

# A rank of a store-formed world killed; the survivors form a smaller world in
# the same processes, leaving nothing behind (no mpirun).
add_executable(comm_reform_worker comm_reform_worker.cc)
muster_target_defaults(comm_reform_worker)
target_link_libraries(comm_reform_worker PRIVATE muster_comm)
muster_gtest(comm_reform_test SOURCES comm_reform_test.cc DEPS muster_base LABEL unit TIMEOUT 300)
add_dependencies(comm_reform_test comm_reform_worker)

# The Python binding and muster.runtime without mpirun: ranks on threads
# over a store object, and processes over muster.runtime.FileStore.
muster_python_test(runtime_python SCRIPT ${CMAKE_CURRENT_SOURCE_DIR}/runtime_python_test.py LABEL unit TIMEOUT 600)
# The KvStore contract, one typed suite every store passes (memory, file).
muster_gtest(kv_store_contract_test SOURCES kv_store_contract_test.cc DEPS muster_comm LABEL unit TIMEOUT 120)
