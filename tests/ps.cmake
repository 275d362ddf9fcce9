# runtime/ps: parameter-server mode. Unit tests run PS tasks in-process on
# 127.0.0.1 (ephemeral ports) with worker threads; the integration test runs
# real muster-ps processes configured through TF_CONFIG.
muster_gtest(ps_protocol_test SOURCES ps_protocol_test.cc DEPS muster_ps LABEL unit TIMEOUT 60)
muster_gtest(ps_sync_test SOURCES ps_sync_test.cc DEPS muster_ps LABEL unit TIMEOUT 120)
muster_gtest(ps_hostile_test SOURCES ps_hostile_test.cc DEPS muster_ps LABEL unit TIMEOUT 120)
muster_gtest(ps_fault_test SOURCES ps_fault_test.cc DEPS muster_ps LABEL unit TIMEOUT 120)
muster_gtest(ps_process_test SOURCES ps_process_test.cc DEPS muster_ps LABEL integration TIMEOUT 120)
add_dependencies(ps_process_test muster_ps_server)
