# workers/kubernetes: the backend over a fake API server (unit).
muster_gtest(kubernetes_backend_test SOURCES kubernetes_backend_test.cc DEPS muster_workers_kubernetes muster_base
  LABEL unit TIMEOUT 60)
