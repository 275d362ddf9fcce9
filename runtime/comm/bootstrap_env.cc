// bootstrap_from_env() (bootstrap.h): which Bootstrap forms this process's
// world, from how it was started. One branch per launcher, tried in order.
#include <cstdlib>

#include "runtime/comm/bootstrap.h"
#include "runtime/comm/kv_bootstrap.h"
#include "runtime/comm/musterd/rendezvous_client.h"
#include "runtime/comm/mpi/mpi_bootstrap.h"
#include "runtime/comm/mpi/mpi_world.h"
#include "runtime/error.h"

namespace muster::runtime::comm {

std::unique_ptr<Bootstrap> bootstrap_from_env() {
  // a) mpirun / horovodrun: MPI's world. Existing launch lines keep working.
  if (mpi::launched_with_mpi()) return std::make_unique<mpi::MpiBootstrap>();
  // b) A rank of a world that musterd forms (its rendezvous; elastic
  //    generations): a KvBootstrap over musterd's store, kind "musterd".
  //    Each call joins the generation after the last one this process was
  //    in, so a world created again (an elastic reset) is the next one; the
  //    store is that generation's, so one prefix serves every generation.
  if (auto joined = musterd::join_from_env()) {
    return std::make_unique<KvBootstrap>(joined->store, joined->assignment.rank, joined->assignment.size,
                                         joined->assignment.prefix.empty() ? "world" : joined->assignment.prefix,
                                         "musterd");
  }
  // c) A plain process: the world of one.
  return single_process_bootstrap();
}

}  // namespace muster::runtime::comm
