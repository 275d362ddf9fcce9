# The Kubernetes testbed (tests/kubernetes_testbed.py: etcd, kube-apiserver,
# controller manager, scheduler, and kubelets on containerd + runc in network
# namespaces; root), built once by scripts/kubernetes.sh, which `make test`
# runs before ctest. Tests that start a testbed take one lock: each runs its
# own control plane, and two at once on a small machine starve each other.
muster_python_test(kubernetes_testbed SCRIPT ${CMAKE_CURRENT_SOURCE_DIR}/kubernetes_testbed_test.py
  LABEL integration TIMEOUT 600)
set_tests_properties(kubernetes_testbed PROPERTIES RESOURCE_LOCK kubernetes)
