// Shared main() for the comm tests that run under mpirun: one Communicator
// per process (created before any test, destroyed after all), gtest output in
// brief form on every rank so a failure shows which rank saw it.
//
// The same binaries run without mpirun (tests/comm_store_launch.sh starts
// the copies): --store=DIR --rank=R --size=N forms the world over a file
// store in DIR instead of MPI's.
#pragma once

#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>

#include "runtime/comm/communicator.h"
#include "runtime/comm/kv_bootstrap.h"
#include "runtime/comm/world_communicator.h"

namespace muster::runtime::comm::testing {

inline std::unique_ptr<Communicator>& world() {
  static std::unique_ptr<Communicator> comm;
  return comm;
}

// --transport=shm|mpi|tcp selects the ring's transport (and checks that
// the ring really runs over it).
inline int run_mpi_tests(int argc, char** argv) {
  ::testing::GTEST_FLAG(brief) = true;
  ::testing::GTEST_FLAG(color) = "no";
  ::testing::InitGoogleTest(&argc, argv);
  CommOptions options;
  std::string transport, store;
  int rank = -1, size = -1;
  for (int i = 1; i < argc; ++i) {
    if (std::strncmp(argv[i], "--transport=", 12) == 0) transport = argv[i] + 12;
    if (std::strncmp(argv[i], "--store=", 8) == 0) store = argv[i] + 8;
    if (std::strncmp(argv[i], "--rank=", 7) == 0) rank = std::atoi(argv[i] + 7);
    if (std::strncmp(argv[i], "--size=", 7) == 0) size = std::atoi(argv[i] + 7);
  }
  if (transport == "mpi") options.ring_transport = RingTransport::kMpi;
  if (transport == "shm") options.ring_transport = RingTransport::kShm;
  if (transport == "tcp") options.ring_transport = RingTransport::kTcp;
  if (store.empty()) {
    world() = Communicator::create(options);
  } else {
    world() = Communicator::create(std::make_unique<KvBootstrap>(make_file_kv_store(store), rank, size, "tests"), options);
  }
  if (!transport.empty() && world()->size() > 1) {
    const std::string actual = dynamic_cast<WorldCommunicator&>(*world()).ring_transport_name();
    if (actual != transport) {
      std::fprintf(stderr, "--transport=%s asked for, but the ring runs over %s\n", transport.c_str(), actual.c_str());
      return 1;
    }
  }
  const int rc = RUN_ALL_TESTS();
  world().reset();
  return rc;
}

}  // namespace muster::runtime::comm::testing
