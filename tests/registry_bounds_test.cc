// WorkerRegistry's bounds and state integrity, with a FakeClock, a
// FakeBackend and a real SQLite file: retention by count and by age (record,
// row and directory go; clusters keep theirs), DELETE, the cap on unfinished
// workers, the list in pages, and restore() facing a database that lost
// rows (refused, or adopted with a log line) or holds garbled ones.
#include <sqlite3.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "registry_fixture.h"

namespace fs = std::filesystem;
using namespace std::chrono_literals;
using muster::api::ErrorCode;
using muster::api::WorkerStatus;
using muster::service::LaunchBatch;
using muster::service::RestoreOptions;
using muster::service::Store;

namespace {

class RegistryBoundsTest : public muster::testing::RegistryFixture {
 protected:
  RegistryBoundsTest() : RegistryFixture("muster-registry-bounds") {}
  void SetUp() override {
    options_.retention.max_finished = 3;
    options_.retention.retain_for = 60s;
    options_.retention.max_live = 6;
    open();
  }
  void open() { start(db()); }
  std::string db() const { return (dir_.path() / "musterd.db").string(); }
  muster::api::Result<std::vector<muster::api::Worker>> launch(int n, std::optional<std::string> cluster = {}) {
    LaunchBatch b;
    b.request.n = n;
    b.request.script = "train.py";
    b.request.script_path = dir_.path() / "train.py";
    b.cluster_id = cluster;
    return registry_->launch(b);
  }
  std::vector<std::string> finished(int n, std::optional<std::string> cluster = {}) {
    std::vector<std::string> ids;
    const auto launched = launch(n, cluster).value();
    for (const auto& w : launched) {
      EXPECT_TRUE(registry_->agent_register(w.id, "10.0.0.1", std::nullopt).is_ok());
      EXPECT_TRUE(registry_->agent_exit(w.id, 0).is_ok());
      ids.push_back(w.id);
    }
    return ids;
  }
  bool known(const std::string& id) { return registry_->get(id).is_ok(); }
  bool has_dir(const std::string& id) { return fs::exists(dir_.path() / "workers" / id); }
  size_t dirs() {
    size_t n = 0;
    for (auto it = fs::directory_iterator(dir_.path() / "workers"); it != fs::directory_iterator(); ++it) ++n;
    return n;
  }
};

TEST_F(RegistryBoundsTest, FinishedWorkersAreForgottenBeyondTheCountOldestFirst) {
  std::vector<std::string> ids;
  for (int i = 0; i < 5; ++i) {
    ids.push_back(finished(1)[0]);
    clock_.advance(1s);
  }
  const auto cluster_ids = finished(2, std::string("c-1"));  // kept with their cluster
  const auto live = launch(1).value()[0].id;
  registry_->tick();
  for (int i = 0; i < 2; ++i) {
    EXPECT_FALSE(known(ids[i])) << i;
    EXPECT_FALSE(has_dir(ids[i])) << "its directory (and log) goes too";
  }
  for (int i = 2; i < 5; ++i) EXPECT_TRUE(known(ids[i])) << i;
  for (const auto& id : cluster_ids) EXPECT_TRUE(known(id));
  EXPECT_TRUE(known(live));
  EXPECT_EQ(backend_.forgotten, (std::vector<std::string>{ids[0], ids[1]}));
  // The rows went as well: a restarted daemon agrees.
  open();
  ASSERT_TRUE(registry_->restore().is_ok());
  EXPECT_EQ(registry_->list().size(), 6u);
  EXPECT_FALSE(known(ids[0]));
}

TEST_F(RegistryBoundsTest, FinishedWorkersAreForgottenAfterTheRetentionTime) {
  options_.retention.max_finished = 100;
  open();
  const auto old = finished(2);
  clock_.advance(50s);
  const auto young = finished(1);
  clock_.step_wall(24h);  // the calendar does not count
  registry_->tick();
  for (const auto& id : old) EXPECT_TRUE(known(id));
  clock_.advance(11s);  // 61 s after the first two finished
  registry_->tick();
  for (const auto& id : old) EXPECT_FALSE(known(id));
  EXPECT_TRUE(known(young[0]));
  clock_.advance(60s);
  registry_->tick();
  EXPECT_FALSE(known(young[0]));
}

TEST_F(RegistryBoundsTest, DeleteForgetsOnlyFinishedWorkersOutsideClusters) {
  const auto done = finished(1)[0];
  const auto in_cluster = finished(1, std::string("c-2"))[0];
  const auto live = launch(1).value()[0].id;
  EXPECT_EQ(registry_->remove("nope").code(), ErrorCode::kNotFound);
  const auto running = registry_->remove(live);
  EXPECT_EQ(running.code(), ErrorCode::kConflict);
  EXPECT_NE(running.message().find("stop it"), std::string::npos) << running.message();
  const auto clustered = registry_->remove(in_cluster);
  EXPECT_EQ(clustered.code(), ErrorCode::kConflict);
  EXPECT_NE(clustered.message().find("c-2"), std::string::npos) << clustered.message();
  ASSERT_TRUE(registry_->remove(done).is_ok());
  EXPECT_FALSE(known(done));
  EXPECT_FALSE(has_dir(done));
  // A cluster's deletion forgets its workers, unless one still runs.
  const auto cluster_live = launch(1, std::string("c-3")).value()[0].id;
  EXPECT_EQ(registry_->remove_finished({in_cluster, cluster_live}).code(), ErrorCode::kConflict);
  EXPECT_TRUE(known(in_cluster));
  ASSERT_TRUE(registry_->remove_finished({in_cluster}).is_ok());
  EXPECT_FALSE(known(in_cluster));
}

TEST_F(RegistryBoundsTest, UnfinishedWorkersAreCappedAndARefusedLaunchLeavesNoDirectory) {
  ASSERT_TRUE(launch(4).is_ok());
  const size_t before = dirs();
  const auto refused = launch(3);
  ASSERT_FALSE(refused.is_ok());
  EXPECT_EQ(refused.status().code(), ErrorCode::kConflict);
  EXPECT_NE(refused.status().message().find("--max-live-workers"), std::string::npos) << refused.status().message();
  EXPECT_EQ(dirs(), before) << "half-made directories stay behind";
  EXPECT_EQ(registry_->list().size(), 4u);
  EXPECT_TRUE(launch(2).is_ok());
  ASSERT_TRUE(registry_->stop({}).is_ok());  // finished ones do not count
  EXPECT_TRUE(launch(6).is_ok());
}

TEST_F(RegistryBoundsTest, TheListComesInPagesInLaunchOrder) {
  options_.retention.max_live = 100;
  open();
  std::vector<std::string> ids;
  for (int i = 0; i < 5; ++i) {
    const auto launched = launch(5).value();
    for (const auto& w : launched) ids.push_back(w.id);
  }
  std::vector<std::string> seen;
  uint64_t cursor = 0;
  int pages = 0;
  for (;;) {
    auto page = registry_->page(cursor, 10);
    ++pages;
    EXPECT_LE(page.workers.size(), 10u);
    for (const auto& w : page.workers) seen.push_back(w.id);
    if (!page.next) break;
    cursor = *page.next;
  }
  EXPECT_EQ(pages, 3);
  EXPECT_EQ(seen, ids);
  // By id, for the dashboard's snapshot pieces.
  auto first = registry_->page_by_id("", 7);
  auto rest = registry_->page_by_id(first.back().id, 100);
  EXPECT_EQ(first.size() + rest.size(), ids.size());
  EXPECT_LT(first.back().id, rest.front().id);
}

// A database that lost rows (deleted, emptied, its -wal lost) next to worker
// directories is refused at start, never silently emptied; told to, the
// daemon adopts those directories as lost workers. An empty directory (a
// launch that died before its commit) is simply removed.
TEST_F(RegistryBoundsTest, ADatabaseThatLostWorkersIsRefusedOrAdopted) {
  const auto ids = finished(2);
  for (const auto& id : ids) std::ofstream(dir_.path() / "workers" / id / "output.log") << "hello\n";
  fs::create_directories(dir_.path() / "workers" / "emptyone00");
  registry_.reset();
  store_.reset();
  fs::remove(db());
  fs::remove(db() + "-wal");
  fs::remove(db() + "-shm");
  open();
  const auto refused = registry_->restore();
  ASSERT_FALSE(refused.is_ok());
  EXPECT_NE(refused.message().find("2 worker directories"), std::string::npos) << refused.message();
  EXPECT_NE(refused.message().find(ids[0]), std::string::npos) << refused.message();
  EXPECT_NE(refused.message().find("--adopt-orphaned-workers"), std::string::npos) << refused.message();
  EXPECT_TRUE(registry_->list().empty());
  EXPECT_FALSE(fs::exists(dir_.path() / "workers" / "emptyone00"));

  open();
  RestoreOptions adopt;
  adopt.adopt_orphans = true;
  ASSERT_TRUE(registry_->restore(adopt).is_ok());
  ASSERT_EQ(registry_->list().size(), 2u);
  for (const auto& id : ids) {
    const auto w = registry_->get(id).value();
    EXPECT_EQ(w.status, WorkerStatus::kLost);
    EXPECT_NE(w.reason.find("no record"), std::string::npos) << w.reason;
  }
  // Adopted means recorded: the next start needs no flag.
  open();
  ASSERT_TRUE(registry_->restore().is_ok());
  EXPECT_EQ(registry_->list().size(), 2u);
}

// Rows that cannot be read are skipped (and logged), the others restored.
TEST_F(RegistryBoundsTest, GarbledRowsAreSkippedAndTheRestRestored) {
  const auto ids = finished(2);
  registry_.reset();
  store_.reset();
  sqlite3* raw = nullptr;
  ASSERT_EQ(sqlite3_open(db().c_str(), &raw), SQLITE_OK);
  const std::string sql = "UPDATE workers SET record = '{not json' WHERE id = '" + ids[0] +
                          "'; INSERT INTO workers (id, seq, record) VALUES ('zz', 99, '{\"worker\": 5}');";
  ASSERT_EQ(sqlite3_exec(raw, sql.c_str(), nullptr, nullptr, nullptr), SQLITE_OK);
  sqlite3_close(raw);
  fs::remove_all(dir_.path() / "workers" / ids[0]);  // its directory is not an orphan then
  open();
  ASSERT_TRUE(registry_->restore().is_ok());
  EXPECT_FALSE(known(ids[0]));
  EXPECT_TRUE(known(ids[1]));
  EXPECT_FALSE(known("zz"));
}

// A database the daemon can only read is refused at open, not discovered by
// every later write failing.
TEST_F(RegistryBoundsTest, AReadOnlyDatabaseIsRefused) {
  registry_.reset();
  store_.reset();
  if (::geteuid() == 0) {
    // root writes through file permissions: open read-only through a URI instead.
    auto store = Store::open("file:" + db() + "?mode=ro");
    ASSERT_FALSE(store.is_ok());
    EXPECT_NE(store.status().message().find("can only be read"), std::string::npos) << store.status().message();
    return;
  }
  fs::permissions(db(), fs::perms::owner_read, fs::perm_options::replace);
  auto store = Store::open(db());
  ASSERT_FALSE(store.is_ok());
  EXPECT_NE(store.status().message().find("can only be read"), std::string::npos) << store.status().message();
}

}  // namespace
