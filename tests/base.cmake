# api/base/ (the floor): atomic files, processes, shell quoting. Real files
# and real processes, but each test takes well under a second.
muster_gtest(base_atomic_file_test SOURCES base_atomic_file_test.cc DEPS muster_base LABEL unit TIMEOUT 60)
muster_gtest(base_process_test SOURCES base_process_test.cc DEPS muster_base LABEL unit TIMEOUT 60)
muster_gtest(base_shell_quote_test SOURCES base_shell_quote_test.cc DEPS muster_base LABEL unit TIMEOUT 60)
muster_gtest(base_net_test SOURCES base_net_test.cc DEPS muster_base LABEL unit TIMEOUT 60)
muster_gtest(base_checkpoint_file_test SOURCES base_checkpoint_file_test.cc DEPS muster_base LABEL unit TIMEOUT 60)
# The capped, rotating log file (worker and cluster logs).
muster_gtest(base_rotating_log_test SOURCES base_rotating_log_test.cc DEPS muster_base LABEL unit TIMEOUT 60)
# The one settings reader (environment, --backend-opt, query) and the one thread-pool type.
# It also runs tests/settings_dialect.json, the cases the Python reader (settings_dialect_test) runs.
muster_gtest(base_settings_test SOURCES base_settings_test.cc DEPS muster_base nlohmann_json::nlohmann_json
  LABEL unit TIMEOUT 60)
muster_python_test(settings_dialect_test SCRIPT ${CMAKE_CURRENT_SOURCE_DIR}/settings_dialect_test.py LABEL unit TIMEOUT 60)
# The one way to run a program and keep its output.
muster_gtest(base_run_capture_test SOURCES base_run_capture_test.cc DEPS muster_base LABEL unit TIMEOUT 60)
muster_gtest(base_task_queue_test SOURCES base_task_queue_test.cc DEPS muster_base LABEL unit TIMEOUT 60)
# A worker's cpu/memory limits on both cgroup layouts, against a fake cgroup root.
muster_gtest(base_cgroup_limits_test SOURCES base_cgroup_limits_test.cc DEPS muster_base LABEL unit TIMEOUT 60)
