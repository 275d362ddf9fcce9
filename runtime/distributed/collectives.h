// Collectives: the few collective operations DistributedOptimizer needs.
//
// A seam between the optimizer and comm::Communicator, so the optimizer's
// bucketing, threading and error handling are unit-tested with in-process
// ranks on threads (tests/distributed_fake_collectives.h) and run for real
// over MPI through wrap_communicator().
//
// Contract: the same as comm::Communicator's: every rank issues the same
// calls in the same order; errors are thrown as CommError / TimeoutError
// naming the peer; nothing waits forever. DistributedOptimizer calls these
// from its one communication thread only.
#pragma once

#include <chrono>
#include <cstddef>
#include <memory>
#include <vector>

#include "runtime/comm/communicator.h"
#include "runtime/dtype.h"

namespace muster::runtime::distributed {

// An allreduce in flight. wait() blocks until it is done and rethrows its error.
class PendingOp {
 public:
  virtual ~PendingOp() = default;
  virtual void wait() = 0;
  // True once wait() would return at once.
  virtual bool done() = 0;
};

class Collectives {
 public:
  virtual ~Collectives() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  // How long a peer may stay silent before the collectives throw TimeoutError
  // (bounds how long the optimizer's destructor waits for its thread).
  virtual std::chrono::milliseconds timeout() const = 0;
  // The same for every Collectives over the same communicator: optimizers
  // sharing one send all their collectives through one thread, in the order
  // the user thread issued them, which is the same order on every rank.
  virtual const void* identity() const { return this; }

  // In-place reduction of `count` elements; starts it and returns at once.
  virtual std::unique_ptr<PendingOp> allreduce_async(void* data, std::size_t count, DataType dtype,
                                                     comm::ReduceOp op, comm::Algorithm algorithm) = 0;
  void allreduce(void* data, std::size_t count, DataType dtype, comm::ReduceOp op) {
    allreduce_async(data, count, dtype, op, comm::Algorithm::kAuto)->wait();
  }
  virtual void broadcast(void* data, std::size_t count, DataType dtype, int root) = 0;
  // Rank i's `count` elements land at recv + i * count * dtype_size(dtype).
  virtual void allgather(const void* send, std::size_t count, DataType dtype, void* recv) = 0;
  // Per-rank counts: *counts gets each rank's count, *recv the concatenation.
  virtual void allgatherv(const void* send, std::size_t count, DataType dtype, std::vector<char>* recv,
                          std::vector<std::size_t>* counts) = 0;
  // No communication: throws CommError when a peer is known to be gone
  // (comm::Communicator::check_peers). Any thread. Default: nothing known.
  virtual void check_peers() {}
  // True when the whole world shares this host's memory (one host, a
  // shared-memory segment: comm::Communicator::shares_host_memory).
  virtual bool shares_host_memory() const { return false; }
  // Collective: memory for gradients that allreduces handle fastest in place
  // (comm::Communicator::allocate_shared). Default: ordinary memory.
  virtual std::unique_ptr<comm::SharedBuffer> allocate_shared(std::size_t bytes) {
    return comm::make_private_buffer(bytes);
  }
};

// Adapts a comm::Communicator (not owned; must outlive the result).
std::unique_ptr<Collectives> wrap_communicator(comm::Communicator& comm);

}  // namespace muster::runtime::distributed
