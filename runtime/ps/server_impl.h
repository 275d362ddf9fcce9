// PsServer::Impl: the state of one PS task, shared by the server's
// translation units (internal: only runtime/ps/server*.cc include it).
//   server.cc           PsServer itself, Impl's construction and stop()
//   server_slices.cc    the SyncReplicas bookkeeping: init, push, pull, pull_state
//   server_watchdog.cc  the end of a job: done workers, lost workers, failure, timeouts
//   server_accept.cc    accepting connections within limits, hello, seal
//   server_connection.* one worker's connection; server_frames.cc its frame checks
//
// Locks: `mu_` guards the job (options, the slice map, orphan pulls, done
// and lost workers, connections, the finished flag); each Slice's `mu`
// guards that slice. Order: mu_ before a Slice's mu, never the reverse.
// Connections are answered (send_params/send_error post onto their strand)
// after the slice's lock is released wherever possible; answering under a
// lock only posts, it never blocks.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <boost/asio.hpp>

#include "runtime/error.h"
#include "runtime/optim/optimizer.h"
#include "runtime/ps/protocol.h"
#include "runtime/ps/server.h"

namespace muster::runtime::ps {

namespace asio = boost::asio;
using tcp = asio::ip::tcp;
using Clock = std::chrono::steady_clock;

class Connection;

// A pull waiting for its step (in its Slice) or for the chief's init of its
// slice (in Impl::orphan_pulls_); the watchdog fails it after timeout_ms.
struct PendingPull {
  std::shared_ptr<Connection> conn;
  int64_t min_step = 0;
  uint32_t slice = 0;
  Clock::time_point since;
};

// One variable slice: its values, the accumulator of the current step and
// the optimizer that updates it. Guarded by `mu`.
struct Slice {
  uint32_t id = 0;
  std::size_t size = 0;
  std::mutex mu;
  std::shared_ptr<std::vector<float>> values;  // copied on write while a pull is sending it
  std::vector<float> accum;
  int count = 0;        // gradients accumulated for `step`
  int64_t step = 0;     // the global step the accumulator is stamped with
  Clock::time_point first_push;
  std::unique_ptr<optim::Optimizer> opt;
  std::vector<PendingPull> pending;
};

class PsServer::Impl {
 public:
  explicit Impl(const ServerOptions& o);

  void accept();
  // At max_connections: evicts the oldest connection without a hello, or
  // returns false (the new one is refused). Under mu_.
  bool make_room_locked();
  void watchdog();
  // Closes connections past their deadline and forgets closed ones (each
  // watchdog tick).
  void sweep();
  // The chief has sent its inits to this PS: pulls of missing slices fail.
  void seal();
  // One of the chief's connections sent its first frame after its inits:
  // seals once all chief_streams_ of them have.
  void chief_inits_over();
  std::string name() const { return "ps task " + std::to_string(opt_.task_index); }
  std::string missing_slice(uint32_t id) const {
    return name() + ": pull of slice " + std::to_string(id) + ", which does not exist on this ps task";
  }
  bool stopping() const { return stopping_; }

  // Returns an empty string when accepted, else why the connection must close.
  std::string hello(Connection& c, const HelloPayload& h);
  std::string init(uint32_t slice, int64_t step, uint32_t state_buffers, std::shared_ptr<std::vector<float>> values);
  void pull_state(const std::shared_ptr<Connection>& c, uint32_t slice);
  std::string push(Slice& s, int64_t step, std::vector<float>& grad, bool* stale);
  void pull(const std::shared_ptr<Connection>& c, uint32_t slice, int64_t min_step);
  void worker_done(int worker);
  void connection_lost(int worker, bool done);
  Slice* find_slice(uint32_t id);
  void fail(const std::string& reason, bool timeout);
  void check_finished_locked();
  void stop();

  ServerOptions opt_;
  // Declared before everything that can hold a Connection (io_, slices_,
  // orphan_pulls_): a Connection's destructor gives back its slot here.
  std::atomic<uint64_t> auth_failures_{0}, refused_{0}, timed_out_{0}, init_buffered_{0};
  std::atomic<int> open_{0};  // sockets accepted and not yet closed
  asio::io_context io_;
  tcp::acceptor acceptor_;
  asio::steady_timer watchdog_timer_;
  std::vector<std::thread> threads_;

  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool have_options_ = false;
  HelloPayload options_;
  std::map<uint32_t, std::unique_ptr<Slice>> slices_;
  std::vector<PendingPull> orphan_pulls_;  // pulls of slices the chief has not initialised yet
  std::atomic<bool> sealed_{false};        // seal(): no slice will appear any more
  bool chief_seen_ = false;                // worker 0 has said hello
  int chief_streams_ = 1;                  // its connections (its hello says)
  int chief_inits_over_ = 0;               // of them, past their inits
  std::set<int> done_, lost_;
  Clock::time_point first_done_;
  std::vector<std::weak_ptr<Connection>> conns_;
  bool finished_ = false;
  bool stopped_ = false;
  std::string failure_;
  bool failure_is_timeout_ = false;

  std::atomic<bool> stopping_{false};
  unsigned short port_ = 0;
  std::map<int, int> live_;  // open connections per worker index
  std::atomic<uint64_t> pushes_accepted_{0}, stale_dropped_{0}, steps_applied_{0}, bad_frames_{0};
  std::atomic<uint64_t> bytes_in_{0}, bytes_out_{0};
};

}  // namespace muster::runtime::ps
