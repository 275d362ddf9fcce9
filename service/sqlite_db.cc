#include "service/sqlite_db.h"

#include <sqlite3.h>

namespace muster::service {

Statement::~Statement() { sqlite3_finalize(stmt); }

api::Result<std::unique_ptr<SqliteDb>> SqliteDb::open(const std::string& path, const std::string& what) {
  sqlite3* db = nullptr;
  if (sqlite3_open_v2(path.c_str(), &db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_URI, nullptr) !=
      SQLITE_OK) {
    std::string msg = db ? sqlite3_errmsg(db) : "out of memory";
    sqlite3_close(db);
    return api::internal_error("cannot open " + what + " " + path + ": " + msg);
  }
  std::unique_ptr<SqliteDb> out(new SqliteDb(db, path, what));
  sqlite3_busy_timeout(db, 5000);
  if (path != ":memory:" && sqlite3_db_readonly(db, "main") == 1) {
    return api::internal_error(what + " " + path +
                               " can only be read (its permissions, or a read-only file system); musterd needs to "
                               "write it: fix that, or give --state-dir another directory");
  }
  if (auto s = out->exec("PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;"); !s) return s;
  Statement check;
  std::string verdict = "no answer";
  if (sqlite3_prepare_v2(db, "PRAGMA quick_check;", -1, &check.stmt, nullptr) == SQLITE_OK &&
      sqlite3_step(check.stmt) == SQLITE_ROW) {
    const char* text = reinterpret_cast<const char*>(sqlite3_column_text(check.stmt, 0));
    verdict = text ? text : "";
  } else {
    verdict = sqlite3_errmsg(db);
  }
  if (verdict != "ok") {
    return api::internal_error(what + " " + path + " is damaged (quick_check: " + verdict +
                               "); restore it from a backup or move it away");
  }
  return out;
}

SqliteDb::~SqliteDb() { sqlite3_close(db_); }

std::string SqliteDb::last_message() const { return sqlite3_errmsg(db_); }

api::Status SqliteDb::exec(const std::string& sql) {
  char* err = nullptr;
  if (sqlite3_exec(db_, sql.c_str(), nullptr, nullptr, &err) != SQLITE_OK) {
    std::string msg = err ? err : "unknown error";
    sqlite3_free(err);
    return api::internal_error(msg);
  }
  return api::Status::ok();
}

api::Status SqliteDb::in_transaction(const std::function<api::Status()>& body) {
  if (auto s = exec("BEGIN IMMEDIATE;"); !s) return s;
  api::Status s = body();
  if (s) s = exec("COMMIT;");
  if (!s && !sqlite3_get_autocommit(db_)) {
    if (auto rolled = exec("ROLLBACK;"); !rolled) {
      return api::internal_error(s.message() + "; the rollback failed too: " + rolled.message());
    }
  }
  return s;
}

}  // namespace muster::service
