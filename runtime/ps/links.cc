#include "runtime/ps/links.h"

#include <chrono>
#include <thread>

#include <boost/asio.hpp>

#include "runtime/error.h"
#include "runtime/ps/cluster.h"

namespace muster::runtime::ps {
namespace {

namespace asio = boost::asio;
using tcp = asio::ip::tcp;
using Clock = std::chrono::steady_clock;

}  // namespace

struct Links::Impl {
  struct Link {
    int index = 0;  // the PS task
    std::string address;
    std::unique_ptr<tcp::socket> sock;
    // Per exchange:
    std::vector<HeaderBytes> headers;
    std::vector<asio::const_buffer> out;
    std::vector<Expected*> in;
    std::size_t next = 0;
    HeaderBytes reply{};
    std::string message;
    bool writing = false, reading = false;
  };

  asio::io_context io;
  std::vector<Link> links;
  int timeout_ms;
  int sockbuf;
  std::string error;       // first failure of the current exchange
  bool error_is_timeout = false;
  int error_ps = -1;
  bool broken = false;

  std::vector<std::string> addresses;  // per PS task
  std::vector<int> streams;            // per PS task: its connections, in links in task order
  std::string name(int i) const {
    return "ps task " + std::to_string(i) + " (" + addresses[static_cast<std::size_t>(i)] + ")";
  }

  void fail(int ps, const std::string& msg, bool timeout = false) {
    if (error.empty()) {
      error = msg;
      error_ps = ps;
      error_is_timeout = timeout;
    }
    for (auto& l : links) {
      boost::system::error_code ec;
      if (l.sock) l.sock->close(ec);
    }
  }

  void io_failed(Link& l, const boost::system::error_code& ec, const std::string& what) {
    if (!error.empty()) return;
    if (ec == asio::error::eof || ec == asio::error::connection_reset || ec == asio::error::broken_pipe) {
      fail(l.index, name(l.index) + " closed the connection during " + what + " (" + ec.message() +
                        "): the ps task died or was stopped");
    } else {
      fail(l.index, name(l.index) + ": " + what + " failed: " + ec.message());
    }
  }

  void read_next(Link& l, const std::string& what) {
    if (l.next >= l.in.size()) {
      l.reading = false;
      return;
    }
    asio::async_read(*l.sock, asio::buffer(l.reply), [this, &l, what](boost::system::error_code ec, std::size_t) {
      if (ec) return io_failed(l, ec, what);
      FrameHeader h = decode_header(l.reply.data());
      if (h.magic != kMagic || h.version != kProtocolVersion) {
        return fail(l.index, name(l.index) + " sent a frame with a bad magic/version during " + what);
      }
      if (h.op == Op::kError) {
        if (h.length > (1u << 16)) return fail(l.index, name(l.index) + " sent an oversize error frame during " + what);
        l.message.assign(h.length, '\0');
        const bool timeout = h.aux == kErrorTimeout;
        return asio::async_read(*l.sock, asio::buffer(l.message), [this, &l, what, timeout](boost::system::error_code ec2, std::size_t) {
          if (ec2) return io_failed(l, ec2, what);
          fail(l.index, name(l.index) + " failed " + what + ": " + l.message, timeout);
        });
      }
      Expected& e = *l.in[l.next];
      if (h.op != e.op || h.slice != e.slice || h.length != e.count * sizeof(float)) {
        return fail(l.index, name(l.index) + " answered " + what + " with " + op_name(h.op) + " of slice " +
                                 std::to_string(h.slice) + " (" + std::to_string(h.length) + " bytes), expected slice " +
                                 std::to_string(e.slice) + " (" + std::to_string(e.count * 4) + " bytes)");
      }
      e.step = h.step;
      e.aux = h.aux;
      asio::async_read(*l.sock, asio::buffer(e.dst, e.count * sizeof(float)),
                       [this, &l, what](boost::system::error_code ec2, std::size_t) {
                         if (ec2) return io_failed(l, ec2, what);
                         ++l.next;
                         read_next(l, what);
                       });
    });
  }

  void connect(Link& l, const Clock::time_point deadline) {
    std::string host;
    unsigned short port = 0;
    split_address(l.address, &host, &port);
    std::string last = "no attempt";
    while (Clock::now() < deadline) {
      boost::system::error_code ec;
      tcp::resolver resolver(io);
      auto endpoints = resolver.resolve(host, std::to_string(port), ec);
      if (!ec) {
        auto sock = std::make_unique<tcp::socket>(io);
        boost::system::error_code cec = asio::error::timed_out;
        asio::async_connect(*sock, endpoints, [&](boost::system::error_code e, const tcp::endpoint&) { cec = e; });
        io.restart();
        io.run_for(deadline - Clock::now());
        if (!cec) {
          sock->set_option(tcp::no_delay(true), ec);
          if (sockbuf > 0) {
            sock->set_option(asio::socket_base::send_buffer_size(sockbuf), ec);
            sock->set_option(asio::socket_base::receive_buffer_size(sockbuf), ec);
          }
          l.sock = std::move(sock);
          return;
        }
        boost::system::error_code ignore;
        sock->close(ignore);
        io.restart();
        io.run();
        last = cec.message();
      } else {
        last = "cannot resolve " + host + ": " + ec.message();
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    broken = true;
    throw TimeoutError(name(l.index) + " not reachable within " + std::to_string(timeout_ms) + " ms: " + last, l.index);
  }
};

Links::Links(std::vector<std::string> ps, int timeout_ms, int socket_buffer_bytes) : impl_(std::make_unique<Impl>()) {
  impl_->timeout_ms = timeout_ms;
  impl_->sockbuf = socket_buffer_bytes;
  impl_->addresses = std::move(ps);
}

Links::~Links() {
  for (auto& l : impl_->links) {
    boost::system::error_code ec;
    if (l.sock) l.sock->close(ec);
  }
}

std::string Links::name(int ps) const { return impl_->name(ps); }
int Links::size() const { return static_cast<int>(impl_->addresses.size()); }

void Links::connect_all(const HelloPayload& hello, const std::vector<int>& streams) {
  auto& d = *impl_;
  MUSTER_CHECK(streams.size() == d.addresses.size() && d.links.empty(), "Links::connect_all: one stream count per PS task, once");
  d.streams = streams;
  for (std::size_t i = 0; i < d.addresses.size(); ++i) {
    MUSTER_CHECK(streams[i] >= 1 && streams[i] <= static_cast<int>(kMaxStreams), "Links: 1..kMaxStreams connections per PS task");
    for (int k = 0; k < streams[i]; ++k) {
      Impl::Link l;
      l.index = static_cast<int>(i);
      l.address = d.addresses[i];
      d.links.push_back(std::move(l));
    }
  }
  const auto deadline = Clock::now() + std::chrono::milliseconds(impl_->timeout_ms);
  for (auto& l : impl_->links) {
    HelloPayload mine = hello;
    mine.streams = static_cast<uint32_t>(d.streams[static_cast<std::size_t>(l.index)]);
    std::vector<unsigned char> payload(hello_size(mine));
    encode_hello(mine, payload.data());
    FrameHeader h;
    h.op = Op::kHello;
    h.slice = hello.worker_index;
    h.length = payload.size();
    HeaderBytes hb = encode_header(h);
    impl_->connect(l, deadline);
    boost::system::error_code ec;
    std::array<asio::const_buffer, 2> bufs{asio::buffer(hb), asio::buffer(payload)};
    asio::write(*l.sock, bufs, ec);
    if (ec) {
      impl_->broken = true;
      throw CommError(name(l.index) + ": sending hello failed: " + ec.message(), l.index);
    }
  }
}

// Protocol step d) of protocol.h from the worker's side: per PS, one gather
// write of every frame while the replies are read in order into place.
void Links::exchange(const std::vector<std::vector<Outgoing>>& out, std::vector<std::vector<Expected>>& in,
                     const std::string& what) {
  auto& d = *impl_;
  if (d.broken) throw CommError("ps client is unusable after an earlier failure: " + d.error);
  d.error.clear();
  // A slice's frames and replies all go over connection slice % streams of
  // its PS task, so each connection keeps the order of its own.
  std::size_t first = 0;  // of the current task's connections in d.links
  for (std::size_t j = 0; j < d.links.size(); ++j) {
    auto& l = d.links[j];
    if (j > 0 && d.links[j - 1].index != l.index) first = j;
    const auto n = static_cast<uint32_t>(d.streams[static_cast<std::size_t>(l.index)]);
    const auto stream_of = [n](uint32_t slice) { return static_cast<std::size_t>(slice % n); };
    const std::size_t k = j - first;
    const auto& frames = out[static_cast<std::size_t>(l.index)];
    l.headers.resize(frames.size());
    l.out.clear();
    for (std::size_t f = 0; f < frames.size(); ++f) {
      if (stream_of(frames[f].header.slice) != k) continue;
      encode_header(frames[f].header, l.headers[f].data());
      l.out.push_back(asio::buffer(l.headers[f]));
      if (frames[f].more.empty()) {
        if (frames[f].header.length > 0) l.out.push_back(asio::buffer(frames[f].data, frames[f].header.length));
      } else {
        for (const auto& [p, n] : frames[f].more) l.out.push_back(asio::buffer(p, n));
      }
    }
    l.in.clear();
    for (auto& e : in[static_cast<std::size_t>(l.index)]) {
      if (stream_of(e.slice) == k) l.in.push_back(&e);
    }
    l.next = 0;
    l.writing = !l.out.empty();
    l.reading = !l.in.empty();
    if (l.writing) {
      asio::async_write(*l.sock, l.out, [&d, &l, what](boost::system::error_code ec, std::size_t) {
        if (ec) return d.io_failed(l, ec, what);
        l.writing = false;
      });
    }
    if (l.reading) d.read_next(l, what);
  }
  d.io.restart();
  // The PS reports a missing worker itself after timeout_ms; wait a little
  // longer so its explanation, not ours, reaches the caller.
  d.io.run_for(std::chrono::milliseconds(d.timeout_ms + 2000));
  if (d.error.empty()) {
    for (auto& l : d.links) {
      if (l.writing || l.reading) {
        d.fail(l.index, name(l.index) + " did not answer " + what + " within " + std::to_string(d.timeout_ms) + " ms", true);
        break;
      }
    }
  }
  if (!d.error.empty()) {
    d.broken = true;
    for (auto& l : d.links) {
      boost::system::error_code ec;
      if (l.sock) l.sock->close(ec);
    }
    d.io.restart();
    d.io.run();  // drain the aborted handlers
    if (d.error_is_timeout) throw TimeoutError(d.error, d.error_ps);
    throw CommError(d.error, d.error_ps);
  }
}

void Links::send_done(uint32_t worker) {
  FrameHeader h;
  h.op = Op::kDone;
  h.slice = worker;
  HeaderBytes hb = encode_header(h);
  for (auto& l : impl_->links) {
    if (!l.sock || !l.sock->is_open()) continue;
    boost::system::error_code ec;
    asio::write(*l.sock, asio::buffer(hb), ec);
    l.sock->shutdown(tcp::socket::shutdown_send, ec);
    l.sock->close(ec);
  }
}

}  // namespace muster::runtime::ps
