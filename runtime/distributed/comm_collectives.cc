// Collectives over a comm::Communicator: the production implementation.
#include <memory>
#include <utility>

#include "runtime/distributed/collectives.h"

namespace muster::runtime::distributed {
namespace {

class HandleOp final : public PendingOp {
 public:
  explicit HandleOp(comm::Handle handle) : handle_(std::move(handle)) {}
  void wait() override { handle_.wait(); }
  bool done() override { return handle_.done(); }

 private:
  comm::Handle handle_;
};

class CommCollectives final : public Collectives {
 public:
  explicit CommCollectives(comm::Communicator& comm) : comm_(comm) {}
  int rank() const override { return comm_.rank(); }
  int size() const override { return comm_.size(); }
  std::chrono::milliseconds timeout() const override { return comm_.options().timeout; }
  const void* identity() const override { return &comm_; }
  bool shares_host_memory() const override { return comm_.shares_host_memory(); }

  std::unique_ptr<PendingOp> allreduce_async(void* data, std::size_t count, DataType dtype, comm::ReduceOp op,
                                             comm::Algorithm algorithm) override {
    comm::AllreduceOptions o;
    o.op = op;
    o.algorithm = algorithm;
    return std::make_unique<HandleOp>(comm_.allreduce_async(data, count, dtype, o));
  }
  void broadcast(void* data, std::size_t count, DataType dtype, int root) override {
    comm_.broadcast(data, count, dtype, root);
  }
  void allgather(const void* send, std::size_t count, DataType dtype, void* recv) override {
    comm_.allgather(send, count, dtype, recv);
  }
  void allgatherv(const void* send, std::size_t count, DataType dtype, std::vector<char>* recv,
                  std::vector<std::size_t>* counts) override {
    comm_.allgatherv(send, count, dtype, recv, counts);
  }
  std::unique_ptr<comm::SharedBuffer> allocate_shared(std::size_t bytes) override {
    return comm_.allocate_shared(bytes);
  }
  void check_peers() override { comm_.check_peers(); }

 private:
  comm::Communicator& comm_;
};

}  // namespace

std::unique_ptr<Collectives> wrap_communicator(comm::Communicator& comm) {
  return std::make_unique<CommCollectives>(comm);
}

}  // namespace muster::runtime::distributed
