// bootstrap_from_env() (bootstrap.h): which Bootstrap forms this process's
// world, from how it was started. One branch per launcher, tried in order.
#include <cstdlib>

#include "runtime/comm/bootstrap.h"
#include "runtime/comm/mpi/mpi_bootstrap.h"
#include "runtime/comm/mpi/mpi_world.h"
#include "runtime/error.h"

namespace muster::runtime::comm {

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
