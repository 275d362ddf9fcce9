# Elastic clusters: the world rendezvous (generations, timeouts, late and
# stale joiners, deaths during the rendezvous) as unit tests with a
# FakeClock.
muster_gtest(elastic_world_test SOURCES elastic_world_test.cc DEPS muster_elastic LABEL unit TIMEOUT 60)
# The elastic clusters' host blacklist (service/elastic/host_blacklist.h):
# counts, threshold, Horovod's cooldown with a chosen draw.
muster_gtest(host_blacklist_test SOURCES host_blacklist_test.cc DEPS muster_elastic LABEL unit TIMEOUT 60)
# The protocol's bodies (clusterspec/rendezvous_protocol.h) round-trip and
# refuse what they must; base64 both ways.
muster_gtest(rendezvous_protocol_test SOURCES rendezvous_protocol_test.cc DEPS muster_clusterspec muster_base
  LABEL unit TIMEOUT 60)
# Elastic clusters and max_restarts in the cluster manager (a real registry
# over a fake backend, a FakeClock; agents played by the test).
muster_gtest(elastic_cluster_test SOURCES elastic_cluster_test.cc DEPS muster_clusters LABEL unit TIMEOUT 120)
# A rank that speaks only the rendezvous (its C++ client, no Communicator),
# run by a real musterd: generations, a death, a death during the exchange,
# a replacement.
muster_executable(muster_elastic_rdzv_probe SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/elastic_rdzv_probe.cc DEPS muster_comm)
set_target_properties(muster_elastic_rdzv_probe PROPERTIES OUTPUT_NAME muster-elastic-rdzv-probe)
muster_python_test(elastic_rendezvous_integration_test
  SCRIPT ${CMAKE_CURRENT_SOURCE_DIR}/elastic_rendezvous_integration_test.py
  LABEL integration
  TIMEOUT 300)
# Whole-job restarts under max_restarts with the real fashion_mnist program:
# an mpi cluster resumes from its checkpoint, a ps worker is replaced alone.
muster_python_test(restart_integration_test
  SCRIPT ${CMAKE_CURRENT_SOURCE_DIR}/restart_integration_test.py
  LABEL integration
  TIMEOUT 600
  ENV "OMP_NUM_THREADS=1")
# muster.torch.elastic in one process: state, sampler, the run loop's control flow.
muster_python_test(torch_elastic_unit_test
  SCRIPT ${CMAKE_CURRENT_SOURCE_DIR}/torch_elastic_unit_test.py
  LABEL unit
  TIMEOUT 180
  ENV "OMP_NUM_THREADS=1")
# The C++ runtime's elastic state and run loop, ranks on threads.
muster_gtest(elastic_run_test SOURCES elastic_run_test.cc
  DEPS muster_runtime_elastic nlohmann_json::nlohmann_json LABEL unit TIMEOUT 60)
# The shared scenarios of the C++ and Python loops (tests/elastic_loop_scenarios.json).
target_compile_definitions(elastic_run_test PRIVATE MUSTER_TESTS_DIR="${CMAKE_CURRENT_SOURCE_DIR}")
# A Horovod-elastic PyTorch script (tests/elastic_torch_train.py) survives
# SIGKILLed ranks (rank 0 and another, 2 and 3 ranks), a kill inside
# commit(), a stopped worker and musterd killed during the recovery, on the
# local backend, and a killed rank and a stopped worker across container
# hosts (root only: network namespaces; without root those two cases skip
# and say so).
muster_python_test(elastic_torch_integration_test
  SCRIPT ${CMAKE_CURRENT_SOURCE_DIR}/elastic_torch_integration_test.py
  LABEL integration
  TIMEOUT 900
  ENV "OMP_NUM_THREADS=1")
# The Python SDK and CLI: elastic flags, max_restarts, the generations shown.
muster_python_test(sdk_python_elastic_test SCRIPT ${CMAKE_CURRENT_SOURCE_DIR}/sdk_python_elastic_test.py
  LABEL unit TIMEOUT 120)
