#include "api/agent_protocol.h"

#include <arpa/inet.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "api/base/settings.h"
#include "api/json_integer.h"
#include "clusterspec/names.h"

extern char** environ;

namespace muster::api {

using nlohmann::json;

namespace {

// The shortest text that reads back as the same double.
std::string format_number(double v) {
  char buf[64];
  for (int precision = 1; precision <= 17; ++precision) {
    std::snprintf(buf, sizeof buf, "%.*g", precision, v);
    if (std::strtod(buf, nullptr) == v) break;
  }
  return buf;
}

std::string format_seconds(std::chrono::milliseconds d) { return format_number(d.count() / 1000.0); }

bool is_ipv4(const std::string& s) {
  in_addr a{};
  return ::inet_pton(AF_INET, s.c_str(), &a) == 1;
}

// http(s)://host:port[/...] with a port in 1..65535.
bool is_agent_url(const std::string& url) {
  const std::string prefix = url.compare(0, 8, "https://") == 0 ? "https://" : "http://";
  if (url.compare(0, prefix.size(), prefix) != 0) return false;
  const std::string authority = url.substr(prefix.size(), url.find('/', prefix.size()) - prefix.size());
  const auto colon = authority.rfind(':');
  if (colon == std::string::npos || colon == 0) return false;
  const std::string port = authority.substr(colon + 1);
  if (port.empty() || port.size() > 5 || port.find_first_not_of("0123456789") != std::string::npos) return false;
  const int p = std::atoi(port.c_str());
  return p >= 1 && p <= 65535;
}

Result<std::map<std::string, std::string>> string_map(const json& j, const char* field) {
  if (!j.contains(field)) return invalid_argument(std::string(field) + " is required", field);
  const json& v = j.at(field);
  if (!v.is_object()) return invalid_argument(std::string(field) + " must be an object of strings", field);
  std::map<std::string, std::string> out;
  for (const auto& [k, value] : v.items()) {
    if (!value.is_string()) {
      return invalid_argument(std::string(field) + "." + k + " must be a string", field);
    }
    out[k] = value.get<std::string>();
  }
  return out;
}

// Blames the body's first required field, as a missing field would.
Status require_object(const json& j, const char* what, const char* field) {
  if (!j.is_object()) return invalid_argument(std::string(what) + " must be a JSON object with " + field, field);
  return Status::ok();
}

}  // namespace

std::vector<std::string> to_argv(const std::string& agent_path, const AgentCommand& c) {
  std::vector<std::string> argv = {agent_path, "--kernel", c.kernel};
  if (!c.code.empty()) {
    argv.insert(argv.end(), {"--code", c.code});
  } else {
    argv.insert(argv.end(), {"--script", c.script});
  }
  if (!c.python.empty()) argv.insert(argv.end(), {"--python", c.python});
  argv.push_back("--");
  argv.insert(argv.end(), c.args.begin(), c.args.end());
  return argv;
}

Result<AgentCommand> parse_agent_argv(const std::vector<std::string>& argv) {
  AgentCommand c;
  bool script = false, code = false;
  for (size_t i = 1; i < argv.size(); ++i) {
    const std::string& a = argv[i];
    if (a == "--") {
      c.args.assign(argv.begin() + static_cast<long>(i) + 1, argv.end());
      break;
    }
    if (a != "--kernel" && a != "--script" && a != "--code" && a != "--python") {
      return invalid_argument("unknown argument '" + a + "' (expected --kernel, --script, --code, --python or --)", a);
    }
    if (i + 1 >= argv.size()) return invalid_argument(a + " needs a value", a);
    const std::string& value = argv[++i];
    if (a == "--kernel") {
      if (value != kKernelPython3 && value != kKernelBash && value != kKernelExecutable) {
        return invalid_argument("--kernel must be python3, bash or executable, not '" + value + "'", a);
      }
      c.kernel = value;
    } else if (a == "--script") {
      if (value.empty() || value.front() != '/') {
        return invalid_argument("--script must be an absolute path, not '" + value + "'", a);
      }
      c.script = value;
      script = true;
    } else if (a == "--python") {
      if (value.empty() || value.front() != '/') {
        return invalid_argument("--python must be an absolute path, not '" + value + "'", a);
      }
      c.python = value;
    } else {
      if (value.empty()) return invalid_argument("--code must not be empty", a);
      c.code = value;
      code = true;
    }
  }
  if (script == code) return invalid_argument("give exactly one of --script and --code", "--script");
  return c;
}

std::string agent_url(const std::string& host, int port, bool tls) {
  return (tls ? "https://" : "http://") + host + ":" + std::to_string(port);
}

std::map<std::string, std::string> to_env(const AgentEnvironment& e) {
  std::map<std::string, std::string> env = {
      {kEnvUrl, e.url},
      {kEnvWorkerId, e.worker_id},
      {kEnvAgentToken, e.token},
      {kEnvMasterIp, e.master_ip},
      {kEnvHeartbeatSeconds, format_seconds(e.heartbeat)},
      {kEnvCpu, format_number(e.cpu)},
      {kEnvMemoryGb, format_number(e.memory_gb)},
      {kEnvProjectDir, e.project_dir},
      {kEnvStopGraceSeconds, format_seconds(e.stop_grace)},
      // cdsw's engine variables.
      {"CDSW_ENGINE_ID", e.worker_id},
      {"CDSW_MASTER_IP", e.master_ip},
      {"CML_MASTER_IP", e.master_ip},
      {"CDSW_PROJECT", e.project_dir.substr(e.project_dir.find_last_of('/') + 1)},
      {"CDSW_CPU_MILLICORES", std::to_string(std::lround(e.cpu * 1000))},
      {"CDSW_MEMORY_MB", std::to_string(std::lround(e.memory_gb * 1024))},
  };
  if (e.reserve_port) env[kEnvReservePort] = "1";
  if (e.orphan_timeout) env[kEnvOrphanTimeoutSeconds] = format_seconds(*e.orphan_timeout);
  if (!e.metrics_token.empty()) env[kEnvMetricsToken] = e.metrics_token;
  if (!e.cgroup.empty()) env[kEnvCgroup] = e.cgroup;
  if (!e.limits_enforced_by.empty()) env[kEnvLimitsEnforcedBy] = e.limits_enforced_by;
  if (!e.cgroup_root.empty()) env[kEnvCgroupRoot] = e.cgroup_root;
  if (!e.tls_fingerprint.empty()) env[kEnvTlsFingerprint] = e.tls_fingerprint;
  if (!e.ca_file.empty()) env[kEnvCaFile] = e.ca_file;
  if (!e.gpu_devices.empty()) {
    env[kEnvGpuDevices] = e.gpu_devices;
    env["CUDA_VISIBLE_DEVICES"] = e.gpu_devices;
    env["NVIDIA_VISIBLE_DEVICES"] = e.gpu_devices;
  }
  return env;
}

Result<AgentEnvironment> parse_agent_env(const std::map<std::string, std::string>& env) {
  // One reader for every variable (api/base/settings.h): a bad value is an
  // error naming the variable.
  const auto settings = base::Settings::of(env, "environment variable");
  // Seconds > 0 (or >= 0); unset: `fallback`.
  auto seconds = [&settings](const char* name, bool positive, double fallback) -> Result<double> {
    auto v = settings.number(name, fallback, 0, 1e9);
    if (!v.ok()) return invalid_argument(v.error, name);
    if (positive && v.given && v.value <= 0) {
      return invalid_argument(settings.describe(name) + " must be a number > 0, not '" + *settings.raw(name) + "'",
                              name);
    }
    return v.value;
  };
  auto millis = [](double s) { return std::chrono::milliseconds(std::llround(s * 1000)); };
  AgentEnvironment e;
  e.url = settings.text(kEnvUrl).value;
  if (!is_agent_url(e.url)) {
    return invalid_argument(std::string(kEnvUrl) + " must be http://host:port or https://host:port, not '" + e.url +
                                "'",
                            kEnvUrl);
  }
  if (const std::string pin = settings.text(kEnvTlsFingerprint).value; !pin.empty()) {
    const auto parsed = base::parse_fingerprint(pin);
    if (!parsed) {
      return invalid_argument(std::string(kEnvTlsFingerprint) +
                                  " must be the SHA-256 fingerprint of musterd's certificate (64 hex digits, colons "
                                  "allowed), not '" + pin + "'",
                              kEnvTlsFingerprint);
    }
    e.tls_fingerprint = *parsed;
  }
  e.ca_file = settings.text(kEnvCaFile).value;
  e.worker_id = settings.text(kEnvWorkerId).value;
  if (e.worker_id.empty()) return invalid_argument(std::string(kEnvWorkerId) + " is required", kEnvWorkerId);
  e.token = settings.text(kEnvAgentToken).value;
  if (e.token.empty()) return invalid_argument(std::string(kEnvAgentToken) + " is required", kEnvAgentToken);
  e.master_ip = settings.text(kEnvMasterIp).value;
  const auto heartbeat = seconds(kEnvHeartbeatSeconds, true, 2);
  if (!heartbeat) return heartbeat.status();
  e.heartbeat = millis(heartbeat.value());
  const auto reserve = settings.boolean(kEnvReservePort, false);
  if (!reserve.ok()) return invalid_argument(reserve.error, kEnvReservePort);
  e.reserve_port = reserve.value;
  const auto cpu = seconds(kEnvCpu, false, 0);
  if (!cpu) return cpu.status();
  e.cpu = cpu.value();
  const auto memory = seconds(kEnvMemoryGb, false, 0);
  if (!memory) return memory.status();
  e.memory_gb = memory.value();
  if (settings.raw(kEnvOrphanTimeoutSeconds)) {
    const auto orphan = seconds(kEnvOrphanTimeoutSeconds, true, 0);
    if (!orphan) return orphan.status();
    e.orphan_timeout = millis(orphan.value());
  }
  const auto grace = seconds(kEnvStopGraceSeconds, false, e.stop_grace.count() / 1000.0);
  if (!grace) return grace.status();
  e.stop_grace = millis(grace.value());
  e.metrics_token = settings.text(kEnvMetricsToken).value;
  e.project_dir = settings.text(kEnvProjectDir).value;
  e.gpu_devices = settings.text(kEnvGpuDevices).value;
  e.cgroup = settings.text(kEnvCgroup).value;
  e.limits_enforced_by = settings.text(kEnvLimitsEnforcedBy).value;
  e.cgroup_root = settings.text(kEnvCgroupRoot).value;
  return e;
}

std::map<std::string, std::string> process_env() {
  std::map<std::string, std::string> out;
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) {
    const std::string kv(*e);
    const auto eq = kv.find('=');
    if (eq != std::string::npos) out.emplace(kv.substr(0, eq), kv.substr(eq + 1));
  }
  return out;
}

json to_json(const AgentRegistration& r) {
  json j = {{"ip_address", r.ip_address}};
  if (r.port) j["port"] = *r.port;
  if (!r.limits.empty()) j["limits"] = r.limits;
  return j;
}

Result<AgentRegistration> registration_from_json(const json& j) {
  if (auto s = require_object(j, "the registration", "ip_address"); !s) return s;
  AgentRegistration r;
  if (!j.contains("ip_address") || !j["ip_address"].is_string() || !is_ipv4(j["ip_address"].get<std::string>())) {
    return invalid_argument("ip_address must be an IPv4 address", "ip_address");
  }
  r.ip_address = j["ip_address"].get<std::string>();
  if (j.contains("port") && !j["port"].is_null()) {
    const auto p = json_integer(j["port"]);
    if (!p || *p < 1 || *p > 65535) return invalid_argument("port must be an integer in 1..65535", "port");
    r.port = static_cast<int>(*p);
  }
  if (j.contains("limits")) {
    const char* form = "limits must be an object {cpu, memory} of \"enforced ...\" or \"not enforced: ...\" texts";
    if (!j["limits"].is_object()) return invalid_argument(form, "limits");
    for (const auto& [resource, how] : j["limits"].items()) {
      const bool known = resource == "cpu" || resource == "memory";
      const bool text = how.is_string() && (how.get<std::string>().rfind("enforced", 0) == 0 ||
                                            how.get<std::string>().rfind("not enforced: ", 0) == 0);
      if (!known || !text) return invalid_argument(form, "limits");
      r.limits[resource] = how.get<std::string>();
    }
  }
  return r;
}

namespace {

void put_interval(json& j, const std::optional<std::chrono::milliseconds>& interval) {
  if (interval) j["heartbeat_s"] = interval->count() / 1000.0;
}

// heartbeat_s of a reply: absent, or seconds within the bounds.
Status read_interval(const json& j, std::optional<std::chrono::milliseconds>* out) {
  if (!j.contains("heartbeat_s")) return Status::ok();
  const auto& v = j["heartbeat_s"];
  const double s = v.is_number() ? v.get<double>() : -1;
  const auto ms = std::chrono::milliseconds(std::llround(s * 1000));
  if (!v.is_number() || !std::isfinite(s) || ms < kMinHeartbeatInterval || ms > kMaxHeartbeatInterval) {
    return invalid_argument("heartbeat_s must be a number of seconds from " +
                                format_seconds(kMinHeartbeatInterval) + " to " + format_seconds(kMaxHeartbeatInterval),
                            "heartbeat_s");
  }
  *out = ms;
  return Status::ok();
}

}  // namespace

json to_json(const AgentRegistered& r) {
  json j = {{"hold", r.hold}};
  put_interval(j, r.heartbeat);
  return j;
}

Result<AgentRegistered> registered_from_json(const json& j) {
  if (auto s = require_object(j, "the registration reply", "hold"); !s) return s;
  if (!j.contains("hold") || !j["hold"].is_boolean()) return invalid_argument("hold must be a boolean", "hold");
  AgentRegistered r{j["hold"].get<bool>()};
  if (auto s = read_interval(j, &r.heartbeat); !s) return s;
  return r;
}

json to_json(const AgentHeartbeatReply& r) {
  json j = json::object();
  put_interval(j, r.heartbeat);
  return j;
}

Result<AgentHeartbeatReply> heartbeat_reply_from_json(const json& j) {
  if (auto s = require_object(j, "the heartbeat reply", "heartbeat_s"); !s) return s;
  AgentHeartbeatReply r;
  if (auto s = read_interval(j, &r.heartbeat); !s) return s;
  return r;
}

json to_json(const AgentExit& e) {
  json j = {{"exit_code", e.exit_code}};
  if (e.out_of_memory) j["out_of_memory"] = true;
  return j;
}

Result<AgentExit> exit_from_json(const json& j) {
  if (auto s = require_object(j, "the exit report", "exit_code"); !s) return s;
  const auto code = j.contains("exit_code") ? json_integer(j["exit_code"]) : std::nullopt;
  if (!code || *code < 0 || *code > 255) {
    return invalid_argument("exit_code must be an integer in 0..255 (128+signal when killed)", "exit_code");
  }
  AgentExit e{static_cast<int>(*code)};
  if (j.contains("out_of_memory")) {
    if (!j["out_of_memory"].is_boolean()) return invalid_argument("out_of_memory must be a boolean", "out_of_memory");
    e.out_of_memory = j["out_of_memory"].get<bool>();
  }
  return e;
}

json to_json(const Release& r) {
  json j = {{"env", r.env}, {"files", r.files}};
  if (!r.processes.empty()) {
    j["processes"] = json::array();
    for (const auto& env : r.processes) j["processes"].push_back({{"env", env}});
  }
  if (!r.interface_env.empty()) j["interface_env"] = r.interface_env;
  return j;
}

Result<Release> release_from_json(const json& j) {
  if (auto s = require_object(j, "the release", "env"); !s) return s;
  Release r;
  auto env = string_map(j, "env");
  if (!env) return env.status();
  r.env = std::move(env).value();
  auto files = string_map(j, "files");
  if (!files) return files.status();
  r.files = std::move(files).value();
  if (j.contains("processes") && !j["processes"].is_null()) {
    const json& list = j["processes"];
    if (!list.is_array()) return invalid_argument("processes must be a list of {\"env\": {...}}", "processes");
    if (list.size() > kMaxReleaseProcesses) {
      return invalid_argument("processes has " + std::to_string(list.size()) + " entries, more than " +
                                  std::to_string(kMaxReleaseProcesses), "processes");
    }
    for (const auto& entry : list) {
      if (!entry.is_object()) return invalid_argument("processes must be a list of {\"env\": {...}}", "processes");
      auto env = string_map(entry, "env");
      if (!env) return invalid_argument("processes: " + env.status().message(), "processes");
      r.processes.push_back(std::move(env).value());
    }
  }
  if (j.contains("interface_env") && !j["interface_env"].is_null()) {
    const json& names = j["interface_env"];
    if (!names.is_array()) return invalid_argument("interface_env must be a list of variable names", "interface_env");
    for (const auto& name : names) {
      if (!name.is_string()) return invalid_argument("interface_env must be a list of variable names", "interface_env");
      r.interface_env.push_back(name.get<std::string>());
    }
  }
  if (auto s = validate_release(r); !s) return s;
  return r;
}

Status validate_release(const Release& r) {
  for (const auto& [name, content] : r.files) {
    if (name.empty() || name.find('/') != std::string::npos || name == "." || name == "..") {
      return invalid_argument(
          "files: release file name '" + name + "' must be a plain file name (no '/', not . or ..)", "files");
    }
  }
  if (r.processes.size() > kMaxReleaseProcesses) {
    return invalid_argument("processes has " + std::to_string(r.processes.size()) + " entries, more than " +
                                std::to_string(kMaxReleaseProcesses), "processes");
  }
  for (const auto& env : r.processes) {
    for (const auto& [name, value] : env) {
      if (!clusterspec::is_valid_env_name(name)) {
        return invalid_argument("processes: variable name '" + name + "' must match [A-Za-z_][A-Za-z0-9_]*",
                                "processes");
      }
    }
  }
  if (r.interface_env.size() > kMaxInterfaceEnv) {
    return invalid_argument("interface_env has " + std::to_string(r.interface_env.size()) + " names, more than " +
                                std::to_string(kMaxInterfaceEnv), "interface_env");
  }
  for (const auto& name : r.interface_env) {
    if (!clusterspec::is_valid_env_name(name)) {
      return invalid_argument("interface_env: '" + name + "' must match [A-Za-z_][A-Za-z0-9_]*", "interface_env");
    }
  }
  return Status::ok();
}

}  // namespace muster::api
