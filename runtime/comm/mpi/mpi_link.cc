#include "runtime/comm/mpi/mpi_link.h"

#include <algorithm>

#include "runtime/comm/mpi/mpi_world.h"

namespace muster::runtime::comm::mpi {
namespace {
constexpr int kRingTag = 17;

void cancel_all(MPI_Request* r) {
  if (*r == MPI_REQUEST_NULL) return;
  MPI_Cancel(r);
  MPI_Request_free(r);
}
}  // namespace

MpiSendLink::MpiSendLink(MPI_Comm comm, int peer, std::size_t in_flight)
    : comm_(comm), peer_(peer), in_flight_(std::max<std::size_t>(in_flight, 1)) {}

MpiSendLink::~MpiSendLink() {
  // Only reached with requests outstanding after a failure; do not block.
  for (auto& r : requests_) cancel_all(&r);
}

bool MpiSendLink::try_send(const void* src, std::size_t bytes) {
  if (requests_.size() >= in_flight_ && !flushed()) {
    // Drop completed requests to make room.
    auto done = std::remove_if(requests_.begin(), requests_.end(), [](MPI_Request r) { return r == MPI_REQUEST_NULL; });
    requests_.erase(done, requests_.end());
    if (requests_.size() >= in_flight_) return false;
  }
  MPI_Request r;
  check(MPI_Isend(src, static_cast<int>(bytes), MPI_BYTE, peer_, kRingTag, comm_, &r), "MPI_Isend (ring)", peer_);
  requests_.push_back(r);
  return true;
}

bool MpiSendLink::flushed() {
  bool all = true;
  for (auto& r : requests_) {
    if (r == MPI_REQUEST_NULL) continue;
    int flag = 0;
    MPI_Status status;
    check(MPI_Test(&r, &flag, &status), "MPI_Test (ring send)", peer_);
    if (!flag) all = false;
  }
  if (all) requests_.clear();
  return all;
}

MpiRecvLink::MpiRecvLink(MPI_Comm comm, int peer, std::size_t segment_bytes, std::size_t in_flight)
    : comm_(comm), peer_(peer), segment_bytes_(segment_bytes) {
  const std::size_t n = std::max<std::size_t>(in_flight, 1);
  buffers_.resize(n);
  for (std::size_t i = 0; i < n; ++i) {
    buffers_[i].resize(segment_bytes_);
    free_buffers_.push_back(i);
  }
}

MpiRecvLink::~MpiRecvLink() {
  for (auto& p : posted_) cancel_all(&p.request);
}

void MpiRecvLink::expect(std::size_t bytes) {
  pending_.push_back(bytes);
  post_pending();
}

void MpiRecvLink::post_pending() {
  while (!pending_.empty() && !free_buffers_.empty()) {
    const std::size_t buffer = free_buffers_.back();
    free_buffers_.pop_back();
    Posted p{MPI_REQUEST_NULL, buffer, pending_.front(), false};
    pending_.pop_front();
    check(MPI_Irecv(buffers_[buffer].data(), static_cast<int>(p.bytes), MPI_BYTE, peer_, kRingTag, comm_,
                    &p.request),
          "MPI_Irecv (ring)", peer_);
    posted_.push_back(p);
  }
}

const void* MpiRecvLink::try_recv() {
  if (posted_.empty()) return nullptr;
  Posted& p = posted_.front();
  if (!p.arrived) {
    int flag = 0;
    MPI_Status status;
    check(MPI_Test(&p.request, &flag, &status), "MPI_Test (ring receive)", peer_);
    if (!flag) return nullptr;
    p.arrived = true;
  }
  return buffers_[p.buffer].data();
}

void MpiRecvLink::release() {
  free_buffers_.push_back(posted_.front().buffer);
  posted_.pop_front();
  post_pending();
}

}  // namespace muster::runtime::comm::mpi
