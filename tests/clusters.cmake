# Clusters in the daemon (issue 3): request validation and the cluster
# manager's state machine (unit), real musterd + mpirun (integration).
if(TARGET muster_clusters)
  muster_gtest(cluster_unit_test
    SOURCES cluster_request_test.cc cluster_manager_test.cc
    DEPS muster_clusters
    LABEL unit
    TIMEOUT 120)
endif()
