#include "runtime/comm/tcp/tcp_transport.h"

#include <poll.h>
#include <time.h>

#include <vector>

namespace muster::runtime::comm::tcp {
namespace {

class TcpSendLink : public SendLink {
 public:
  explicit TcpSendLink(TcpSender* s) : s_(s) {}
  bool try_send(const void* src, std::size_t bytes) override { return s_->try_send(src, bytes); }
  bool flushed() override { return s_->flushed(); }
  int peer() const override { return s_->peer(); }

 private:
  TcpSender* s_;
};

class TcpRecvLink : public RecvLink {
 public:
  TcpRecvLink(TcpReceiver* r, TcpSender* s) : r_(r), s_(s) {}
  void expect(std::size_t bytes) override { r_->expect(bytes); }
  void expect_into(void* dst, std::size_t bytes) override { r_->expect_into(dst, bytes); }
  const void* try_recv() override {
    if (s_) s_->progress();
    return r_->try_recv();
  }
  void release() override { r_->release(); }
  int peer() const override { return r_->peer(); }

 private:
  TcpReceiver* r_;
  TcpSender* s_;  // may be null
};

}  // namespace

TcpTransport::TcpTransport(std::unique_ptr<TcpSender> sender, std::unique_ptr<TcpReceiver> receiver,
                           std::shared_ptr<ProgressBell> bell)
    : sender_(std::move(sender)), receiver_(std::move(receiver)), bell_(std::move(bell)) {}

std::unique_ptr<SendLink> TcpTransport::send_link() {
  return sender_ ? std::make_unique<TcpSendLink>(sender_.get()) : nullptr;
}

std::unique_ptr<RecvLink> TcpTransport::recv_link() {
  return receiver_ ? std::make_unique<TcpRecvLink>(receiver_.get(), sender_.get()) : nullptr;
}

void TcpTransport::abort(int blamed) noexcept {
  if (sender_) sender_->abort(blamed);
}

void TcpTransport::sleep(std::chrono::microseconds max) {
  if (bell_) {
    bell_->wait(seen_, max);
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
