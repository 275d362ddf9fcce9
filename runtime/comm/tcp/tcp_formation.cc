#include "runtime/comm/tcp/tcp_formation.h"

#include <algorithm>
#include <cstring>
#include <random>

#include "runtime/comm/tcp/bootstrap.h"
#include "runtime/comm/tcp/interfaces.h"
#include "runtime/error.h"

namespace muster::runtime::comm::tcp {
namespace {

enum Flags : uint8_t { kSendTcp = 1, kRecvTcp = 2, kListening = 4 };

struct Endpoint {
  uint32_t address;  // network order
  uint16_t port;
  uint8_t flags;
  uint8_t streams;
  uint64_t token;
};
static_assert(sizeof(Endpoint) == 16, "Endpoint travels as 16 bytes");

std::string r(int rank) { return "rank " + std::to_string(rank); }

// b): what this rank needs from the data its ring neighbours and mesh peers published.
void check_peers(const std::vector<Endpoint>& all, int me, int left, int right, const Endpoint& mine,
                 const TcpPlan& plan) {
  const Endpoint& L = all[static_cast<std::size_t>(left)];
  const Endpoint& R = all[static_cast<std::size_t>(right)];
  const char* hint = "; set MUSTER_COMM_RING_TRANSPORT alike on every rank";
  if (((mine.flags & kSendTcp) != 0) != ((R.flags & kRecvTcp) != 0)) {
    throw CommError("TCP bootstrap: " + r(me) + (mine.flags & kSendTcp ? " sends" : " does not send") +
                        " to its right neighbour " + r(right) + " over TCP, but " + r(right) +
                        (R.flags & kRecvTcp ? " expects" : " does not expect") + " it" + hint,
                    right);
  }
  if (((mine.flags & kRecvTcp) != 0) != ((L.flags & kSendTcp) != 0)) {
    throw CommError("TCP bootstrap: " + r(me) + (mine.flags & kRecvTcp ? " expects" : " does not expect") +
                        " TCP from its left neighbour " + r(left) + ", but " + r(left) +
                        (L.flags & kSendTcp ? " sends" : " does not send") + " it" + hint,
                    left);
  }
  if ((mine.flags & kSendTcp) && (R.streams != mine.streams)) {
    throw CommError("TCP bootstrap: " + r(right) + " uses " + std::to_string(R.streams) + " TCP streams, " + r(me) +
                        " " + std::to_string(mine.streams) + "; set MUSTER_COMM_TCP_STREAMS alike on every rank",
                    right);
  }
  auto listening = [&](int peer) {
    const Endpoint& P = all[static_cast<std::size_t>(peer)];
    if (!(P.flags & kListening) || P.port == 0 || P.address == 0) {
      throw CommError("TCP bootstrap: " + r(peer) + " published no TCP endpoint (its listener failed; see its error)",
                      peer);
    }
  };
  if (mine.flags & kSendTcp) listening(right);
  for (int p : plan.mesh_peers) {
    if (p > me) listening(p);
  }
}

// c) and e): every rank learns whether every other one got its part done,
// and whom each failing rank blames (itself when its own step failed), so
// all name the same culprit.
void agree(Bootstrap& bootstrap, const std::exception_ptr& failure, const char* phase,
           std::chrono::milliseconds timeout) {
  const int me = bootstrap.rank();
  int blamed = -2;  // -2: fine
  if (failure) {
    blamed = me;
    try {
      std::rethrow_exception(failure);
    } catch (const CommError& e) {
      if (e.rank() >= 0) blamed = e.rank();
    } catch (...) {
    }
  }
  const auto all = bootstrap.allgather(std::to_string(blamed), std::string("TCP ") + phase, timeout);
  if (failure) std::rethrow_exception(failure);
  int reporter = -1;
  for (std::size_t k = 0; k < all.size(); ++k) {
    const int b = std::stoi(all[k]);
    if (b == static_cast<int>(k)) {
      throw CommError("TCP bootstrap: " + r(static_cast<int>(k)) + " failed to " + phase + " (see its error); " +
                          r(me) + " gives up too",
                      static_cast<int>(k));
    }
    if (b != -2 && reporter < 0) reporter = static_cast<int>(k);
  }
  if (reporter >= 0) {
    const int b = std::stoi(all[static_cast<std::size_t>(reporter)]);
    throw CommError("TCP bootstrap: " + r(reporter) + " failed to " + phase + " because of " + r(b) + " (see " +
                        r(reporter) + "'s error); " + r(me) + " gives up too",
                    b);
  }
}

Hello hello(int from, int to, uint32_t stream, uint64_t token) {
  Hello h;
  h.from = from;
  h.to = to;
  h.stream = stream;
  h.token = token;
  return h;
}

}  // namespace

TcpLinks connect_tcp(Bootstrap& bootstrap, const TcpPlan& plan, const TcpFormationOptions& options) {
  const int me = bootstrap.rank(), size = bootstrap.size();
  const int left = (me + size - 1) % size, right = (me + 1) % size;
  if (options.streams < 1 || options.streams > 64) {
    throw InvalidArgument("TCP streams per link must be 1..64, got " + std::to_string(options.streams));
  }
  const auto deadline = std::chrono::steady_clock::now() + options.formation_timeout;
  const bool any_tcp = plan.ring_send || plan.ring_recv || !plan.mesh_peers.empty();

  // a) listen.
  Endpoint mine{};
  mine.flags = static_cast<uint8_t>((plan.ring_send ? kSendTcp : 0) | (plan.ring_recv ? kRecvTcp : 0));
  mine.streams = static_cast<uint8_t>(options.streams);
  if (me == 0) mine.token = std::random_device{}() * 0x100000000ULL + std::random_device{}();
  Listener listener;
  std::exception_ptr failure;
  if (any_tcp) {
    try {
      const in_addr address =
          choose_address(options.interface_spec, local_interfaces(), options.whole_job_on_one_host);
      listener = Listener::open(address, options.socket_buffer_bytes);
      mine.address = listener.address().s_addr;
      mine.port = listener.port();
      mine.flags |= kListening;
    } catch (const Error&) {
      failure = std::current_exception();
    }
  }
  // b) exchange and check; c) agree.
  std::string raw(reinterpret_cast<const char*>(&mine), sizeof mine);
  const auto gathered = bootstrap.allgather(raw, "TCP endpoints", options.formation_timeout);
  std::vector<Endpoint> all(static_cast<std::size_t>(size));
  for (std::size_t k = 0; k < all.size(); ++k) {
    if (gathered[k].size() != sizeof(Endpoint)) {
      throw CommError("TCP bootstrap: rank " + std::to_string(k) + " published " + std::to_string(gathered[k].size()) +
                          " bytes as its endpoint, not 16 (a different muster version?)",
                      static_cast<int>(k));
    }
    std::memcpy(&all[k], gathered[k].data(), sizeof(Endpoint));
  }
  if (!failure && size > 1) {
    try {
      check_peers(all, me, left, right, mine, plan);
    } catch (const Error&) {
      failure = std::current_exception();
    }
  }
  agree(bootstrap, failure, "open its TCP listener or agree on the links", options.formation_timeout);
  TcpLinks links;
  links.mesh.resize(static_cast<std::size_t>(size));
  links.p2p.resize(static_cast<std::size_t>(size));
  if (!any_tcp) {
    agree(bootstrap, nullptr, "connect its TCP streams", options.formation_timeout);
    return links;
  }

  // d) connect to the right and to higher mesh peers; accept the rest.
  const uint64_t token = all[0].token;
  std::vector<Socket> ring_out, ring_in;
  std::vector<std::pair<int, Socket>> mesh, p2p;
  try {
    auto endpoint = [&](int peer) {
      in_addr a{};
      a.s_addr = all[static_cast<std::size_t>(peer)].address;
      return std::make_pair(a, all[static_cast<std::size_t>(peer)].port);
    };
    if (plan.ring_send) {
      const auto [address, port] = endpoint(right);
      for (int s = 0; s < options.streams; ++s) {
        ring_out.push_back(connect_stream(address, port, right, hello(me, right, static_cast<uint32_t>(s), token),
                                          deadline, options.socket_buffer_bytes));
      }
    }
    for (int p : plan.mesh_peers) {
      if (p < me) continue;
      const auto [address, port] = endpoint(p);
      mesh.emplace_back(p, connect_stream(address, port, p, hello(me, p, kMeshStream, token), deadline,
                                          options.socket_buffer_bytes));
      p2p.emplace_back(p, connect_stream(address, port, p, hello(me, p, kP2pStream, token), deadline,
                                         options.socket_buffer_bytes));
    }
    std::vector<ExpectedStream> expected;
    if (plan.ring_recv) {
      for (int s = 0; s < options.streams; ++s) expected.push_back(ExpectedStream{left, static_cast<uint32_t>(s)});
    }
    for (int p : plan.mesh_peers) {
      if (p < me) {
        expected.push_back(ExpectedStream{p, kMeshStream});
        expected.push_back(ExpectedStream{p, kP2pStream});
      }
    }
    std::vector<Socket> in = accept_expected(listener, expected, me, token, deadline);
    for (std::size_t i = 0; i < expected.size(); ++i) {
      if (expected[i].stream == kMeshStream) {
        mesh.emplace_back(expected[i].from, std::move(in[i]));
      } else if (expected[i].stream == kP2pStream) {
        p2p.emplace_back(expected[i].from, std::move(in[i]));
      } else {
        ring_in.push_back(std::move(in[i]));
      }
    }
    for (const auto& s : ring_out) configure_stream(s, options.timeout);
    for (const auto& s : ring_in) configure_stream(s, options.timeout);
    for (const auto& [peer, s] : mesh) configure_stream(s, options.timeout);
    for (const auto& [peer, s] : p2p) configure_stream(s, options.timeout);
  } catch (const Error&) {
    failure = std::current_exception();
  }
  // e) all or none.
  agree(bootstrap, failure, "connect its TCP streams", options.formation_timeout);
  if (plan.ring_send || plan.ring_recv) {
    std::unique_ptr<TcpSender> sender;
    std::unique_ptr<TcpReceiver> receiver;
    auto bell = options.io_threads ? std::make_shared<ProgressBell>() : nullptr;
    if (plan.ring_send) sender = std::make_unique<TcpSender>(std::move(ring_out), right, options.in_flight, bell);
    if (plan.ring_recv) {
      receiver = std::make_unique<TcpReceiver>(std::move(ring_in), left, options.segment_bytes, options.in_flight, bell);
    }
    links.ring = std::make_unique<TcpTransport>(std::move(sender), std::move(receiver), std::move(bell));
  }
  for (auto& [peer, s] : p2p) links.p2p[static_cast<std::size_t>(peer)] = std::move(s);
  for (auto& [peer, s] : mesh) {
    links.mesh[static_cast<std::size_t>(peer)] =
        std::make_unique<MeshStream>(std::move(s), peer, options.mesh_segment_bytes, options.mesh_in_flight);
  }
  return links;
}

}  // namespace muster::runtime::comm::tcp
