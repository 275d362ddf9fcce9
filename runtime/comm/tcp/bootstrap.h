// Setting up ring streams between two ranks, without MPI: a listener on an
// ephemeral port, an outgoing stream that introduces itself with a Hello,
// and an accept loop that takes the left neighbour's streams and checks
// their Hellos.
//
// Hello (32 bytes, the first thing on every stream, connector -> acceptor):
//   magic "MUSTERTC", version, from rank, to rank, stream index, job token.
// The token is rank 0's random number, shared through the bootstrap, so a
// stream from another job (or anything else that finds the port) is told
// apart. A Hello that does not check out throws CommError saying which
// field was wrong and where the connection came from.
//
// Every wait has a deadline: TimeoutError naming the peer rank.
#pragma once

#include <netinet/in.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "runtime/comm/tcp/socket.h"

namespace muster::runtime::comm::tcp {

using Deadline = std::chrono::steady_clock::time_point;

constexpr uint64_t kHelloMagic = 0x4354524554535543ULL;  // "MUSTERTC" read little-endian
constexpr uint32_t kHelloVersion = 1;

struct Hello {
  uint64_t magic = kHelloMagic;
  uint32_t version = kHelloVersion;
  int32_t from = -1;
  int32_t to = -1;
  uint32_t stream = 0;
  uint64_t token = 0;
};
static_assert(sizeof(Hello) == 32, "Hello is part of the wire format");

class Listener {
 public:
  // Binds `address` on an ephemeral port and listens; accepted streams get
  // socket buffers of `buffer_bytes` (0: autotuning). Throws Error naming
  // the address on failure.
  static Listener open(in_addr address, std::size_t buffer_bytes = 0);
  in_addr address() const { return address_; }
  uint16_t port() const { return port_; }
  const Socket& socket() const { return socket_; }

 private:
  Socket socket_;
  in_addr address_{};
  uint16_t port_ = 0;
};

// Connects to `peer` at address:port and sends `hello`. CommError naming the
// peer and endpoint when refused/unreachable, TimeoutError past `deadline`.
Socket connect_stream(in_addr address, uint16_t port, int peer, const Hello& hello, Deadline deadline,
                      std::size_t buffer_bytes = 0);

// Accepts `streams` connections on `listener` whose Hellos say from `peer`
// to `me` with `token`, and returns them ordered by stream index.
std::vector<Socket> accept_streams(const Listener& listener, int peer, int me, uint64_t token, int streams,
                                   Deadline deadline);

// One connection a listener waits for: from rank `from`, stream `stream`.
struct ExpectedStream {
  int from = -1;
  uint32_t stream = 0;
};
// Accepts one connection for each of `expected` (in any order of arrival)
// whose Hello names this rank `me` and `token`, and returns them in the
// order of `expected`. TimeoutError names the ranks that did not connect;
// a Hello matching nothing expected (or one that came twice) is a CommError.
std::vector<Socket> accept_expected(const Listener& listener, const std::vector<ExpectedStream>& expected, int me,
                                    uint64_t token, Deadline deadline);

}  // namespace muster::runtime::comm::tcp
