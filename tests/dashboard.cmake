# The dashboard and /metrics: the Prometheus text writer, cookie
# sessions and CSRF, training series (unit); the page and its API against a
# real musterd, the real Chromium driving it, and the real Prometheus
# scraping it (integration).
muster_gtest(dashboard_unit_test SOURCES dashboard_unit_test.cc DEPS muster_dashboard LABEL unit TIMEOUT 60)
muster_gtest(metrics_reporter_test SOURCES metrics_reporter_test.cc DEPS muster_report muster_dashboard
  LABEL unit TIMEOUT 60)
muster_python_test(dashboard_api SCRIPT ${CMAKE_CURRENT_SOURCE_DIR}/dashboard_api_test.py
  LABEL integration TIMEOUT 180)
muster_python_test(dashboard_browser SCRIPT ${CMAKE_CURRENT_SOURCE_DIR}/dashboard_browser_test.py
  LABEL integration TIMEOUT 240)
muster_python_test(dashboard_https SCRIPT ${CMAKE_CURRENT_SOURCE_DIR}/dashboard_https_test.py
  LABEL integration TIMEOUT 180)
muster_python_test(dashboard_prometheus SCRIPT ${CMAKE_CURRENT_SOURCE_DIR}/dashboard_prometheus_test.py
  LABEL integration TIMEOUT 180)
muster_python_test(sdk_python_metrics SCRIPT ${CMAKE_CURRENT_SOURCE_DIR}/sdk_python_metrics_test.py LABEL unit TIMEOUT 60)
