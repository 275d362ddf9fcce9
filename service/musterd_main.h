// musterd_main: musterd's whole program (its flags, signals and the
// daemon's life), apart from main() so that a benchmark's program runs the
// very same daemon after registering a backend of its own
// (workers/factory.h, register_backend; bench/fleet/fleet_musterd.cc).
// Returns the process's exit status.
#pragma once

namespace muster::service {

int musterd_main(int argc, char** argv);

}  // namespace muster::service
