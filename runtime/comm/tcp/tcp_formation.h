// Connecting a rank's TCP streams through the Bootstrap (collective: every
// rank of the Bootstrap calls it, also one with no TCP link of its own):
// the ring's streams to its neighbours (when they are on other hosts, or
// under RingTransport::kTcp) and the mesh's one stream to every other rank
// it reaches over TCP, and beside each mesh stream a point-to-point
// stream (p2p_stream.h) that carries nothing but send/recv messages.
//
// Protocol:
//   a) a rank with any TCP link listens on an ephemeral port on the address
//      chosen by interfaces.h (one listener for ring and mesh);
//   b) allgather of every rank's Endpoint: address, port, which ring links
//      are TCP, ring stream count, rank 0's random job token, and whether
//      step a) worked. Every rank checks the data it depends on: its ring
//      neighbours agree on which links are TCP and on the stream count, and
//      every rank it will connect to has a listener; then c) agrees;
//   c) agreement (allgather of whom each rank blames, if anyone): when any
//      rank failed, every rank throws the same CommError naming the rank at
//      fault (a rank whose own step failed throws its reason);
//   d) each rank connects its ring streams to its right neighbour and its
//      mesh stream to every mesh peer of higher rank (each stream opens with
//      a Hello: from, to, stream index, token; the mesh's index is
//      kMeshStream, the point-to-point one's kP2pStream), and accepts its left neighbour's ring streams and its
//      lower mesh peers' streams, checking their Hellos, before the deadline;
//   e) agreement again: all or none, so no rank is left waiting on a
//      half-built set of links.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "runtime/comm/bootstrap.h"
#include "runtime/comm/tcp/mesh_stream.h"
#include "runtime/comm/tcp/tcp_transport.h"

namespace muster::runtime::comm::tcp {

// The Hello stream index of a mesh stream (ring streams count from 0).
constexpr uint32_t kMeshStream = 0x4d455348;  // "MESH"
constexpr uint32_t kP2pStream = 0x50325053;   // "P2PS"

// Which of this rank's links are TCP (decided alike on every rank from the
// host map and the options).
struct TcpPlan {
  bool ring_send = false;       // to the right neighbour
  bool ring_recv = false;       // from the left neighbour
  std::vector<int> mesh_peers;  // sorted
};

struct TcpFormationOptions {
  std::string interface_spec;  // see interfaces.h; "" = default choice
  int streams = 1;             // ring TCP connections per direction
  std::size_t socket_buffer_bytes = 4u << 20;  // SO_SNDBUF/SO_RCVBUF; 0 = kernel autotuning
  std::size_t segment_bytes = 256 * 1024;      // ring segment
  std::size_t in_flight = 8;
  std::size_t mesh_segment_bytes = 256 * 1024;
  std::size_t mesh_in_flight = 4;
  std::chrono::milliseconds timeout{60000};            // the ops': TCP_USER_TIMEOUT on every stream
  std::chrono::milliseconds formation_timeout{60000};  // every wait of this protocol
  bool whole_job_on_one_host = false;
  // The ring's socket I/O on threads of its own (tcp_transport.h) or inline
  // on the progress thread. The mesh always moves inline.
  bool io_threads = false;
};

struct TcpLinks {
  std::unique_ptr<TcpTransport> ring;              // null when neither ring link is TCP
  std::vector<std::unique_ptr<MeshStream>> mesh;   // by rank; null where not a mesh peer
  std::vector<Socket> p2p;                         // by rank: the point-to-point streams (invalid where none)
};

TcpLinks connect_tcp(Bootstrap& bootstrap, const TcpPlan& plan, const TcpFormationOptions& options);

}  // namespace muster::runtime::comm::tcp
