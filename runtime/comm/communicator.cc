#include "muster/runtime/comm/communicator.h"

#include "muster/runtime/comm/world_communicator.h"

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

std::unique_ptr<Communicator> Communicator::create(const CommOptions& options) {
  return std::make_unique<WorldCommunicator>(options);
}

void Communicator::allreduce(void* data, std::size_t count, DataType dtype, const AllreduceOptions& options) {
  allreduce_async(data, count, dtype, options).wait();
}

void Communicator::broadcast(void* data, std::size_t count, DataType dtype, int root) {
  broadcast_async(data, count, dtype, root).wait();
}

void Communicator::allgather(const void* send, std::size_t count, DataType dtype, void* recv) {
  allgather_async(send, count, dtype, recv).wait();
}

void Communicator::barrier() { barrier_async().wait(); }

}  // namespace muster::runtime::comm
