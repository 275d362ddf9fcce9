#include "runtime/elastic/run.h"

#include <cstdlib>
#include <optional>

#include "api/base/settings.h"
#include "runtime/comm/musterd/rendezvous_client.h"
#include "runtime/elastic/membership.h"

namespace muster::runtime::elastic {

namespace {

// The process's world from the environment.
class CommWorld final : public World {
 public:
  CommWorld()
      : comm_(comm::Communicator::create()),
        collectives_(distributed::wrap_communicator(*comm_)),
        generation_(comm::musterd::last_assignment().generation) {}
  ~CommWorld() override {
    collectives_.reset();
    comm_.reset();
  }
  distributed::Collectives& collectives() override { return *collectives_; }
  comm::Communicator* communicator() override { return comm_.get(); }
  int generation() const override { return generation_; }

 private:
  std::unique_ptr<comm::Communicator> comm_;
  std::unique_ptr<distributed::Collectives> collectives_;
  int generation_;
};

bool in_elastic_cluster() {
  return base::Settings::environment().raw(clusterspec::rendezvous::kEnvRendezvousUrl).has_value();
}

void fill_defaults(RunOptions& o) {
  if (!o.make_world) o.make_world = [] { return std::unique_ptr<World>(std::make_unique<CommWorld>()); };
  if (!o.elastic) o.elastic = in_elastic_cluster;
  if (!o.make_membership) {
    o.make_membership = [](int generation) -> std::unique_ptr<Membership> {
      auto settings = comm::musterd::RendezvousSettings::from_env();
      if (!settings || generation == 0) return nullptr;
      return std::make_unique<MusterdMembership>(*settings, generation);
    };
  }
  if (!o.report) o.report = report_to_musterd;
}

}  // namespace

void run(ElasticJob& job, State& state, RunOptions o) {
  fill_defaults(o);
  std::optional<State::Copies> carry;  // what goes into the next world's buffers
  bool skip_sync = false;
  bool after_failure = false;
  bool reformed = false;  // a world after the first: rank 0 reports its first step
  bool first = true;
  int64_t redone = 0;
  for (;;) {
    // a) The next world, and what the job builds on it.
    std::unique_ptr<World> world = o.make_world();
    std::unique_ptr<Membership> membership;
    if (world->collectives().rank() == 0) membership = o.make_membership(world->generation());
    state.attach(&world->collectives(), membership.get());
    bool formed = false;
    try {
      job.form(*world, state);
      formed = true;
      // b) Rollback or carry-over, then rank 0's state everywhere.
      if (carry) state.load(*carry);
      if (after_failure) state.restore();
      if (!skip_sync) state.sync();
      if (first) state.save();  // the state to go back to before the first commit
      first = false;
      if (reformed && world->collectives().rank() == 0) {
        const int generation = world->generation();
        const int64_t again = after_failure ? redone : 0;
        state.on_next_step([&o, generation, again] { o.report(generation, again); });
      }
      carry.reset();
      // c) Train.
      job.train(*world, state);
      state.attach(nullptr, nullptr);
      job.teardown();
      return;
    } catch (const HostsUpdatedInterrupt& interrupt) {
      // d) A planned change: keep the live state for the next world.
      carry = state.snapshot();
      skip_sync = interrupt.skip_sync();
      after_failure = false;
      reformed = true;
    } catch (const CommError&) {
      // d) The world broke: back to the last commit in the next one.
      if (!o.elastic()) {
        state.attach(nullptr, nullptr);
        if (formed) job.teardown();
        throw;
      }
      redone = state.steps_since_commit();
      carry.reset();
      skip_sync = false;
      after_failure = true;
      reformed = true;
    }
    state.attach(nullptr, nullptr);
    membership.reset();
    if (formed) job.teardown();
    world.reset();
  }
}

}  // namespace muster::runtime::elastic
