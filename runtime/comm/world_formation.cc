// WorldCommunicator's formation (world_communicator.h): everything a world
// needs before its first op, swapped through the Bootstrap.
//
// Protocol (every rank of the Bootstrap, each step an allgather):
//   a) "world": host key, pid, CPUs, and the options every rank must share (transport, streams, segment
//      sizes, inline size, checks, blocks). Options that differ from rank
//      0's throw InvalidArgument on every rank, naming the rank and the
//      variable. The host map (host_map.h) follows from the same data on
//      every rank; then "TCP I/O threads": each rank's wish (its options,
//      its CPUs, its host's rank count), on only if every rank wishes them;
//   b) "shm segment": the lowest rank of every host with several ranks
//      creates the host's ShmSegment and publishes its name; the others
//      map it;
//   c) "shm mapped": every rank says whether it mapped it; the creator
//      unlinks the name (nothing stays in /dev/shm), and a host where any
//      rank failed drops its segment on all its ranks (its ranks then talk
//      TCP, as between hosts);
//   d) the TCP streams of the ring and the mesh (tcp_formation.h: endpoints,
//      agreement, connect, agreement).
// Ranks that share a host and its segment use shared memory for the ring,
// the mesh and the control table; the others TCP. RingTransport::kTcp makes
// every link TCP; kMpi makes the ring's links MPI point-to-point.
#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "runtime/comm/comm_env.h"
#include "runtime/comm/mpi/mpi_bootstrap.h"
#include "runtime/comm/mpi/mpi_link.h"
#include "runtime/comm/shm/p2p_ring.h"
#include "runtime/comm/tcp/p2p_stream.h"
#include "runtime/comm/tcp/interfaces.h"
#include "runtime/comm/world_communicator.h"

namespace muster::runtime::comm {
namespace {

// CPUs this process may run on (its affinity mask: mpirun's binding counts).
int usable_cpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) != 0) return static_cast<int>(sysconf(_SC_NPROCESSORS_ONLN));
  return CPU_COUNT(&set);
}

// Bytes in a simple length-prefixed form for the Bootstrap's allgathers.
void put_u64(std::string* out, uint64_t v) { out->append(reinterpret_cast<const char*>(&v), sizeof v); }
void put_str(std::string* out, const std::string& s) {
  put_u64(out, s.size());
  out->append(s);
}
struct Reader {
  const std::string& in;
  std::size_t at = 0;
  int rank;
  uint64_t u64() {
    if (at + 8 > in.size()) fail();
    uint64_t v;
    std::memcpy(&v, in.data() + at, 8);
    at += 8;
    return v;
  }
  std::string str() {
    const uint64_t n = u64();
    if (at + n > in.size()) fail();
    std::string s = in.substr(at, n);
    at += n;
    return s;
  }
  [[noreturn]] void fail() {
    throw CommError("world formation: rank " + std::to_string(rank) +
                        " sent a malformed record (a different muster version?)",
                    rank);
  }
};

// The options every rank must share, with the variable that sets each.
struct SharedOption {
  const char* name;
  uint64_t (*get)(const CommOptions&);
};
const SharedOption kSharedOptions[] = {
    {"MUSTER_COMM_RING_TRANSPORT", [](const CommOptions& o) { return static_cast<uint64_t>(o.ring_transport); }},
    {"MUSTER_COMM_TCP_STREAMS", [](const CommOptions& o) { return static_cast<uint64_t>(o.tcp_streams); }},
    {"MUSTER_COMM_SEGMENT_BYTES", [](const CommOptions& o) { return static_cast<uint64_t>(o.segment_bytes); }},
    {"MUSTER_COMM_SEGMENTS_IN_FLIGHT", [](const CommOptions& o) { return static_cast<uint64_t>(o.segments_in_flight); }},
    {"MUSTER_COMM_BLOCK_BYTES", [](const CommOptions& o) { return static_cast<uint64_t>(o.block_bytes); }},
    {"MUSTER_COMM_INLINE_BYTES", [](const CommOptions& o) { return static_cast<uint64_t>(o.inline_bytes); }},
    {"MUSTER_COMM_CHECK_OPS", [](const CommOptions& o) { return static_cast<uint64_t>(o.check_ops); }},
    {"MUSTER_COMM_SMALL_BYTES", [](const CommOptions& o) { return static_cast<uint64_t>(o.small_bytes); }},
};

const char* transport_text(uint64_t t) {
  switch (static_cast<RingTransport>(t)) {
    case RingTransport::kAuto: return "auto";
    case RingTransport::kShm: return "shm";
    case RingTransport::kMpi: return "mpi";
    case RingTransport::kTcp: return "tcp";
  }
  return "?";
}

// Mesh channels on one host: 4 slots per ordered pair, each at most 256 KB,
// smaller when many ranks share the host (about 64 MB for all pairs at most).
std::size_t mesh_slot_bytes(int local_size) {
  const auto pairs = static_cast<std::size_t>(local_size) * static_cast<std::size_t>(local_size);
  const std::size_t fit = (std::size_t{64} << 20) / (pairs * 4);
  return std::max<std::size_t>(4096, std::min<std::size_t>(256 * 1024, fit / 64 * 64));
}

// Point-to-point rings on one host: 1 MB each way per pair of ranks,
// smaller when many ranks share the host (about 64 MB for all pairs at most).
std::size_t p2p_ring_bytes(int local_size) {
  const auto pairs = static_cast<std::size_t>(local_size) * static_cast<std::size_t>(local_size);
  const std::size_t fit = (std::size_t{64} << 20) / pairs;
  return std::max<std::size_t>(64 * 1024, std::min<std::size_t>(1u << 20, fit / 64 * 64));
}

}  // namespace

void WorldCommunicator::form() {
  rank_ = bootstrap_->rank();
  size_ = bootstrap_->size();
  bootstrap_kind_ = bootstrap_->kind();
  if (auto* m = dynamic_cast<mpi::MpiBootstrap*>(bootstrap_.get())) mpi_comm_ = m->comm();
  if (options_.ring_transport == RingTransport::kMpi && mpi_comm_ == MPI_COMM_NULL && size_ > 1) {
    throw InvalidArgument("RingTransport::kMpi (MUSTER_COMM_RING_TRANSPORT=mpi) needs a world formed by MPI (mpirun); "
                          "this one was formed by '" + bootstrap_kind_ + "'");
  }

  // a) The world: host keys, pids, thread wishes, shared options. kAuto
  // wishes for TCP I/O threads where there are CPUs for them (at least 4,
  // and 2 for each rank on this host); they run only if every rank wishes
  // them, since the ring's block size follows the choice.
  const int cpus = usable_cpus();
  std::string mine;
  const std::string key = options_.host_key.empty() ? this_host_key() : options_.host_key;
  put_str(&mine, key);
  put_u64(&mine, static_cast<uint64_t>(getpid()));
  put_u64(&mine, static_cast<uint64_t>(cpus));
  for (const auto& o : kSharedOptions) put_u64(&mine, o.get(options_));
  const auto all = bootstrap_->allgather(mine, "world", options_.formation_timeout);
  std::vector<std::string> keys;
  std::vector<std::vector<uint64_t>> shared;
  for (int r = 0; r < size_; ++r) {
    Reader in{all[static_cast<std::size_t>(r)], 0, r};
    keys.push_back(in.str());
    in.u64();  // pid: for logs
    in.u64();  // CPUs: for logs
    std::vector<uint64_t> values;
    for (std::size_t i = 0; i < std::size(kSharedOptions); ++i) values.push_back(in.u64());
    shared.push_back(std::move(values));
  }
  for (int r = 1; r < size_; ++r) {
    for (std::size_t i = 0; i < std::size(kSharedOptions); ++i) {
      const uint64_t a = shared[0][i], b = shared[static_cast<std::size_t>(r)][i];
      if (a == b) continue;
      const bool transport = i == 0;
      throw InvalidArgument(std::string(kSharedOptions[i].name) + " differs between ranks: rank " + std::to_string(r) +
                            " has " + (transport ? transport_text(b) : std::to_string(b)) + ", rank 0 " +
                            (transport ? transport_text(a) : std::to_string(a)) + "; set " +
                            kSharedOptions[i].name + " alike on every rank (or the CommOptions field)");
    }
  }
  hosts_ = build_host_map(keys);
  local_rank_ = hosts_.local_of[static_cast<std::size_t>(rank_)];
  local_size_ = static_cast<int>(hosts_.host_members(rank_).size());
  if (bootstrap_kind_ == "mpi") {
    // Open MPI's own view of the host wins where it is set (the same values
    // when its notion of a node matches ours).
    local_rank_ = env_int("OMPI_COMM_WORLD_LOCAL_RANK", local_rank_);
    local_size_ = env_int("OMPI_COMM_WORLD_LOCAL_SIZE", local_size_);
  }
  const long online = sysconf(_SC_NPROCESSORS_ONLN);
  if (options_.spin == CommOptions::kAutoSpin) {
    // Ranks that share CPUs sleep at once: a spinning rank takes the CPU
    // from the peer it waits for (4 ranks on 2 cores, the ring against a
    // 50 us spin: 1.25-1.36x faster at 16 MB, 1.2-2x at 4 KB).
    options_.spin = local_size_ <= online ? std::chrono::microseconds(5000) : std::chrono::microseconds(0);
  }
  // Every rank of a host resolves it alike (same ranks, same CPUs), and only
  // a world on one host has the small path whose layout depends on it.
  if (options_.small_bytes == CommOptions::kAutoSmallBytes) {
    options_.small_bytes = auto_small_bytes(local_size_, online);
  }
  // The thread wishes: this rank's from its options and CPUs, every
  // rank's the same way from theirs (published CPUs, own host's rank count).
  bool threads = true;
  {
    const auto host_ranks = static_cast<int>(hosts_.host_members(rank_).size());
    const bool wants = options_.tcp_threads == CommOptions::TcpThreads::kOn ||
                       (options_.tcp_threads == CommOptions::TcpThreads::kAuto && cpus >= 4 && cpus >= 2 * host_ranks);
    const auto wishes = bootstrap_->allgather(wants ? "1" : "0", "TCP I/O threads", options_.formation_timeout);
    for (const auto& w : wishes) threads = threads && w == "1";
  }
  // b) + c) This host's segment.
  form_segment(keys[static_cast<std::size_t>(rank_)], static_cast<int>(hosts_.host_members(rank_).size()));
  // d) The links.
  form_links(threads);
}

void WorldCommunicator::form_segment(const std::string& key_of_host, int host_size) {
  (void)key_of_host;
  shm::SegmentLayout layout;
  layout.local_size = host_size;
  layout.ring_slots = options_.segments_in_flight;
  layout.ring_slot_bytes = options_.segment_bytes;
  layout.control_bytes = std::max<std::size_t>({options_.inline_bytes, 16 * static_cast<std::size_t>(size_), 512});
  if (options_.ring_transport != RingTransport::kTcp) {
    layout.mesh_slots = 4;
    layout.mesh_slot_bytes = mesh_slot_bytes(host_size);
    layout.p2p_bytes = p2p_ring_bytes(host_size);
  }
  // The whole world on this host: the SmallOps area (world_small.cc).
  if (hosts_.hosts() == 1 && host_size > 1 && options_.small_bytes > 0 &&
      options_.ring_transport != RingTransport::kTcp && options_.ring_transport != RingTransport::kMpi) {
    layout.small_bytes = shm::SmallOps::area_bytes(host_size, small_capacity(host_size));
  }
  const bool leader = host_size > 1 && hosts_.local_of[static_cast<std::size_t>(rank_)] == 0;
  std::string name;
  if (leader) segment_ = shm::ShmSegment::create(layout, &name);
  const auto names = bootstrap_->allgather(name, "shm segment", options_.formation_timeout);
  if (host_size > 1 && !leader) {
    const std::string& published = names[static_cast<std::size_t>(hosts_.host_members(rank_).front())];
    if (!published.empty()) segment_ = shm::ShmSegment::open(published, layout);
  }
  const auto mapped = bootstrap_->allgather(segment_ ? "1" : "0", "shm mapped", options_.formation_timeout);
  if (leader) shm::ShmSegment::unlink(name);  // every rank of the host has mapped it (or given up)
  // Keep it only if every rank of this host mapped it (all of them see the same).
  bool host_ok = host_size > 1;
  for (int r : hosts_.host_members(rank_)) host_ok = host_ok && mapped[static_cast<std::size_t>(r)] == "1";
  if (!host_ok) segment_.reset();
  // Which hosts kept theirs: every rank needs it to decide its links alike.
  std::vector<bool> kept(static_cast<std::size_t>(hosts_.hosts()), true);
  for (int h = 0; h < hosts_.hosts(); ++h) {
    const auto& members = hosts_.members[static_cast<std::size_t>(h)];
    bool ok = members.size() > 1;
    for (int r : members) ok = ok && mapped[static_cast<std::size_t>(r)] == "1";
    kept[static_cast<std::size_t>(h)] = ok;
  }
  host_has_segment_ = std::move(kept);
  if (segment_) {
    shm_local_ = hosts_.local_of[static_cast<std::size_t>(rank_)];
    monitor_ = std::make_unique<shm::ShmPeerMonitor>(segment_.get(), shm_local_, rank_);
    sleeper_ = std::make_unique<shm::DoorbellSleeper>(segment_->peer(shm_local_));
    form_small(host_size);
  }
}

void WorldCommunicator::form_links(bool io_threads) {
  const auto urank = static_cast<std::size_t>(rank_);
  // Shared memory between a and b: the same host, whose segment every rank kept.
  auto shm_between = [&](int a, int b) {
    return hosts_.same_host(a, b) && host_has_segment_[static_cast<std::size_t>(hosts_.host_of[static_cast<std::size_t>(a)])];
  };
  const bool all_tcp = options_.ring_transport == RingTransport::kTcp;
  auto mesh_shm = [&](int a, int b) { return !all_tcp && shm_between(a, b); };
  enum class Kind { kShm, kTcp, kMpi };
  auto ring_kind = [&](int a, int b) {
    if (options_.ring_transport == RingTransport::kMpi) return Kind::kMpi;
    return mesh_shm(a, b) ? Kind::kShm : Kind::kTcp;
  };
  const int right = (rank_ + 1) % size_, left = (rank_ + size_ - 1) % size_;
  const Kind send_kind = size_ > 1 ? ring_kind(rank_, right) : Kind::kShm;
  const Kind recv_kind = size_ > 1 ? ring_kind(left, rank_) : Kind::kShm;

  tcp::TcpPlan plan;
  plan.ring_send = size_ > 1 && send_kind == Kind::kTcp;
  plan.ring_recv = size_ > 1 && recv_kind == Kind::kTcp;
  for (int r = 0; r < size_; ++r) {
    if (r != rank_ && !mesh_shm(rank_, r)) plan.mesh_peers.push_back(r);
  }
  tcp::TcpFormationOptions t;
  t.interface_spec = tcp::interface_spec_from_env(options_.tcp_interface);
  // Auto: 2 streams where I/O threads move them, 1 where the progress thread
  // does (CommOptions::tcp_streams); io_threads is agreed, so all resolve alike.
  t.streams = options_.tcp_streams != CommOptions::kAutoTcpStreams ? options_.tcp_streams : (io_threads ? 2 : 1);
  t.socket_buffer_bytes = options_.tcp_socket_buffer_bytes;
  t.segment_bytes = options_.segment_bytes;
  t.in_flight = options_.segments_in_flight;
  t.timeout = options_.timeout;
  t.formation_timeout = options_.formation_timeout;
  t.io_threads = io_threads;
  t.whole_job_on_one_host = hosts_.hosts() == 1;
  tcp_ = tcp::connect_tcp(*bootstrap_, plan, t);

  // The ring's links.
  if (size_ > 1) {
    auto shm_peer = [&](int r) { return segment_->peer(hosts_.local_of[static_cast<std::size_t>(r)]); };
    switch (send_kind) {
      case Kind::kShm:
        send_link_ = std::make_unique<shm::ShmSendLink>(segment_->ring_channel(shm_local_), shm_peer(right), right);
        break;
      case Kind::kTcp: send_link_ = tcp_.ring->send_link(); break;
      case Kind::kMpi:
        send_link_ = std::make_unique<mpi::MpiSendLink>(mpi_comm_, right, options_.segments_in_flight);
        break;
    }
    switch (recv_kind) {
      case Kind::kShm:
        recv_link_ = std::make_unique<shm::ShmRecvLink>(
            segment_->ring_channel(hosts_.local_of[static_cast<std::size_t>(left)]), shm_peer(left), left);
        break;
      case Kind::kTcp: recv_link_ = tcp_.ring->recv_link(); break;
      case Kind::kMpi:
        recv_link_ = std::make_unique<mpi::MpiRecvLink>(mpi_comm_, left, options_.segment_bytes,
                                                        options_.segments_in_flight);
        break;
    }
  }
  ring_all_shm_ = sleeper_ && send_kind == Kind::kShm && recv_kind == Kind::kShm && size_ > 1;
  ring_all_tcp_ = send_kind == Kind::kTcp && recv_kind == Kind::kTcp && size_ > 1;
  // Every link of the ring TCP: decided from what every rank knows alike (the
  // options and the host map), since the block size must agree.
  tcp_ring_everywhere_ = options_.ring_transport == RingTransport::kTcp ||
                         (options_.ring_transport == RingTransport::kAuto && hosts_.one_rank_per_host() && size_ > 1);
  // An inline all-TCP ring's block follows the ring's round trip
  // (world_ops.cc): the largest any rank's kernel timed on its link to the
  // right, so every rank cuts the same blocks. Asked on every such ring,
  // MUSTER_COMM_BLOCK_BYTES or not, so no rank waits on one that skipped it.
  if (tcp_ring_everywhere_ && !io_threads) {
    std::string mine;
    put_u64(&mine, tcp_.ring && tcp_.ring->sender() ? tcp_.ring->sender()->round_trip_us() : 0);
    const auto all = bootstrap_->allgather(mine, "ring round trip", options_.formation_timeout);
    uint64_t worst = 0;
    bool known = true;
    for (int r = 0; r < size_; ++r) {
      const uint64_t us = Reader{all[static_cast<std::size_t>(r)], 0, r}.u64();
      known = known && us > 0;
      worst = std::max(worst, us);
    }
    ring_round_trip_us_ = known ? static_cast<uint32_t>(std::min<uint64_t>(worst, UINT32_MAX)) : 0;
  }
  direct_capable_ = segment_ && segment_->local_size() == size_ && options_.ring_transport != RingTransport::kMpi &&
                    options_.ring_transport != RingTransport::kTcp;

  // The mesh: alltoall's link to every rank, and the control plane.
  mesh_send_.resize(static_cast<std::size_t>(size_));
  mesh_recv_.resize(static_cast<std::size_t>(size_));
  peer_links_.resize(static_cast<std::size_t>(size_));
  std::vector<int> table_local(static_cast<std::size_t>(size_), -1);
  std::vector<tcp::MeshStream*> mesh(static_cast<std::size_t>(size_), nullptr);
  bool any_table = false;
  for (int r = 0; r < size_; ++r) {
    const auto ur = static_cast<std::size_t>(r);
    if (r == rank_) continue;
    if (mesh_shm(rank_, r)) {
      const int l = hosts_.local_of[ur];
      table_local[ur] = l;
      any_table = true;
      mesh_send_[ur] = std::make_unique<shm::ShmSendLink>(segment_->mesh_channel(shm_local_, l), segment_->peer(l), r);
      mesh_recv_[ur] = std::make_unique<shm::ShmRecvLink>(segment_->mesh_channel(l, shm_local_), segment_->peer(l), r);
      peer_links_[ur] = PeerLink{mesh_send_[ur].get(), mesh_recv_[ur].get(), segment_->layout().rounded().mesh_slot_bytes};
    } else {
      tcp::MeshStream* m = tcp_.mesh[ur].get();
      MUSTER_CHECK(m != nullptr, "no mesh stream to rank " << r);
      mesh[ur] = m;
      peer_links_[ur] = PeerLink{&m->send(), &m->recv(), m->segment_bytes()};
    }
  }
  if (any_table) table_local[urank] = shm_local_;
  control_ = std::make_unique<ControlPlane>(rank_, size_, segment_.get(), std::move(table_local), std::move(mesh),
                                            options_.spin, small_.get());
  form_p2p(mesh_shm);
}

// Point to point: a ring pair in the segment to each rank the mesh reaches
// through shared memory, the point-to-point TCP stream to every other one.
// The thread sleeps on its doorbell when every channel is a ring, else in
// ppoll on the streams (at most 1 ms at a time where there are rings too).
void WorldCommunicator::form_p2p(const std::function<bool(int, int)>& shm_between) {
  std::vector<std::unique_ptr<P2pChannel>> channels(static_cast<std::size_t>(size_));
  std::vector<tcp::TcpP2pChannel*> streams;
  bool rings = false;
  for (int r = 0; r < size_; ++r) {
    const auto ur = static_cast<std::size_t>(r);
    if (r == rank_) continue;
    if (shm_between(rank_, r)) {
      const int l = hosts_.local_of[ur];
      channels[ur] = std::make_unique<shm::ShmP2pChannel>(
          segment_->p2p_ring(shm_local_, l), segment_->p2p_ring(l, shm_local_), segment_->p2p_bell(shm_local_),
          segment_->p2p_bell(l), segment_->peer(l), shm_local_, l, r, options_.p2p_single_copy);
      rings = true;
    } else if (tcp_.p2p[ur].valid()) {
      auto stream = std::make_unique<tcp::TcpP2pChannel>(std::move(tcp_.p2p[ur]), r);
      streams.push_back(stream.get());
      channels[ur] = std::move(stream);
    }
  }
  if (rings && options_.p2p_single_copy) shm::publish_p2p_probe(segment_->p2p_bell(shm_local_));
  std::unique_ptr<P2pWaiter> waiter;
  if (rings && streams.empty()) {
    waiter = std::make_unique<shm::P2pBellWaiter>(segment_->p2p_bell(shm_local_));
  } else {
    waiter = std::make_unique<tcp::P2pPollWaiter>(std::move(streams), rings ? std::chrono::microseconds(1000)
                                                                            : std::chrono::microseconds(0));
  }
  // A short spin while ops wait: a peer's reply often comes within microseconds.
  const auto spin = std::min(options_.spin, std::chrono::microseconds(50));
  p2p_ = std::make_unique<PointToPoint>(rank_, size_, std::move(channels), std::move(waiter), options_.timeout, spin);
}

RingPeers WorldCommunicator::ring_peers() const {
  RingPeers ring;
  ring.rank = rank_;
  ring.size = size_;
  ring.segment_bytes = options_.segment_bytes;
  return ring;
}

}  // namespace muster::runtime::comm
