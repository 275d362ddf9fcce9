#include "runtime/comm/communicator.h"

#include "runtime/comm/world_communicator.h"

namespace muster::runtime::comm {

const char* reduce_op_name(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum: return "sum";
    case ReduceOp::kAverage: return "average";
    case ReduceOp::kMin: return "min";
    case ReduceOp::kMax: return "max";
  }
  return "unknown";
}

const char* algorithm_name(Algorithm a) {
  switch (a) {
    case Algorithm::kAuto: return "auto";
    case Algorithm::kMpi: return "mpi";
    case Algorithm::kRing: return "ring";
  }
  return "unknown";
}

namespace {

class PrivateBuffer final : public SharedBuffer {
 public:
  explicit PrivateBuffer(std::size_t bytes) : bytes_(bytes), lines_((bytes + sizeof(Line) - 1) / sizeof(Line) + 1) {}
  void* data() override { return lines_.data(); }
  std::size_t bytes() const override { return bytes_; }
  bool direct() const override { return false; }

 private:
  struct alignas(64) Line {
    char b[64] = {};
  };
  std::size_t bytes_;
  std::vector<Line> lines_;  // zeroed, 64-byte aligned
};

}  // namespace

std::size_t auto_small_bytes(int ranks_on_host, long host_cpus) {
  return host_cpus > 0 && ranks_on_host > host_cpus ? std::size_t{4} << 20 : std::size_t{256} << 10;
}

bool private_allreduce_in_pieces(int ranks_on_host, long host_cpus) {
  return ranks_on_host == 2 || (host_cpus > 0 && ranks_on_host > host_cpus);
}

std::unique_ptr<SharedBuffer> make_private_buffer(std::size_t bytes) { return std::make_unique<PrivateBuffer>(bytes); }

std::unique_ptr<Communicator> Communicator::create(std::unique_ptr<Bootstrap> bootstrap, const CommOptions& options) {
  return std::make_unique<WorldCommunicator>(std::move(bootstrap), options);
}

std::unique_ptr<Communicator> Communicator::create(const CommOptions& options) {
  return create(bootstrap_from_env(), options);
}

void Communicator::allreduce(void* data, std::size_t count, DataType dtype, const AllreduceOptions& options) {
  allreduce_async(data, count, dtype, options).wait();
}

void Communicator::broadcast(void* data, std::size_t count, DataType dtype, int root, const OpOptions& options) {
  broadcast_async(data, count, dtype, root, options).wait();
}

void Communicator::allgather(const void* send, std::size_t count, DataType dtype, void* recv,
                             const OpOptions& options) {
  allgather_async(send, count, dtype, recv, options).wait();
}

void Communicator::allgatherv(const void* send, std::size_t count, DataType dtype, std::vector<char>* recv,
                              std::vector<std::size_t>* counts, const OpOptions& options) {
  allgatherv_async(send, count, dtype, recv, counts, options).wait();
}

void Communicator::reducescatter(const void* send, void* recv, const std::vector<std::size_t>& counts,
                                 DataType dtype, const ReduceScatterOptions& options) {
  reducescatter_async(send, recv, counts, dtype, options).wait();
}

void Communicator::alltoall(const void* send, const std::vector<std::size_t>& send_counts, DataType dtype,
                            std::vector<char>* recv, std::vector<std::size_t>* recv_counts, const OpOptions& options) {
  alltoall_async(send, send_counts, dtype, recv, recv_counts, options).wait();
}

void Communicator::barrier(const OpOptions& options) { barrier_async(options).wait(); }

Handle Communicator::send_async(const void*, std::size_t, int, const P2pOptions&) {
  throw InvalidArgument("send: this Communicator offers no point-to-point messages");
}

Handle Communicator::recv_async(void*, std::size_t, int, const P2pOptions&, int*) {
  throw InvalidArgument("recv: this Communicator offers no point-to-point messages");
}

}  // namespace muster::runtime::comm
