// The SSH side of a container: one key material set per backend and one sshd
// per container.
//
// SshKeys lives in <state-dir>/container/ssh/: a client key pair (id_ed25519,
// no passphrase) whose public half is the only authorized key, a host key
// shared by every container, and a known_hosts file listing each running
// container's "[ip]:port" with that host key, so mpirun/ssh can check hosts
// strictly. SshdProcess runs `/usr/sbin/sshd -D -e -f <config>` inside the
// container's network namespace and new UTS namespace (hostname), as a child
// the backend owns; its destructor ends it.
#pragma once

#include <sys/types.h>

#include <filesystem>
#include <string>
#include <vector>

#include "api/status.h"
#include "workers/container/executor.h"

namespace muster::workers::container {

inline constexpr int kContainerSshPort = 2222;

struct SshKeys {
  std::filesystem::path dir;
  std::filesystem::path client_key;       // id_ed25519 (private)
  std::filesystem::path authorized_keys;  // id_ed25519.pub, copied
  std::filesystem::path host_key;         // ssh_host_ed25519_key
  std::filesystem::path known_hosts;

  // Creates `dir` (0700) and whatever keys are missing there.
  static api::Result<SshKeys> ensure(Executor& exec, const std::filesystem::path& dir);
  // Rewrites known_hosts with one line per address for the host key.
  api::Status write_known_hosts(const std::vector<std::string>& addresses, int port) const;
  // ssh(1) options that reach a container as root with this key, strictly
  // checking the host key: -i KEY -p PORT -o UserKnownHostsFile=... etc.
  std::vector<std::string> ssh_options(int port) const;
};

// The sshd_config text for one container.
std::string sshd_config_text(const SshKeys& keys, const std::string& listen_address, int port,
                             const std::filesystem::path& pid_file);

class SshdProcess {
 public:
  SshdProcess() = default;
  SshdProcess(const SshdProcess&) = delete;
  SshdProcess& operator=(const SshdProcess&) = delete;
  SshdProcess(SshdProcess&& o) noexcept { *this = std::move(o); }
  SshdProcess& operator=(SshdProcess&& o) noexcept;
  ~SshdProcess() { stop(); }

  struct Options {
    std::string netns;
    std::string hostname;
    std::filesystem::path config_file;
    std::filesystem::path log_path;
  };
  static api::Result<SshdProcess> start(Executor& exec, const Options& options);

  pid_t pid() const { return pid_; }
  // SIGTERM, then SIGKILL if it lingers; reaps it. Idempotent.
  void stop();

 private:
  Executor* exec_ = nullptr;
  pid_t pid_ = 0;
};

}  // namespace muster::workers::container
