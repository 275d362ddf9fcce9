#include "api/base/cgroup.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

namespace muster::base {

namespace fs = std::filesystem;

namespace {

// One write(2) of `text` to a cgroup file (they take one value per write).
Failure write_value(const fs::path& file, const std::string& text) {
  const int fd = ::open(file.c_str(), O_WRONLY | O_CLOEXEC);
  if (fd < 0) return file.string() + ": " + std::strerror(errno);
  const ssize_t n = ::write(fd, text.data(), text.size());
  const int err = errno;
  ::close(fd);
  if (n != static_cast<ssize_t>(text.size())) return file.string() + ": " + std::strerror(err);
  return std::nullopt;
}

struct Mount {
  fs::path point;
  std::string root;  // the part of the hierarchy mounted there
};

std::optional<Mount> cgroup2_mount() {
  std::ifstream in("/proc/self/mountinfo");
  std::string line;
  while (std::getline(in, line)) {
    const auto dash = line.find(" - ");
    if (dash == std::string::npos) continue;
    std::istringstream tail(line.substr(dash + 3));
    std::string type;
    tail >> type;
    if (type != "cgroup2") continue;
    std::istringstream head(line.substr(0, dash));
    std::string id, parent, devno, root, point;
    head >> id >> parent >> devno >> root >> point;
    return Mount{point, root};
  }
  return std::nullopt;
}

}  // namespace

std::optional<fs::path> own_cgroup() {
  auto mount = cgroup2_mount();
  if (!mount) return std::nullopt;
  std::ifstream in("/proc/self/cgroup");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("0::", 0) != 0) continue;
    std::string rel = line.substr(3);
    if (mount->root != "/" && rel.rfind(mount->root, 0) == 0) rel = rel.substr(mount->root.size());
    if (rel.rfind("/", 0) == 0) rel = rel.substr(1);
    return rel.empty() ? mount->point : mount->point / rel;
  }
  return std::nullopt;
}

bool Cgroup::exists() const {
  std::error_code ec;
  return valid() && fs::exists(path_ / "cgroup.procs", ec);
}

Failure Cgroup::add(pid_t pid) const { return write_value(path_ / "cgroup.procs", std::to_string(pid)); }

std::vector<pid_t> Cgroup::processes() const {
  std::vector<pid_t> out;
  if (!valid()) return out;
  std::ifstream in(path_ / "cgroup.procs");
  long pid;
  while (in >> pid) out.push_back(static_cast<pid_t>(pid));
  return out;
}

int Cgroup::signal(int sig) const {
  int n = 0;
  for (pid_t pid : processes()) {
    if (pid > 1 && ::kill(pid, sig) == 0) ++n;
  }
  return n;
}

Failure Cgroup::kill() const {
  if (!valid()) return std::string("no cgroup");
  return write_value(path_ / "cgroup.kill", "1");
}

bool Cgroup::remove() const { return valid() && ::rmdir(path_.c_str()) == 0; }

CgroupParent::Found CgroupParent::find(const std::string& subdir) {
  auto own = own_cgroup();
  if (!own) return {std::nullopt, "no cgroup v2 hierarchy is mounted (/proc/self/mountinfo)"};
  const fs::path parent = *own / subdir;
  if (::mkdir(parent.c_str(), 0755) != 0 && errno != EEXIST) {
    return {std::nullopt, "cannot create " + parent.string() + ": " + std::strerror(errno)};
  }
  std::error_code ec;
  if (!fs::exists(parent / "cgroup.kill", ec)) {
    return {std::nullopt, parent.string() + " has no cgroup.kill (Linux 5.14 or later is needed)"};
  }
  return {CgroupParent(parent), ""};
}

CgroupParent::Created CgroupParent::create(const std::string& name) const {
  const fs::path dir = path_ / name;
  if (::mkdir(dir.c_str(), 0755) != 0 && errno != EEXIST) {
    return {Cgroup(), "cannot create cgroup " + dir.string() + ": " + std::strerror(errno)};
  }
  return {Cgroup(dir), std::nullopt};
}

}  // namespace muster::base
