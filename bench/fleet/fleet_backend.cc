#include "bench/fleet/fleet_backend.h"

#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "api/agent_protocol.h"
#include "api/base/settings.h"

namespace muster::bench {

namespace fs = std::filesystem;

api::Result<std::unique_ptr<workers::Backend>> FleetBackend::create(const workers::BackendOptions& options) {
  const auto settings = base::Settings::of(options.options, "--backend-opt");
  const auto socket = settings.text("socket");
  if (const auto unknown = settings.unread(); !unknown.empty()) {
    return api::invalid_argument("unknown --backend-opt '" + unknown.front() + "' for the fleet backend (known: socket)",
                                 "backend-opt");
  }
  const std::string socket_path = socket.value;
  if (socket_path.empty()) return api::invalid_argument("the fleet backend needs --backend-opt socket=PATH", "backend-opt");
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (socket_path.size() >= sizeof(addr.sun_path)) {
    return api::invalid_argument("socket path too long: " + socket_path, "backend-opt");
  }
  std::memcpy(addr.sun_path, socket_path.c_str(), socket_path.size() + 1);
  std::error_code ec;
  fs::remove(socket_path, ec);
  const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return api::internal_error(std::string("socket: ") + std::strerror(errno));
  if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 || ::listen(fd, 64) != 0) {
    const std::string why = std::strerror(errno);
    ::close(fd);
    return api::internal_error("cannot listen on " + socket_path + ": " + why);
  }
  return std::unique_ptr<workers::Backend>(new FleetBackend(socket_path, fd));
}

FleetBackend::FleetBackend(fs::path socket_path, int listen_fd)
    : socket_path_(std::move(socket_path)), listen_fd_(listen_fd), acceptor_([this] { accept_loop(); }) {}

FleetBackend::~FleetBackend() { shutdown(); }

void FleetBackend::accept_loop() {
  while (!closing_) {
    pollfd p{listen_fd_, POLLIN, 0};
    if (::poll(&p, 1, 200) <= 0) continue;
    const int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) continue;
    std::lock_guard<std::mutex> lock(mu_);
    agents_.push_back(fd);
  }
}

bool FleetBackend::send_locked(int fd, const std::string& line) {
  size_t done = 0;
  while (done < line.size()) {
    const ssize_t n = ::send(fd, line.data() + done, line.size() - done, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    done += static_cast<size_t>(n);
  }
  return true;
}

api::Status FleetBackend::launch(const std::vector<workers::LaunchSpec>& specs) {
  std::lock_guard<std::mutex> lock(mu_);
  if (agents_.empty()) return api::unavailable("no fleet agent process is connected to " + socket_path_.string());
  std::vector<std::string> announced;
  for (const auto& spec : specs) {
    const auto token = spec.env.find(api::kEnvAgentToken);
    if (token == spec.env.end()) return api::internal_error("worker " + spec.worker_id + " has no agent token");
    const int fd = agents_[next_++ % agents_.size()];
    if (!send_locked(fd, "L " + spec.worker_id + " " + token->second + " " + spec.log_path.string() + "\n")) {
      for (const auto& id : announced) send_locked(placed_[id], "S " + id + "\n");
      return api::unavailable("fleet agent process gone while launching worker " + spec.worker_id);
    }
    placed_[spec.worker_id] = fd;
    announced.push_back(spec.worker_id);
  }
  return api::Status::ok();
}

api::Status FleetBackend::stop(const std::string& worker_id, std::chrono::milliseconds) {
  std::lock_guard<std::mutex> lock(mu_);
  const auto it = placed_.find(worker_id);
  if (it == placed_.end()) return api::Status::ok();
  if (!send_locked(it->second, "S " + worker_id + "\n")) {
    return api::unavailable("fleet agent process of worker " + worker_id + " is gone");
  }
  return api::Status::ok();
}

workers::ProcessStatus FleetBackend::poll(const std::string& worker_id) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!placed_.count(worker_id)) return {workers::ProcessState::kUnknown};
  return {workers::ProcessState::kRunning};
}

void FleetBackend::forget(const std::string& worker_id) {
  std::lock_guard<std::mutex> lock(mu_);
  placed_.erase(worker_id);
}

void FleetBackend::shutdown() {
  if (closing_.exchange(true)) return;
  if (acceptor_.joinable()) acceptor_.join();
  std::lock_guard<std::mutex> lock(mu_);
  for (int fd : agents_) ::close(fd);
  agents_.clear();
  ::close(listen_fd_);
  std::error_code ec;
  fs::remove(socket_path_, ec);
}

}  // namespace muster::bench
