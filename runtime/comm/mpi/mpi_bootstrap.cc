#include "runtime/comm/mpi/mpi_bootstrap.h"

#include <algorithm>
#include <cstdint>
#include <thread>

#include "runtime/comm/mpi/mpi_world.h"
#include "runtime/error.h"

namespace muster::runtime::comm::mpi {
namespace {

// Polls `request` until it completes or `deadline` passes (then false).
bool wait_until(MPI_Request* request, std::chrono::steady_clock::time_point deadline, const std::string& what) {
  auto pause = std::chrono::microseconds(10);
  for (;;) {
    int flag = 0;
    check(MPI_Test(request, &flag, MPI_STATUS_IGNORE), what);
    if (flag) return true;
    if (std::chrono::steady_clock::now() >= deadline) return false;
    std::this_thread::sleep_for(pause);
    pause = std::min(pause * 2, std::chrono::microseconds(2000));
  }
}

}  // namespace

MpiBootstrap::MpiBootstrap() {
  ensure_initialized();
  check(MPI_Comm_dup(MPI_COMM_WORLD, &comm_), "MPI_Comm_dup(MPI_COMM_WORLD)");
  check(MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN), "MPI_Comm_set_errhandler");
  MPI_Comm_rank(comm_, &rank_);
  MPI_Comm_size(comm_, &size_);
}

MpiBootstrap::MpiBootstrap(MPI_Comm owned) : comm_(owned) {
  MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN);
  MPI_Comm_rank(comm_, &rank_);
  MPI_Comm_size(comm_, &size_);
}

MpiBootstrap::~MpiBootstrap() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  // Freeing is collective in spirit; after a failure a peer may be gone, and
  // MPI_Comm_free must not be what hangs a survivor's teardown.
  if (!finalized && !failed() && comm_ != MPI_COMM_NULL) MPI_Comm_free(&comm_);
}

std::vector<std::string> MpiBootstrap::allgather(const std::string& mine, const std::string& tag,
                                                 std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  const std::string what = "MPI bootstrap (" + tag + ")";
  auto timed_out = [&] {
    mark_failed();  // a request stays posted: MPI cannot be finalised cleanly
    return TimeoutError(what + ": not every rank arrived within " + std::to_string(timeout.count()) +
                        " ms (MPI does not say which); check every rank's log");
  };
  uint64_t length = mine.size();
  std::vector<uint64_t> lengths(static_cast<std::size_t>(size_));
  MPI_Request request;
  check(MPI_Iallgather(&length, 1, MPI_UINT64_T, lengths.data(), 1, MPI_UINT64_T, comm_, &request),
        what + ": MPI_Iallgather");
  if (!wait_until(&request, deadline, what)) throw timed_out();
  std::vector<int> counts(static_cast<std::size_t>(size_)), displs(static_cast<std::size_t>(size_));
  uint64_t total = 0;
  for (std::size_t r = 0; r < lengths.size(); ++r) {
    if (total + lengths[r] > static_cast<uint64_t>(INT32_MAX)) throw InvalidArgument(what + ": values too large");
    counts[r] = static_cast<int>(lengths[r]);
    displs[r] = static_cast<int>(total);
    total += lengths[r];
  }
  std::string all(static_cast<std::size_t>(total), '\0');
  std::string send = mine;  // MPI wants a non-const buffer on some builds
  check(MPI_Iallgatherv(send.data(), static_cast<int>(send.size()), MPI_BYTE, all.data(), counts.data(),
                        displs.data(), MPI_BYTE, comm_, &request),
        what + ": MPI_Iallgatherv");
  if (!wait_until(&request, deadline, what)) throw timed_out();
  std::vector<std::string> out(static_cast<std::size_t>(size_));
  for (std::size_t r = 0; r < out.size(); ++r) {
    out[r] = all.substr(static_cast<std::size_t>(displs[r]), static_cast<std::size_t>(counts[r]));
  }
  return out;
}

std::unique_ptr<Bootstrap> MpiBootstrap::subset(const std::vector<int>& ranks, const std::string& name) {
  MPI_Group world = MPI_GROUP_NULL, members = MPI_GROUP_NULL;
  check(MPI_Comm_group(comm_, &world), "MPI_Comm_group");
  const int rc = MPI_Group_incl(world, static_cast<int>(ranks.size()), ranks.data(), &members);
  MPI_Group_free(&world);
  check(rc, "MPI_Group_incl (process set '" + name + "')");
  // The tag tells concurrent creations apart; the members agree on the name.
  uint32_t h = 2166136261u;
  for (unsigned char c : name) h = (h ^ c) * 16777619u;
  MPI_Comm sub = MPI_COMM_NULL;
  const int crc = MPI_Comm_create_group(comm_, members, static_cast<int>(h % 32000u), &sub);
  MPI_Group_free(&members);
  check(crc, "MPI_Comm_create_group (process set '" + name + "')");
  return std::unique_ptr<Bootstrap>(new MpiBootstrap(sub));
}

}  // namespace muster::runtime::comm::mpi
