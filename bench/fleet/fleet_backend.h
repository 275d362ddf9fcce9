// FleetBackend: a workers::Backend for the fleet benchmark that starts
// nothing. Each worker musterd launches is announced, one line on a Unix
// socket, to one of the simulated-agent processes connected there
// (bench/fleet/fleet_agents.cc), which then speaks the real agent protocol
// for it: register, heartbeat, exit, and its log file. It lives in bench/,
// never in the product: bench/fleet/fleet_musterd.cc registers it under the
// name "fleet" and runs musterd's own main.
//
// Contract
// - --backend-opt socket=PATH (required): where it listens. The lines it
//   writes: "L <id> <agent token> <log path>\n" for a launch and
//   "S <id>\n" for a stop, each to the agent process that holds the worker
//   (round-robin at launch).
// - launch() is all-or-nothing: with no agent process connected it refuses
//   the batch; a write that fails mid-batch stops the announced ones.
// - poll() says running for every announced worker: the simulated agents'
//   exit reports end them, as a real agent's do; unknown ids are kUnknown.
// - Thread-safe (one mutex); the accept loop runs on its own thread.
#pragma once

#include <atomic>
#include <filesystem>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "api/status.h"
#include "workers/backend.h"
#include "workers/factory.h"

namespace muster::bench {

class FleetBackend final : public workers::Backend {
 public:
  static api::Result<std::unique_ptr<workers::Backend>> create(const workers::BackendOptions& options);
  ~FleetBackend() override;

  std::string name() const override { return "fleet"; }
  std::string master_address() const override { return "127.0.0.1"; }
  api::Status launch(const std::vector<workers::LaunchSpec>& specs) override;
  api::Status stop(const std::string& worker_id, std::chrono::milliseconds grace) override;
  workers::ProcessStatus poll(const std::string& worker_id) override;
  void forget(const std::string& worker_id) override;
  void shutdown() override;

 private:
  FleetBackend(std::filesystem::path socket_path, int listen_fd);
  void accept_loop();
  bool send_locked(int fd, const std::string& line);

  const std::filesystem::path socket_path_;
  int listen_fd_ = -1;
  std::atomic<bool> closing_{false};
  std::thread acceptor_;

  std::mutex mu_;
  std::vector<int> agents_;                  // connected agent processes
  size_t next_ = 0;                          // round-robin
  std::map<std::string, int> placed_;        // worker id -> its agent process
};

}  // namespace muster::bench
