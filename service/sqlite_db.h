// SqliteDb: the one way musterd opens and writes a SQLite file, for both of
// its databases (the state, store.h, and the training curves,
// metrics/series_store.h).
//
// open() creates the file if needed and refuses one it could only read (its
// permissions, a read-only file system) or whose `PRAGMA quick_check` fails,
// so a daemon never starts on a file it cannot keep; then WAL with
// synchronous=NORMAL and a 5 s busy timeout. Every error names the file by
// its `what` ("state database", "training curves' database") and path.
// in_transaction() runs a body between BEGIN IMMEDIATE and COMMIT and rolls
// back when the body or the COMMIT fails (a full disk shows up at COMMIT in
// WAL mode), so a call writes all of its rows or none.
//
// Not thread-safe: its owner serialises calls (both stores hold a mutex).
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "api/status.h"

struct sqlite3;
struct sqlite3_stmt;

namespace muster::service {

class SqliteDb {
 public:
  static api::Result<std::unique_ptr<SqliteDb>> open(const std::string& path, const std::string& what);
  ~SqliteDb();
  SqliteDb(const SqliteDb&) = delete;
  SqliteDb& operator=(const SqliteDb&) = delete;

  sqlite3* handle() const { return db_; }
  const std::string& path() const { return path_; }

  // One or more statements without results; the error is error(message).
  api::Status exec(const std::string& sql);
  api::Status in_transaction(const std::function<api::Status()>& body);
  // sqlite3_errmsg of the last call.
  std::string last_message() const;

 private:
  SqliteDb(sqlite3* db, std::string path, std::string what)
      : db_(db), path_(std::move(path)), what_(std::move(what)) {}
  sqlite3* db_;
  std::string path_;
  std::string what_;
};

// Finalizes a prepared statement when it goes out of scope.
struct Statement {
  Statement() = default;
  Statement(const Statement&) = delete;
  Statement& operator=(const Statement&) = delete;
  ~Statement();
  sqlite3_stmt* stmt = nullptr;
};

}  // namespace muster::service
