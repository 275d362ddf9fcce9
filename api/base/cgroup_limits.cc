#include "api/base/cgroup_limits.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstring>
#include <fstream>
#include <set>
#include <sstream>
#include <thread>

namespace muster::base {

namespace fs = std::filesystem;

namespace {

constexpr long kCpuPeriodUs = 100000;
constexpr long kMinCpuQuotaUs = 1000;  // the kernel's floor for cfs_quota_us

bool present(const fs::path& path) {
  std::error_code ec;
  return fs::exists(path, ec);
}

std::string read_text(const fs::path& path) {
  std::ifstream in(path);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

std::set<std::string> words(const std::string& text) {
  std::istringstream in(text);
  std::set<std::string> out;
  for (std::string w; in >> w;) out.insert(w);
  return out;
}

std::string joined(const std::set<std::string>& names) {
  std::string out;
  for (const auto& n : names) out += (out.empty() ? "" : " ") + n;
  return out.empty() ? "none" : out;
}

// One write(2) of `text`, as cgroup files take a value per write.
Failure write_value(const fs::path& file, const std::string& text) {
  const int fd = ::open(file.c_str(), O_WRONLY | O_TRUNC | O_CLOEXEC);
  if (fd < 0) return file.string() + ": " + std::strerror(errno);
  const ssize_t n = ::write(fd, text.data(), text.size());
  const int err = errno;
  ::close(fd);
  if (n != static_cast<ssize_t>(text.size())) return "writing " + text + " to " + file.string() + ": " + std::strerror(err);
  return std::nullopt;
}

// `path` relative to a mount whose root (mountinfo's 4th field) is `root`.
fs::path under_mount(const fs::path& point, const std::string& root, std::string path) {
  if (root != "/" && path.rfind(root, 0) == 0) path = path.substr(root.size());
  while (!path.empty() && path.front() == '/') path.erase(0, 1);
  return path.empty() ? point : point / path;
}

bool inside(const fs::path& path, const fs::path& root) {
  auto r = root.begin();
  auto p = path.begin();
  for (; r != root.end(); ++r, ++p) {
    if (p == path.end() || *p != *r) return false;
  }
  return true;
}

const char* v2_file(const std::string& controller) { return controller == kLimitMemory ? "memory.max" : "cpu.max"; }

long cpu_quota(double cores) {
  return std::max(kMinCpuQuotaUs, static_cast<long>(std::lround(cores * kCpuPeriodUs)));
}

long long memory_bytes(double gib) { return std::llround(gib * 1024.0 * 1024.0 * 1024.0); }

// Whether `controller` reaches the children of `dir`, enabling it there
// (and first in `dir`'s parent when that is the hierarchy's root) when
// `enable`. Returns why not.
Failure reach_children(const fs::path& dir, const fs::path& root, const std::string& controller, bool enable) {
  if (words(read_text(dir / "cgroup.subtree_control")).count(controller)) return std::nullopt;
  const auto offered = words(read_text(dir / "cgroup.controllers"));
  if (!offered.count(controller)) {
    if (dir != root && dir.parent_path() == root) {
      if (auto why = reach_children(root, root, controller, enable)) return why;
      if (!enable) return std::nullopt;
    } else {
      return "cgroup v2 " + dir.string() + " has no " + controller + " controller (it has: " + joined(offered) + ")";
    }
  }
  if (!enable) return std::nullopt;
  return write_value(dir / "cgroup.subtree_control", "+" + controller);
}

Failure write_v2(const fs::path& cgroup, const std::string& controller, const LimitsRequest& request) {
  if (controller == kLimitMemory) {
    if (auto failed = write_value(cgroup / "memory.max", std::to_string(memory_bytes(request.memory_gb)))) return failed;
    if (present(cgroup / "memory.swap.max")) return write_value(cgroup / "memory.swap.max", "0");
    return std::nullopt;
  }
  return write_value(cgroup / "cpu.max", std::to_string(cpu_quota(request.cpu)) + " " + std::to_string(kCpuPeriodUs));
}

Failure write_v1(const fs::path& dir, const std::string& controller, const LimitsRequest& request) {
  if (controller == kLimitMemory) {
    const std::string bytes = std::to_string(memory_bytes(request.memory_gb));
    if (auto failed = write_value(dir / "memory.limit_in_bytes", bytes)) return failed;
    // Present only where the kernel accounts swap (swapaccount=1).
    if (present(dir / "memory.memsw.limit_in_bytes")) return write_value(dir / "memory.memsw.limit_in_bytes", bytes);
    return std::nullopt;
  }
  if (auto failed = write_value(dir / "cpu.cfs_period_us", std::to_string(kCpuPeriodUs))) return failed;
  return write_value(dir / "cpu.cfs_quota_us", std::to_string(cpu_quota(request.cpu)));
}

// The controllers asked for, in a fixed order.
std::vector<std::string> asked(const LimitsRequest& request) {
  std::vector<std::string> out;
  if (request.cpu > 0) out.push_back(kLimitCpu);
  if (request.memory_gb > 0) out.push_back(kLimitMemory);
  return out;
}

std::string v1_missing(const std::string& controller) {
  return "no cgroup v1 " + controller + " hierarchy is mounted";
}

}  // namespace

bool limit_enforced(const std::string& value) { return value.rfind("enforced", 0) == 0; }

CgroupMounts CgroupMounts::parse(const std::string& mountinfo, const std::string& proc_cgroup) {
  struct Mount {
    fs::path point;
    std::string root;
  };
  std::optional<Mount> v2;
  std::map<std::string, Mount> v1;  // controller -> its hierarchy's mount
  std::istringstream lines(mountinfo);
  for (std::string line; std::getline(lines, line);) {
    const auto dash = line.find(" - ");
    if (dash == std::string::npos) continue;
    std::istringstream head(line.substr(0, dash)), tail(line.substr(dash + 3));
    std::string id, parent, devno, root, point, type, source, options;
    head >> id >> parent >> devno >> root >> point;
    tail >> type >> source >> options;
    if (type == "cgroup2" && !v2) v2 = Mount{point, root};
    if (type != "cgroup") continue;
    std::istringstream opts(options);
    for (std::string opt; std::getline(opts, opt, ',');) {
      if ((opt == kLimitMemory || opt == kLimitCpu) && !v1.count(opt)) v1[opt] = Mount{point, root};
    }
  }
  CgroupMounts out;
  std::istringstream own(proc_cgroup);
  for (std::string line; std::getline(own, line);) {
    const auto first = line.find(':');
    const auto second = first == std::string::npos ? first : line.find(':', first + 1);
    if (second == std::string::npos) continue;
    const std::string controllers = line.substr(first + 1, second - first - 1);
    const std::string path = line.substr(second + 1);
    if (line.rfind("0::", 0) == 0) {
      if (v2) {
        out.v2_root = v2->point;
        out.v2_own = under_mount(v2->point, v2->root, path);
      }
      continue;
    }
    std::istringstream names(controllers);
    for (std::string name; std::getline(names, name, ',');) {
      auto m = v1.find(name);
      if (m != v1.end()) out.v1_own[name] = under_mount(m->second.point, m->second.root, path);
    }
  }
  return out;
}

CgroupMounts CgroupMounts::of_this_process() {
  return parse(read_text("/proc/self/mountinfo"), read_text("/proc/self/cgroup"));
}

CgroupMounts CgroupMounts::under(const fs::path& root) {
  CgroupMounts out;
  std::error_code ec;
  if (fs::is_directory(root / "unified", ec)) {
    out.v2_root = out.v2_own = root / "unified";
  } else if (present(root / "cgroup.controllers")) {
    out.v2_root = out.v2_own = root;
  }
  for (const char* c : {kLimitMemory, kLimitCpu}) {
    if (fs::is_directory(root / c, ec)) out.v1_own[c] = root / c;
  }
  return out;
}

CgroupMounts CgroupMounts::for_limits(const std::string& root) {
  return root.empty() ? of_this_process() : under(root);
}

LimitReport probe_limits(const CgroupMounts& mounts, const std::optional<fs::path>& v2_parent,
                         const LimitsRequest& request) {
  LimitReport report;
  for (const auto& controller : asked(request)) {
    std::string why;
    if (v2_parent && mounts.v2_root && inside(*v2_parent, *mounts.v2_root)) {
      // Not made yet: what its parent passes down is what it will be given.
      const fs::path& parent = *v2_parent;
      const fs::path above = parent.parent_path();
      Failure failed;
      if (present(parent)) {
        failed = reach_children(parent, *mounts.v2_root, controller, false);
      } else if (!words(read_text(above / "cgroup.subtree_control")).count(controller) &&
                 !(above == *mounts.v2_root && words(read_text(above / "cgroup.controllers")).count(controller))) {
        failed = "cgroup v2 " + above.string() + " does not pass the " + controller + " controller down (it has: " +
                 joined(words(read_text(above / "cgroup.controllers"))) + ")";
      }
      if (!failed) {
        report[controller] = "enforced by cgroup v2";
        continue;
      }
      why = *failed;
    } else {
      why = "the worker has no cgroup v2";
    }
    auto v1 = mounts.v1_own.find(controller);
    if (v1 != mounts.v1_own.end() && ::access(v1->second.c_str(), W_OK) == 0) {
      report[controller] = "enforced by cgroup v1";
      continue;
    }
    why += "; " + (v1 == mounts.v1_own.end() ? v1_missing(controller)
                                              : "cannot write to cgroup v1 " + v1->second.string() + ": " +
                                                    std::strerror(errno));
    report[controller] = kNotEnforced + why;
  }
  return report;
}

size_t sweep_abandoned_limits(const CgroupMounts& mounts) {
  size_t removed = 0;
  for (const auto& [controller, own] : mounts.v1_own) {
    std::error_code ec;
    for (fs::directory_iterator it(own, ec), end; !ec && it != end; it.increment(ec)) {
      const std::string name = it->path().filename().string();
      const auto dash = name.rfind('-');
      if (name.rfind("muster-", 0) != 0 || dash <= 6 || dash + 1 >= name.size()) continue;
      const std::string digits = name.substr(dash + 1);
      if (digits.find_first_not_of("0123456789") != std::string::npos || digits.size() > 9) continue;
      const pid_t owner = static_cast<pid_t>(std::stol(digits));
      if (owner <= 1 || ::kill(owner, 0) == 0 || errno != ESRCH) continue;  // alive (or not ours to judge)
      if (::rmdir(it->path().c_str()) == 0) ++removed;
    }
  }
  return removed;
}

CgroupLimits CgroupLimits::apply(const CgroupMounts& mounts, const Cgroup& v2, const LimitsRequest& request) {
  CgroupLimits out;
  for (const auto& controller : asked(request)) {
    std::string why;
    // a) cgroup v2: the worker's own cgroup, the controller enabled from its parent.
    if (v2.valid() && mounts.v2_root && inside(v2.path(), *mounts.v2_root)) {
      Failure failed;
      if (!present(v2.path() / v2_file(controller))) {
        failed = reach_children(v2.path().parent_path(), *mounts.v2_root, controller, true);
        if (!failed && !present(v2.path() / v2_file(controller))) {
          failed = "cgroup v2 " + v2.path().string() + " has no " + v2_file(controller) + " after enabling " + controller;
        }
      }
      if (!failed) failed = write_v2(v2.path(), controller, request);
      if (!failed) {
        out.report_[controller] = "enforced by cgroup v2";
        if (controller == kLimitMemory) out.oom_file_ = v2.path() / "memory.events";
        continue;
      }
      why = *failed;
    } else {
      why = "the worker has no cgroup v2";
    }
    // b) cgroup v1: a directory of the worker's own in the controller's hierarchy.
    auto v1 = mounts.v1_own.find(controller);
    if (v1 == mounts.v1_own.end()) {
      out.report_[controller] = kNotEnforced + why + "; " + v1_missing(controller);
      continue;
    }
    const fs::path dir = v1->second / ("muster-" + request.name);
    const bool made = ::mkdir(dir.c_str(), 0755) == 0;
    if (!made && errno != EEXIST) {
      out.report_[controller] = kNotEnforced + why + "; cannot create cgroup v1 " + dir.string() + ": " +
                                std::strerror(errno);
      continue;
    }
    if (auto failed = write_v1(dir, controller, request)) {
      if (made) ::rmdir(dir.c_str());
      out.report_[controller] = kNotEnforced + why + "; " + *failed;
      continue;
    }
    bool known = false;
    for (const auto& d : out.v1_dirs_) known = known || d == dir;  // one hierarchy holding both controllers
    if (!known) {
      const int fd = ::open((dir / "cgroup.procs").c_str(), O_WRONLY | O_CLOEXEC);
      if (fd < 0) {
        const int err = errno;
        if (made) ::rmdir(dir.c_str());
        out.report_[controller] = kNotEnforced + why + "; " + (dir / "cgroup.procs").string() + ": " + std::strerror(err);
        continue;
      }
      out.v1_dirs_.push_back(dir);
      out.procs_fds_.push_back(fd);
    }
    out.report_[controller] = "enforced by cgroup v1";
    if (controller == kLimitMemory) out.oom_file_ = dir / "memory.oom_control";
  }
  out.oom_baseline_ = out.oom_kills();
  return out;
}

CgroupLimits::~CgroupLimits() { remove(); }

CgroupLimits::CgroupLimits(CgroupLimits&& other) noexcept { *this = std::move(other); }

CgroupLimits& CgroupLimits::operator=(CgroupLimits&& other) noexcept {
  if (this == &other) return *this;
  remove();
  report_ = std::move(other.report_);
  v1_dirs_ = std::move(other.v1_dirs_);
  procs_fds_ = std::move(other.procs_fds_);
  oom_file_ = std::move(other.oom_file_);
  oom_baseline_ = other.oom_baseline_;
  other.v1_dirs_.clear();
  other.procs_fds_.clear();
  other.oom_file_.reset();
  return *this;
}

int CgroupLimits::join_child() const {
  for (int fd : procs_fds_) {
    if (::write(fd, "0", 1) != 1) return 126;  // "0" is the writer itself
  }
  return 0;
}

Failure CgroupLimits::join(pid_t pid) const {
  for (const auto& dir : v1_dirs_) {
    if (auto failed = write_value(dir / "cgroup.procs", std::to_string(pid))) return failed;
  }
  return std::nullopt;
}

uint64_t CgroupLimits::oom_kills() const {
  if (!oom_file_) return 0;
  std::istringstream in(read_text(*oom_file_));
  std::string key;
  uint64_t value = 0;
  while (in >> key >> value) {
    if (key == "oom_kill") return value;
  }
  return 0;
}

bool CgroupLimits::out_of_memory() const { return oom_kills() > oom_baseline_; }

void CgroupLimits::close_fds() {
  for (int fd : procs_fds_) ::close(fd);
  procs_fds_.clear();
}

bool CgroupLimits::remove() {
  close_fds();
  std::vector<fs::path> left;
  for (const auto& dir : v1_dirs_) {
    // A process that just ended may leave its cgroup a moment after its parent reaped it.
    bool gone = false;
    for (int attempt = 0; attempt < 50 && !gone; ++attempt) {
      gone = ::rmdir(dir.c_str()) == 0 || errno == ENOENT;
      if (!gone && errno != EBUSY) break;
      if (!gone) std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    if (!gone) left.push_back(dir);
  }
  v1_dirs_ = left;
  return left.empty();
}

}  // namespace muster::base
