# workers/kubernetes: the backend over a fake API server (unit).
muster_gtest(kubernetes_backend_test SOURCES kubernetes_backend_test.cc DEPS muster_workers_kubernetes muster_base
  LABEL unit TIMEOUT 60)
# musterd --backend kubernetes on the real testbed (tests/kubernetes_testbed.py; root).
muster_python_test(kubernetes_integration SCRIPT ${CMAKE_CURRENT_SOURCE_DIR}/kubernetes_integration_test.py
  LABEL integration TIMEOUT 600)
set_tests_properties(kubernetes_integration PROPERTIES RESOURCE_LOCK kubernetes)
# Faults (OOM, a kubelet killed, musterd killed) and cluster modes on the real testbed.
muster_python_test(kubernetes_cluster SCRIPT ${CMAKE_CURRENT_SOURCE_DIR}/kubernetes_cluster_test.py
  LABEL integration TIMEOUT 600)
set_tests_properties(kubernetes_cluster PROPERTIES RESOURCE_LOCK kubernetes)
