// Shared main() for the comm tests that run under mpirun: one Communicator
// per process (created before any test, destroyed after all), gtest output in
// brief form on every rank so a failure shows which rank saw it.
#pragma once

#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <string>

#include "runtime/comm/communicator.h"

namespace muster::runtime::comm::testing {

inline std::unique_ptr<Communicator>& world() {
  static std::unique_ptr<Communicator> comm;
  return comm;
}

// --transport=shm|mpi selects the ring's local transport.
inline int run_mpi_tests(int argc, char** argv) {
  ::testing::GTEST_FLAG(brief) = true;
  ::testing::GTEST_FLAG(color) = "no";
  ::testing::InitGoogleTest(&argc, argv);
  CommOptions options;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--transport=mpi") == 0) options.ring_transport = RingTransport::kMpi;
    if (std::strcmp(argv[i], "--transport=shm") == 0) options.ring_transport = RingTransport::kShm;
  }
  world() = Communicator::create(options);
  const int rc = RUN_ALL_TESTS();
  world().reset();
  return rc;
}

}  // namespace muster::runtime::comm::testing
