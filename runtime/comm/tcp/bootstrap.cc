#include "runtime/comm/tcp/bootstrap.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <set>

#include "runtime/error.h"

namespace muster::runtime::comm::tcp {
namespace {

int ms_left(Deadline deadline) {
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
  return left.count() <= 0 ? 0 : static_cast<int>(std::min<long long>(left.count(), 1 << 30));
}

// Waits for `events` on fd; false at the deadline.
bool wait_for(int fd, short events, Deadline deadline) {
  for (;;) {
    pollfd p{fd, events, 0};
    const int r = poll(&p, 1, ms_left(deadline));
    if (r > 0) return true;
    if (r == 0) return false;
    if (errno != EINTR) throw Error("TCP bootstrap: poll failed: " + errno_text(errno));
  }
}

void set_nonblocking(const Socket& s) {
  const int flags = fcntl(s.fd(), F_GETFL);
  if (flags < 0 || fcntl(s.fd(), F_SETFL, flags | O_NONBLOCK) != 0) {
    throw Error("TCP bootstrap: fcntl(O_NONBLOCK) failed: " + errno_text(errno));
  }
}

std::string peer_endpoint(const Socket& s) {
  sockaddr_in a{};
  socklen_t len = sizeof a;
  if (getpeername(s.fd(), reinterpret_cast<sockaddr*>(&a), &len) != 0) return "an unknown address";
  return format_endpoint(a.sin_addr, ntohs(a.sin_port));
}

}  // namespace

Listener Listener::open(in_addr address, std::size_t buffer_bytes) {
  Listener l;
  l.socket_ = Socket(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!l.socket_.valid()) throw Error("TCP bootstrap: socket() failed: " + errno_text(errno));
  set_buffers(l.socket_, buffer_bytes);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr = address;
  a.sin_port = 0;
  if (bind(l.socket_.fd(), reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
    throw Error("TCP bootstrap: cannot listen on " + format_endpoint(address, 0) + ": bind failed: " +
                errno_text(errno) + " (is that address this host's? see MUSTER_COMM_TCP_IFACE)");
  }
  if (listen(l.socket_.fd(), SOMAXCONN) != 0) throw Error("TCP bootstrap: listen failed: " + errno_text(errno));
  socklen_t len = sizeof a;
  getsockname(l.socket_.fd(), reinterpret_cast<sockaddr*>(&a), &len);
  set_nonblocking(l.socket_);
  l.address_ = address;
  l.port_ = ntohs(a.sin_port);
  return l;
}

Socket connect_stream(in_addr address, uint16_t port, int peer, const Hello& hello, Deadline deadline,
                      std::size_t buffer_bytes) {
  const std::string where = "rank " + std::to_string(peer) + " at " + format_endpoint(address, port);
  Socket s(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!s.valid()) throw Error("TCP bootstrap: socket() failed: " + errno_text(errno));
  set_buffers(s, buffer_bytes);
  set_nonblocking(s);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr = address;
  a.sin_port = htons(port);
  if (connect(s.fd(), reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 && errno != EINPROGRESS) {
    throw CommError("TCP bootstrap: cannot connect to " + where + ": " + errno_text(errno), peer);
  }
  if (!wait_for(s.fd(), POLLOUT, deadline)) {
    throw TimeoutError("TCP bootstrap: connecting to " + where + " timed out (a firewall, or the wrong " +
                           "interface: see MUSTER_COMM_TCP_IFACE)",
                       peer);
  }
  int err = 0;
  socklen_t len = sizeof err;
  getsockopt(s.fd(), SOL_SOCKET, SO_ERROR, &err, &len);
  if (err != 0) {
    throw CommError("TCP bootstrap: cannot connect to " + where + ": " + errno_text(err) +
                        " (wrong interface? see MUSTER_COMM_TCP_IFACE)",
                    peer);
  }
  // 32 bytes into a fresh socket's send buffer: written at once.
  if (send(s.fd(), &hello, sizeof hello, MSG_NOSIGNAL) != static_cast<ssize_t>(sizeof hello)) {
    throw CommError("TCP bootstrap: sending the hello to " + where + " failed: " + errno_text(errno), peer);
  }
  return s;
}

std::vector<Socket> accept_streams(const Listener& listener, int peer, int me, uint64_t token, int streams,
                                   Deadline deadline) {
  std::vector<ExpectedStream> expected;
  for (int s = 0; s < streams; ++s) expected.push_back(ExpectedStream{peer, static_cast<uint32_t>(s)});
  return accept_expected(listener, expected, me, token, deadline);
}

std::vector<Socket> accept_expected(const Listener& listener, const std::vector<ExpectedStream>& expected, int me,
                                    uint64_t token, Deadline deadline) {
  std::vector<Socket> out(expected.size());
  const std::string here = format_endpoint(listener.address(), listener.port());
  // The ranks whose streams have not all arrived, and the first of them.
  auto missing = [&] {
    std::set<int> ranks;
    for (std::size_t i = 0; i < expected.size(); ++i) {
      if (!out[i].valid()) ranks.insert(expected[i].from);
    }
    std::string who = ranks.size() == 1 ? "rank " : "ranks ";
    for (int r : ranks) who += (who.back() == ' ' ? "" : ", ") + std::to_string(r);
    return std::make_pair(who, ranks.empty() ? -1 : *ranks.begin());
  };
  for (std::size_t accepted = 0; accepted < expected.size();) {
    if (!wait_for(listener.socket().fd(), POLLIN, deadline)) {
      const auto [who, first] = missing();
      throw TimeoutError("TCP bootstrap: " + who + " did not connect to this rank's " + here + " (" +
                             std::to_string(accepted) + " of " + std::to_string(expected.size()) +
                             " streams arrived)",
                         first);
    }
    Socket s(accept4(listener.socket().fd(), nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK));
    if (!s.valid()) {
      if (errno == EAGAIN || errno == EINTR || errno == ECONNABORTED) continue;
      throw Error("TCP bootstrap: accept failed: " + errno_text(errno));
    }
    const std::string from = peer_endpoint(s);
    Hello h;
    std::size_t got = 0;
    while (got < sizeof h) {
      if (!wait_for(s.fd(), POLLIN, deadline)) {
        throw TimeoutError("TCP bootstrap: the connection from " + from + " sent " + std::to_string(got) +
                               " of the hello's 32 bytes before the deadline",
                           missing().second);
      }
      const ssize_t r = recv(s.fd(), reinterpret_cast<char*>(&h) + got, sizeof h - got, 0);
      if (r == 0) {
        throw CommError("TCP bootstrap: the connection from " + from + " closed after " + std::to_string(got) +
                            " of the hello's 32 bytes",
                        missing().second);
      }
      if (r < 0 && errno != EAGAIN && errno != EINTR) {
        throw CommError("TCP bootstrap: reading the hello from " + from + " failed: " + errno_text(errno),
                        missing().second);
      }
      if (r > 0) got += static_cast<std::size_t>(r);
    }
    std::string wrong;
    std::size_t slot = expected.size();
    if (h.magic != kHelloMagic) {
      wrong = "it is not a muster ring or mesh stream (bad magic)";
    } else if (h.version != kHelloVersion) {
      wrong = "protocol version " + std::to_string(h.version) + ", this rank speaks " + std::to_string(kHelloVersion);
    } else if (h.token != token) {
      wrong = "it belongs to another job (token mismatch)";
    } else {
      bool from_expected = false;
      for (std::size_t i = 0; i < expected.size(); ++i) {
        from_expected = from_expected || expected[i].from == h.from;
        if (expected[i].from == h.from && expected[i].stream == h.stream) slot = i;
      }
      if (h.to != me || !from_expected) {
        wrong = "it says rank " + std::to_string(h.from) + " -> rank " + std::to_string(h.to) + ", expected " +
                missing().first + " -> rank " + std::to_string(me);
        slot = expected.size();
      } else if (slot == expected.size()) {
        wrong = "stream " + std::to_string(h.stream) + " of rank " + std::to_string(h.from) +
                " is not one this rank expects";
      } else if (out[slot].valid()) {
        wrong = "rank " + std::to_string(h.from) + " stream " + std::to_string(h.stream) + " came twice";
      }
    }
    if (!wrong.empty()) {
      // Blame the rank this listener still waits for: the stranger may be anyone.
      throw CommError("TCP bootstrap: bad hello on " + here + " from " + from + ": " + wrong, missing().second);
    }
    out[slot] = std::move(s);
    ++accepted;
  }
  return out;
}

}  // namespace muster::runtime::comm::tcp
