# Multi-host backends: containers (network namespaces), SSH, preflight.
# Tests that need root skip themselves (GTEST_SKIP with the reason) otherwise.
muster_gtest(container_backend_test SOURCES container_backend_test.cc
  DEPS muster_workers_container LABEL unit)
muster_gtest(container_integration_test SOURCES container_integration_test.cc
  DEPS muster_workers_container LABEL integration TIMEOUT 120)
muster_gtest(ssh_backend_integration_test SOURCES ssh_backend_integration_test.cc
  DEPS muster_workers_ssh muster_workers_container LABEL integration TIMEOUT 120)
muster_gtest(ssh_backend_test SOURCES ssh_backend_test.cc DEPS muster_workers_ssh LABEL unit)
muster_gtest(preflight_integration_test SOURCES preflight_integration_test.cc
  DEPS muster_workers_ssh muster_workers_container LABEL integration TIMEOUT 120)
# musterd with the container backend (needs the daemon and the agent).
muster_gtest(container_daemon_test SOURCES container_daemon_test.cc
  DEPS muster_workers_container cpprestsdk::cpprest OpenSSL::SSL OpenSSL::Crypto nlohmann_json::nlohmann_json
  LABEL integration TIMEOUT 120)
add_dependencies(container_daemon_test musterd muster_agent)
# Clusters across containers (mpi and ps modes) through musterd.
muster_gtest(container_cluster_test SOURCES container_cluster_test.cc
  DEPS muster_workers_container cpprestsdk::cpprest OpenSSL::SSL OpenSSL::Crypto nlohmann_json::nlohmann_json
  LABEL integration TIMEOUT 240)
add_dependencies(container_cluster_test musterd muster_agent muster_mpi_hello)
# musterd with the SSH backend, the containers standing in for remote hosts.
muster_gtest(ssh_daemon_test SOURCES ssh_daemon_test.cc
  DEPS muster_workers_container cpprestsdk::cpprest OpenSSL::SSL OpenSSL::Crypto nlohmann_json::nlohmann_json
  LABEL integration TIMEOUT 180)
add_dependencies(ssh_daemon_test musterd muster_agent muster_mpi_hello)
# Fashion-MNIST across containers (allreduce and ps modes) through musterd.
muster_gtest(container_training_test SOURCES container_training_test.cc
  DEPS muster_workers_container cpprestsdk::cpprest OpenSSL::SSL OpenSSL::Crypto nlohmann_json::nlohmann_json
  LABEL integration TIMEOUT 300)
add_dependencies(container_training_test musterd muster_agent fashion_mnist muster_ps_server)
