// SshBackend: workers on other machines, reached over SSH (libssh2, keys only).
//
// Data flow: launch() picks a host with a free slot (inventory order, least
// loaded first), opens a session, makes sure muster-agent is at the
// configured path there (copying it over SFTP if allowed), and starts
//     echo muster-pgid $$; cd DIR || exit 126; exec 2>&1; exec env K=V... AGENT ARGS...
// on an exec channel. sshd makes that shell a session (and process-group)
// leader, so $$ is the agent's process group. A reader thread per worker owns
// the session from then on: it appends the agent's output to
// LaunchSpec::log_path and records the exit code, or kLost when the
// connection breaks (keepalives + TCP_USER_TIMEOUT bound how long a cut link
// goes unnoticed). stop() opens a second session and sends SIGTERM, then
// SIGKILL after `grace`, to `-PGID`.
//
// Thread-safety: every public method may be called from any thread.
#pragma once

#include <atomic>
#include <condition_variable>
#include <filesystem>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "workers/backend.h"
#include "workers/mpi_hosts.h"
#include "workers/ssh/inventory.h"
#include "api/base/task_queue.h"

namespace muster::workers::ssh {

struct SshOptions {
  std::filesystem::path inventory;     // required unless `hosts` is given
  std::vector<Host> hosts;             // used as is when non-empty
  std::filesystem::path known_hosts;   // default ~/.ssh/known_hosts
  bool accept_new = false;             // add unknown host keys (tests, fresh containers)
  std::string agent_path;              // muster-agent on the hosts; default: the local path
  bool copy_agent = true;              // copy it over SFTP when it is not there
  std::string master_address;          // default: the local address that routes to the first host
  std::chrono::milliseconds connect_timeout{10000};
  std::chrono::milliseconds dead_after{6000};
  // Hand mpirun (preflight_mpi's rsh_agent) ssh with the inventory's key and
  // user and strict checking against known_hosts, so that it reaches the
  // hosts as this backend does; only when all hosts share user and key.
  bool mpi_ssh = false;
  // Threads that wait out a stop's grace and end the session, so stop()
  // returns once the process group is signalled (0: inline, for tests).
  size_t teardown_threads = 2;

  // From --backend-opt key=value: inventory, known_hosts, accept_new (true/false),
  // agent_path, copy_agent (on/off), master, connect_timeout_ms, dead_after_ms,
  // mpi_ssh (on/off, default on here).
  static api::Result<SshOptions> from_map(const std::map<std::string, std::string>& opts);
  ConnectOptions connect_options() const;
};

class SshBackend final : public Backend, public MpiHosts {
 public:
  static api::Result<std::unique_ptr<SshBackend>> create(SshOptions options, std::unique_ptr<Connector> connector);
  ~SshBackend() override;

  std::string name() const override { return "ssh"; }
  std::string master_address() const override { return options_.master_address; }
  api::Status launch(const std::vector<LaunchSpec>& specs) override;
  api::Status stop(const std::string& worker_id, std::chrono::milliseconds grace) override;
  ProcessStatus poll(const std::string& worker_id) override;
  void shutdown() override;
  // MpiHosts: the preflight (workers/remote/) of the hosts, with the
  // inventory's user and key for each address (the first host's for an
  // address not in it), and mpi_rsh_agent() when mpi_ssh is on.
  api::Result<MpiLaunchSettings> preflight_mpi(const MpiHostsRequest& request) override;

  const std::vector<Host>& hosts() const { return options_.hosts; }
  // The host a running worker was placed on (nullptr if none).
  const Host* host_of(const std::string& worker_id) const;
  // The ssh(1) command line for mpirun's plm_rsh_agent ("" when the hosts
  // differ in user or key).
  std::string mpi_rsh_agent() const;

  // The remote command line for one worker (see the data flow above).
  static std::string remote_command(const LaunchSpec& spec, const std::string& agent_path,
                                    const std::map<std::string, std::string>& env);

 private:
  struct RemoteWorker;
  explicit SshBackend(SshOptions options, std::unique_ptr<Connector> connector);
  api::Result<std::unique_ptr<RemoteWorker>> start_one(const LaunchSpec& spec, size_t host_index);
  api::Status ensure_agent(RemoteSession& session, const Host& host, const std::string& local_agent,
                           const std::string& remote_agent);
  std::string place(const std::vector<LaunchSpec>& specs, std::vector<size_t>* placement);
  void reader_loop(RemoteWorker* w);
  bool signal_group(RemoteWorker& w, const char* sig);
  void end_worker(RemoteWorker& w, std::chrono::milliseconds grace, bool termed = false);

  SshOptions options_;
  std::unique_ptr<Connector> connector_;

  mutable std::mutex mu_;
  std::map<std::string, std::unique_ptr<RemoteWorker>> workers_;
  std::vector<int> load_;                 // workers per host index (those being stopped included)
  int stopping_ = 0;                      // of them, workers whose stop has not released its slot yet
  std::condition_variable slot_released_;  // a stop released its slot (stopping_ went down)
  std::set<size_t> agent_checked_;        // hosts where the agent is known present
  std::map<std::string, ProcessStatus> finished_;
  bool shut_down_ = false;
  std::unique_ptr<base::TaskQueue> teardowns_;  // stop()'s grace and the session's end
};

}  // namespace muster::workers::ssh
