// Rank 0's watch over musterd's world route (runtime/comm/musterd/): a
// thread long-polls GET rendezvous/world?generation=G until the generation
// is over or a newcomer waits, and changed() reads what it saw. The
// process's worlds formed through musterd; outside an elastic cluster there
// is nothing to watch.
#pragma once

#include <atomic>
#include <memory>
#include <thread>

#include "runtime/comm/musterd/rendezvous_client.h"
#include "runtime/elastic/state.h"

namespace muster::runtime::elastic {

class MusterdMembership final : public Membership {
 public:
  MusterdMembership(comm::musterd::RendezvousSettings settings, int generation);
  ~MusterdMembership() override;  // the thread is detached: its long-poll ends within its bound
  bool changed(bool* newcomers) override;

 private:
  struct Shared {
    std::atomic<bool> changed{false};
    std::atomic<int> waiting{0};
    std::atomic<bool> stop{false};
  };
  std::shared_ptr<Shared> shared_;
};

// Reports (generation, batches redone) to musterd from a detached thread.
void report_to_musterd(int generation, int64_t redone);

}  // namespace muster::runtime::elastic
