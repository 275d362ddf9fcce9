# musterd: unit tests of validation, registry, auth and the HTTP
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
# GPU reservation (fake inventory) and followed logs (fake stream).
muster_gtest(gpu_inventory_test SOURCES gpu_inventory_test.cc DEPS muster_service LABEL unit TIMEOUT 60)
muster_gtest(log_follower_test SOURCES log_follower_test.cc DEPS muster_service LABEL unit TIMEOUT 60)
muster_python_test(notebook_daemon_integration_test
  SCRIPT ${CMAKE_CURRENT_SOURCE_DIR}/notebook_daemon_integration_test.py
  LABEL integration
  TIMEOUT 240)
# The HTTP server against hostile clients and its streamed responses.
muster_gtest(http_server_limits_test SOURCES http_server_limits_test.cc DEPS muster_service LABEL unit TIMEOUT 60)
muster_gtest(http_server_stream_test SOURCES http_server_stream_test.cc DEPS muster_service LABEL unit TIMEOUT 60)
# ... and over TLS: the same limits, stuck handshakes, the self-signed certificate, pins and CA files.
muster_gtest(http_server_tls_test SOURCES http_server_tls_test.cc DEPS muster_service muster_client_socket
  LABEL unit TIMEOUT 60)
# musterd beyond loopback: TLS only; the SDK, the CLI and muster-agent pin or
# CA-verify it, refuse a wrong fingerprint; no token in a capture of the traffic.
muster_python_test(musterd_tls_test SCRIPT ${CMAKE_CURRENT_SOURCE_DIR}/musterd_tls_test.py
  LABEL integration TIMEOUT 240)
muster_gtest(musterd_load_test SOURCES musterd_load_test.cc
  DEPS cpprestsdk::cpprest OpenSSL::SSL OpenSSL::Crypto nlohmann_json::nlohmann_json
  LABEL integration TIMEOUT 120)
add_dependencies(musterd_load_test musterd muster_agent)
# The registry with a slow backend, 50k duplicate stop ids and a
# state database that cannot be written.
muster_gtest(registry_hardening_test SOURCES registry_hardening_test.cc DEPS muster_service LABEL unit TIMEOUT 60)
# Launch answers before the backend works, and stays all-or-nothing.
muster_gtest(registry_launch_test SOURCES registry_launch_test.cc DEPS muster_service LABEL unit TIMEOUT 60)
# Admission: a launch counted against the host's CPUs and memory with the
# workers already there (a warning, or waiting in scheduling; clusters whole).
muster_gtest(registry_admission_test SOURCES registry_admission_test.cc DEPS muster_service LABEL unit TIMEOUT 60)
# ... and through musterd and the Python SDK: the warning, --overcommit=false.
muster_python_test(admission_integration SCRIPT ${CMAKE_CURRENT_SOURCE_DIR}/admission_integration_test.py
  LABEL integration TIMEOUT 180)
# Workers start in the project directory, MUSTER_WORKER_DIR their scratch,
# on the local and container backends (the latter root only: 77 = skipped).
muster_python_test(worker_directory_local SCRIPT ${CMAKE_CURRENT_SOURCE_DIR}/worker_directory_test.py
  LABEL integration TIMEOUT 120 ENV MUSTER_TEST_BACKEND=local)
muster_python_test(worker_directory_container SCRIPT ${CMAKE_CURRENT_SOURCE_DIR}/worker_directory_test.py
  LABEL integration TIMEOUT 180 ENV MUSTER_TEST_BACKEND=container)
set_tests_properties(worker_directory_container PROPERTIES SKIP_RETURN_CODE 77 RESOURCE_LOCK container_network)
# Chaos: kill -9 musterd during a 64-worker launch, an mpi cluster
# and a ps cluster; restart on the same port and state dir.
muster_python_test(chaos_test SCRIPT ${CMAKE_CURRENT_SOURCE_DIR}/chaos_test.py LABEL integration TIMEOUT 420)
# The registry's stop path and clocks (a report racing a stop, a backend that
# cannot stop, heartbeats stamped on arrival, a wall clock that jumps), and
# its bounds and state integrity (retention, DELETE, the live cap, pages, a
# database that lost or garbled rows, a read-only one).
muster_gtest(registry_stop_test SOURCES registry_stop_test.cc DEPS muster_service LABEL unit TIMEOUT 60)
# An agent's exit held while the backend's copy of the log trails it.
muster_gtest(registry_log_drain_test SOURCES registry_log_drain_test.cc DEPS muster_service LABEL unit TIMEOUT 60)
# tick()'s sweep: bounded slices of the records past sweep_all (bench/fleet).
muster_gtest(registry_sweep_test SOURCES registry_sweep_test.cc DEPS muster_service LABEL unit TIMEOUT 60)
muster_gtest(registry_bounds_test SOURCES registry_bounds_test.cc DEPS muster_service SQLite::SQLite3 LABEL unit TIMEOUT 60)
muster_gtest(sqlite_db_test SOURCES sqlite_db_test.cc DEPS muster_metrics SQLite::SQLite3 LABEL unit TIMEOUT 60)
# Agent routes on handler threads of their own (no queueing behind users).
muster_gtest(http_server_lanes_test SOURCES http_server_lanes_test.cc DEPS muster_service LABEL unit TIMEOUT 60)
# A real musterd: 32 concurrent stops beside healthy workers and escapees
# (setsid, double fork, background children) with and without cgroups; a
# second daemon on one state dir, a lost or emptied database, garbled rows;
# a full disk (state dir on an 8 MiB tmpfs in a mount namespace); 20,000
# finished records (snapshot pieces, lists in pages, RSS, DELETE, retention);
# an 8 MiB body.
muster_python_test(musterd_stop_test SCRIPT ${CMAKE_CURRENT_SOURCE_DIR}/musterd_stop_test.py LABEL integration TIMEOUT 300)
muster_python_test(musterd_state_test SCRIPT ${CMAKE_CURRENT_SOURCE_DIR}/musterd_state_test.py LABEL integration TIMEOUT 240)
muster_python_test(musterd_full_disk_test SCRIPT ${CMAKE_CURRENT_SOURCE_DIR}/musterd_full_disk_test.py LABEL integration TIMEOUT 180)
muster_python_test(musterd_records_test SCRIPT ${CMAKE_CURRENT_SOURCE_DIR}/musterd_records_test.py LABEL integration TIMEOUT 300)
muster_python_test(musterd_large_body_test SCRIPT ${CMAKE_CURRENT_SOURCE_DIR}/musterd_large_body_test.py LABEL integration TIMEOUT 120)
# What a running worker holds open: one kept heartbeat connection; musterd's
# open-files limit raised, the scripts' left as musterd was given it.
muster_python_test(musterd_agent_files_test SCRIPT ${CMAKE_CURRENT_SOURCE_DIR}/musterd_agent_files_test.py
  LABEL integration TIMEOUT 120)

# The heartbeat budget with real agents: the interval stretches past
# --heartbeat-rate, the loss timeout with it, and back when the fleet shrinks.
muster_python_test(musterd_heartbeat_budget_test SCRIPT ${CMAKE_CURRENT_SOURCE_DIR}/musterd_heartbeat_budget_test.py
  LABEL integration TIMEOUT 180)
