// make_memory_kv_store (kv_bootstrap.h): ranks on threads of one process.
#include <algorithm>
#include <condition_variable>
#include <map>
#include <mutex>

#include "runtime/comm/kv_bootstrap.h"
#include "runtime/error.h"

namespace muster::runtime::comm {
namespace {

class MemoryKvStore final : public KvStore {
 public:
  void set(const std::string& key, const std::string& value) override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (!values_.emplace(key, value).second) {
        throw InvalidArgument("memory store: key '" + key + "' was set before (keys are written once)");
      }
    }
    cv_.notify_all();
  }

  std::vector<std::string> get(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) override {
    std::unique_lock<std::mutex> lock(mu_);
    auto all_there = [&] {
      return std::all_of(keys.begin(), keys.end(), [&](const std::string& k) { return values_.count(k) != 0; });
    };
    if (!cv_.wait_for(lock, timeout, all_there)) {
      std::string missing;
      for (const auto& k : keys) {
        if (!values_.count(k)) missing += (missing.empty() ? "" : ", ") + k;
      }
      throw TimeoutError("memory store: keys missing after " + std::to_string(timeout.count()) + " ms: " + missing);
    }
    std::vector<std::string> out;
    out.reserve(keys.size());
    for (const auto& k : keys) out.push_back(values_.at(k));
    return out;
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::map<std::string, std::string> values_;
};

}  // namespace

std::shared_ptr<KvStore> make_memory_kv_store() { return std::make_shared<MemoryKvStore>(); }

}  // namespace muster::runtime::comm
