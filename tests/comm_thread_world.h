// Ranks on threads for the comm tests: run_world(n, variant, body) forms an
// n-rank world over KvBootstrap and an in-process store (each call its own
// prefix), runs body(rank, communicator) on every rank's thread, and reports
// every rank's exception. Variants: "shm" (one host: shared memory links),
// "tcp" (RingTransport::kTcp: every link TCP over loopback) and "hosts"
// (ranks on two hosts, by host key: shm within, TCP between).
#pragma once

#include <gtest/gtest.h>

#include <atomic>
#include <exception>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "runtime/comm/communicator.h"
#include "runtime/comm/kv_bootstrap.h"

namespace muster::runtime::comm::testing {

inline CommOptions variant_options(const std::string& variant, int rank, int n) {
  CommOptions o;
  o.timeout = std::chrono::milliseconds(30000);
  if (variant == "tcp") o.ring_transport = RingTransport::kTcp;
  if (variant == "hosts") {
    // Ranks [0, n/2) on host A, the rest on host B; loopback reaches both.
    o.host_key = rank < (n + 1) / 2 ? "test-host-a" : "test-host-b";
    o.tcp_interface = "lo";
  }
  return o;
}

inline std::string unique_prefix() {
  static std::atomic<int> n{0};
  return "world-" + std::to_string(n++);
}

using RankBody = std::function<void(int rank, Communicator& comm)>;

// Returns each rank's exception (null where body returned normally).
inline std::vector<std::exception_ptr> run_world_collect(int n, const std::string& variant, const RankBody& body,
                                                         const std::function<CommOptions(int)>& options = nullptr,
                                                         std::shared_ptr<KvStore> store = nullptr) {
  if (!store) store = make_memory_kv_store();
  const std::string prefix = unique_prefix();
  std::vector<std::exception_ptr> errors(static_cast<std::size_t>(n));
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      try {
        const CommOptions o = options ? options(r) : variant_options(variant, r, n);
        auto comm = Communicator::create(std::make_unique<KvBootstrap>(store, r, n, prefix), o);
        body(r, *comm);
      } catch (...) {
        errors[static_cast<std::size_t>(r)] = std::current_exception();
      }
    });
  }
  for (auto& t : threads) t.join();
  return errors;
}

inline std::string what(const std::exception_ptr& e) {
  try {
    std::rethrow_exception(e);
  } catch (const std::exception& x) {
    return x.what();
  } catch (...) {
    return "unknown exception";
  }
}

// Fails the test for every rank that threw.
inline void run_world(int n, const std::string& variant, const RankBody& body) {
  const auto errors = run_world_collect(n, variant, body);
  for (int r = 0; r < n; ++r) {
    if (errors[static_cast<std::size_t>(r)]) ADD_FAILURE() << "rank " << r << ": " << what(errors[static_cast<std::size_t>(r)]);
  }
}

}  // namespace muster::runtime::comm::testing
