// Ledger: the file where the container backend writes down every namespace,
// link and bridge it creates, so that a daemon started after a crash can
// remove what its predecessor left behind.
//
// Format (<state-dir>/container/ledger), one resource a line, in creation
// order:  `netns NAME` | `link NAME` | `bridge NAME`.
// Contract: add() is called right before creating a resource, remove() after
// deleting it; both rewrite the file at once. Thread-safe.
#pragma once

#include <filesystem>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

namespace muster::workers::container {

enum class ResourceKind { kNetns, kLink, kBridge };

struct LedgerEntry {
  ResourceKind kind;
  std::string name;
  bool operator==(const LedgerEntry& o) const { return kind == o.kind && name == o.name; }
};

class Ledger {
 public:
  explicit Ledger(std::filesystem::path file);

  void add(ResourceKind kind, const std::string& name);
  void remove(ResourceKind kind, const std::string& name);
  std::vector<LedgerEntry> entries() const;

  // Parses the text of a ledger file; unknown lines are skipped.
  static std::vector<LedgerEntry> parse(const std::string& text);
  static std::string format(const std::vector<LedgerEntry>& entries);

 private:
  void save_locked() const;

  std::filesystem::path file_;
  mutable std::mutex mu_;
  std::vector<LedgerEntry> entries_;
};

}  // namespace muster::workers::container
