#include "workers/ssh/ssh_backend.h"

#include <signal.h>

#include "workers/remote/ssh_mpi.h"

#include "api/base/net.h"
#include "api/base/rotating_log.h"
#include "api/log_capture.h"

#include <cstdlib>
#include <fstream>

namespace muster::workers::ssh {
namespace fs = std::filesystem;
using namespace std::chrono_literals;

struct SshBackend::RemoteWorker {
  std::string id;
  size_t host_index = 0;
  Host host;
  fs::path log_path;
  base::RotatingLogOptions log_limits;
  std::unique_ptr<base::RotatingLog> log;  // opened by the reader thread
  long pgid = 0;
  std::unique_ptr<RemoteSession> session;
  std::unique_ptr<RemoteProcess> process;
  std::string pending_output;  // read before the reader thread started
  std::thread reader;
  std::atomic<bool> quit{false};
  std::mutex mu;
  std::condition_variable cv;
  ProcessStatus status{ProcessState::kRunning, std::nullopt};
};

namespace {

// How long a launch that finds every host full waits for workers being
// stopped to release their slots (a stop's grace, then SIGKILL and the
// session's end).
constexpr auto kStoppingWait = std::chrono::seconds(30);

void append_to(const fs::path& log, const std::string& text) {
  if (text.empty() || log.empty()) return;
  std::ofstream out(log, std::ios::app | std::ios::binary);
  out << text;
}

}  // namespace

api::Result<std::unique_ptr<SshBackend>> SshBackend::create(SshOptions options, std::unique_ptr<Connector> connector) {
  if (options.hosts.empty()) {
    auto hosts = load_inventory(options.inventory);
    if (!hosts) return hosts.status();
    options.hosts = std::move(hosts.value());
  }
  if (options.known_hosts.empty()) {
    const char* home = std::getenv("HOME");
    options.known_hosts = fs::path(home ? home : "/root") / ".ssh" / "known_hosts";
  }
  if (options.master_address.empty()) {
    auto local = base::local_address_towards(options.hosts.front().address);
    if (local.failure)
      return api::unavailable(*local.failure + "; set --backend-opt master=IP (the address the hosts reach musterd at)");
    options.master_address = local.address;
  }
  return std::unique_ptr<SshBackend>(new SshBackend(std::move(options), std::move(connector)));
}

api::Result<MpiLaunchSettings> SshBackend::preflight_mpi(const MpiHostsRequest& request) {
  remote::SshMpiOptions p;
  for (const auto& address : request.hosts) {
    Host h = options_.hosts.front();
    for (const auto& known : options_.hosts)
      if (known.address == address) h = known;
    h.address = address;
    h.port = request.ssh_port;
    p.hosts.push_back(h);
  }
  p.program = request.program;
  p.master_address = master_address();
  if (options_.mpi_ssh) p.rsh_agent = mpi_rsh_agent();
  return remote::ssh_mpi_preflight(*connector_, p);
}

std::string SshBackend::mpi_rsh_agent() const {
  const Host& first = options_.hosts.front();
  for (const auto& h : options_.hosts)
    if (h.user != first.user || h.identity_file != first.identity_file) return "";
  remote::RshAgentOptions a;
  a.identity_file = first.identity_file;
  a.user = first.user;
  a.strict_host_key_checking = options_.accept_new ? "accept-new" : "yes";
  a.known_hosts = options_.known_hosts;
  return remote::ssh_rsh_agent(a);
}

SshBackend::SshBackend(SshOptions options, std::unique_ptr<Connector> connector)
    : options_(std::move(options)), connector_(std::move(connector)), load_(options_.hosts.size(), 0) {
  base::TaskQueueOptions q;
  q.threads = options_.teardown_threads;
  q.name = "ssh teardowns";
  teardowns_ = std::make_unique<base::TaskQueue>(q);
}

SshBackend::~SshBackend() { shutdown(); }

std::string SshBackend::remote_command(const LaunchSpec& spec, const std::string& agent_path,
                                       const std::map<std::string, std::string>& env) {
  std::string cmd = "echo muster-pgid $$; ";
  if (!spec.working_dir.empty())
    // The directory is a shell word everywhere it appears (also in the
    // message), so a name like "$(reboot)" stays a name.
    cmd += "cd " + shell_quote(spec.working_dir.string()) + " || { printf 'muster: no directory %s on %s\\n' " +
           shell_quote(spec.working_dir.string()) + " \"$(hostname)\" >&2; exit 126; }; ";
  cmd += "exec 2>&1; exec env";
  for (const auto& [k, v] : env) cmd += " " + shell_quote(k + "=" + v);
  cmd += " " + shell_quote(agent_path);
  for (size_t i = 1; i < spec.agent_argv.size(); ++i) cmd += " " + shell_quote(spec.agent_argv[i]);
  return cmd;
}

api::Status SshBackend::ensure_agent(RemoteSession& session, const Host& host, const std::string& local_agent,
                                     const std::string& remote_agent) {
  auto test = session.run("test -x " + shell_quote(remote_agent));
  if (!test) return test.status();
  if (test->exit_code == 0) return api::Status::ok();
  if (!options_.copy_agent)
    return api::unavailable("muster-agent is not at " + remote_agent + " on " + host.label() +
                            "; install it there or set --backend-opt copy_agent=on");
  std::string dir = fs::path(remote_agent).parent_path().string();
  if (!dir.empty()) {
    auto mk = session.run("mkdir -p " + shell_quote(dir));
    if (!mk) return mk.status();
    if (mk->exit_code != 0)
      return api::unavailable("cannot create " + dir + " on " + host.label() + ": " + mk->err + mk->out);
  }
  return session.upload(local_agent, remote_agent, 0755);
}

api::Result<std::unique_ptr<SshBackend::RemoteWorker>> SshBackend::start_one(const LaunchSpec& spec,
                                                                             size_t host_index) {
  const Host& host = options_.hosts[host_index];
  if (spec.agent_argv.empty()) return api::invalid_argument("empty agent command line");
  auto session = connector_->connect(host);
  if (!session) return session.status();
  std::string remote_agent = options_.agent_path.empty() ? spec.agent_argv[0] : options_.agent_path;
  bool checked;
  {
    std::lock_guard<std::mutex> lock(mu_);
    checked = agent_checked_.count(host_index) > 0;
  }
  if (!checked) {
    if (auto s = ensure_agent(*session.value(), host, spec.agent_argv[0], remote_agent); !s) return s;
    std::lock_guard<std::mutex> lock(mu_);
    agent_checked_.insert(host_index);
  }
  // The env already names master_address() (the registry builds MUSTER_URL
  // from it: api/agent_protocol.h); it goes as it is, less the log capture:
  // the remote agent writes to the channel and reader_loop() caps it here.
  auto env = spec.env;
  api::remove_log_capture_env(env);
  auto process = session.value()->start(remote_command(spec, remote_agent, env));
  if (!process) return process.status();
  auto w = std::make_unique<RemoteWorker>();
  w->id = spec.worker_id;
  w->host_index = host_index;
  w->host = host;
  w->log_path = spec.log_path;
  w->log_limits = spec.log_limits;
  // The first line is the process group; everything after it is the agent's.
  std::string buf;
  auto deadline = std::chrono::steady_clock::now() + options_.connect_timeout;
  // (A process that ends at once still reports kEnded again to the reader.)
  for (;;) {
    ReadEvent ev = process.value()->read(buf, 100ms);
    auto nl = buf.find('\n');
    if (nl != std::string::npos) {
      std::string line = buf.substr(0, nl);
      if (line.rfind("muster-pgid ", 0) != 0)
        return api::internal_error("unexpected first line from " + host.label() + ": " + line);
      w->pgid = std::atol(line.c_str() + 12);
      w->pending_output = buf.substr(nl + 1);
      break;
    }
    if (ev.state == ReadState::kEnded || ev.state == ReadState::kLost)
      return api::unavailable("the agent on " + host.label() + " did not start: " +
                              (ev.state == ReadState::kLost ? ev.message : "exit " + std::to_string(ev.exit_code)) +
                              (buf.empty() ? "" : ": " + buf));
    if (std::chrono::steady_clock::now() > deadline)
      return api::Status(api::ErrorCode::kDeadlineExceeded, "the agent on " + host.label() +
                         " did not start within " + std::to_string(options_.connect_timeout.count()) + " ms");
  }
  if (w->pgid <= 1) return api::internal_error("bad process group from " + host.label());
  w->session = std::move(session.value());
  w->process = std::move(process.value());
  return w;
}

void SshBackend::reader_loop(RemoteWorker* w) {
  // The remote agent's output, under the worker's cap (the remote host
  // cannot write the daemon's files, so the cap is applied here). A full
  // disk loses the bytes of that write (RotatingLog's contract).
  auto write_log = [](RemoteWorker& w, const std::string& text) {
    if (text.empty() || w.log_path.empty()) return;
    if (!w.log) {
      std::string error;
      w.log = base::RotatingLog::open(w.log_path, w.log_limits, &error);
      if (!w.log) return append_to(w.log_path, "[muster] " + error + "; this output is not capped\n" + text);
    }
    w.log->write(text);
  };
  write_log(*w, w->pending_output);
  w->pending_output.clear();
  while (!w->quit.load()) {
    std::string chunk;
    ReadEvent ev = w->process->read(chunk, 200ms);
    write_log(*w, chunk);
    if (ev.state == ReadState::kEnded || ev.state == ReadState::kLost) {
      if (ev.state == ReadState::kLost)
        write_log(*w, "\n[muster] lost the connection to " + w->host.label() + ": " + ev.message + "\n");
      std::lock_guard<std::mutex> lock(w->mu);
      w->status = ev.state == ReadState::kEnded ? ProcessStatus{ProcessState::kExited, ev.exit_code}
                                                : ProcessStatus{ProcessState::kLost, std::nullopt};
      w->cv.notify_all();
      return;
    }
  }
}

// Each spec on the host with the lowest load for its slots, in order; on
// success the slots are reserved in load_. Returns the first worker that
// fits nowhere ("" when all fit; then nothing is reserved). Holds mu_.
std::string SshBackend::place(const std::vector<LaunchSpec>& specs, std::vector<size_t>* placement) {
  std::vector<int> load = load_;
  placement->clear();
  for (const auto& spec : specs) {
    size_t best = options_.hosts.size();
    for (size_t i = 0; i < options_.hosts.size(); ++i) {
      if (load[i] >= options_.hosts[i].slots) continue;
      if (best == options_.hosts.size() || load[i] * options_.hosts[best].slots < load[best] * options_.hosts[i].slots)
        best = i;
    }
    if (best == options_.hosts.size()) return spec.worker_id;
    ++load[best];
    placement->push_back(best);
  }
  load_ = load;  // reserve the slots while connecting
  return "";
}

api::Status SshBackend::launch(const std::vector<LaunchSpec>& specs) {
  std::vector<size_t> placement;
  {
    std::unique_lock<std::mutex> lock(mu_);
    // Workers being stopped keep their slots until their session has ended
    // (stop()'s teardown). A launch that finds every host full while some
    // are still stopping waits for them, up to kStoppingWait: stopped
    // workers then make room, as the caller who stopped them expects.
    const auto deadline = std::chrono::steady_clock::now() + kStoppingWait;
    for (;;) {
      if (shut_down_) return api::unavailable("the ssh backend is shut down");
      for (const auto& spec : specs) {
        if (workers_.count(spec.worker_id)) return api::conflict("worker " + spec.worker_id + " is already running");
      }
      const std::string full = place(specs, &placement);
      if (full.empty()) break;
      if (stopping_ == 0 || slot_released_.wait_until(lock, deadline) == std::cv_status::timeout) {
        return api::unavailable("no free slot for worker " + full + ": every host in the inventory is full" +
                                (stopping_ > 0 ? " (" + std::to_string(stopping_) +
                                                     " stopped workers have not released theirs yet)"
                                               : ""));
      }
    }
  }
  std::vector<std::unique_ptr<RemoteWorker>> started;
  api::Status failure;
  for (size_t i = 0; i < specs.size(); ++i) {
    auto w = start_one(specs[i], placement[i]);
    if (!w) {
      failure = api::Status(w.status().code(), "worker " + specs[i].worker_id + " on " +
                                                   options_.hosts[placement[i]].label() + ": " +
                                                   w.status().message());
      break;
    }
    started.push_back(std::move(w.value()));
  }
  if (!failure.is_ok()) {
    for (auto& w : started) end_worker(*w, 0ms);
    std::lock_guard<std::mutex> lock(mu_);
    for (size_t idx : placement) --load_[idx];
    return failure;
  }
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& w : started) {
    RemoteWorker* raw = w.get();
    raw->reader = std::thread([this, raw] { reader_loop(raw); });
    finished_.erase(raw->id);
    workers_[raw->id] = std::move(w);
  }
  return api::Status::ok();
}

// Signals the worker's process group over a second session; false when it
// could not.
bool SshBackend::signal_group(RemoteWorker& w, const char* sig) {
  auto s = connector_->connect(w.host);
  if (!s) return false;
  auto r = s.value()->run(std::string("kill -") + sig + " -- -" + std::to_string(w.pgid) + " 2>/dev/null");
  return r.is_ok();
}

// Signals the process group (unless stop() did: `termed`), waits for the
// reader to see the end (SIGKILL after the grace), then releases the session.
void SshBackend::end_worker(RemoteWorker& w, std::chrono::milliseconds grace, bool termed) {
  auto running = [&] {
    std::lock_guard<std::mutex> lock(w.mu);
    return w.status.state == ProcessState::kRunning;
  };
  auto signal = [&](const char* sig) { return signal_group(w, sig); };
  if (w.pgid > 1 && running() && (termed || signal("TERM"))) {
    bool reader_running = w.reader.joinable();
    auto wait_end = [&](std::chrono::milliseconds limit) {
      if (reader_running) {
        std::unique_lock<std::mutex> lock(w.mu);
        w.cv.wait_for(lock, limit, [&] { return w.status.state != ProcessState::kRunning; });
      } else {
        // No reader yet (a failed launch): drain here.
        auto until = std::chrono::steady_clock::now() + limit;
        std::string sink;
        while (std::chrono::steady_clock::now() < until) {
          ReadEvent ev = w.process->read(sink, 50ms);
          if (ev.state == ReadState::kEnded || ev.state == ReadState::kLost) {
            std::lock_guard<std::mutex> lock(w.mu);
            w.status = {ev.state == ReadState::kEnded ? ProcessState::kExited : ProcessState::kLost,
                        ev.state == ReadState::kEnded ? std::optional<int>(ev.exit_code) : std::nullopt};
            break;
          }
        }
      }
    };
    wait_end(std::max(grace, 50ms));
    if (running() && signal("KILL")) wait_end(3000ms);
  }
  w.quit = true;
  if (w.reader.joinable()) w.reader.join();
  w.process.reset();
  w.session.reset();
}

// SIGTERM now (a round trip to the host); the grace, SIGKILL and the
// session's end on a teardown thread.
api::Status SshBackend::stop(const std::string& worker_id, std::chrono::milliseconds grace) {
  std::shared_ptr<RemoteWorker> w;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = workers_.find(worker_id);
    if (it == workers_.end()) return api::Status::ok();
    w = std::move(it->second);
    workers_.erase(it);
    finished_[worker_id] = {ProcessState::kExited, 128 + SIGTERM};  // the final status once its end is seen
    ++stopping_;
  }
  bool running = false;
  {
    std::lock_guard<std::mutex> lock(w->mu);
    running = w->status.state == ProcessState::kRunning;
  }
  const bool termed = w->pgid > 1 && running && signal_group(*w, "TERM");
  teardowns_->post([this, w, worker_id, grace, termed] {
    end_worker(*w, grace, termed);
    ProcessStatus final_status;
    {
      std::lock_guard<std::mutex> lock(w->mu);
      final_status = w->status;
    }
    if (final_status.state == ProcessState::kRunning) final_status = {ProcessState::kLost, std::nullopt};
    {
      std::lock_guard<std::mutex> lock(mu_);
      --load_[w->host_index];
      --stopping_;
      finished_[worker_id] = final_status;
    }
    slot_released_.notify_all();
  });
  if (w->pgid > 1 && running && !termed) {
    return api::unavailable("worker " + worker_id + ": cannot reach " + w->host.label() +
                            " to signal its process group; it is signalled again after the grace");
  }
  return api::Status::ok();
}

ProcessStatus SshBackend::poll(const std::string& worker_id) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = workers_.find(worker_id);
  if (it == workers_.end()) {
    auto f = finished_.find(worker_id);
    return f == finished_.end() ? ProcessStatus{} : f->second;
  }
  std::lock_guard<std::mutex> wlock(it->second->mu);
  return it->second->status;
}

const Host* SshBackend::host_of(const std::string& worker_id) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = workers_.find(worker_id);
  return it == workers_.end() ? nullptr : &options_.hosts[it->second->host_index];
}

void SshBackend::shutdown() {
  std::map<std::string, std::unique_ptr<RemoteWorker>> all;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (shut_down_) return;
    shut_down_ = true;
    all.swap(workers_);
  }
  slot_released_.notify_all();  // a launch waiting for a slot ends
  teardowns_->drain();  // the stops under way end first
  teardowns_->close();
  for (auto& [id, w] : all) end_worker(*w, 1000ms);
}

}  // namespace muster::workers::ssh
