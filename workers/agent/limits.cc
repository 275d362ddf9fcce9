#include "workers/agent/limits.h"

#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>

namespace muster::workers::agent {

namespace {
bool write_file(const std::filesystem::path& path, const std::string& text) {
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) return false;  // the controller is not enabled there
  std::ofstream out(path);
  out << text;
  out.flush();
  return static_cast<bool>(out);
}
}  // namespace

std::string apply_limits(const base::Cgroup& cgroup, double cpu, double memory_gb) {
  std::ostringstream what;
  what << "cpu=" << cpu << " memory=" << memory_gb << "GiB";
  if (!cgroup.valid()) return what.str() + " recorded, not enforced (the worker has no cgroup)";
  const long period = 100000;
  const long quota = std::lround(cpu * period);
  const long long bytes = std::llround(memory_gb * 1024.0 * 1024.0 * 1024.0);
  const bool cpu_ok = write_file(cgroup.path() / "cpu.max", std::to_string(quota) + " " + std::to_string(period));
  const bool mem_ok = write_file(cgroup.path() / "memory.max", std::to_string(bytes));
  return what.str() + ": cpu " + (cpu_ok ? "enforced" : "not enforced") + ", memory " +
         (mem_ok ? "enforced" : "not enforced") + " by cgroup " + cgroup.path().string();
}

}  // namespace muster::workers::agent
