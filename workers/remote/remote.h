// The SSH backend's seam: a connection to one host, the commands run over it,
// and a long-running remote process whose output is read as it comes.
//
// Contract
// - Connector::connect() opens an authenticated session (keys only; the host
//   key is checked against known_hosts unless accept_new adds unknown hosts;
//   a changed key is always refused).
// - A RemoteSession is used by one thread at a time. A RemoteProcess borrows
//   its session: the session must outlive it and must not run other commands
//   meanwhile (the backend opens a second session to send signals).
// - The real implementation is libssh2 (libssh2_session.cc); unit tests use a
//   fake, so they never open a socket.
#pragma once

#include <chrono>
#include <filesystem>
#include <memory>
#include <string>

#include "api/base/shell_quote.h"
#include "api/status.h"
#include "workers/remote/host.h"

namespace muster::workers::remote {

struct RemoteResult {
  int exit_code = -1;   // 128+signal when killed by one
  std::string out;
  std::string err;
};

enum class ReadState {
  kIdle,    // nothing new within the wait
  kData,    // bytes were appended
  kEnded,   // the process ended; exit_code is set
  kLost,    // the connection broke; message says how
};

struct ReadEvent {
  ReadState state = ReadState::kIdle;
  int exit_code = -1;
  std::string message;
};

class RemoteProcess {
 public:
  virtual ~RemoteProcess() = default;
  // Appends whatever stdout/stderr arrived to `out`, waiting at most `wait`.
  virtual ReadEvent read(std::string& out, std::chrono::milliseconds wait) = 0;
};

class RemoteSession {
 public:
  virtual ~RemoteSession() = default;
  // Runs `command` through the login shell (non-interactive) and waits.
  virtual api::Result<RemoteResult> run(const std::string& command) = 0;
  // Starts `command` and returns at once; read its output from the process.
  virtual api::Result<std::unique_ptr<RemoteProcess>> start(const std::string& command) = 0;
  // Copies a local file to `remote_path` with `mode` (SFTP).
  virtual api::Status upload(const std::filesystem::path& local, const std::string& remote_path, int mode) = 0;
};

struct ConnectOptions {
  std::filesystem::path known_hosts;   // checked (and appended to with accept_new)
  bool accept_new = false;             // add unknown host keys instead of refusing
  std::chrono::milliseconds timeout{10000};
  // A connection whose sent data stays unacknowledged this long is dead
  // (TCP_USER_TIMEOUT); keepalives make sure there is data to acknowledge.
  std::chrono::milliseconds dead_after{6000};
};

class Connector {
 public:
  virtual ~Connector() = default;
  virtual api::Result<std::unique_ptr<RemoteSession>> connect(const Host& host) = 0;
};

std::unique_ptr<Connector> make_libssh2_connector(const ConnectOptions& options);

// Remote commands are quoted with the floor's one set of rules.
using base::shell_quote;

}  // namespace muster::workers::remote
