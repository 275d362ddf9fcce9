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

#include "api/log_capture.h"
#include "service/mpi_output.h"

namespace muster::service {
namespace {

using Clock = std::chrono::steady_clock;

// The launcher's output, from a pipe into its log (or the log relay's pipe)
// through RankLines, on a
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
  ProcessLauncherProcess(base::ProcessId id, std::unique_ptr<OutputPump> pump, pid_t relay)
      : id_(id), pump_(std::move(pump)), relay_(relay) {}
  ~ProcessLauncherProcess() override {
    terminate(std::chrono::milliseconds(2000));
    pump_.reset();  // closes the pump's end of the relay's pipe
    reap_relay(std::chrono::milliseconds(2000));
  }

  std::optional<int> poll() override {
    if (!exit_code_) exit_code_ = base::try_reap(id_.pid);
    if (!exit_code_) return std::nullopt;
    if (pump_) {
      pump_->stop_after(kOutputDrain);
      if (!pump_->done()) return std::nullopt;
    }
    reap_relay(std::chrono::milliseconds(0));
    return exit_code_;
  }

  void terminate(std::chrono::milliseconds grace) override {
    if (terminated_) return;
    terminated_ = true;
    end_tree(id_, grace, [this] { return poll().has_value(); });
    if (!exit_code_) exit_code_ = base::wait_exit(id_.pid);
  }

  base::ProcessId identity() const override { return id_; }

 private:
  // The relay ends once the launcher's tree has closed the pipe; it is our
  // child, so it is reaped here (bounded: an escaped rank may hold the pipe).
  void reap_relay(std::chrono::milliseconds patience) {
    const auto deadline = Clock::now() + patience;
    while (relay_ > 0) {
      if (base::try_reap(relay_)) {
        relay_ = -1;
        return;
      }
      if (Clock::now() >= deadline) return;
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
  }

  base::ProcessId id_;
  std::unique_ptr<OutputPump> pump_;  // tagged_output only
  pid_t relay_ = -1;
  std::optional<int> exit_code_;
  bool terminated_ = false;
};

// A pipe whose ends close themselves.
struct Pipe {
  int read = -1, write = -1;
  ~Pipe() {
    if (read >= 0) ::close(read);
    if (write >= 0) ::close(write);
  }
};

class ProcessLauncher final : public Launcher {
 public:
  explicit ProcessLauncher(std::optional<LauncherLogRelay> relay) : relay_(std::move(relay)) {}

  // With a relay: a) a pipe; b) the relay (`muster-agent --log-relay`, a
  // session of its own, so ending the launcher's tree leaves it to drain)
  // reads it into log_path with the cap; c) the launcher writes into it;
  // d) our ends are closed, so the relay ends when the launcher's tree has.
  api::Result<std::unique_ptr<LauncherProcess>> start(const LauncherSpec& spec) override {
    if (spec.argv.empty()) return api::internal_error("launcher: empty command line");
    std::error_code ec;
    std::filesystem::create_directories(spec.log_path.parent_path(), ec);
    base::SpawnOptions o;
    o.argv = spec.argv;
    o.env = spec.env;
    o.cwd = spec.working_dir;
    o.output = spec.log_path;
    o.new_session = true;
    Pipe pipe;
    pid_t relay = -1;
    if (relay_) {
      int fds[2];
      if (::pipe2(fds, O_CLOEXEC) != 0) return api::internal_error("launcher: pipe for its log failed");
      pipe.read = fds[0];
      pipe.write = fds[1];
      base::SpawnOptions r;
      r.argv = api::to_log_relay_argv(relay_->agent_path.string(), {spec.log_path.string(), relay_->limits});
      r.input_fd = pipe.read;
      r.output = spec.log_path;  // the relay's own complaints, if it cannot open the log
      r.new_session = true;
      auto started = base::spawn(r);
      if (started.failure) return api::internal_error("launcher: its log relay: " + *started.failure);
      relay = started.id.pid;
      o.output.clear();
      o.output_fd = pipe.write;
    }
    // mpirun's tagged output goes through RankLines on a pump thread, which
    // writes into the relay's pipe (or into the log without a relay).
    Pipe tagged;
    int sink_fd = -1;
    if (spec.tagged_output) {
      sink_fd = pipe.write >= 0 ? ::fcntl(pipe.write, F_DUPFD_CLOEXEC, 0)
                                : ::open(spec.log_path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
      int fds[2];
      if (sink_fd >= 0 && ::pipe2(fds, O_CLOEXEC) == 0) {
        tagged.read = fds[0];
        tagged.write = fds[1];
        o.output.clear();
        o.output_fd = tagged.write;
      } else {
        if (sink_fd >= 0) ::close(sink_fd);
        sink_fd = -1;
        o.argv.clear();  // spawn fails below, which ends the relay too
      }
    }
    base::Spawned spawned;
    if (o.argv.empty()) {
      spawned.failure = "cannot open " + spec.log_path.string() + " or a pipe for its output";
    } else {
      spawned = base::spawn(o);
    }
    if (pipe.read >= 0) {
      ::close(pipe.read);
      ::close(pipe.write);
      pipe.read = pipe.write = -1;  // the relay sees end of file once the launcher's tree (and pump) are gone
    }
    std::unique_ptr<OutputPump> pump;
    if (sink_fd >= 0) {
      ::close(tagged.write);  // the child holds it now: EOF once every writer is gone
      tagged.write = -1;
      pump = std::make_unique<OutputPump>(tagged.read, sink_fd);  // owns both now
      tagged.read = -1;
    }
    if (spawned.failure) {
      pump.reset();  // its end of the relay's pipe closes
      if (relay > 0) (void)base::wait_exit(relay);  // it read end of file at once
      const bool missing = spawned.failure->find("not found on PATH") != std::string::npos;
      if (missing) return api::unavailable("launcher: " + spec.argv[0] + " is not on the daemon's PATH");
      return api::internal_error("launcher: " + *spawned.failure);
    }
    return std::unique_ptr<LauncherProcess>(new ProcessLauncherProcess(spawned.id, std::move(pump), relay));
  }

  bool end_orphan(const base::ProcessId& leader, std::chrono::milliseconds grace) override {
    if (!leader.valid() || (tree_of(leader).empty() && !base::alive(leader))) return false;
    end_tree(leader, grace, [&] { return !base::alive(leader); });
    return true;
  }

 private:
  std::optional<LauncherLogRelay> relay_;
};

}  // namespace

std::unique_ptr<Launcher> make_process_launcher(std::optional<LauncherLogRelay> relay) {
  return std::make_unique<ProcessLauncher>(std::move(relay));
}

}  // namespace muster::service
