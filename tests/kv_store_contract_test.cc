// The KvStore contract (runtime/comm/bootstrap.h), one typed suite that
// every store passes: the memory store (ranks on threads) and the file store
// (processes sharing a directory; muster.runtime.FileStore binds the same
// one). A new store joins by adding a factory to StoreKinds. The musterd
// store needs a daemon and is not in the suite yet: worlds form over it in
// elastic_rendezvous_integration_test; Python stores (PyKvStore) form worlds
// in runtime_python.
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <filesystem>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "runtime/comm/kv_bootstrap.h"
#include "runtime/error.h"

namespace muster::runtime::comm {
namespace {

using namespace std::chrono_literals;
namespace fs = std::filesystem;

struct MemoryStore {
  static std::shared_ptr<KvStore> make() { return make_memory_kv_store(); }
};

struct FileStore {
  static std::shared_ptr<KvStore> make() {
    static std::atomic<int> n{0};
    const fs::path dir = fs::temp_directory_path() /
                         ("muster-kv-contract-" + std::to_string(::getpid()) + "-" + std::to_string(n++));
    fs::remove_all(dir);
    return make_file_kv_store(dir.string());
  }
};

template <class Kind>
class KvStoreContract : public ::testing::Test {
 protected:
  std::shared_ptr<KvStore> store_ = Kind::make();
};

using StoreKinds = ::testing::Types<MemoryStore, FileStore>;
TYPED_TEST_SUITE(KvStoreContract, StoreKinds);

TYPED_TEST(KvStoreContract, ValuesComeBackWholeAndInTheOrderAsked) {
  const std::string binary("a\0b\xff", 4);
  const std::string big(1 << 20, 'x');
  this->store_->set("k/binary", binary);
  this->store_->set("k/empty", "");
  this->store_->set("k/big", big);
  this->store_->set("plain", "v");
  const auto got = this->store_->get({"plain", "k/big", "k/binary", "k/empty"}, 1s);
  ASSERT_EQ(got.size(), 4u);
  EXPECT_EQ(got[0], "v");
  EXPECT_EQ(got[1], big);
  EXPECT_EQ(got[2], binary);
  EXPECT_EQ(got[3], "");
}

TYPED_TEST(KvStoreContract, GetWaitsForAKeySetLater) {
  std::thread writer([store = this->store_] {
    std::this_thread::sleep_for(100ms);
    store->set("late", "here");
  });
  const auto start = std::chrono::steady_clock::now();
  const auto got = this->store_->get({"late"}, 10s);
  writer.join();
  EXPECT_EQ(got, std::vector<std::string>{"here"});
  EXPECT_LT(std::chrono::steady_clock::now() - start, 5s);
}

TYPED_TEST(KvStoreContract, MissingKeysTimeOutNamingThem) {
  this->store_->set("there", "1");
  const auto start = std::chrono::steady_clock::now();
  try {
    this->store_->get({"there", "absent/one"}, 200ms);
    FAIL() << "get of a missing key returned";
  } catch (const TimeoutError& e) {
    EXPECT_NE(std::string(e.what()).find("absent/one"), std::string::npos) << e.what();
    EXPECT_EQ(std::string(e.what()).find("there,"), std::string::npos) << "names a key that exists: " << e.what();
  }
  EXPECT_GE(std::chrono::steady_clock::now() - start, 190ms);
}

TYPED_TEST(KvStoreContract, AKeyIsWrittenOnce) {
  this->store_->set("once", "first");
  EXPECT_THROW(this->store_->set("once", "second"), InvalidArgument);
  EXPECT_EQ(this->store_->get({"once"}, 1s), std::vector<std::string>{"first"});
}

TYPED_TEST(KvStoreContract, OfWritersRacingForAKeyExactlyOneWins) {
  constexpr int kWriters = 8;
  std::atomic<int> won{0}, refused{0};
  std::vector<std::thread> writers;
  for (int i = 0; i < kWriters; ++i) {
    writers.emplace_back([&, i, store = this->store_] {
      try {
        store->set("race", "writer " + std::to_string(i));
        ++won;
      } catch (const InvalidArgument&) {
        ++refused;
      }
    });
  }
  for (auto& t : writers) t.join();
  EXPECT_EQ(won.load(), 1);
  EXPECT_EQ(refused.load(), kWriters - 1);
  const auto value = this->store_->get({"race"}, 1s).at(0);
  EXPECT_EQ(value.rfind("writer ", 0), 0u) << value;
}

}  // namespace
}  // namespace muster::runtime::comm
