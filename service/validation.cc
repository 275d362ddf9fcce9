#include "service/validation.h"

#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <set>
#include <system_error>

#include "api/json_integer.h"
#include "api/kernel.h"

namespace muster::service {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

// As for clusters (api/cluster_request.cc): no host has more.
constexpr int kMaxGpus = 64;

api::Status check_fields(const json& body, const std::set<std::string>& allowed) {
  if (!body.is_object()) return api::invalid_argument("the request body must be a JSON object");
  for (const auto& item : body.items()) {
    if (!allowed.count(item.key())) {
      return api::invalid_argument("unknown field '" + item.key() + "'", item.key());
    }
  }
  return api::Status::ok();
}

bool has_nul(const std::string& s) { return s.find('\0') != std::string::npos; }

api::Status get_string(const json& body, const char* field, std::string* out) {
  if (!body.contains(field)) return api::Status::ok();
  const json& v = body.at(field);
  if (!v.is_string()) return api::invalid_argument(std::string(field) + " must be a string", field);
  *out = v.get<std::string>();
  if (has_nul(*out)) return api::invalid_argument(std::string(field) + " must not contain NUL characters", field);
  return api::Status::ok();
}

api::Status get_int(const json& body, const char* field, int* out) {
  if (!body.contains(field)) return api::Status::ok();
  const json& v = body.at(field);
  const auto n = api::json_integer(v);
  if (!n) return api::invalid_argument(std::string(field) + " must be an integer", field);
  // No llabs: it overflows for INT64_MIN, which then passed as 0 (found by tests/fuzz).
  if (*n < -1'000'000'000ll || *n > 1'000'000'000ll) {
    return api::invalid_argument(std::string(field) + " is out of range", field);
  }
  *out = static_cast<int>(*n);
  return api::Status::ok();
}

api::Status get_positive_number(const json& body, const char* field, double* out) {
  if (!body.contains(field)) return api::invalid_argument(std::string(field) + " is required", field);
  const json& v = body.at(field);
  if (!v.is_number()) return api::invalid_argument(std::string(field) + " must be a number", field);
  *out = v.get<double>();
  if (!std::isfinite(*out) || *out <= 0) {
    return api::invalid_argument(std::string(field) + " must be greater than 0", field);
  }
  return api::Status::ok();
}

api::Status get_bool(const json& body, const char* field, bool* out) {
  if (!body.contains(field)) return api::Status::ok();
  const json& v = body.at(field);
  if (!v.is_boolean()) return api::invalid_argument(std::string(field) + " must be true or false", field);
  *out = v.get<bool>();
  return api::Status::ok();
}

// ids: a list of strings, or of worker objects carrying "id" (SDK convenience).
api::Status get_ids(const json& body, std::vector<std::string>* out) {
  if (!body.contains("ids")) return api::Status::ok();
  const json& v = body.at("ids");
  if (!v.is_array()) return api::invalid_argument("ids must be a list of worker ids", "ids");
  for (const json& id : v) {
    if (id.is_object() && id.contains("id")) {
      if (!id.at("id").is_string()) return api::invalid_argument("ids must be a list of worker ids", "ids");
      out->push_back(id.at("id").get<std::string>());
    } else if (id.is_string()) {
      out->push_back(id.get<std::string>());
    } else {
      return api::invalid_argument("ids must be a list of worker ids", "ids");
    }
    if (out->back().empty() || has_nul(out->back())) return api::invalid_argument("empty or bad worker id", "ids");
  }
  return api::Status::ok();
}

}  // namespace

HostCapacity host_capacity() {
  HostCapacity h;
  h.cpus = static_cast<int>(::sysconf(_SC_NPROCESSORS_ONLN));
  std::ifstream meminfo("/proc/meminfo");
  std::string key;
  double kib = 0;
  while (meminfo >> key >> kib) {
    if (key == "MemTotal:") {
      h.memory_gb = kib / (1024.0 * 1024.0);
      break;
    }
    meminfo.ignore(1 << 10, '\n');
  }
  return h;
}

std::vector<std::string> resource_warnings(double cpu, double memory_gb, const std::optional<HostCapacity>& host) {
  std::vector<std::string> out;
  if (!host) return out;
  auto number = [](double v) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.6g", v);
    return std::string(buf);
  };
  if (host->cpus > 0 && cpu > host->cpus) {
    out.push_back("cpu=" + number(cpu) + " is more than this host's " + std::to_string(host->cpus) +
                  " CPUs: each worker gets at most what the host has, shared with the others");
  }
  if (host->memory_gb > 0 && memory_gb > host->memory_gb) {
    out.push_back("memory=" + number(memory_gb) + " (GB) is more than this host's " + number(host->memory_gb) +
                  " GB: a worker that uses it will be killed or swap");
  }
  return out;
}

bool is_env_name(const std::string& name) {
  if (name.empty()) return false;
  auto alpha = [](char c) { return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || c == '_'; };
  if (!alpha(name[0])) return false;
  for (char c : name) {
    if (!alpha(c) && !(c >= '0' && c <= '9')) return false;
  }
  return true;
}

api::Result<fs::path> resolve_script(const fs::path& project_dir, const std::string& script) {
  if (auto s = api::check_script_path(script, "script"); !s) return s;
  fs::path rel(script);
  std::error_code ec;
  const fs::path root = fs::canonical(project_dir, ec);
  if (ec) return api::internal_error("project directory " + project_dir.string() + " is not accessible");
  const fs::path resolved = fs::canonical(root / rel, ec);
  if (ec) {
    return api::invalid_argument("script '" + script + "' does not exist in the project directory " + root.string(),
                                 "script");
  }
  // Inside the project dir after following every symlink?
  auto r = root.begin();
  auto p = resolved.begin();
  for (; r != root.end(); ++r, ++p) {
    if (p == resolved.end() || *p != *r) {
      return api::invalid_argument("script '" + script + "' resolves to " + resolved.string() +
                                       ", outside the project directory",
                                   "script");
    }
  }
  if (!fs::is_regular_file(resolved, ec)) {
    return api::invalid_argument("script '" + script + "' is not a regular file", "script");
  }
  return resolved;
}

api::Result<api::LaunchRequest> parse_launch_request(const json& body, const ValidationOptions& options) {
  static const std::set<std::string> kFields = {"n",    "cpu",  "memory", "nvidia_gpu", "kernel",
                                                "script", "code", "env",    "args", "python"};
  if (auto s = check_fields(body, kFields); !s) return s;
  api::LaunchRequest req;
  if (!body.contains("n")) return api::invalid_argument("n is required", "n");
  if (auto s = get_int(body, "n", &req.n); !s) return s;
  if (req.n < 1 || req.n > options.max_workers) {
    return api::invalid_argument(
        "n must be between 1 and " + std::to_string(options.max_workers) + " (musterd --max-workers)", "n");
  }
  if (auto s = get_positive_number(body, "cpu", &req.cpu); !s) return s;
  if (auto s = get_positive_number(body, "memory", &req.memory); !s) return s;
  if (auto s = get_int(body, "nvidia_gpu", &req.nvidia_gpu); !s) return s;
  if (req.nvidia_gpu < 0 || req.nvidia_gpu > kMaxGpus) {
    return api::invalid_argument("nvidia_gpu must be in 0.." + std::to_string(kMaxGpus), "nvidia_gpu");
  }
  if (auto s = get_string(body, "kernel", &req.kernel); !s) return s;
  if (req.kernel != api::kKernelPython3 && req.kernel != api::kKernelBash && req.kernel != api::kKernelExecutable) {
    return api::invalid_argument("kernel must be one of python3, bash, executable (got '" + req.kernel + "')",
                                 "kernel");
  }
  if (auto s = get_string(body, "script", &req.script); !s) return s;
  if (auto s = get_string(body, "code", &req.code); !s) return s;
  if (req.script.empty() && req.code.empty()) {
    return api::invalid_argument("give either script (a file in the project directory) or code", "script");
  }
  if (!req.script.empty() && !req.code.empty()) {
    // cdsw runs the script and ignores the code; so do we, and say so.
    req.code.clear();
    req.warnings.push_back("both script and code were given: the script runs and code is ignored (as in cdsw)");
  }
  if (!req.code.empty() && req.kernel == api::kKernelExecutable) {
    return api::invalid_argument("code needs kernel python3 or bash", "code");
  }
  if (!req.script.empty()) {
    auto path = resolve_script(options.project_dir, req.script);
    if (!path) return path.status();
    req.script_path = path.value();
    if (req.kernel == api::kKernelExecutable && ::access(req.script_path.c_str(), X_OK) != 0) {
      return api::invalid_argument("script '" + req.script + "' is not executable (kernel executable)", "script");
    }
  }
  for (auto& w : resource_warnings(req.cpu, req.memory, options.host)) req.warnings.push_back(std::move(w));
  if (auto s = get_string(body, "python", &req.python); !s) return s;
  if (auto s = api::check_python(req.python, "python"); !s) return s;
  if (body.contains("env")) {
    const json& env = body.at("env");
    if (!env.is_object()) return api::invalid_argument("env must be an object of name -> string", "env");
    for (const auto& item : env.items()) {
      if (!is_env_name(item.key())) {
        return api::invalid_argument("env name '" + item.key() + "' must match [A-Za-z_][A-Za-z0-9_]*", "env");
      }
      if (!item.value().is_string()) {
        return api::invalid_argument("env value of '" + item.key() + "' must be a string", "env");
      }
      std::string value = item.value().get<std::string>();
      if (has_nul(value)) return api::invalid_argument("env value of '" + item.key() + "' contains NUL", "env");
      req.env[item.key()] = std::move(value);
    }
  }
  if (body.contains("args")) {
    const json& args = body.at("args");
    if (!args.is_array()) return api::invalid_argument("args must be a list of strings", "args");
    for (const json& a : args) {
      if (!a.is_string()) return api::invalid_argument("args must be a list of strings", "args");
      req.args.push_back(a.get<std::string>());
      if (has_nul(req.args.back())) return api::invalid_argument("args must not contain NUL characters", "args");
    }
  }
  return req;
}

api::Result<api::AwaitRequest> parse_await_request(const json& body) {
  if (auto s = check_fields(body, {"ids", "wait_for_completion", "timeout_seconds"}); !s) return s;
  api::AwaitRequest req;
  if (auto s = get_ids(body, &req.ids); !s) return s;
  if (auto s = get_bool(body, "wait_for_completion", &req.wait_for_completion); !s) return s;
  if (body.contains("timeout_seconds")) {
    const json& v = body.at("timeout_seconds");
    if (!v.is_number() || !std::isfinite(v.get<double>()) || v.get<double>() < 0) {
      return api::invalid_argument("timeout_seconds must be a number >= 0 (0: no timeout)", "timeout_seconds");
    }
    req.timeout_seconds = v.get<double>();
  }
  return req;
}

api::Result<api::StopRequest> parse_stop_request(const json& body) {
  if (body.is_null()) return api::StopRequest{};
  if (auto s = check_fields(body, {"ids"}); !s) return s;
  api::StopRequest req;
  if (auto s = get_ids(body, &req.ids); !s) return s;
  return req;
}

}  // namespace muster::service
