# The dashboard (issue 14): cookie sessions, server-sent events, the page's
# routes, GET /metrics and the training curves. Included at the end of
# service/CMakeLists.txt, after the clusters; musterd links it. The page's
# files (static/) are served from the source tree in a build, or from
# <prefix>/share/muster/dashboard once installed (--dashboard-dir overrides).
muster_library(muster_dashboard
  SOURCES
    ${CMAKE_CURRENT_LIST_DIR}/sessions.cc
    ${CMAKE_CURRENT_LIST_DIR}/event_hub.cc
    ${CMAKE_CURRENT_LIST_DIR}/dashboard_routes.cc
    ${CMAKE_CURRENT_LIST_DIR}/../metrics/prometheus_text.cc
    ${CMAKE_CURRENT_LIST_DIR}/../metrics/daemon_metrics.cc
    ${CMAKE_CURRENT_LIST_DIR}/../metrics/training_series.cc
    ${CMAKE_CURRENT_LIST_DIR}/../metrics/training_routes.cc
  DEPS muster_service muster_clusters)
target_compile_definitions(muster_dashboard PRIVATE
  MUSTER_DASHBOARD_SOURCE_DIR="${CMAKE_CURRENT_LIST_DIR}/static")
install(DIRECTORY ${CMAKE_CURRENT_LIST_DIR}/static/ DESTINATION share/muster/dashboard)
if(TARGET musterd)
  target_link_libraries(musterd PRIVATE muster_dashboard)
endif()
