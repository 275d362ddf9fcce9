#include "service/validation.h"

#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <set>
#include <system_error>

#include "api/body_reader.h"
#include "api/json_integer.h"
#include "api/kernel.h"
#include "service/script_path.h"
#include "service/worker_limits.h"

namespace muster::service {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

// As for clusters (api/cluster_request.cc): no host has more.
constexpr int kMaxGpus = 64;

bool has_nul(const std::string& s) { return s.find('\0') != std::string::npos; }

// ids: a list of strings, or of worker objects carrying "id" (SDK convenience).
api::Status get_ids(const api::BodyReader& in, std::vector<std::string>* out) {
  if (!in.has("ids")) return api::Status::ok();
  const json& v = in.at("ids");
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

// Every body is read with the one body reader (api/body_reader.h); null is
// of the wrong type in these bodies, as the document says.
api::Result<api::LaunchRequest> parse_launch_request(const json& body, const ValidationOptions& options) {
  static const std::set<std::string> kFields = {"n",    "cpu",  "memory", "nvidia_gpu", "kernel",
                                                "script", "code", "env",    "args", "python"};
  auto reader = api::BodyReader::of(body, kFields);
  if (!reader) return reader.status();
  const api::BodyReader& in = reader.value();
  api::LaunchRequest req;
  if (auto s = in.required("n"); !s) return s;
  if (!api::json_integer(in.at("n"))) return api::invalid_argument("n must be an integer", "n");
  if (auto s = in.integer("n", 1, options.max_workers, &req.n); !s) {
    return api::invalid_argument(
        "n must be between 1 and " + std::to_string(options.max_workers) + " (musterd --max-workers)", "n");
  }
  for (const char* field : {"cpu", "memory"}) {
    if (auto s = in.required(field); !s) return s;
  }
  if (auto s = in.number("cpu", false, &req.cpu); !s) return s;
  if (auto s = in.number("memory", false, &req.memory); !s) return s;
  if (auto s = in.integer("nvidia_gpu", 0, kMaxGpus, &req.nvidia_gpu); !s) return s;
  if (auto s = in.string("kernel", &req.kernel); !s) return s;
  if (req.kernel != api::kKernelPython3 && req.kernel != api::kKernelBash && req.kernel != api::kKernelExecutable) {
    return api::invalid_argument("kernel must be one of python3, bash, executable (got '" + req.kernel + "')",
                                 "kernel");
  }
  if (auto s = in.string("script", &req.script); !s) return s;
  if (auto s = in.string("code", &req.code); !s) return s;
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
  for (auto& w : limit_warnings(req.cpu, req.memory, options.host.has_value())) req.warnings.push_back(std::move(w));
  if (auto s = in.string("python", &req.python); !s) return s;
  if (auto s = api::check_python(req.python, "python"); !s) return s;
  if (auto s = in.env("env", &req.env); !s) return s;
  if (auto s = in.strings("args", &req.args); !s) return s;
  return req;
}

api::Result<api::AwaitRequest> parse_await_request(const json& body) {
  auto reader = api::BodyReader::of(body, {"ids", "wait_for_completion", "timeout_seconds"});
  if (!reader) return reader.status();
  const api::BodyReader& in = reader.value();
  api::AwaitRequest req;
  if (auto s = get_ids(in, &req.ids); !s) return s;
  if (auto s = in.boolean("wait_for_completion", &req.wait_for_completion); !s) return s;
  if (auto s = in.number("timeout_seconds", true, &req.timeout_seconds); !s) {
    return api::invalid_argument("timeout_seconds must be a number >= 0 (0: no timeout)", "timeout_seconds");
  }
  return req;
}

api::Result<api::StopRequest> parse_stop_request(const json& body) {
  if (body.is_null()) return api::StopRequest{};
  auto reader = api::BodyReader::of(body, {"ids"});
  if (!reader) return reader.status();
  api::StopRequest req;
  if (auto s = get_ids(reader.value(), &req.ids); !s) return s;
  return req;
}

}  // namespace muster::service
