#include "runtime/comm/nccl/nccl_communicator.h"

#include <sched.h>

#include <cstring>
#include <string>

namespace muster::runtime::comm::nccl {
namespace {

void check_cuda(cudaError_t rc, const std::string& what) {
  if (rc != cudaSuccess) throw CommError(what + ": " + cudaGetErrorString(rc));
}

void check_nccl(ncclResult_t rc, const std::string& what) {
  if (rc != ncclSuccess) throw CommError(what + ": " + ncclGetErrorString(rc));
}

ncclDataType_t nccl_type(DataType t) {
  switch (t) {
    case DataType::kFloat32: return ncclFloat32;
    case DataType::kFloat64: return ncclFloat64;
    case DataType::kFloat16: return ncclFloat16;
    case DataType::kBFloat16: return ncclBfloat16;
    case DataType::kInt32: return ncclInt32;
    case DataType::kInt64: return ncclInt64;
  }
  throw InvalidArgument("NCCL: unknown dtype");
}

ncclRedOp_t nccl_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum: return ncclSum;
    case ReduceOp::kAverage: return ncclAvg;
    case ReduceOp::kMin: return ncclMin;
    case ReduceOp::kMax: return ncclMax;
  }
  throw InvalidArgument("NCCL: unknown reduce op");
}

}  // namespace

int NcclCommunicator::device_count() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();  // clear the sticky "no device" error
    return 0;
  }
  return n;
}

std::unique_ptr<NcclCommunicator> NcclCommunicator::create(Communicator& host) {
  const int devices = device_count();
  if (devices == 0) throw CommError("NCCL: no CUDA device visible on rank " + std::to_string(host.rank()));
  const int device = host.local_rank() % devices;
  check_cuda(cudaSetDevice(device), "cudaSetDevice(" + std::to_string(device) + ")");
  ncclUniqueId id;
  std::memset(&id, 0, sizeof id);
  if (host.rank() == 0) check_nccl(ncclGetUniqueId(&id), "ncclGetUniqueId");
  static_assert(sizeof(ncclUniqueId) % 4 == 0, "ncclUniqueId is sent as int32 words");
  host.broadcast(&id, sizeof id / 4, DataType::kInt32, 0);
  ncclComm_t comm;
  check_nccl(ncclCommInitRank(&comm, host.size(), id, host.rank()), "ncclCommInitRank");
  return std::unique_ptr<NcclCommunicator>(
      new NcclCommunicator(comm, device, host.rank(), host.options().timeout));
}

NcclCommunicator::NcclCommunicator(ncclComm_t comm, int device, int rank, std::chrono::milliseconds timeout)
    : comm_(comm), device_(device), rank_(rank), timeout_(timeout) {}

NcclCommunicator::~NcclCommunicator() {
  if (aborted_) return;
  ncclCommDestroy(comm_);
}

void NcclCommunicator::allreduce(void* data, std::size_t count, DataType dtype, ReduceOp op, cudaStream_t stream) {
  if (aborted_) throw CommError("NCCL communicator was aborted by an earlier failure", -1);
  check_cuda(cudaSetDevice(device_), "cudaSetDevice");
  check_nccl(ncclAllReduce(data, data, count, nccl_type(dtype), nccl_op(op), comm_, stream), "ncclAllReduce");
  wait(stream, "ncclAllReduce");
}

void NcclCommunicator::broadcast(void* data, std::size_t count, DataType dtype, int root, cudaStream_t stream) {
  if (aborted_) throw CommError("NCCL communicator was aborted by an earlier failure", -1);
  check_cuda(cudaSetDevice(device_), "cudaSetDevice");
  check_nccl(ncclBroadcast(data, data, count, nccl_type(dtype), root, comm_, stream), "ncclBroadcast");
  wait(stream, "ncclBroadcast");
}

void NcclCommunicator::wait(cudaStream_t stream, const char* what) {
  const auto deadline = std::chrono::steady_clock::now() + timeout_;
  for (;;) {
    const cudaError_t q = cudaStreamQuery(stream);
    if (q == cudaSuccess) return;
    if (q != cudaErrorNotReady) check_cuda(q, what);
    ncclResult_t async = ncclSuccess;
    check_nccl(ncclCommGetAsyncError(comm_, &async), "ncclCommGetAsyncError");
    if (async != ncclSuccess) {
      ncclCommAbort(comm_);
      aborted_ = true;
      throw CommError(std::string(what) + " on rank " + std::to_string(rank_) + ": " + ncclGetErrorString(async));
    }
    if (std::chrono::steady_clock::now() >= deadline) {
      ncclCommAbort(comm_);
      aborted_ = true;
      throw TimeoutError(std::string(what) + " on rank " + std::to_string(rank_) + ": a peer did not make progress within " +
                             std::to_string(timeout_.count()) + " ms",
                         -1);
    }
    sched_yield();
  }
}

}  // namespace muster::runtime::comm::nccl
