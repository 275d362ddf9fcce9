// Ring links over MPI point-to-point, for neighbours on other hosts (and on
// this host when MUSTER_COMM_RING_TRANSPORT=mpi).
//
// Sends are MPI_Isend straight from the caller's buffer (zero-copy, at most
// `in_flight` outstanding). Receives are MPI_Irecv into `in_flight` staging
// buffers of `segment_bytes`, posted as soon as expect() announces a segment,
// so data arrives while the ring reduces the previous one. Messages use a
// Communicator-private MPI communicator, so one tag suffices: MPI keeps
// messages between a pair in order.
#pragma once

#include <mpi.h>

#include <cstddef>
#include <deque>
#include <vector>

#include "runtime/comm/link.h"

namespace muster::runtime::comm::mpi {

class MpiSendLink : public SendLink {
 public:
  MpiSendLink(MPI_Comm comm, int peer, std::size_t in_flight);
  ~MpiSendLink() override;
  bool try_send(const void* src, std::size_t bytes) override;
  bool flushed() override;
  int peer() const override { return peer_; }

 private:
  MPI_Comm comm_;
  int peer_;
  std::size_t in_flight_;
  std::vector<MPI_Request> requests_;
};

class MpiRecvLink : public RecvLink {
 public:
  MpiRecvLink(MPI_Comm comm, int peer, std::size_t segment_bytes, std::size_t in_flight);
  ~MpiRecvLink() override;
  void expect(std::size_t bytes) override;
  const void* try_recv() override;
  void release() override;
  int peer() const override { return peer_; }

 private:
  struct Posted {
    MPI_Request request;
    std::size_t buffer;
    std::size_t bytes;
    bool arrived;
  };
  void post_pending();

  MPI_Comm comm_;
  int peer_;
  std::size_t segment_bytes_;
  std::vector<std::vector<char>> buffers_;
  std::vector<std::size_t> free_buffers_;
  std::deque<std::size_t> pending_;  // expected sizes not yet posted
  std::deque<Posted> posted_;
};

}  // namespace muster::runtime::comm::mpi
