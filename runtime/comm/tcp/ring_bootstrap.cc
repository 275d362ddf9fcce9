#include "runtime/comm/tcp/ring_bootstrap.h"

#include <random>
#include <vector>

#include "runtime/comm/mpi/mpi_world.h"
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
static_assert(sizeof(Endpoint) == 16, "Endpoint travels as 16 MPI_BYTEs");

std::string r(int rank) { return "rank " + std::to_string(rank); }

// b): what this rank needs from the data its neighbours published.
void check_neighbours(const std::vector<Endpoint>& all, int me, int left, int right, const Endpoint& mine) {
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
  if ((mine.flags & kSendTcp) && (!(R.flags & kListening) || R.port == 0 || R.address == 0)) {
    throw CommError("TCP bootstrap: " + r(right) + " published no TCP endpoint (its listener failed; see its error)",
                    right);
  }
}

// d): every rank learns whether every other one got its streams up, and
// whom each failing rank blames (itself when its own step failed), so all
// name the same culprit.
void agree(MPI_Comm comm, int me, const std::exception_ptr& failure, const char* phase) {
  int size = 0;
  MPI_Comm_size(comm, &size);
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
  std::vector<int> all(static_cast<std::size_t>(size));
  mpi::check(MPI_Allgather(&blamed, 1, MPI_INT, all.data(), 1, MPI_INT, comm), "MPI_Allgather(TCP bootstrap status)");
  if (failure) std::rethrow_exception(failure);
  int reporter = -1;
  for (int k = 0; k < size; ++k) {
    const int b = all[static_cast<std::size_t>(k)];
    if (b == k) {
      throw CommError("TCP bootstrap: " + r(k) + " failed to " + phase + " (see its error); " + r(me) + " gives up too",
                      k);
    }
    if (b != -2 && reporter < 0) reporter = k;
  }
  if (reporter >= 0) {
    const int b = all[static_cast<std::size_t>(reporter)];
    throw CommError("TCP bootstrap: " + r(reporter) + " failed to " + phase + " because of " + r(b) +
                        " (see rank " + std::to_string(reporter) + "'s error); " + r(me) + " gives up too",
                    b);
  }
}

}  // namespace

std::unique_ptr<TcpTransport> connect_ring(MPI_Comm comm, bool send_tcp, bool recv_tcp, const TcpRingOptions& options) {
  int me = 0, size = 1;
  MPI_Comm_rank(comm, &me);
  MPI_Comm_size(comm, &size);
  const int left = (me + size - 1) % size, right = (me + 1) % size;
  if (options.streams < 1 || options.streams > 64) {
    throw InvalidArgument("TCP streams per link must be 1..64, got " + std::to_string(options.streams));
  }
  const auto deadline = std::chrono::steady_clock::now() + options.timeout;

  // a) listen.
  Endpoint mine{};
  mine.flags = static_cast<uint8_t>((send_tcp ? kSendTcp : 0) | (recv_tcp ? kRecvTcp : 0));
  mine.streams = static_cast<uint8_t>(options.streams);
  if (me == 0) mine.token = std::random_device{}() * 0x100000000ULL + std::random_device{}();
  Listener listener;
  std::exception_ptr failure;
  if (recv_tcp) {
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
  // b) exchange and check.
  std::vector<Endpoint> all(static_cast<std::size_t>(size));
  mpi::check(MPI_Allgather(&mine, sizeof mine, MPI_BYTE, all.data(), sizeof mine, MPI_BYTE, comm),
             "MPI_Allgather(TCP endpoints)");
  if (!failure) {
    try {
      check_neighbours(all, me, left, right, mine);
    } catch (const Error&) {
      failure = std::current_exception();
    }
  }
  agree(comm, me, failure, "open its TCP listener or agree on the ring's transport");
  if (!send_tcp && !recv_tcp) return nullptr;

  // c) connect right, accept left.
  const uint64_t token = all[0].token;
  std::vector<Socket> out, in;
  try {
    if (send_tcp) {
      const Endpoint& R = all[static_cast<std::size_t>(right)];
      in_addr address{};
      address.s_addr = R.address;
      for (int s = 0; s < options.streams; ++s) {
        Hello h;
        h.from = me;
        h.to = right;
        h.stream = static_cast<uint32_t>(s);
        h.token = token;
        out.push_back(connect_stream(address, R.port, right, h, deadline, options.socket_buffer_bytes));
      }
    }
    if (recv_tcp) in = accept_streams(listener, left, me, token, options.streams, deadline);
    for (const auto& s : out) configure_stream(s, options.timeout);
    for (const auto& s : in) configure_stream(s, options.timeout);
  } catch (const Error&) {
    failure = std::current_exception();
  }
  // d) all or none.
  agree(comm, me, failure, "connect its TCP ring streams");
  std::unique_ptr<TcpSender> sender;
  std::unique_ptr<TcpReceiver> receiver;
  auto bell = options.io_threads ? std::make_shared<ProgressBell>() : nullptr;
  if (send_tcp) sender = std::make_unique<TcpSender>(std::move(out), right, options.in_flight, bell);
  if (recv_tcp) {
    receiver = std::make_unique<TcpReceiver>(std::move(in), left, options.segment_bytes, options.in_flight, bell);
  }
  return std::make_unique<TcpTransport>(std::move(sender), std::move(receiver), std::move(bell));
}

}  // namespace muster::runtime::comm::tcp
