# workers/: the agent's pure parts (unit), the local backend with
# real processes and a real agent's hold/release round trip (integration).
muster_gtest(agent_test SOURCES agent_test.cc DEPS muster_agent_lib LABEL unit TIMEOUT 60)
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
