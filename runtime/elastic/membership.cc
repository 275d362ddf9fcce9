#include "runtime/elastic/membership.h"

#include <chrono>

namespace muster::runtime::elastic {

MusterdMembership::MusterdMembership(comm::musterd::RendezvousSettings settings, int generation)
    : shared_(std::make_shared<Shared>()) {
  std::thread([shared = shared_, settings, generation] {
    comm::musterd::RendezvousClient client(settings);
    while (!shared->stop) {
      try {
        auto v = client.world(generation, std::chrono::milliseconds(25'000));
        if (v.changed) {
          shared->waiting = v.waiting;
          shared->changed = true;
          return;
        }
      } catch (const std::exception&) {
        shared->changed = true;  // the world is gone for this rank: re-form and learn why
        return;
      }
    }
  }).detach();
}

MusterdMembership::~MusterdMembership() { shared_->stop = true; }

bool MusterdMembership::changed(bool* newcomers) {
  if (!shared_->changed) return false;
  *newcomers = shared_->waiting > 0;
  return true;
}

void report_to_musterd(int generation, int64_t redone) {
  auto settings = comm::musterd::RendezvousSettings::from_env();
  if (!settings) return;
  std::thread([s = *settings, generation, redone] {
    try {
      comm::musterd::RendezvousClient(s).report({generation, static_cast<int>(redone), true});
    } catch (const std::exception&) {
      // The history only: training goes on.
    }
  }).detach();
}

}  // namespace muster::runtime::elastic
