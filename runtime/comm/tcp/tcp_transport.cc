#include "runtime/comm/tcp/tcp_transport.h"

#include <poll.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <vector>

#include "runtime/error.h"

namespace muster::runtime::comm::tcp {
namespace {

class TcpSendLink : public SendLink {
 public:
  TcpSendLink(TcpTransport* t, int peer) : t_(t), peer_(peer) {}
  bool try_send(const void* src, std::size_t bytes) override { return t_->link_try_send(src, bytes); }
  bool flushed() override { return t_->link_flushed(); }
  int peer() const override { return peer_; }

 private:
  TcpTransport* t_;
  int peer_;
};

class TcpRecvLink : public RecvLink {
 public:
  TcpRecvLink(TcpTransport* t, int peer) : t_(t), peer_(peer) {}
  void expect(std::size_t bytes) override { t_->link_expect(nullptr, bytes); }
  void expect_into(void* dst, std::size_t bytes) override { t_->link_expect(dst, bytes); }
  const void* try_recv() override { return t_->link_try_recv(); }
  void release() override { t_->link_release(); }
  int peer() const override { return peer_; }

 private:
  TcpTransport* t_;
  int peer_;
};

}  // namespace

TcpTransport::TcpTransport(std::unique_ptr<TcpSender> sender, std::unique_ptr<TcpReceiver> receiver, bool io_thread)
    : sender_(std::move(sender)), receiver_(std::move(receiver)) {
  if (!io_thread || (!sender_ && !receiver_)) return;
  event_fd_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (event_fd_ < 0) throw CommError("TCP transport: eventfd failed: " + errno_text(errno), -1);
  if (sender_) sender_->set_deferred(true);
  if (receiver_) receiver_->set_deferred(true);
  io_ = std::thread([this] { io_loop(); });
}

TcpTransport::~TcpTransport() {
  if (io_.joinable()) {
    {
      std::lock_guard<std::mutex> lk(mu_);
      stop_ = true;
    }
    const uint64_t one = 1;
    (void)!write(event_fd_, &one, sizeof one);
    io_.join();
  }
  if (event_fd_ >= 0) close(event_fd_);
}

std::unique_ptr<SendLink> TcpTransport::send_link() {
  return sender_ ? std::make_unique<TcpSendLink>(this, sender_->peer()) : nullptr;
}

std::unique_ptr<RecvLink> TcpTransport::recv_link() {
  return receiver_ ? std::make_unique<TcpRecvLink>(this, receiver_->peer()) : nullptr;
}

void TcpTransport::abort(int blamed) noexcept {
  if (!sender_) return;
  if (!io_.joinable()) {
    sender_->abort(blamed);
    return;
  }
  std::lock_guard<std::mutex> lk(mu_);
  sender_->abort(blamed);
}

// --- the link views' calls ---

bool TcpTransport::link_try_send(const void* src, std::size_t bytes) {
  if (!io_.joinable()) return sender_->try_send(src, bytes);
  std::lock_guard<std::mutex> lk(mu_);
  check_locked();
  if (!sender_->try_send(src, bytes)) return false;
  kick_locked();
  return true;
}

bool TcpTransport::link_flushed() {
  if (!io_.joinable()) return sender_->flushed();
  std::lock_guard<std::mutex> lk(mu_);
  check_locked();
  return sender_->flushed();
}

void TcpTransport::link_expect(void* dst, std::size_t bytes) {
  std::unique_lock<std::mutex> lk(mu_, std::defer_lock);
  if (io_.joinable()) lk.lock();
  if (dst) {
    receiver_->expect_into(dst, bytes);
  } else {
    receiver_->expect(bytes);
  }
  if (io_.joinable()) kick_locked();
}

const void* TcpTransport::link_try_recv() {
  if (!io_.joinable()) {
    if (sender_) sender_->progress();
    return receiver_->try_recv();
  }
  std::lock_guard<std::mutex> lk(mu_);
  check_locked();
  return receiver_->try_recv();
}

void TcpTransport::link_release() {
  if (!io_.joinable()) {
    receiver_->release();
    return;
  }
  std::lock_guard<std::mutex> lk(mu_);
  receiver_->release();
  kick_locked();  // a slot came free: more can be read
}

void TcpTransport::kick_locked() {
  if (!io_waiting_) return;
  io_waiting_ = false;
  const uint64_t one = 1;
  (void)!write(event_fd_, &one, sizeof one);
}

void TcpTransport::check_locked() const {
  if (error_) std::rethrow_exception(error_);
}

// --- the I/O thread ---

void TcpTransport::io_loop() {
  std::vector<pollfd> fds;
  std::unique_lock<std::mutex> lk(mu_);
  while (!stop_) {
    bool completed = false;
    if (!error_) {
      try {
        if (sender_) completed |= sender_->progress();
        if (receiver_) completed |= receiver_->progress();
      } catch (...) {
        error_ = std::current_exception();
        completed = true;
      }
    }
    if (completed) {
      ++completions_;
      done_.notify_all();
    }
    fds.clear();
    if (!error_) {
      if (sender_) sender_->add_poll(&fds);
      if (receiver_) receiver_->add_poll(&fds);
    }
    fds.push_back(pollfd{event_fd_, POLLIN, 0});
    io_waiting_ = true;
    lk.unlock();
    // Errors and hang-ups wake it too; the next progress() reports them.
    const timespec ts{0, 100 * 1000 * 1000};
    ppoll(fds.data(), fds.size(), &ts, nullptr);
    if (fds.back().revents & POLLIN) {
      uint64_t v;
      (void)!read(event_fd_, &v, sizeof v);
    }
    lk.lock();
    io_waiting_ = false;
  }
}

// --- Sleeper ---

void TcpTransport::prepare() {
  if (!io_.joinable()) return;
  std::lock_guard<std::mutex> lk(mu_);
  seen_ = completions_;
}

void TcpTransport::sleep(std::chrono::microseconds max) {
  if (io_.joinable()) {
    std::unique_lock<std::mutex> lk(mu_);
    done_.wait_for(lk, max, [&] { return completions_ != seen_ || error_; });
    return;
  }
  std::vector<pollfd> fds;
  if (sender_) sender_->add_poll(&fds);
  if (receiver_) receiver_->add_poll(&fds);
  const timespec ts{static_cast<time_t>(max.count() / 1000000), static_cast<long>(max.count() % 1000000) * 1000};
  if (fds.empty()) {
    // Nothing on the wire to wait for (the ring is between its own steps).
    const timespec brief{0, 20000};
    nanosleep(&brief, nullptr);
    return;
  }
  // Errors and hang-ups wake it too; the next poll of the links reports them.
  ppoll(fds.data(), fds.size(), &ts, nullptr);
}

}  // namespace muster::runtime::comm::tcp
