// Internal to server.cc (split for size): one worker's connection to the PS.
#pragma once

#include "muster/runtime/ps/server_impl.h"

namespace muster::runtime::ps {

// One worker's connection. Every handler runs on the connection's strand and
// the connection has at most one operation in flight: read a frame, handle
// it, maybe wait (pull), write the answer, read the next frame.
class Connection : public std::enable_shared_from_this<Connection> {
 public:
  Connection(PsServer::Impl& s, tcp::socket sock) : s_(s), sock_(std::move(sock)) {
    boost::system::error_code ec;
    auto ep = sock_.remote_endpoint(ec);
    peer_ = ec ? std::string("?") : ep.address().to_string() + ":" + std::to_string(ep.port());
  }

  void start() { read_header(); }

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
      std::array<asio::const_buffer, 2> bufs{asio::buffer(self->out_), asio::buffer(*self->sending_)};
      asio::async_write(self->sock_, bufs, [self](boost::system::error_code ec, std::size_t n) {
        self->sending_.reset();
        self->s_.bytes_out_ += n;
        if (ec) return self->closed(ec, "writing params", 0);
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
      std::array<asio::const_buffer, 2> bufs{asio::buffer(self->out_), asio::buffer(self->err_)};
      asio::async_write(self->sock_, bufs, [self](boost::system::error_code, std::size_t) { self->close(); });
    });
  }

  void close() {
    asio::post(sock_.get_executor(), [self = shared_from_this()] {
      boost::system::error_code ec;
      self->sock_.shutdown(tcp::socket::shutdown_both, ec);
      self->sock_.close(ec);
    });
  }

 private:
  void read_header() {
    asio::async_read(sock_, asio::buffer(in_), [self = shared_from_this()](boost::system::error_code ec, std::size_t n) {
      if (ec) return self->closed(ec, "reading a frame header", n);
      self->on_header();
    });
  }

  void bad_frame(const std::string& reason) {
    ++s_.bad_frames_;
    spdlog::warn("{}: closing connection from {} (worker {}): {}", s_.name(), peer_, worker_, reason);
    lost();
    boost::system::error_code ec;
    sock_.shutdown(tcp::socket::shutdown_both, ec);
    sock_.close(ec);
  }

  void closed(const boost::system::error_code& ec, const char* during, std::size_t partial) {
    if (partial > 0 && partial < kHeaderSize && std::string(during) == "reading a frame header") {
      return bad_frame("truncated frame header (" + std::to_string(partial) + " of " + std::to_string(kHeaderSize) + " bytes)");
    }
    if (ec != asio::error::eof && ec != asio::error::operation_aborted && ec != asio::error::bad_descriptor &&
        !s_.stopping()) {
      spdlog::info("{}: connection from {} (worker {}) lost while {}: {}", s_.name(), peer_, worker_, during, ec.message());
    }
    lost();
  }

  void lost() {
    if (!reported_lost_) {
      reported_lost_ = true;
      s_.connection_lost(worker_, done_);
    }
  }

  template <typename Buffer, typename Then>
  void read_payload(Buffer buf, Then then) {
    asio::async_read(sock_, buf, [self = shared_from_this(), then](boost::system::error_code ec, std::size_t n) {
      self->s_.bytes_in_ += n + kHeaderSize;
      if (ec == asio::error::eof) {
        return self->bad_frame("truncated " + std::string(op_name(self->h_.op)) + " frame: " + std::to_string(n) + " of " +
                               std::to_string(self->h_.length) + " payload bytes");
      }
      if (ec) return self->closed(ec, "reading a payload", 0);
      then();
    });
  }

  void on_header() {
    h_ = decode_header(in_.data());
    if (h_.magic != kMagic) return bad_frame("bad magic 0x" + hex(h_.magic) + " (not a muster ps frame)");
    if (h_.version != kProtocolVersion) {
      return bad_frame("unsupported protocol version " + std::to_string(h_.version) + " (this PS speaks " +
                       std::to_string(kProtocolVersion) + ")");
    }
    const uint8_t raw_op = static_cast<uint8_t>(h_.op);
    if (!op_valid(raw_op) || h_.op == Op::kParams || h_.op == Op::kError || h_.op == Op::kState) {
      return bad_frame("unknown op " + std::to_string(raw_op));
    }
    if (h_.dtype != 0 && !dtype_valid(h_.dtype)) return bad_frame("unknown dtype " + std::to_string(h_.dtype));
    if (h_.length > s_.opt_.max_frame_bytes) {
      return bad_frame("oversize frame: " + std::to_string(h_.length) + " bytes > limit " + std::to_string(s_.opt_.max_frame_bytes));
    }
    if (worker_ < 0 && h_.op != Op::kHello) return bad_frame(std::string("first frame must be hello, got ") + op_name(h_.op));
    if (worker_ >= 0 && h_.op == Op::kHello) return bad_frame("a second hello on the same connection");
    switch (h_.op) {
      case Op::kHello:
        if (h_.length != kHelloSize) return bad_frame("hello length " + std::to_string(h_.length) + " != " + std::to_string(kHelloSize));
        small_.resize(kHelloSize);
        return read_payload(asio::buffer(small_), [this] {
          std::string why = s_.hello(*this, decode_hello(small_.data()));
          if (!why.empty()) return reject(why);
          read_header();
        });
      case Op::kInit: {
        if (h_.dtype != static_cast<uint8_t>(DataType::kFloat32)) return bad_frame("init: unsupported dtype " + std::to_string(h_.dtype));
        const uint64_t parts = 1 + static_cast<uint64_t>(h_.aux);  // values + optimizer state buffers
        if (h_.aux > 8) return bad_frame("init: " + std::to_string(h_.aux) + " optimizer state buffers (at most 8)");
        if (h_.length == 0 || h_.length % (4 * parts) != 0) {
          return bad_frame("init: length " + std::to_string(h_.length) + " is not a positive multiple of " + std::to_string(4 * parts));
        }
        if (Slice* s = s_.find_slice(h_.slice); s != nullptr && s->size * 4 * parts != h_.length) {
          return bad_frame("init: length " + std::to_string(h_.length) + " does not match slice " + std::to_string(h_.slice) +
                           " (" + std::to_string(s->size * 4 * parts) + " bytes)");
        }
        init_ = std::make_shared<std::vector<float>>(h_.length / 4);
        return read_payload(asio::buffer(*init_), [this] {
          std::string why = s_.init(h_.slice, h_.step, h_.aux, std::move(init_));
          if (!why.empty()) return reject(why);
          read_header();
        });
      }
      case Op::kPush: {
        if (h_.dtype != static_cast<uint8_t>(DataType::kFloat32)) return bad_frame("push: unsupported dtype " + std::to_string(h_.dtype));
        Slice* s = s_.find_slice(h_.slice);
        if (s == nullptr) return bad_frame("push to slice " + std::to_string(h_.slice) + ", which was never initialised");
        if (s->size * 4 != h_.length) {
          return bad_frame("push: length " + std::to_string(h_.length) + " does not match slice " + std::to_string(h_.slice) +
                           " (" + std::to_string(s->size * 4) + " bytes)");
        }
        buf_.resize(s->size);
        return read_payload(asio::buffer(buf_), [this, s] {
          bool stale = false;
          std::string why = s_.push(*s, h_.step, buf_, &stale);
          if (!why.empty()) return bad_frame(why);
          if (stale) ++stale_;
          read_header();
        });
      }
      case Op::kPull:
        if (h_.length != 0) return bad_frame("pull with a payload of " + std::to_string(h_.length) + " bytes");
        s_.bytes_in_ += kHeaderSize;
        return s_.pull(shared_from_this(), h_.slice, h_.step);  // send_params() resumes reading
      case Op::kPullState:
        if (h_.length != 0) return bad_frame("pull_state with a payload of " + std::to_string(h_.length) + " bytes");
        s_.bytes_in_ += kHeaderSize;
        return s_.pull_state(shared_from_this(), h_.slice);
      case Op::kDone:
        if (h_.length != 0) return bad_frame("done with a payload of " + std::to_string(h_.length) + " bytes");
        done_ = true;
        s_.worker_done(worker_);
        return read_header();
      default:
        return bad_frame("unknown op " + std::to_string(raw_op));
    }
  }

  void reject(const std::string& why) {
    ++s_.bad_frames_;
    spdlog::warn("{}: rejecting worker {} from {}: {}", s_.name(), worker_, peer_, why);
    lost();
    send_error(s_.name() + ": " + why);
  }

  static std::string hex(uint32_t v) {
    char b[16];
    std::snprintf(b, sizeof b, "%08x", v);
    return b;
  }

 public:
  int worker_ = -1;

 private:
  PsServer::Impl& s_;
  tcp::socket sock_;
  std::string peer_;
  bool done_ = false;
  bool reported_lost_ = false;
  uint32_t stale_ = 0;  // this connection's pushes dropped as stale (sent in kParams' aux)
  HeaderBytes in_{};
  FrameHeader h_;
  std::vector<float> buf_;
  std::vector<unsigned char> small_;
  std::shared_ptr<std::vector<float>> init_;
  HeaderBytes out_{};
  std::shared_ptr<std::vector<float>> sending_;
  std::string err_;
};

}  // namespace muster::runtime::ps
