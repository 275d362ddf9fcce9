// fleet-musterd: musterd itself (service/musterd_main.h, the same flags and
// the same daemon), with one more backend, "fleet" (fleet_backend.h), which
// starts nothing and hands its workers to bench/fleet's simulated agents.
#include "bench/fleet/fleet_backend.h"
#include "service/musterd_main.h"
#include "workers/factory.h"

int main(int argc, char** argv) {
  muster::workers::register_backend("fleet", muster::bench::FleetBackend::create);
  return muster::service::musterd_main(argc, argv);
}
