// Allreduce and broadcast of GPU (device) buffers through NCCL, for the
// ranks of a host Communicator (one GPU per rank, chosen by local rank).
//
// Built only where CMake finds CUDA and NCCL (MUSTER_WITH_NCCL). The NCCL
// unique id is made by rank 0 and sent to the others with the host
// Communicator's broadcast (MPI). Ops are enqueued on the caller's CUDA
// stream and then waited for under the same watchdog rule as the CPU
// collectives: no completion within the timeout -> the NCCL communicator is
// aborted and TimeoutError is thrown; an asynchronous NCCL error -> CommError.
//
//   if (NcclCommunicator::device_count() > 0) {
//     auto nccl = NcclCommunicator::create(*comm);
//     nccl->allreduce(dev_grads, n, DataType::kFloat32, ReduceOp::kAverage);
//   }
#pragma once

#include <cuda_runtime.h>
#include <nccl.h>

#include <chrono>
#include <cstddef>
#include <memory>

#include "runtime/comm/communicator.h"

namespace muster::runtime::comm::nccl {

class NcclCommunicator {
 public:
  // CUDA devices visible to this process; 0 when there is no GPU or driver.
  static int device_count();
  // Collective over `host`'s ranks. Selects device local_rank % device_count.
  static std::unique_ptr<NcclCommunicator> create(Communicator& host);
  ~NcclCommunicator();
  NcclCommunicator(const NcclCommunicator&) = delete;
  NcclCommunicator& operator=(const NcclCommunicator&) = delete;

  int device() const { return device_; }
  // In place on device memory; returns when the result is in `data`.
  void allreduce(void* data, std::size_t count, DataType dtype, ReduceOp op, cudaStream_t stream = nullptr);
  void broadcast(void* data, std::size_t count, DataType dtype, int root, cudaStream_t stream = nullptr);

 private:
  NcclCommunicator(ncclComm_t comm, int device, int rank, std::chrono::milliseconds timeout);
  void wait(cudaStream_t stream, const char* what);

  ncclComm_t comm_;
  int device_;
  int rank_;
  std::chrono::milliseconds timeout_;
  bool aborted_ = false;
};

}  // namespace muster::runtime::comm::nccl
