// api/agent_protocol.h: the agent's command line, its environment and each
// JSON body round-trip exactly, and bad input is refused with an error whose
// field names what was wrong.
#include "api/agent_protocol.h"

#include <gtest/gtest.h>

namespace {

using muster::api::ErrorCode;
using nlohmann::json;
namespace api = muster::api;

// The error's field is `field` and its message mentions it.
void expect_refused(const api::Status& s, const std::string& field) {
  ASSERT_FALSE(s.is_ok()) << "accepted; expected an error about " << field;
  EXPECT_EQ(s.code(), ErrorCode::kInvalidArgument);
  EXPECT_EQ(s.field(), field) << s.message();
  EXPECT_NE(s.message().find(field), std::string::npos) << s.message();
}

TEST(AgentArgv, RoundTripsScriptAndCode) {
  api::AgentCommand script;
  script.kernel = "bash";
  script.script = "/project/run job.sh";
  script.args = {"--", "--lr", "0.1", "", "a b"};
  auto argv = api::to_argv("/opt/muster-agent", script);
  EXPECT_EQ(argv.front(), "/opt/muster-agent");
  auto back = api::parse_agent_argv(argv);
  ASSERT_TRUE(back.is_ok()) << back.status().message();
  EXPECT_EQ(back->kernel, "bash");
  EXPECT_EQ(back->script, script.script);
  EXPECT_EQ(back->code, "");
  EXPECT_EQ(back->args, script.args);

  api::AgentCommand code;
  code.code = "!nvidia-smi\nprint('--script')";
  back = api::parse_agent_argv(api::to_argv("a", code));
  ASSERT_TRUE(back.is_ok()) << back.status().message();
  EXPECT_EQ(back->kernel, "python3");
  EXPECT_EQ(back->code, code.code);
  EXPECT_TRUE(back->script.empty());
  EXPECT_TRUE(back->args.empty());
  EXPECT_TRUE(back->python.empty());

  code.python = "/home/me/venv/bin/python";
  back = api::parse_agent_argv(api::to_argv("a", code));
  ASSERT_TRUE(back.is_ok()) << back.status().message();
  EXPECT_EQ(back->python, code.python);
}

TEST(AgentArgv, RefusesBadCommandLines) {
  expect_refused(api::parse_agent_argv({"a", "--kernel", "python3"}).status(), "--script");  // neither
  expect_refused(api::parse_agent_argv({"a", "--script", "/x.py", "--code", "1"}).status(), "--script");  // both
  expect_refused(api::parse_agent_argv({"a", "--script", "x.py"}).status(), "--script");  // relative
  expect_refused(api::parse_agent_argv({"a", "--kernel", "ruby", "--code", "1"}).status(), "--kernel");
  expect_refused(api::parse_agent_argv({"a", "--code"}).status(), "--code");  // no value
  expect_refused(api::parse_agent_argv({"a", "--code", ""}).status(), "--code");
  expect_refused(api::parse_agent_argv({"a", "--verbose", "--code", "1"}).status(), "--verbose");
  expect_refused(api::parse_agent_argv({"a", "--code", "1", "--python", "python3"}).status(), "--python");
}

api::AgentEnvironment full_env() {
  api::AgentEnvironment e;
  e.url = api::agent_url("10.1.2.3", 7878);
  e.worker_id = "a1b2c3d4e5";
  e.token = std::string(64, 't');
  e.master_ip = "10.1.2.3";
  e.heartbeat = std::chrono::milliseconds(250);
  e.reserve_port = true;
  e.cpu = 0.1;
  e.memory_gb = 1.0 / 3;
  e.orphan_timeout = std::chrono::milliseconds(1500);
  e.metrics_token = "m";
  e.project_dir = "/home/me/proj";
  e.gpu_devices = "0,2";
  return e;
}

TEST(AgentEnv, RoundTripsEveryVariable) {
  const auto e = full_env();
  const auto env = api::to_env(e);
  EXPECT_EQ(env.at("MUSTER_URL"), "http://10.1.2.3:7878");
  EXPECT_EQ(env.at("CUDA_VISIBLE_DEVICES"), "0,2");
  EXPECT_EQ(env.at("NVIDIA_VISIBLE_DEVICES"), "0,2");
  EXPECT_EQ(env.at("CDSW_ENGINE_ID"), e.worker_id);
  EXPECT_EQ(env.at("CDSW_PROJECT"), "proj");
  EXPECT_EQ(env.at("CDSW_CPU_MILLICORES"), "100");
  EXPECT_EQ(env.at("CDSW_MEMORY_MB"), "341");
  auto back = api::parse_agent_env(env);
  ASSERT_TRUE(back.is_ok()) << back.status().message();
  EXPECT_EQ(back->url, e.url);
  EXPECT_EQ(back->worker_id, e.worker_id);
  EXPECT_EQ(back->token, e.token);
  EXPECT_EQ(back->master_ip, e.master_ip);
  EXPECT_EQ(back->heartbeat, e.heartbeat);
  EXPECT_EQ(back->reserve_port, true);
  EXPECT_EQ(back->cpu, e.cpu);              // exactly: numbers are written so that they read back
  EXPECT_EQ(back->memory_gb, e.memory_gb);
  EXPECT_EQ(back->orphan_timeout, e.orphan_timeout);
  EXPECT_EQ(back->metrics_token, e.metrics_token);
  EXPECT_EQ(back->project_dir, e.project_dir);
  EXPECT_EQ(back->gpu_devices, e.gpu_devices);

  // The optional ones left out: no variable, and the defaults come back.
  api::AgentEnvironment minimal;
  minimal.url = "http://127.0.0.1:1";
  minimal.worker_id = "w";
  minimal.token = "t";
  const auto small = api::to_env(minimal);
  for (const char* absent : {"MUSTER_RESERVE_PORT", "MUSTER_ORPHAN_TIMEOUT_S", "MUSTER_METRICS_TOKEN",
                             "MUSTER_GPU_DEVICES", "CUDA_VISIBLE_DEVICES"}) {
    EXPECT_EQ(small.count(absent), 0u) << absent;
  }
  back = api::parse_agent_env(small);
  ASSERT_TRUE(back.is_ok()) << back.status().message();
  EXPECT_FALSE(back->reserve_port);
  EXPECT_FALSE(back->orphan_timeout.has_value());
  EXPECT_EQ(back->heartbeat, std::chrono::milliseconds(2000));
}

TEST(AgentEnv, RefusesBadVariablesNamingThem) {
  const auto good = api::to_env(full_env());
  auto with = [&good](const std::string& name, const std::optional<std::string>& value) {
    auto env = good;
    if (value) {
      env[name] = *value;
    } else {
      env.erase(name);
    }
    return api::parse_agent_env(env).status();
  };
  expect_refused(with("MUSTER_URL", std::nullopt), "MUSTER_URL");
  expect_refused(with("MUSTER_URL", "10.0.0.1:7878"), "MUSTER_URL");
  expect_refused(with("MUSTER_URL", "http://10.0.0.1"), "MUSTER_URL");
  expect_refused(with("MUSTER_URL", "http://10.0.0.1:70000"), "MUSTER_URL");
  expect_refused(with("MUSTER_WORKER_ID", std::nullopt), "MUSTER_WORKER_ID");
  expect_refused(with("MUSTER_AGENT_TOKEN", ""), "MUSTER_AGENT_TOKEN");
  expect_refused(with("MUSTER_HEARTBEAT_S", "0"), "MUSTER_HEARTBEAT_S");
  expect_refused(with("MUSTER_HEARTBEAT_S", "2s"), "MUSTER_HEARTBEAT_S");
  expect_refused(with("MUSTER_CPU", "-1"), "MUSTER_CPU");
  expect_refused(with("MUSTER_MEMORY_GB", "nan"), "MUSTER_MEMORY_GB");
  expect_refused(with("MUSTER_ORPHAN_TIMEOUT_S", "never"), "MUSTER_ORPHAN_TIMEOUT_S");
  expect_refused(with("MUSTER_RESERVE_PORT", "yes"), "MUSTER_RESERVE_PORT");
}

TEST(AgentJson, RoundTripsEachBody) {
  auto reg = api::registration_from_json(api::to_json(api::AgentRegistration{"10.0.0.7", 40001}));
  ASSERT_TRUE(reg.is_ok());
  EXPECT_EQ(reg->ip_address, "10.0.0.7");
  EXPECT_EQ(reg->port, 40001);
  reg = api::registration_from_json(api::to_json(api::AgentRegistration{"10.0.0.7", std::nullopt}));
  ASSERT_TRUE(reg.is_ok());
  EXPECT_FALSE(reg->port.has_value());
  // Unknown fields are ignored (api/openapi.yaml: a later agent may send more); 3.0 is an integer.
  reg = api::registration_from_json(json{{"ip_address", "1.2.3.4"}, {"port", 3.0}, {"later", 1}});
  ASSERT_TRUE(reg.is_ok());
  EXPECT_EQ(reg->port, 3);

  for (bool hold : {true, false}) {
    auto r = api::registered_from_json(api::to_json(api::AgentRegistered{hold}));
    ASSERT_TRUE(r.is_ok());
    EXPECT_EQ(r->hold, hold);
    EXPECT_FALSE(r->heartbeat.has_value());  // an older daemon's reply: keep MUSTER_HEARTBEAT_S
  }
  // The heartbeat budget's interval, in both replies (seconds on the wire).
  for (auto every : {std::chrono::milliseconds(10), std::chrono::milliseconds(2000),
                     std::chrono::milliseconds(12'345), std::chrono::milliseconds(3'600'000)}) {
    auto r = api::registered_from_json(api::to_json(api::AgentRegistered{true, every}));
    ASSERT_TRUE(r.is_ok()) << r.status().message();
    EXPECT_EQ(r->heartbeat, every);
    auto h = api::heartbeat_reply_from_json(api::to_json(api::AgentHeartbeatReply{every}));
    ASSERT_TRUE(h.is_ok()) << h.status().message();
    EXPECT_EQ(h->heartbeat, every);
  }
  EXPECT_EQ(api::to_json(api::AgentHeartbeatReply{std::chrono::milliseconds(4000)}), (json{{"heartbeat_s", 4.0}}));
  auto none = api::heartbeat_reply_from_json(json::object());  // {} from an older daemon
  ASSERT_TRUE(none.is_ok());
  EXPECT_FALSE(none->heartbeat.has_value());
  for (int code : {0, 1, 143, 255}) {
    auto e = api::exit_from_json(api::to_json(api::AgentExit{code}));
    ASSERT_TRUE(e.is_ok());
    EXPECT_EQ(e->exit_code, code);
  }
  api::Release rel;
  rel.env = {{"TF_CONFIG", "{\"cluster\":{}}"}, {"EMPTY", ""}};
  rel.files = {{"cluster.json", "{}\n"}};
  auto r = api::release_from_json(api::to_json(rel));
  ASSERT_TRUE(r.is_ok()) << r.status().message();
  EXPECT_EQ(r->env, rel.env);
  EXPECT_EQ(r->files, rel.files);
  EXPECT_TRUE(r->processes.empty());
  EXPECT_FALSE(api::to_json(rel).contains("processes"));  // one process: the field stays out
  rel.processes = {{{"RANK", "2"}, {"LOCAL_RANK", "0"}}, {{"RANK", "3"}, {"LOCAL_RANK", "1"}}};
  r = api::release_from_json(api::to_json(rel));
  ASSERT_TRUE(r.is_ok()) << r.status().message();
  EXPECT_EQ(r->processes, rel.processes);
  rel.interface_env = {"GLOO_SOCKET_IFNAME", "NCCL_SOCKET_IFNAME"};
  r = api::release_from_json(api::to_json(rel));
  ASSERT_TRUE(r.is_ok()) << r.status().message();
  EXPECT_EQ(r->interface_env, rel.interface_env);
  r = api::release_from_json(api::to_json(api::Release{}));
  ASSERT_TRUE(r.is_ok());
  EXPECT_TRUE(r->env.empty() && r->files.empty());
}

TEST(AgentJson, RefusesBadBodiesNamingTheField) {
  expect_refused(api::registration_from_json(json::array()).status(), "ip_address");
  expect_refused(api::registration_from_json(json::object()).status(), "ip_address");
  expect_refused(api::registration_from_json(json{{"ip_address", "10.0.0"}}).status(), "ip_address");
  expect_refused(api::registration_from_json(json{{"ip_address", 7}}).status(), "ip_address");
  expect_refused(api::registration_from_json(json{{"ip_address", "::1"}}).status(), "ip_address");
  for (const json& port : {json(0), json(65536), json(1.5), json("80")}) {
    expect_refused(api::registration_from_json(json{{"ip_address", "1.2.3.4"}, {"port", port}}).status(), "port");
  }
  expect_refused(api::registered_from_json(json{{"hold", "yes"}}).status(), "hold");
  expect_refused(api::registered_from_json(nullptr).status(), "hold");
  for (const json& every : {json(0), json(-1), json(0.001), json(3601), json("2"), json(nullptr)}) {
    expect_refused(api::registered_from_json(json{{"hold", false}, {"heartbeat_s", every}}).status(), "heartbeat_s");
    expect_refused(api::heartbeat_reply_from_json(json{{"heartbeat_s", every}}).status(), "heartbeat_s");
  }
  expect_refused(api::heartbeat_reply_from_json(json::array()).status(), "heartbeat_s");
  for (const json& code : {json(-1), json(256), json(1.5), json(nullptr), json("0")}) {
    expect_refused(api::exit_from_json(json{{"exit_code", code}}).status(), "exit_code");
  }
  expect_refused(api::exit_from_json(json::object()).status(), "exit_code");
  expect_refused(api::release_from_json(json{{"files", json::object()}}).status(), "env");
  expect_refused(api::release_from_json(json{{"env", json::object()}}).status(), "files");
  expect_refused(api::release_from_json(json{{"env", {{"A", 1}}}, {"files", json::object()}}).status(), "env");
  for (const char* name : {"../x", "a/b", ".", "..", ""}) {
    expect_refused(api::release_from_json(json{{"env", json::object()}, {"files", {{name, "x"}}}}).status(), "files");
  }
  const json empty = json::object();
  for (const json& processes : {json("x"), json::array({1}), json::array({empty}), json::array({json{{"env", 1}}}),
                                json::array({json{{"env", {{"A B", "1"}}}}}),
                                json::array({json{{"env", {{"A", 1}}}}})}) {
    expect_refused(api::release_from_json(json{{"env", empty}, {"files", empty}, {"processes", processes}}).status(),
                   "processes");
  }
  for (const json& names : {json("GLOO"), json::array({1}), json::array({"A B"}),
                            json(std::vector<std::string>(api::kMaxInterfaceEnv + 1, "A"))}) {
    expect_refused(api::release_from_json(json{{"env", empty}, {"files", empty}, {"interface_env", names}}).status(),
                   "interface_env");
  }
  json many = json::array();
  for (size_t i = 0; i <= api::kMaxReleaseProcesses; ++i) many.push_back(json{{"env", empty}});
  expect_refused(api::release_from_json(json{{"env", empty}, {"files", empty}, {"processes", many}}).status(),
                 "processes");
}


TEST(AgentJson, LimitsAndOutOfMemoryAreOptionalFields) {
  api::AgentRegistration reg{"10.0.0.7", std::nullopt,
                             {{"cpu", "enforced by cgroup v1"}, {"memory", "not enforced: no controller"}}};
  auto back = api::registration_from_json(api::to_json(reg));
  ASSERT_TRUE(back.is_ok()) << back.status().message();
  EXPECT_EQ(back->limits, reg.limits);
  // An older agent sends none; an older daemon's reader ignores them.
  EXPECT_FALSE(api::to_json(api::AgentRegistration{"10.0.0.7", std::nullopt}).contains("limits"));
  for (const json& bad : {json{{"cpu", 1}}, json{{"gpu", "enforced"}}, json{{"cpu", "maybe"}}, json(nullptr),
                          json::array()}) {
    expect_refused(api::registration_from_json(json{{"ip_address", "1.2.3.4"}, {"limits", bad}}).status(), "limits");
  }

  EXPECT_FALSE(api::to_json(api::AgentExit{137}).contains("out_of_memory"));
  auto e = api::exit_from_json(api::to_json(api::AgentExit{137, true}));
  ASSERT_TRUE(e.is_ok());
  EXPECT_TRUE(e->out_of_memory);
  EXPECT_FALSE(api::exit_from_json(json{{"exit_code", 1}})->out_of_memory);
  expect_refused(api::exit_from_json(json{{"exit_code", 1}, {"out_of_memory", "yes"}}).status(), "out_of_memory");
}

TEST(AgentEnv, LimitsEnforcedByAndTheTestCgroupRootRoundTrip) {
  api::AgentEnvironment e;
  e.url = "http://127.0.0.1:1";
  e.worker_id = "w";
  e.token = "t";
  EXPECT_EQ(api::to_env(e).count("MUSTER_LIMITS_ENFORCED_BY"), 0u);
  e.limits_enforced_by = "the pod";
  e.cgroup_root = "/tmp/fake-cgroup";
  auto back = api::parse_agent_env(api::to_env(e));
  ASSERT_TRUE(back.is_ok()) << back.status().message();
  EXPECT_EQ(back->limits_enforced_by, "the pod");
  EXPECT_EQ(back->cgroup_root, "/tmp/fake-cgroup");
}

// https: the daemon's pin and a CA file round-trip; a pin is read in any
// spelling (colons, upper case) and compared in one; a malformed one is
// refused naming the variable.
TEST(AgentEnv, TlsPinAndCaFileRoundTrip) {
  api::AgentEnvironment e;
  e.url = "https://10.0.0.1:7878";
  e.worker_id = "w";
  e.token = "t";
  EXPECT_EQ(api::to_env(e).count("MUSTER_TLS_FINGERPRINT"), 0u);
  e.tls_fingerprint = std::string(64, 'a');
  e.ca_file = "/etc/muster/ca.crt";
  auto env = api::to_env(e);
  auto back = api::parse_agent_env(env);
  ASSERT_TRUE(back.is_ok()) << back.status().message();
  EXPECT_EQ(back->url, "https://10.0.0.1:7878");
  EXPECT_EQ(back->tls_fingerprint, std::string(64, 'a'));
  EXPECT_EQ(back->ca_file, "/etc/muster/ca.crt");
  std::string spelled;
  for (int i = 0; i < 32; ++i) spelled += std::string(i ? ":" : "") + "AA";
  env["MUSTER_TLS_FINGERPRINT"] = spelled;
  EXPECT_EQ(api::parse_agent_env(env)->tls_fingerprint, std::string(64, 'a'));
  env["MUSTER_TLS_FINGERPRINT"] = "sha256-of-something";
  expect_refused(api::parse_agent_env(env).status(), "MUSTER_TLS_FINGERPRINT");
  EXPECT_EQ(api::agent_url("10.0.0.1", 7878, /*tls=*/true), "https://10.0.0.1:7878");
}

}  // namespace
