// Connecting a rank's TCP ring streams through MPI (collective over `comm`).
//
// Protocol:
//   a) every rank whose link from its left neighbour is TCP listens on an
//      ephemeral port on the address chosen by interfaces.h;
//   b) MPI_Allgather of every rank's Endpoint: address, port, which of its
//      links are TCP, stream count, rank 0's random job token, and whether
//      step a) worked. Every rank checks the data it depends on: its
//      neighbours agree on which links are TCP and on the stream count, and
//      their listener opened; otherwise all throw the same CommError naming
//      the rank at fault (a rank whose own step failed throws its reason);
//   c) each rank connects its streams to its right neighbour (Hello first)
//      and accepts its left neighbour's, before the deadline;
//   d) MPI_Allgather of whether c) worked: if any rank failed, every rank
//      throws (naming it), so none is left waiting on a half-built ring.
// Ranks with no TCP link still take part in b) and d).
#pragma once

#include <mpi.h>

#include <chrono>
#include <cstddef>
#include <memory>
#include <string>

#include "runtime/comm/tcp/tcp_transport.h"

namespace muster::runtime::comm::tcp {

struct TcpRingOptions {
  std::string interface_spec;  // see interfaces.h; "" = default choice
  int streams = 1;             // TCP connections per direction
  std::size_t socket_buffer_bytes = 4u << 20;  // SO_SNDBUF/SO_RCVBUF; 0 = kernel autotuning
  std::size_t segment_bytes = 256 * 1024;
  std::size_t in_flight = 8;
  std::chrono::milliseconds timeout{60000};
  bool whole_job_on_one_host = false;
  // Socket I/O on threads of its own (tcp_transport.h) or inline on the
  // progress thread.
  bool io_threads = false;
};

// Null when neither of this rank's links is TCP.
std::unique_ptr<TcpTransport> connect_ring(MPI_Comm comm, bool send_tcp, bool recv_tcp, const TcpRingOptions& options);

}  // namespace muster::runtime::comm::tcp
