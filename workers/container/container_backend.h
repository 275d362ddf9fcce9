// ContainerBackend: "mocked containers" on one machine. Each worker gets
//   - its own network namespace <prefix><instance>-<n>, with a veth pair onto
//     a bridge the backend creates (default muster0) and its own address from a
//     private subnet (default 10.213.0.0/24: bridge .1, containers .2, .3, ...),
//   - its own hostname (a UTS namespace),
//   - an sshd on port 2222 inside it that accepts only the key pair the backend
//     generated (no passwords),
//   - the agent, started inside the same namespaces, so the IP it registers is
//     the container's own.
//
// Contract (on top of workers/backend.h)
// - create() refuses without root (kUnavailable, saying why) and first removes
//   whatever an earlier daemon with the same state dir left behind (read from
//   the Ledger in <state-dir>/container/ledger).
// - stop() and shutdown() remove everything the worker/backend created:
//   every process in the namespace, sshd, the veth pair, the namespace; and at
//   shutdown() the bridge. A worker whose agent exits is torn down the same way
//   when poll() sees it.
// - poll() answers kLost when the container's link lost carrier (its end was
//   set down), so heartbeats are not the only signal.
// - A reaper thread (every reap_interval; 0 = none) polls the containers so
//   that one whose agent exited is torn down even if nobody asks.
// - MpiHosts (workers/mpi_hosts.h): the preflight over the containers' sshd,
//   and with mpi_ssh an rsh agent (ssh with the generated key and strict
//   known_hosts) that the cluster side puts on mpirun's line, so mpirun
//   reaches the containers as root; plm_rsh_args "-p 2222" comes from the
//   cluster request.
// - Files: container_backend.cc (lifecycle), container_build.cc (one
//   container), container_options.cc, container_mpi.cc; container.h holds
//   the private per-worker state they share.
// - Thread-safe; launch() builds containers outside the lock.
#pragma once

#include <filesystem>
#include <map>
#include <memory>
#include <condition_variable>
#include <mutex>
#include <thread>
#include <set>
#include <string>
#include <vector>

#include "workers/backend.h"
#include "workers/mpi_hosts.h"
#include "workers/container/executor.h"
#include "workers/container/ledger.h"
#include "workers/container/net_resources.h"
#include "workers/container/sshd.h"
#include "api/base/task_queue.h"
#include "workers/container/subnet.h"

namespace muster::workers::container {

struct ContainerOptions {
  std::filesystem::path state_dir;       // the daemon's; the backend uses state_dir/container
  std::string bridge = "muster0";
  std::string subnet = "10.213.0.0/24";
  std::string prefix = "mst";            // namespace and link names start with it
  std::string instance_id;               // empty: random 4 hex digits
  int ssh_port = kContainerSshPort;
  bool start_sshd = true;
  std::chrono::milliseconds sshd_ready_timeout{5000};
  std::chrono::milliseconds reap_interval{500};
  bool mpi_ssh = true;  // preflight_mpi() answers the ssh rsh agent
  // Threads that wait out a stop's grace and tear the container down, so
  // stop() returns once the agent is signalled (0: inline, for tests).
  size_t teardown_threads = 2;

  // From --backend-opt key=value: bridge, subnet, prefix, ssh_port, sshd (true/false).
  static api::Result<ContainerOptions> from_map(const std::filesystem::path& state_dir,
                                                const std::map<std::string, std::string>& opts);
};

class ContainerBackend final : public Backend, public MpiHosts {
 public:
  static api::Result<std::unique_ptr<ContainerBackend>> create(const ContainerOptions& options,
                                                               std::unique_ptr<Executor> exec);
  ~ContainerBackend() override;

  std::string name() const override { return "container"; }
  std::string master_address() const override { return subnet_.bridge_address(); }
  api::Status launch(const std::vector<LaunchSpec>& specs) override;
  api::Status stop(const std::string& worker_id, std::chrono::milliseconds grace) override;
  ProcessStatus poll(const std::string& worker_id) override;
  void shutdown() override;
  // MpiHosts: the preflight (workers/remote/) over the containers' sshd
  // with the generated key and strict known_hosts.
  api::Result<MpiLaunchSettings> preflight_mpi(const MpiHostsRequest& request) override;

  // The ssh(1) command line mpirun should use as its rsh agent.
  std::string mpi_rsh_agent() const;

  // What mpirun/ssh need to reach the containers: ssh(1) options (port, key,
  // strict known_hosts) and the key material's paths.
  std::vector<std::string> ssh_options() const { return keys_.ssh_options(options_.ssh_port); }
  const SshKeys& ssh_keys() const { return keys_; }
  int ssh_port() const { return options_.ssh_port; }
  // The container address of a running worker ("" if none).
  std::string address_of(const std::string& worker_id) const;
  // The names the backend gave a worker's namespace and host-side link.
  std::string netns_of(const std::string& worker_id) const;
  std::string host_link_of(const std::string& worker_id) const;

  // Removes what an earlier daemon recorded in `ledger` (processes in its
  // namespaces, namespaces, links, bridge). Used by create().
  static void clean_leftovers(Executor& exec, Ledger& ledger);

 private:
  struct Container;
  ContainerBackend(ContainerOptions options, std::unique_ptr<Executor> exec, Subnet subnet);
  api::Status start_bridge();
  api::Result<std::unique_ptr<Container>> build(const LaunchSpec& spec, uint32_t index);
  void teardown(Container& c, std::chrono::milliseconds grace);
  void refresh_known_hosts();
  void reap_loop();
  std::map<std::string, std::string> agent_env(const LaunchSpec& spec) const;

  ContainerOptions options_;
  std::unique_ptr<Executor> exec_;
  Subnet subnet_;
  std::filesystem::path dir_;
  std::unique_ptr<Ledger> ledger_;
  SshKeys keys_;
  Bridge bridge_;

  mutable std::mutex mu_;
  std::map<std::string, std::unique_ptr<Container>> containers_;
  std::set<uint32_t> used_indices_;
  uint32_t next_index_ = 2;  // where the next address search starts (round robin)
  std::map<std::string, int> finished_;  // worker id -> exit code, after teardown
  bool shut_down_ = false;
  std::condition_variable reap_cv_;
  std::thread reaper_;
  std::unique_ptr<base::TaskQueue> teardowns_;  // stop()'s grace and teardown
};

// True when /proc/<pid>/net/tcp text shows a socket listening on `port`.
bool tcp_listening(const std::string& proc_net_tcp, int port);

}  // namespace muster::workers::container
