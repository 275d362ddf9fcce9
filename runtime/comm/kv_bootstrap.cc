#include "runtime/comm/kv_bootstrap.h"

#include <algorithm>

#include "runtime/error.h"

namespace muster::runtime::comm {

KvBootstrap::KvBootstrap(std::shared_ptr<KvStore> store, int rank, int size, std::string prefix, std::string kind)
    : store_(std::move(store)), rank_(rank), size_(size), prefix_(std::move(prefix)), kind_(std::move(kind)) {
  if (!store_) throw InvalidArgument("KvBootstrap: no store given");
  if (size_ < 1) throw InvalidArgument("KvBootstrap: size must be at least 1, got " + std::to_string(size_));
  if (rank_ < 0 || rank_ >= size_) {
    throw InvalidArgument("KvBootstrap: rank " + std::to_string(rank_) + " is not in [0, " + std::to_string(size_) +
                          ")");
  }
  if (prefix_.empty()) prefix_ = "muster";
}

std::vector<std::string> KvBootstrap::allgather(const std::string& mine, const std::string& tag,
                                                std::chrono::milliseconds timeout) {
  const std::string round = prefix_ + "/" + std::to_string(round_++) + "/";
  std::vector<std::string> keys;
  keys.reserve(static_cast<std::size_t>(size_));
  for (int r = 0; r < size_; ++r) keys.push_back(round + std::to_string(r));
  store_->set(keys[static_cast<std::size_t>(rank_)], mine);
  try {
    return store_->get(keys, timeout);
  } catch (const TimeoutError&) {
    // Which ranks are missing: ask for each key again, without waiting.
    std::vector<int> missing;
    for (int r = 0; r < size_; ++r) {
      try {
        store_->get({keys[static_cast<std::size_t>(r)]}, std::chrono::milliseconds(0));
      } catch (const TimeoutError&) {
        missing.push_back(r);
      }
    }
    std::string who = missing.size() == 1 ? "rank " : "ranks ";
    for (std::size_t i = 0; i < missing.size(); ++i) who += (i ? ", " : "") + std::to_string(missing[i]);
    if (missing.empty()) who = "a rank";
    throw TimeoutError(kind_ + " bootstrap (" + prefix_ + "): " + who + " did not arrive at '" + tag + "' within " + std::to_string(timeout.count()) + " ms (rank " +
                           std::to_string(rank_) + " of " + std::to_string(size_) +
                           " waited); check that every rank started and reaches the same store",
                       missing.empty() ? -1 : missing.front());
  }
}

std::unique_ptr<Bootstrap> KvBootstrap::subset(const std::vector<int>& ranks, const std::string& name) {
  const auto me = std::find(ranks.begin(), ranks.end(), rank_);
  if (me == ranks.end()) {
    throw InvalidArgument("KvBootstrap::subset: rank " + std::to_string(rank_) + " is not one of the members");
  }
  // "set:" keeps a subset's folder apart from the round's own rank keys.
  const std::string prefix = prefix_ + "/" + std::to_string(round_) + "/set:" + name;
  return std::make_unique<KvBootstrap>(store_, static_cast<int>(me - ranks.begin()), static_cast<int>(ranks.size()),
                                       prefix, kind_);
}

}  // namespace muster::runtime::comm
