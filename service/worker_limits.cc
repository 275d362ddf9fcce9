#include "service/worker_limits.h"

#include <cstdio>

#include "api/agent_protocol.h"
#include "api/base/cgroup_limits.h"
#include "api/base/settings.h"

namespace muster::service {

std::vector<std::string> limit_warnings(double cpu, double memory_gb, bool on_this_host) {
  std::vector<std::string> out;
  if (!on_this_host) return out;
  const std::string root = base::Settings::environment().text(api::kEnvCgroupRoot).value;
  const auto mounts = base::CgroupMounts::for_limits(root);
  std::optional<std::filesystem::path> v2_parent;
  if (mounts.v2_own) v2_parent = *mounts.v2_own / "muster";
  const auto report = base::probe_limits(mounts, v2_parent, {"probe", cpu, memory_gb});
  auto number = [](double v) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.6g", v);
    return std::string(buf);
  };
  for (const auto& [resource, how] : report) {
    if (base::limit_enforced(how)) continue;
    const std::string ask = resource == base::kLimitCpu ? "cpu=" + number(cpu) : "memory=" + number(memory_gb) + " (GiB)";
    out.push_back(ask + " is recorded, not enforced, on this host: " + how.substr(std::string(base::kNotEnforced).size()) +
                  "; the worker may use more");
  }
  return out;
}

}  // namespace muster::service
