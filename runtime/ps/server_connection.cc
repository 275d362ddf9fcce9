// Connection: its life (slot, deadline, loss), the replies it writes and the
// payload reads. The checks of each frame are in server_frames.cc.

#include "runtime/ps/server_connection.h"

#include <spdlog/spdlog.h>

namespace muster::runtime::ps {

Connection::Connection(PsServer::Impl& s, tcp::socket sock) : s_(s), sock_(std::move(sock)) {
  boost::system::error_code ec;
  auto ep = sock_.remote_endpoint(ec);
  peer_ = ec ? std::string("?") : ep.address().to_string() + ":" + std::to_string(ep.port());
}

Connection::~Connection() {
  release_init_buffer();
  release_slot();
}

void Connection::start() {
  set_deadline(s_.opt_.hello_timeout_ms);  // the whole hello, never extended
  read_header();
}

void Connection::send_params(uint32_t slice, int64_t step, std::shared_ptr<std::vector<float>> values, Op op,
                             uint32_t aux) {
  asio::post(sock_.get_executor(), [self = shared_from_this(), slice, step, values = std::move(values), op, aux]() mutable {
    FrameHeader h;
    h.op = op;
    h.dtype = static_cast<uint8_t>(DataType::kFloat32);
    h.slice = slice;
    h.aux = op == Op::kParams ? self->stale_ : aux;  // read on the strand, like stale_'s writes
    h.step = step;
    h.length = values->size() * sizeof(float);
    encode_header(h, self->out_.data());
    self->sending_ = std::move(values);
    self->set_deadline(self->s_.opt_.frame_timeout_ms);  // a client that never reads loses only itself
    std::array<asio::const_buffer, 2> bufs{asio::buffer(self->out_), asio::buffer(*self->sending_)};
    asio::async_write(self->sock_, bufs, [self](boost::system::error_code ec, std::size_t n) {
      self->sending_.reset();
      self->s_.bytes_out_ += n;
      if (ec) return self->closed(ec, "writing params");
      self->read_header();
    });
  });
}

void Connection::send_error(const std::string& message, bool timeout) {
  asio::post(sock_.get_executor(), [self = shared_from_this(), message, timeout] {
    self->err_ = message;
    FrameHeader h;
    h.op = Op::kError;
    h.aux = timeout ? kErrorTimeout : 0;
    h.length = message.size();
    encode_header(h, self->out_.data());
    self->set_deadline(self->s_.opt_.frame_timeout_ms);
    std::array<asio::const_buffer, 2> bufs{asio::buffer(self->out_), asio::buffer(self->err_)};
    asio::async_write(self->sock_, bufs, [self](boost::system::error_code ec, std::size_t) {
      if (ec) return self->shut();
      // Half-close and discard what the client still sends until it
      // closes (or the deadline passes): closing with unread bytes would
      // reset the connection before the client has read the error.
      boost::system::error_code ignore;
      self->sock_.shutdown(tcp::socket::shutdown_send, ignore);
      self->drain();
    });
  });
}

void Connection::close() {
  asio::post(sock_.get_executor(), [self = shared_from_this()] { self->shut(); });
}

void Connection::expire_if_late(Clock::time_point now) {
  const int64_t d = deadline_.load();
  if (d == 0 || now.time_since_epoch().count() < d) return;
  asio::post(sock_.get_executor(), [self = shared_from_this()] {
    const int64_t d2 = self->deadline_.load();
    if (d2 == 0 || Clock::now().time_since_epoch().count() < d2 || !self->sock_.is_open()) return;
    ++self->s_.timed_out_;
    spdlog::warn("{}: closing connection from {} (worker {}): {}", self->s_.name(), self->peer_, self->worker_,
                 self->authenticated()
                     ? "no progress on a started frame within " + std::to_string(self->s_.opt_.frame_timeout_ms) + " ms"
                     : "no hello within " + std::to_string(self->s_.opt_.hello_timeout_ms) + " ms");
    self->shut();
  });
}

bool Connection::evict() {
  if (evicted_.exchange(true)) return false;
  asio::post(sock_.get_executor(), [self = shared_from_this()] {
    if (self->authenticated() || !self->sock_.is_open()) return;
    ++self->s_.refused_;
    spdlog::warn("{}: closing connection from {}: it has not said hello and the connection limit ({}) is reached",
                 self->s_.name(), self->peer_, self->s_.opt_.max_connections);
    self->shut();
  });
  return true;
}

void Connection::set_deadline(int ms) {
  deadline_ = (Clock::now() + std::chrono::milliseconds(ms)).time_since_epoch().count();
}

void Connection::progress() {
  if (authenticated()) set_deadline(s_.opt_.frame_timeout_ms);
}

void Connection::drain() {
  sock_.async_read_some(asio::buffer(in_), [self = shared_from_this()](boost::system::error_code ec, std::size_t) {
    if (ec) return self->shut();
    self->drain();
  });
}

void Connection::shut() {
  lost();
  boost::system::error_code ec;
  sock_.shutdown(tcp::socket::shutdown_both, ec);
  sock_.close(ec);
}

void Connection::read_header() {
  header_got_ = 0;
  if (authenticated()) deadline_ = 0;  // idle between frames is fine
  read_header_rest();
}

void Connection::read_header_rest() {
  sock_.async_read_some(asio::buffer(in_.data() + header_got_, kHeaderSize - header_got_),
                        [self = shared_from_this()](boost::system::error_code ec, std::size_t n) {
                          self->header_got_ += n;
                          self->s_.bytes_in_ += n;
                          if (ec) {
                            if (self->header_got_ > 0 && ec == asio::error::eof) {
                              return self->bad_frame("truncated frame header (" + std::to_string(self->header_got_) +
                                                     " of " + std::to_string(kHeaderSize) + " bytes)");
                            }
                            return self->closed(ec, "reading a frame header");
                          }
                          if (self->header_got_ < kHeaderSize) {
                            self->progress();
                            return self->read_header_rest();
                          }
                          self->on_header();
                        });
}

void Connection::bad_frame(const std::string& reason) {
  ++s_.bad_frames_;
  spdlog::warn("{}: closing connection from {} (worker {}): {}", s_.name(), peer_, worker_.load(), reason);
  shut();
}

void Connection::closed(const boost::system::error_code& ec, const char* during) {
  if (ec != asio::error::eof && ec != asio::error::operation_aborted && ec != asio::error::bad_descriptor &&
      !s_.stopping()) {
    spdlog::info("{}: connection from {} (worker {}) lost while {}: {}", s_.name(), peer_, worker_.load(), during,
                 ec.message());
  }
  lost();
}

void Connection::lost() {
  release_init_buffer();
  release_slot();
  if (!reported_lost_) {
    reported_lost_ = true;
    s_.connection_lost(worker_, done_);
  }
}

void Connection::release_slot() {
  if (!slot_released_) {
    slot_released_ = true;
    --s_.open_;
  }
}

void Connection::release_init_buffer() {
  s_.init_buffered_ -= init_accounted_;
  init_accounted_ = 0;
}

void Connection::read_init(uint64_t off) {
  const uint64_t k = std::min<uint64_t>(kPayloadPieceBytes, h_.length - off);
  init_->resize(static_cast<std::size_t>((off + k) / sizeof(float)));
  const uint64_t now_held = init_->capacity() * sizeof(float);
  s_.init_buffered_ += now_held - init_accounted_;
  init_accounted_ = now_held;
  auto* dst = reinterpret_cast<unsigned char*>(init_->data());
  read_payload(dst, off + k, off, [this, off, k] {
    if (off + k < h_.length) return read_init(off + k);
    std::string why = s_.init(h_.slice, h_.step, h_.aux, std::move(init_));
    release_init_buffer();
    if (!why.empty()) return reject(why);
    read_header();
  });
}

void Connection::shut_after_error(const std::string& message) {
  lost();
  send_error(message);
}

void Connection::reject(const std::string& why) {
  ++s_.bad_frames_;
  spdlog::warn("{}: rejecting worker {} from {}: {}", s_.name(), worker_.load(), peer_, why);
  lost();
  send_error(s_.name() + ": " + why);
}

}  // namespace muster::runtime::ps
