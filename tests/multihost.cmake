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
