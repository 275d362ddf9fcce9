# workers/: the agent's pure parts (unit), the local backend with
# real processes and a real agent's hold/release round trip (integration).
muster_gtest(agent_test SOURCES agent_test.cc DEPS muster_agent_lib LABEL unit TIMEOUT 60)
muster_gtest(agent_limits_test SOURCES agent_limits_test.cc DEPS muster_agent_lib LABEL unit TIMEOUT 60)
# The agent protocol (api/agent_protocol.h) both sides use.
muster_gtest(agent_protocol_test SOURCES agent_protocol_test.cc DEPS muster_api LABEL unit TIMEOUT 60)
muster_gtest(local_backend_test SOURCES local_backend_test.cc DEPS muster_workers_local LABEL integration TIMEOUT 120)
muster_gtest(agent_release_test SOURCES agent_release_test.cc DEPS muster_service cpprestsdk::cpprest LABEL integration TIMEOUT 120)
add_dependencies(agent_release_test muster_agent)
# An agent whose daemon refuses its token (401/403) stops its
# script and exits.
muster_python_test(agent_unauthorized_test SCRIPT ${CMAKE_CURRENT_SOURCE_DIR}/agent_unauthorized_test.py
  LABEL integration TIMEOUT 60)
# Log capture: its protocol, and the real relay (muster-agent --log-relay)
# under a fast writer (512 MB through a 1 MiB cap).
muster_gtest(agent_log_relay_test SOURCES agent_log_relay_test.cc DEPS muster_api muster_base LABEL unit TIMEOUT 120)
add_dependencies(agent_log_relay_test muster_agent)
# Workers' cpu/memory limits end to end (cgroup v1 or v2, whichever this host
# offers): an out-of-memory kill named as such, half a core for cpu=0.5, a
# launch warning where no controller exists, no cgroup left behind. Exit 77:
# the host has no usable controller (a skip, with the reason in the output).
muster_python_test(limits_integration_test SCRIPT ${CMAKE_CURRENT_SOURCE_DIR}/limits_integration_test.py
  LABEL integration TIMEOUT 240)
set_tests_properties(limits_integration_test PROPERTIES SKIP_RETURN_CODE 77 RUN_SERIAL TRUE)
# api/base/cgroup_limits.h against the real kernel: each layout in its own
# entry, skipped (GTEST_SKIP, with the reason) where this host lacks it.
add_executable(cgroup_limits_kernel_test cgroup_limits_kernel_test.cc)
muster_target_defaults(cgroup_limits_kernel_test)
target_link_libraries(cgroup_limits_kernel_test PRIVATE muster_base GTest::gtest GTest::gtest_main)
foreach(layout v1 v2)
  string(TOUPPER ${layout} suite)
  add_test(NAME cgroup_limits_${layout}_test COMMAND cgroup_limits_kernel_test --gtest_filter=Cgroup${suite}.*)
  set_tests_properties(cgroup_limits_${layout}_test PROPERTIES LABELS integration TIMEOUT 60 RUN_SERIAL TRUE
    SKIP_REGULAR_EXPRESSION "\\[  SKIPPED \\]")
endforeach()
# It starts container-backend workers too.
set_tests_properties(limits_integration_test PROPERTIES RESOURCE_LOCK container_network)
# Every backend held to the Backend contract (workers/backend.h), one binary:
# the fake, the Kubernetes and Slurm backends over their fakes (unit), the
# local backend with real processes (integration: it forks).
add_executable(backend_contract_test backend_contract_test.cc)
muster_target_defaults(backend_contract_test)
target_link_libraries(backend_contract_test PRIVATE muster_workers_local muster_workers_kubernetes muster_workers_slurm
  muster_base
  GTest::gtest GTest::gtest_main)
add_test(NAME backend_contract_test COMMAND backend_contract_test --gtest_filter=-BackendContract/Local.*)
add_test(NAME backend_contract_local_test COMMAND backend_contract_test --gtest_filter=BackendContract/Local.*)
set_tests_properties(backend_contract_test PROPERTIES LABELS unit TIMEOUT 60)
set_tests_properties(backend_contract_local_test PROPERTIES LABELS integration TIMEOUT 120)
