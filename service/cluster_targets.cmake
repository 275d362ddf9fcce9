# Clusters (issue 3): the cluster manager, its store, launcher and routes.
# Included at the end of service/CMakeLists.txt; musterd links it.
muster_library(muster_clusters
  SOURCES
    ${CMAKE_CURRENT_LIST_DIR}/cluster_store.cc
    ${CMAKE_CURRENT_LIST_DIR}/cluster_launcher.cc
    ${CMAKE_CURRENT_LIST_DIR}/cluster_tasks.cc
    ${CMAKE_CURRENT_LIST_DIR}/ps_rendezvous.cc
    ${CMAKE_CURRENT_LIST_DIR}/mpi_rendezvous.cc
    ${CMAKE_CURRENT_LIST_DIR}/cluster_manager.cc
    ${CMAKE_CURRENT_LIST_DIR}/cluster_lifecycle.cc
    ${CMAKE_CURRENT_LIST_DIR}/cluster_routes.cc
  DEPS muster_service muster_clusterspec SQLite::SQLite3 Threads::Threads)
if(TARGET musterd)
  target_link_libraries(musterd PRIVATE muster_clusters)
endif()
