// The C++ runtime's elastic run loop (Horovod's hvd.elastic.run for
// programs that link the runtime), over the world musterd forms.
//
//   a) form a world (WorldFactory: by default the Communicator from the
//      environment, which in an elastic cluster joins the next generation
//      through musterd) and let the job build on it (ElasticJob::form:
//      rebuild its optimizer, register the state's buffers);
//   b) put the right copy into the state's buffers: after a failure the
//      last commit (rollback), after a membership change the snapshot taken
//      before the old world went (no rollback); then sync from rank 0
//      unless skip_sync;
//   c) run the job's training (ElasticJob::train) until it returns: done;
//   d) it throws CommError (a rank died, the world broke: Horovod's
//      HorovodInternalError) or HostsUpdatedInterrupt: the job drops what
//      it built on the world (teardown), the world is destroyed (its shared
//      memory, sockets and threads go) and the loop goes back to a).
// Rank 0 of each world watches musterd for a membership change (the state's
// check_host_updates agrees on it) and, after the first step of every world
// but the first, reports it with the batches redone (0 after a membership
// change) for the cluster's history. The Python loop (muster.torch.elastic,
// runner.py) is the same loop over Python state; tests/elastic_loop_scenarios.json
// holds the two to the same answers.
// Outside an elastic cluster (no MUSTER_RENDEZVOUS_URL) a world cannot
// re-form: a failure is rethrown.
#pragma once

#include <functional>
#include <memory>

#include "runtime/comm/communicator.h"
#include "runtime/distributed/collectives.h"
#include "runtime/elastic/state.h"

namespace muster::runtime::elastic {

// One world of the job.
class World {
 public:
  virtual ~World() = default;
  virtual distributed::Collectives& collectives() = 0;
  // The Communicator under it (what a DistributedOptimizer takes); null in tests.
  virtual comm::Communicator* communicator() { return nullptr; }
  // The generation musterd formed it as (0 outside an elastic cluster).
  virtual int generation() const { return 0; }
};

// The job run() keeps going.
class ElasticJob {
 public:
  virtual ~ElasticJob() = default;
  // Builds what uses `world` and registers the state's buffers (again).
  virtual void form(World& world, State& state) = 0;
  // Trains until done; collectives throw CommError when the world breaks.
  virtual void train(World& world, State& state) = 0;
  // Drops what form() built, before the world is destroyed.
  virtual void teardown() = 0;
};

struct RunOptions {
  // Forms the next world; default: Communicator::create() from the
  // environment. Throws what forming throws (a refused join ends the loop).
  std::function<std::unique_ptr<World>()> make_world;
  // Rank 0's view of membership changes for a world of `generation`;
  // default: musterd's world route (membership.h), none outside an elastic
  // cluster.
  std::function<std::unique_ptr<Membership>(int generation)> make_membership;
  // After the first step of every world but the first, on rank 0:
  // (generation, batches redone: 0 after a membership change); default:
  // reported to musterd.
  std::function<void(int generation, int64_t redone)> report;
  // Whether a failed world may re-form (default: MUSTER_RENDEZVOUS_URL is set).
  std::function<bool()> elastic;
};

// Runs `job` until its train() returns (see the steps above).
void run(ElasticJob& job, State& state, RunOptions options = {});

}  // namespace muster::runtime::elastic
