// The world of one, and bootstrap_from_env() (bootstrap.h).
#include <cstdlib>

#include "runtime/comm/bootstrap.h"
#include "runtime/comm/mpi/mpi_bootstrap.h"
#include "runtime/comm/mpi/mpi_world.h"
#include "runtime/error.h"

namespace muster::runtime::comm {
namespace {

class SingleBootstrap final : public Bootstrap {
 public:
  int rank() const override { return 0; }
  int size() const override { return 1; }
  std::string kind() const override { return "single"; }
  std::vector<std::string> allgather(const std::string& mine, const std::string&, std::chrono::milliseconds) override {
    return {mine};
  }
  std::unique_ptr<Bootstrap> subset(const std::vector<int>& ranks, const std::string&) override {
    if (ranks != std::vector<int>{0}) throw InvalidArgument("the world of one has only rank 0");
    return std::make_unique<SingleBootstrap>();
  }
};

}  // namespace

std::unique_ptr<Bootstrap> single_process_bootstrap() { return std::make_unique<SingleBootstrap>(); }

std::unique_ptr<Bootstrap> bootstrap_from_env() {
  // a) mpirun / horovodrun: MPI's world. Existing launch lines keep working.
  if (mpi::launched_with_mpi()) return std::make_unique<mpi::MpiBootstrap>();
  // b) A rank of a world that musterd forms (its rendezvous; elastic
  //    generations): a KvBootstrap over musterd's store, kind "musterd".
  if (const char* url = std::getenv("MUSTER_RENDEZVOUS_URL"); url && *url) {
    throw InvalidArgument(std::string("MUSTER_RENDEZVOUS_URL=") + url +
                          " is set, but this build of the runtime has no musterd rendezvous client; unset it to run "
                          "as a world of one, or start the job with mpirun");
  }
  // c) A plain process: the world of one.
  return single_process_bootstrap();
}

}  // namespace muster::runtime::comm
