// Internal to server.cc (split for size): one worker's connection to the PS.
#pragma once

#include "runtime/ps/server_impl.h"

namespace muster::runtime::ps {

// One worker's connection. Every handler runs on the connection's strand and
// the connection has at most one operation in flight: read a frame, handle
// it, maybe wait (pull), write the answer, read the next frame.
//
// Limits (server.h): nothing is allocated for a frame before its header has
// passed every check; payloads are read in pieces of kPayloadPieceBytes and a
// deadline (deadline_, checked by PsServer::Impl::sweep) bounds the hello and
// every started frame or reply. Any violation closes this connection only.
class Connection : public std::enable_shared_from_this<Connection> {
 public:
  Connection(PsServer::Impl& s, tcp::socket sock) : s_(s), sock_(std::move(sock)) {
    boost::system::error_code ec;
    auto ep = sock_.remote_endpoint(ec);
    peer_ = ec ? std::string("?") : ep.address().to_string() + ":" + std::to_string(ep.port());
  }
  ~Connection() {
    release_init_buffer();
    release_slot();
  }

  void start() {
    set_deadline(s_.opt_.hello_timeout_ms);  // the whole hello, never extended
    read_header();
  }

  // Answers a pull (kParams) or a state pull (kState); any thread.
  void send_params(uint32_t slice, int64_t step, std::shared_ptr<std::vector<float>> values, Op op = Op::kParams,
                   uint32_t aux = 0) {
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

  // Sends kError and closes; any thread.
  void send_error(const std::string& message, bool timeout = false) {
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

  void close() {
    asio::post(sock_.get_executor(), [self = shared_from_this()] { self->shut(); });
  }

  // Closes the connection if its deadline has passed (sweep, any thread).
  void expire_if_late(Clock::time_point now) {
    const int64_t d = deadline_.load();
    if (d == 0 || now.time_since_epoch().count() < d) return;
    asio::post(sock_.get_executor(), [self = shared_from_this()] {
      const int64_t d2 = self->deadline_.load();
      if (d2 == 0 || Clock::now().time_since_epoch().count() < d2 || !self->sock_.is_open()) return;
      ++self->s_.timed_out_;
      spdlog::warn("{}: closing connection from {} (worker {}): {}", self->s_.name(), self->peer_, self->worker_,
                   self->authenticated() ? "no progress on a started frame within " + std::to_string(self->s_.opt_.frame_timeout_ms) + " ms"
                                         : "no hello within " + std::to_string(self->s_.opt_.hello_timeout_ms) + " ms");
      self->shut();
    });
  }

  // Evicted to make room under max_connections (any thread); true the first time.
  bool evict() {
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

  bool authenticated() const { return worker_.load() >= 0; }
  bool evicted() const { return evicted_.load(); }
  Clock::time_point accepted() const { return accepted_; }

 private:
  void set_deadline(int ms) { deadline_ = (Clock::now() + std::chrono::milliseconds(ms)).time_since_epoch().count(); }
  // Extends the deadline of a started frame after progress; the hello's stays.
  void progress() {
    if (authenticated()) set_deadline(s_.opt_.frame_timeout_ms);
  }

  void drain() {
    sock_.async_read_some(asio::buffer(in_), [self = shared_from_this()](boost::system::error_code ec, std::size_t) {
      if (ec) return self->shut();
      self->drain();
    });
  }

  void shut() {
    lost();
    boost::system::error_code ec;
    sock_.shutdown(tcp::socket::shutdown_both, ec);
    sock_.close(ec);
  }

  // Reads a header with read_some, so that a partial one arms the deadline.
  void read_header() {
    header_got_ = 0;
    if (authenticated()) deadline_ = 0;  // idle between frames is fine
    read_header_rest();
  }

  void read_header_rest() {
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

  void bad_frame(const std::string& reason) {
    ++s_.bad_frames_;
    spdlog::warn("{}: closing connection from {} (worker {}): {}", s_.name(), peer_, worker_.load(), reason);
    shut();
  }

  void closed(const boost::system::error_code& ec, const char* during) {
    if (ec != asio::error::eof && ec != asio::error::operation_aborted && ec != asio::error::bad_descriptor &&
        !s_.stopping()) {
      spdlog::info("{}: connection from {} (worker {}) lost while {}: {}", s_.name(), peer_, worker_.load(), during, ec.message());
    }
    lost();
  }

  void lost() {
    release_init_buffer();
    release_slot();
    if (!reported_lost_) {
      reported_lost_ = true;
      s_.connection_lost(worker_, done_);
    }
  }

  void release_slot() {
    if (!slot_released_) {
      slot_released_ = true;
      --s_.open_;
    }
  }

  void release_init_buffer() {
    s_.init_buffered_ -= init_accounted_;
    init_accounted_ = 0;
  }

  // Reads `n` payload bytes into `dst` in pieces, each extending the deadline.
  template <typename Then>
  void read_payload(unsigned char* dst, uint64_t n, uint64_t off, Then then) {
    const uint64_t k = std::min<uint64_t>(kPayloadPieceBytes, n - off);
    progress();
    asio::async_read(sock_, asio::buffer(dst + off, k), [self = shared_from_this(), dst, n, off, k, then](boost::system::error_code ec, std::size_t got) {
      self->s_.bytes_in_ += got;
      if (ec == asio::error::eof) {
        return self->bad_frame("truncated " + std::string(op_name(self->h_.op)) + " frame: " + std::to_string(off + got) + " of " +
                               std::to_string(self->h_.length) + " payload bytes");
      }
      if (ec) return self->closed(ec, "reading a payload");
      if (off + k == n) return then();
      self->read_payload(dst, n, off + k, then);
    });
  }

  // An init payload: the buffer grows by one piece only once the previous
  // piece has arrived, so a declared length costs nothing until it is sent.
  void read_init(uint64_t off) {
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

  void on_header();  // server_frames.cc: checks a header, then reads and handles its frame
  void on_hello();

  void shut_after_error(const std::string& message) {
    lost();
    send_error(message);
  }

  void reject(const std::string& why) {
    ++s_.bad_frames_;
    spdlog::warn("{}: rejecting worker {} from {}: {}", s_.name(), worker_.load(), peer_, why);
    lost();
    send_error(s_.name() + ": " + why);
  }

 public:
  std::atomic<int> worker_{-1};  // set by the hello; -1 before

 private:
  PsServer::Impl& s_;
  tcp::socket sock_;
  std::string peer_;
  const Clock::time_point accepted_ = Clock::now();
  std::atomic<int64_t> deadline_{0};
  std::atomic<bool> evicted_{false};  // Clock ticks; 0: none (idle between frames, or waiting for a step)
  bool done_ = false;
  bool reported_lost_ = false;
  uint32_t stale_ = 0;  // this connection's pushes dropped as stale (sent in kParams' aux)
  bool slot_released_ = false;
  HeaderBytes in_{};
  std::size_t header_got_ = 0;
  FrameHeader h_;
  std::vector<float> buf_;
  std::vector<unsigned char> small_;
  std::shared_ptr<std::vector<float>> init_;
  uint64_t init_accounted_ = 0;  // bytes of init_ counted in init_buffered_
  HeaderBytes out_{};
  std::shared_ptr<std::vector<float>> sending_;
  std::string err_;
};

}  // namespace muster::runtime::ps
