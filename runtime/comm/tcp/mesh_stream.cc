#include "runtime/comm/tcp/mesh_stream.h"

#include <fcntl.h>

#include <cerrno>

#include "runtime/error.h"

namespace muster::runtime::comm::tcp {
namespace {

class MeshSendLink final : public SendLink {
 public:
  explicit MeshSendLink(TcpSender* s) : s_(s) {}
  bool try_send(const void* src, std::size_t bytes) override { return s_->try_send(src, bytes); }
  bool flushed() override { return s_->flushed(); }
  int peer() const override { return s_->peer(); }

 private:
  TcpSender* s_;
};

// Receiving also pushes what this stream still has to send, so two ranks
// that each wait to receive while holding the other's data keep moving.
class MeshRecvLink final : public RecvLink {
 public:
  MeshRecvLink(TcpReceiver* r, TcpSender* s) : r_(r), s_(s) {}
  void expect(std::size_t bytes) override { r_->expect(bytes); }
  void expect_into(void* dst, std::size_t bytes) override { r_->expect_into(dst, bytes); }
  const void* try_recv() override {
    s_->progress();
    return r_->try_recv();
  }
  void release() override { r_->release(); }
  int peer() const override { return r_->peer(); }

 private:
  TcpReceiver* r_;
  TcpSender* s_;
};

}  // namespace

MeshStream::MeshStream(Socket socket, int peer, std::size_t segment_bytes, std::size_t slots)
    : peer_(peer), segment_bytes_(segment_bytes) {
  Socket copy(fcntl(socket.fd(), F_DUPFD_CLOEXEC, 0));
  if (!copy.valid()) throw Error("TCP mesh: duplicating the stream to rank " + std::to_string(peer) + " failed: " +
                                 errno_text(errno));
  std::vector<Socket> out, in;
  out.push_back(std::move(socket));
  in.push_back(std::move(copy));
  sender_ = std::make_unique<TcpSender>(std::move(out), peer, slots);
  receiver_ = std::make_unique<TcpReceiver>(std::move(in), peer, segment_bytes, slots);
  send_link_ = std::make_unique<MeshSendLink>(sender_.get());
  recv_link_ = std::make_unique<MeshRecvLink>(receiver_.get(), sender_.get());
}

}  // namespace muster::runtime::comm::tcp
