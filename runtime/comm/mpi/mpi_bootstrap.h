// The Bootstrap of jobs started by mpirun/horovodrun (see bootstrap.h for
// the contract): a duplicate of MPI_COMM_WORLD with MPI_ERRORS_RETURN, so no
// MPI error is fatal to the job; it becomes a CommError.
//
// allgather(): the values' lengths with MPI_Iallgather, then the values with
// MPI_Iallgatherv, each polled with MPI_Test until the timeout (TimeoutError:
// MPI does not say which rank is missing). subset(): MPI_Comm_create_group,
// collective over the members only, tagged with a hash of the name.
//
// comm() is there for the opt-in MPI paths (Algorithm::kMpi,
// RingTransport::kMpi); nothing else runs MPI once the world is formed.
// MPI is initialised (MPI_THREAD_MULTIPLE) on first use and finalised at
// exit, unless a collective failed (finalising with a dead peer hangs).
#pragma once

#include <mpi.h>

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "runtime/comm/bootstrap.h"

namespace muster::runtime::comm::mpi {

class MpiBootstrap : public Bootstrap {
 public:
  // Over a duplicate of MPI_COMM_WORLD.
  MpiBootstrap();
  ~MpiBootstrap() override;
  MpiBootstrap(const MpiBootstrap&) = delete;
  MpiBootstrap& operator=(const MpiBootstrap&) = delete;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string kind() const override { return "mpi"; }
  std::vector<std::string> allgather(const std::string& mine, const std::string& tag,
                                     std::chrono::milliseconds timeout) override;
  std::unique_ptr<Bootstrap> subset(const std::vector<int>& ranks, const std::string& name) override;

  // This Bootstrap's communicator (errors returned), for the opt-in MPI paths.
  MPI_Comm comm() const { return comm_; }

 private:
  explicit MpiBootstrap(MPI_Comm owned);
  MPI_Comm comm_ = MPI_COMM_NULL;
  int rank_ = 0;
  int size_ = 1;
};

}  // namespace muster::runtime::comm::mpi
