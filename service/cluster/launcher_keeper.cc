#include "service/cluster/launcher_keeper.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <chrono>
#include <fstream>
#include <iostream>
#include <thread>

#include "api/base/atomic_file.h"
#include "api/base/process.h"
#include "service/cluster/mpi_output.h"

namespace muster::service {

namespace {

using Clock = std::chrono::steady_clock;
constexpr std::chrono::milliseconds kDrainAfterExit{2000};

std::optional<unsigned long long> whole_number(const std::string& s) {
  if (s.empty() || s.size() > 19 || s.find_first_not_of("0123456789") != std::string::npos) return std::nullopt;
  return std::stoull(s);
}

}  // namespace

std::vector<std::string> to_keeper_argv(const std::string& keeper_path, const KeeperOptions& o) {
  std::vector<std::string> argv = {keeper_path, "--log", o.log.string(), "--max-bytes",
                                   std::to_string(o.limits.max_bytes), "--keep", std::to_string(o.limits.keep),
                                   "--exit-file", o.exit_file.string()};
  if (o.tagged) argv.push_back("--tagged");
  argv.push_back("--");
  argv.insert(argv.end(), o.argv.begin(), o.argv.end());
  return argv;
}

api::Result<KeeperOptions> parse_keeper_argv(const std::vector<std::string>& argv) {
  KeeperOptions o;
  size_t i = 1;
  auto value = [&](const std::string& flag) -> std::optional<std::string> {
    if (i + 1 >= argv.size()) return std::nullopt;
    (void)flag;
    return argv[++i];
  };
  for (; i < argv.size() && argv[i] != "--"; ++i) {
    const std::string& flag = argv[i];
    if (flag == "--tagged") {
      o.tagged = true;
      continue;
    }
    auto v = value(flag);
    if (!v) return api::invalid_argument(flag + " needs a value", flag);
    if (flag == "--log") {
      o.log = *v;
    } else if (flag == "--exit-file") {
      o.exit_file = *v;
    } else if (flag == "--max-bytes") {
      auto n = whole_number(*v);
      if (!n) return api::invalid_argument("--max-bytes must be a whole number, not '" + *v + "'", flag);
      o.limits.max_bytes = *n;
    } else if (flag == "--keep") {
      auto n = whole_number(*v);
      if (!n || *n > base::kMaxLogKeep) {
        return api::invalid_argument(
            "--keep must be a whole number in 0.." + std::to_string(base::kMaxLogKeep) + ", not '" + *v + "'", flag);
      }
      o.limits.keep = static_cast<unsigned>(*n);
    } else {
      return api::invalid_argument("unknown flag '" + flag + "'", flag);
    }
  }
  if (o.log.empty() || !o.log.is_absolute()) return api::invalid_argument("--log must be an absolute path", "--log");
  if (o.exit_file.empty() || !o.exit_file.is_absolute()) {
    return api::invalid_argument("--exit-file must be an absolute path", "--exit-file");
  }
  if (auto bad = base::validate(o.limits)) return api::invalid_argument(*bad, "--max-bytes");
  if (i >= argv.size() || i + 1 >= argv.size()) {
    return api::invalid_argument("no program after --: usage: muster-launcher --log PATH --max-bytes N --keep K "
                                 "--exit-file PATH [--tagged] -- PROGRAM ARGS...",
                                 "--");
  }
  o.argv.assign(argv.begin() + static_cast<std::ptrdiff_t>(i + 1), argv.end());
  return o;
}

std::optional<int> read_keeper_exit(const std::filesystem::path& exit_file) {
  std::ifstream in(exit_file);
  int code = 0;
  if (!(in >> code)) return std::nullopt;
  return code;
}

int run_keeper(const KeeperOptions& o) {
  for (int sig : {SIGHUP, SIGINT, SIGTERM, SIGPIPE}) ::signal(sig, SIG_IGN);
  // a)
  std::string error;
  auto log = base::RotatingLog::open(o.log, o.limits, &error);
  if (!log) {
    std::cerr << "muster-launcher: cannot open " << o.log << ": " << error << "\n";
    return 127;
  }
  // b)
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) {
    (void)log->write("muster-launcher: pipe failed: " + std::string(std::strerror(errno)) + "\n");
    return 127;
  }
  base::SpawnOptions spawn;
  spawn.argv = o.argv;
  spawn.output_fd = fds[1];
  spawn.new_session = false;
  const base::Spawned child = base::spawn(spawn);
  ::close(fds[1]);
  if (child.failure) {
    ::close(fds[0]);
    (void)log->write("muster-launcher: cannot start " + o.argv[0] + ": " + *child.failure + "\n");
    (void)base::write_file_atomically(o.exit_file, "127\n");
    return 127;
  }
  // c)
  RankLines lines;
  std::string out;
  auto put = [&](std::string_view data) {
    if (o.tagged) {
      out.clear();
      lines.feed(data, out);
      if (!out.empty()) (void)log->write(out);
    } else {
      (void)log->write(data);
    }
  };
  std::optional<int> code;
  std::optional<Clock::time_point> drain_until;
  char buf[64 << 10];
  for (;;) {
    if (!code) {
      code = base::try_reap(child.id.pid);
      if (code) drain_until = Clock::now() + kDrainAfterExit;
    }
    if (drain_until && Clock::now() >= *drain_until) break;
    pollfd p{fds[0], POLLIN, 0};
    const int ready = ::poll(&p, 1, 100);
    if (ready < 0 && errno != EINTR) break;
    if (ready <= 0) continue;
    const ssize_t n = ::read(fds[0], buf, sizeof buf);
    if (n > 0) {
      put(std::string_view(buf, static_cast<size_t>(n)));
      continue;
    }
    if (n < 0 && (errno == EINTR || errno == EAGAIN)) continue;
    // End of file: every writer is gone.
    if (!code) code = base::wait_exit(child.id.pid);
    break;
  }
  ::close(fds[0]);
  if (o.tagged) {
    out.clear();
    lines.finish(out);
    if (!out.empty()) (void)log->write(out);
  }
  if (!code) code = base::wait_exit(child.id.pid);
  // d)
  if (auto bad = base::write_file_atomically(o.exit_file, std::to_string(*code) + "\n")) {
    (void)log->write("muster-launcher: cannot write " + o.exit_file.string() + ": " + *bad + "\n");
  }
  return *code;
}

}  // namespace muster::service
