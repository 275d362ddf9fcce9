#include "service/cluster_launcher.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <mutex>
#include <set>
#include <thread>

#include "service/mpi_output.h"

namespace muster::service {
namespace {

using Clock = std::chrono::steady_clock;

// The launcher's output, from a pipe into its log through RankLines, on a
// thread of its own. It runs until every writer has closed the pipe (the
// launcher and whatever it started), or, once stop_after() set a deadline,
// until then; then it writes what is left of each line and is done().
class OutputPump {
 public:
  OutputPump(int read_fd, int log_fd) : read_fd_(read_fd), log_fd_(log_fd) {
    thread_ = std::thread([this] { run(); });
  }
  ~OutputPump() {
    stop_after(std::chrono::milliseconds(0));
    thread_.join();
    ::close(read_fd_);
    ::close(log_fd_);
  }
  OutputPump(const OutputPump&) = delete;
  OutputPump& operator=(const OutputPump&) = delete;

  bool done() const { return done_; }
  // Gives the pipe `drain` more time (first call wins).
  void stop_after(std::chrono::milliseconds drain) {
    std::lock_guard<std::mutex> lock(mu_);
    if (!deadline_) deadline_ = Clock::now() + drain;
  }
  // Waits until done() (after stop_after()).
  void join() {
    while (!done_) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }

 private:
  bool past_deadline() {
    std::lock_guard<std::mutex> lock(mu_);
    return deadline_ && Clock::now() >= *deadline_;
  }
  void write_all(const std::string& text) {
    size_t done = 0;
    while (done < text.size()) {
      const ssize_t n = ::write(log_fd_, text.data() + done, text.size() - done);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) return;  // a full disk loses output, never the launcher
      done += static_cast<size_t>(n);
    }
  }
  void run() {
    RankLines lines;
    std::string out;
    char buf[65536];
    for (;;) {
      pollfd p{read_fd_, POLLIN, 0};
      const int ready = ::poll(&p, 1, 100);
      if (ready > 0) {
        const ssize_t n = ::read(read_fd_, buf, sizeof buf);
        if (n > 0) {
          lines.feed(std::string_view(buf, static_cast<size_t>(n)), out);
          write_all(out);
          out.clear();
          continue;
        }
        if (n == 0 || (errno != EINTR && errno != EAGAIN)) break;
      }
      if (past_deadline()) break;
    }
    lines.finish(out);
    write_all(out);
    done_ = true;
  }

  int read_fd_;
  int log_fd_;
  std::mutex mu_;
  std::optional<Clock::time_point> deadline_;
  std::atomic<bool> done_{false};
  std::thread thread_;
};

// How long the pump may still read once the launcher ended: its ranks' last
// words, unless a process it left behind keeps the pipe open.
constexpr std::chrono::milliseconds kOutputDrain{2000};

// Everything that belongs to the launcher `leader`: its group, its session
// and its descendants (by parent links), each with its start time.
std::set<base::ProcessId> tree_of(const base::ProcessId& leader) {
  std::set<base::ProcessId> out;
  for (const auto& p : base::session_members(leader)) out.insert(p);
  for (const auto& p : base::descendants(leader)) out.insert(p);
  return out;
}

bool any_alive(const std::set<base::ProcessId>& tree) {
  for (const auto& p : tree) {
    if (base::alive(p)) return true;
  }
  return false;
}

// SIGTERM to the tree (mpirun forwards it to its job), SIGKILL to whatever
// is left after `grace`, then up to 2 s for it to go. `leader_done` says
// whether the leader ended (a child of ours must be reaped to say so).
template <typename LeaderDone>
void end_tree(const base::ProcessId& leader, std::chrono::milliseconds grace, LeaderDone leader_done) {
  std::set<base::ProcessId> tree = tree_of(leader);
  (void)base::signal_group(leader, SIGTERM);
  for (const auto& p : tree) (void)base::signal_process(p, SIGTERM);
  const auto deadline = Clock::now() + grace;
  while (Clock::now() < deadline && (!leader_done() || any_alive(tree))) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    for (const auto& p : tree_of(leader)) tree.insert(p);
  }
  for (const auto& p : tree_of(leader)) tree.insert(p);
  (void)base::signal_group(leader, SIGKILL);
  for (const auto& p : tree) (void)base::signal_process(p, SIGKILL);
  const auto gone = Clock::now() + std::chrono::seconds(2);
  while (Clock::now() < gone && (!leader_done() || any_alive(tree))) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

class ProcessLauncherProcess final : public LauncherProcess {
 public:
  ProcessLauncherProcess(base::ProcessId id, std::unique_ptr<OutputPump> pump) : id_(id), pump_(std::move(pump)) {}
  ~ProcessLauncherProcess() override { terminate(std::chrono::milliseconds(2000)); }

  std::optional<int> poll() override {
    if (!reap()) return std::nullopt;
    if (pump_) {
      pump_->stop_after(kOutputDrain);
      if (!pump_->done()) return std::nullopt;
    }
    return exit_code_;
  }

  void terminate(std::chrono::milliseconds grace) override {
    if (terminated_) return;
    terminated_ = true;
    end_tree(id_, grace, [this] { return reap().has_value(); });
    if (!exit_code_) exit_code_ = base::wait_exit(id_.pid);
    if (pump_) {
      pump_->stop_after(kOutputDrain);
      pump_->join();
    }
  }

  base::ProcessId identity() const override { return id_; }

 private:
  std::optional<int> reap() {
    if (!exit_code_) exit_code_ = base::try_reap(id_.pid);
    return exit_code_;
  }

  base::ProcessId id_;
  std::unique_ptr<OutputPump> pump_;  // tagged_output only
  std::optional<int> exit_code_;
  bool terminated_ = false;
};

class ProcessLauncher final : public Launcher {
 public:
  api::Result<std::unique_ptr<LauncherProcess>> start(const LauncherSpec& spec) override {
    if (spec.argv.empty()) return api::internal_error("launcher: empty command line");
    std::error_code ec;
    std::filesystem::create_directories(spec.log_path.parent_path(), ec);
    base::SpawnOptions o;
    o.argv = spec.argv;
    o.env = spec.env;
    o.cwd = spec.working_dir;
    o.new_session = true;
    int pipe_fds[2] = {-1, -1};
    int log_fd = -1;
    if (spec.tagged_output) {
      log_fd = ::open(spec.log_path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
      if (log_fd < 0) return api::internal_error("launcher: cannot open " + spec.log_path.string());
      if (::pipe2(pipe_fds, O_CLOEXEC) != 0) {
        ::close(log_fd);
        return api::internal_error("launcher: cannot create a pipe for its output");
      }
      o.output_fd = pipe_fds[1];
    } else {
      o.output = spec.log_path;
    }
    auto spawned = base::spawn(o);
    std::unique_ptr<OutputPump> pump;
    if (spec.tagged_output) {
      ::close(pipe_fds[1]);  // the child holds it now: EOF once every writer is gone
      pump = std::make_unique<OutputPump>(pipe_fds[0], log_fd);
    }
    if (spawned.failure) {
      const bool missing = spawned.failure->find("not found on PATH") != std::string::npos;
      if (missing) return api::unavailable("launcher: " + spec.argv[0] + " is not on the daemon's PATH");
      return api::internal_error("launcher: " + *spawned.failure);
    }
    return std::unique_ptr<LauncherProcess>(new ProcessLauncherProcess(spawned.id, std::move(pump)));
  }

  bool end_orphan(const base::ProcessId& leader, std::chrono::milliseconds grace) override {
    if (!leader.valid() || (tree_of(leader).empty() && !base::alive(leader))) return false;
    end_tree(leader, grace, [&] { return !base::alive(leader); });
    return true;
  }
};

}  // namespace

std::unique_ptr<Launcher> make_process_launcher() { return std::make_unique<ProcessLauncher>(); }

}  // namespace muster::service
