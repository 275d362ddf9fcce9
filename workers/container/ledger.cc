#include "workers/container/ledger.h"

#include <algorithm>
#include <fstream>
#include <sstream>

#include "api/base/atomic_file.h"

namespace muster::workers::container {
namespace {

const char* kind_word(ResourceKind kind) {
  switch (kind) {
    case ResourceKind::kNetns: return "netns";
    case ResourceKind::kLink: return "link";
    case ResourceKind::kBridge: return "bridge";
  }
  return "?";
}

}  // namespace

Ledger::Ledger(std::filesystem::path file) : file_(std::move(file)) {
  std::ifstream in(file_);
  if (in) {
    std::stringstream ss;
    ss << in.rdbuf();
    entries_ = parse(ss.str());
  }
}

void Ledger::add(ResourceKind kind, const std::string& name) {
  std::lock_guard<std::mutex> lock(mu_);
  LedgerEntry e{kind, name};
  if (std::find(entries_.begin(), entries_.end(), e) == entries_.end()) entries_.push_back(e);
  save_locked();
}

void Ledger::remove(ResourceKind kind, const std::string& name) {
  std::lock_guard<std::mutex> lock(mu_);
  entries_.erase(std::remove(entries_.begin(), entries_.end(), LedgerEntry{kind, name}), entries_.end());
  save_locked();
}

std::vector<LedgerEntry> Ledger::entries() const {
  std::lock_guard<std::mutex> lock(mu_);
  return entries_;
}

std::vector<LedgerEntry> Ledger::parse(const std::string& text) {
  std::vector<LedgerEntry> out;
  std::istringstream in(text);
  std::string word, name;
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream ls(line);
    if (!(ls >> word >> name)) continue;
    if (word == "netns") out.push_back({ResourceKind::kNetns, name});
    else if (word == "link") out.push_back({ResourceKind::kLink, name});
    else if (word == "bridge") out.push_back({ResourceKind::kBridge, name});
  }
  return out;
}

std::string Ledger::format(const std::vector<LedgerEntry>& entries) {
  std::string out;
  for (const auto& e : entries) out += std::string(kind_word(e.kind)) + " " + e.name + "\n";
  return out;
}

void Ledger::save_locked() const {
  if (file_.empty()) return;
  // Durable: after a crash (of the daemon or the machine) the next daemon
  // must find every namespace and link this one created.
  (void)base::write_file_atomically(file_, format(entries_), {0600});
}

}  // namespace muster::workers::container
