#include "workers/agent/limits.h"

#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>

namespace muster::workers::agent {

namespace {
bool write_file(const std::filesystem::path& path, const std::string& text) {
  std::ofstream out(path);
  out << text;
  out.flush();
  return static_cast<bool>(out);
}
}  // namespace

std::string apply_limits(const std::string& worker_id, double cpu, double memory_gb, pid_t pid) {
  namespace fs = std::filesystem;
  std::ostringstream what;
  what << "cpu=" << cpu << " memory=" << memory_gb << "GiB";
  const fs::path root = "/sys/fs/cgroup";
  std::error_code ec;
  if (!fs::exists(root / "cgroup.controllers", ec)) {
    return what.str() + " recorded, not enforced (no cgroup v2 at /sys/fs/cgroup)";
  }
  const fs::path group = root / ("muster-" + worker_id);
  fs::create_directory(group, ec);
  if (ec) return what.str() + " recorded, not enforced (cannot create " + group.string() + ")";
  const long period = 100000;
  const long quota = std::lround(cpu * period);
  const long long bytes = std::llround(memory_gb * 1024.0 * 1024.0 * 1024.0);
  const bool cpu_ok = write_file(group / "cpu.max", std::to_string(quota) + " " + std::to_string(period));
  const bool mem_ok = write_file(group / "memory.max", std::to_string(bytes));
  const bool moved = write_file(group / "cgroup.procs", std::to_string(pid));
  if (!moved) return what.str() + " recorded, not enforced (cannot join " + group.string() + ")";
  return what.str() + ": cpu " + (cpu_ok ? "enforced" : "not enforced") + ", memory " +
         (mem_ok ? "enforced" : "not enforced") + " by cgroup " + group.string();
}

}  // namespace muster::workers::agent
