// PsServer: one parameter-server task. Holds the variable slices placed on
// it, aggregates the workers' gradients with SyncReplicasOptimizer
// semantics, applies the optimizer and answers pulls (protocol.h).
//
// Threads: the constructor binds and listens; start() runs `threads`
// io threads (Boost.Asio, one strand per connection, one mutex per slice,
// the optimizer of a slice runs on the thread of the push that completes its
// step). A watchdog fails the server when a step or a pull waits longer than
// timeout_ms (a worker died without backups to replace it).
//
// Usage (muster-ps does exactly this):
//   muster::runtime::ps::PsServer server({.port = 4000, .task_index = 0});
//   server.start();
//   server.wait();   // returns once every worker sent DONE; throws
//                    // TimeoutError / CommError when training cannot go on
//
// stop() closes every connection at once (tests use it to kill a PS).
//
// Hostile clients (every check closes only the offending connection):
//   - secret: with ServerOptions::secret set (MUSTER_PS_SECRET), a hello
//     without it gets kError and a close; nothing else is read first.
//   - max_connections open sockets at most; at the limit a new connection
//     evicts the oldest one that has not said hello yet, else it is closed.
//   - hello_timeout_ms: a connection must complete its hello by then.
//   - frame_timeout_ms: a started frame (or a reply being written) must make
//     progress within it; idle connections between frames are fine.
//   - payload lengths are checked before anything is allocated: push against
//     the slice's known size, init against max_frame_bytes (and the slice's
//     size once it exists); init payloads are read in pieces of
//     kPayloadPieceBytes, each allocated only when the previous one arrived.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "runtime/ps/options.h"

namespace muster::runtime::ps {

struct ServerOptions {
  std::string host = "0.0.0.0";
  unsigned short port = 0;  // 0: an ephemeral port, see PsServer::port()
  int task_index = 0;       // for messages: "ps task 0"
  int threads = 4;
  int timeout_ms = default_timeout_ms();
  uint64_t max_frame_bytes = uint64_t{1} << 30;  // hard cap of one frame (an init before its slice exists)
  int socket_buffer_bytes = default_socket_buffer_bytes();
  std::string secret = default_secret();  // "": accept any client (warned once)
  int max_connections = 256;              // muster-ps: 4 x the cluster's tasks, at least 16
  int hello_timeout_ms = 10000;
  int frame_timeout_ms = 30000;
};

// Init payloads are read (and their buffer grown) in pieces of this size.
inline constexpr std::size_t kPayloadPieceBytes = std::size_t{1} << 20;

struct ServerStats {
  uint64_t pushes_accepted = 0;
  uint64_t stale_dropped = 0;   // pushes older than the slice's global step
  uint64_t steps_applied = 0;   // optimizer applications, summed over slices
  uint64_t bad_frames = 0;      // connections closed for a malformed frame or a protocol violation
  uint64_t auth_failures = 0;   // hellos with a wrong or missing secret
  uint64_t refused = 0;         // connections closed at once or evicted at max_connections
  uint64_t timed_out = 0;       // connections closed by hello_timeout_ms / frame_timeout_ms
  uint64_t init_bytes_buffered = 0;  // bytes allocated now for init payloads still arriving
  int open_connections = 0;
  uint64_t bytes_in = 0;
  uint64_t bytes_out = 0;
  int workers_done = 0;
};

class PsServer {
 public:
  explicit PsServer(const ServerOptions& options);
  ~PsServer();
  PsServer(const PsServer&) = delete;
  PsServer& operator=(const PsServer&) = delete;

  unsigned short port() const;
  void start();
  // Blocks until every worker has sent DONE (or, after the first DONE, the
  // rest have disconnected). Throws TimeoutError/CommError with the reason
  // when training failed.
  void wait();
  // Waits at most `ms`; true when finished (success or failure; wait() then
  // returns or throws at once).
  bool wait_for(int ms);
  void stop();

  ServerStats stats() const;
  // The global step of a slice, -1 if it does not exist yet.
  int64_t global_step(uint32_t slice) const;

  class Impl;  // server.cc

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace muster::runtime::ps
