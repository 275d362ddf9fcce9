# musterd (issue 2): unit tests of validation, registry, auth and the HTTP
# layer (no process is started), and integration tests of a real musterd
# with the local backend.
muster_gtest(validation_test SOURCES validation_test.cc DEPS muster_service LABEL unit TIMEOUT 60)
muster_gtest(registry_test SOURCES registry_test.cc DEPS muster_service LABEL unit TIMEOUT 60)
# Where workers find muster's Python parts (build tree, install prefix) and the PYTHONPATH they get.
muster_gtest(worker_python_test SOURCES worker_python_test.cc DEPS muster_service LABEL unit TIMEOUT 60)
muster_gtest(auth_test SOURCES auth_test.cc DEPS muster_service LABEL unit TIMEOUT 60)
muster_gtest(http_server_test SOURCES http_server_test.cc DEPS muster_service cpprestsdk::cpprest LABEL unit TIMEOUT 60)
muster_gtest(musterd_integration_test SOURCES musterd_integration_test.cc
  DEPS cpprestsdk::cpprest OpenSSL::SSL OpenSSL::Crypto nlohmann_json::nlohmann_json
  LABEL integration TIMEOUT 180)
add_dependencies(musterd_integration_test musterd muster_agent)
# Issue 13: GPU reservation (fake inventory) and followed logs (fake stream).
muster_gtest(gpu_inventory_test SOURCES gpu_inventory_test.cc DEPS muster_service LABEL unit TIMEOUT 60)
muster_gtest(log_follower_test SOURCES log_follower_test.cc DEPS muster_service LABEL unit TIMEOUT 60)
muster_python_test(notebook_daemon_integration_test
  SCRIPT ${CMAKE_CURRENT_SOURCE_DIR}/notebook_daemon_integration_test.py
  LABEL integration
  TIMEOUT 240)
# The HTTP server against hostile clients and its streamed responses.
muster_gtest(http_server_limits_test SOURCES http_server_limits_test.cc DEPS muster_service LABEL unit TIMEOUT 60)
muster_gtest(http_server_stream_test SOURCES http_server_stream_test.cc DEPS muster_service LABEL unit TIMEOUT 60)
muster_gtest(musterd_load_test SOURCES musterd_load_test.cc
  DEPS cpprestsdk::cpprest OpenSSL::SSL OpenSSL::Crypto nlohmann_json::nlohmann_json
  LABEL integration TIMEOUT 120)
add_dependencies(musterd_load_test musterd muster_agent)
# issue 12: the registry with a slow backend, 50k duplicate stop ids and a
# state database that cannot be written.
muster_gtest(registry_hardening_test SOURCES registry_hardening_test.cc DEPS muster_service LABEL unit TIMEOUT 60)
# issue 16: launch answers before the backend works, and stays all-or-nothing.
muster_gtest(registry_launch_test SOURCES registry_launch_test.cc DEPS muster_service LABEL unit TIMEOUT 60)
# issue 12 part 5: kill -9 musterd during a 64-worker launch, an mpi cluster
# and a ps cluster; restart on the same port and state dir.
muster_python_test(chaos_test SCRIPT ${CMAKE_CURRENT_SOURCE_DIR}/chaos_test.py LABEL integration TIMEOUT 240)
