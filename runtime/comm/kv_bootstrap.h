// KvBootstrap: world formation over any KvStore every rank reaches (see
// bootstrap.h for the contract), and the KvStores muster ships.
//
// Protocol. Round n of allgather (n = 0, 1, ... counted alike on every rank,
// since allgathers are collective and ordered) sets "<prefix>/<n>/<rank>" to
// this rank's value, then gets all "<prefix>/<n>/<r>" for r < size in one
// KvStore::get. When that times out, each key is asked again with no wait and
// the TimeoutError names every rank whose key is missing ("ranks 2, 3 did not
// arrive at <tag> within 30000 ms"). subset(ranks, name) is a KvBootstrap
// over the same store with prefix "<prefix>/<n>/set:<name>" (n: the rounds so far)
// and the members renumbered 0..k-1.
//
// One prefix per world: keys are written once, so a world formed again over
// the same store (the next generation of an elastic job) needs a new prefix.
//
// Threads: one at a time per KvBootstrap (bootstrap.h); the stores below are
// thread-safe, so ranks on threads may share one.
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "runtime/comm/bootstrap.h"

namespace muster::runtime::comm {

class KvBootstrap : public Bootstrap {
 public:
  // Rank `rank` of `size` (InvalidArgument unless 0 <= rank < size). `kind`
  // is what kind() reports ("store", "musterd", "torch store").
  KvBootstrap(std::shared_ptr<KvStore> store, int rank, int size, std::string prefix, std::string kind = "store");

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string kind() const override { return kind_; }
  std::vector<std::string> allgather(const std::string& mine, const std::string& tag,
                                     std::chrono::milliseconds timeout) override;
  std::unique_ptr<Bootstrap> subset(const std::vector<int>& ranks, const std::string& name) override;
  const std::string& prefix() const { return prefix_; }

 private:
  std::shared_ptr<KvStore> store_;
  int rank_;
  int size_;
  std::string prefix_;
  std::string kind_;
  uint64_t round_ = 0;
};

// An in-process store (ranks on threads, tests): a map under a mutex.
std::shared_ptr<KvStore> make_memory_kv_store();

// A store in a directory every process reaches (one machine, or a shared
// file system): set() writes a file atomically (temporary name, then
// rename), get() polls for the files. A second set() of a key is refused
// with InvalidArgument. Keys may hold '/', stored as nested folders. The
// directory is created if missing; removing it is the caller's business.
std::shared_ptr<KvStore> make_file_kv_store(const std::string& dir);

}  // namespace muster::runtime::comm
