// Both of musterd's SQLite files are opened one way (service/sqlite_db.h):
// a file that can only be read, or one that fails quick_check, is refused at
// open with a message naming the file, and a failed transaction leaves
// nothing behind.
#include <gtest/gtest.h>
#include <sqlite3.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "service/metrics/series_store.h"
#include "service/sqlite_db.h"
#include "service/store.h"
#include "temp_dir.h"

namespace {

namespace fs = std::filesystem;
using muster::service::SeriesStore;
using muster::service::SqliteDb;
using muster::service::Store;
using muster::service::StoredRecord;
using muster::testing::TempDir;

// A database with enough rows to span many pages, then page 3 overwritten
// from its header on.
std::string damaged_database(const fs::path& dir) {
  const std::string path = (dir / "damaged.db").string();
  {
    auto store = Store::open(path);
    EXPECT_TRUE(store.is_ok()) << store.status().message();
    std::vector<StoredRecord> rows;
    for (int i = 0; i < 400; ++i) {
      rows.push_back({"w" + std::to_string(i), static_cast<uint64_t>(i), {{"pad", std::string(200, 'x')}}});
    }
    EXPECT_TRUE((*store)->put(rows).is_ok());
    auto db = SqliteDb::open(path, "test");
    EXPECT_TRUE(db.is_ok());
    EXPECT_TRUE((*db)->exec("PRAGMA wal_checkpoint(TRUNCATE);").is_ok());
  }
  std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
  f.seekp(4096 * 2);  // page 3 from its b-tree header on
  const std::string garbage(3000, '\x5a');
  f.write(garbage.data(), static_cast<std::streamsize>(garbage.size()));
  return path;
}

TEST(SqliteDbTest, ADamagedFileIsRefusedByBothStores) {
  TempDir dir("muster-sqlite");
  const std::string path = damaged_database(dir.path());
  auto state = Store::open(path);
  ASSERT_FALSE(state.is_ok());
  EXPECT_NE(state.status().message().find("state database " + path), std::string::npos) << state.status().message();
  auto curves = SeriesStore::open(path);
  ASSERT_FALSE(curves.is_ok());
  EXPECT_NE(curves.status().message().find("training curves' database " + path), std::string::npos)
      << curves.status().message();
}

TEST(SqliteDbTest, AFileThatCanOnlyBeReadIsRefusedByBothStores) {
  TempDir dir("muster-sqlite");
  const std::string path = (dir.path() / "ro.db").string();
  ASSERT_TRUE(Store::open(path).is_ok());
  // Root writes through file permissions: open read-only through a URI.
  const std::string ro = "file:" + path + "?mode=ro";
  for (const auto& message : {Store::open(ro).status().message(), SeriesStore::open(ro).status().message()}) {
    EXPECT_NE(message.find("can only be read"), std::string::npos) << message;
  }
}

int count_rows(SqliteDb& db) {
  sqlite3_stmt* st = nullptr;
  int n = -1;
  if (sqlite3_prepare_v2(db.handle(), "SELECT COUNT(*) FROM t;", -1, &st, nullptr) == SQLITE_OK &&
      sqlite3_step(st) == SQLITE_ROW) {
    n = sqlite3_column_int(st, 0);
  }
  sqlite3_finalize(st);
  return n;
}

TEST(SqliteDbTest, ARefusedBodyLeavesNothingAndABadStatementSaysWhy) {
  TempDir dir("muster-sqlite");
  auto db = SqliteDb::open((dir.path() / "t.db").string(), "test database");
  ASSERT_TRUE(db.is_ok()) << db.status().message();
  ASSERT_TRUE((*db)->exec("CREATE TABLE t (x INTEGER);").is_ok());
  auto refused = (*db)->in_transaction([&] {
    EXPECT_TRUE((*db)->exec("INSERT INTO t VALUES (1);").is_ok());
    return muster::api::internal_error("the body refused");
  });
  EXPECT_EQ(refused.message(), "the body refused");
  EXPECT_EQ(count_rows(**db), 0);
  auto kept = (*db)->in_transaction([&] { return (*db)->exec("INSERT INTO t VALUES (2);"); });
  EXPECT_TRUE(kept.is_ok()) << kept.message();
  EXPECT_EQ(count_rows(**db), 1);
  auto bad = (*db)->exec("INSERT INTO missing VALUES (1);");
  ASSERT_FALSE(bad.is_ok());
  EXPECT_NE(bad.message().find("no such table"), std::string::npos) << bad.message();
}

}  // namespace
