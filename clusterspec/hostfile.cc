#include "clusterspec/hostfile.h"

#include <cctype>
#include <set>
#include <sstream>

#include "clusterspec/names.h"
#include "clusterspec/spec_error.h"

namespace muster::clusterspec {
namespace {

std::optional<int> parse_count(const std::string& text) {
  if (text.empty() || text.size() > 6) return std::nullopt;
  for (char c : text) {
    if (!std::isdigit(static_cast<unsigned char>(c))) return std::nullopt;
  }
  int value = std::stoi(text);
  if (value < 1 || value > kMaxSlots) return std::nullopt;
  return value;
}

std::vector<std::string> split_words(const std::string& line) {
  std::vector<std::string> words;
  std::string word;
  for (char c : line) {
    if (c == ' ' || c == '\t' || c == '\r') {
      if (!word.empty()) words.push_back(std::move(word));
      word.clear();
    } else {
      word += c;
    }
  }
  if (!word.empty()) words.push_back(std::move(word));
  return words;
}

}  // namespace

std::optional<std::string> hosts_error(const std::vector<HostSlots>& hosts) {
  if (hosts.empty()) return std::string("hosts: the list is empty");
  std::set<std::string> seen;
  for (std::size_t i = 0; i < hosts.size(); ++i) {
    const auto& h = hosts[i];
    const std::string where = "hosts[" + std::to_string(i) + "]";
    if (!is_valid_host(h.host)) return where + ": host " + quoted(h.host) + " " + kHostRule;
    if (h.slots < 1 || h.slots > kMaxSlots) {
      return where + ": slots for " + h.host + " must be in 1.." + std::to_string(kMaxSlots) + ", got " +
             std::to_string(h.slots);
    }
    if (!seen.insert(h.host).second) return where + ": host " + h.host + " is listed twice";
  }
  return std::nullopt;
}

int total_slots(const std::vector<HostSlots>& hosts) {
  int n = 0;
  for (const auto& h : hosts) n += h.slots;
  return n;
}

std::string hosts_arg(const std::vector<HostSlots>& hosts) {
  if (auto error = hosts_error(hosts)) throw SpecError(*error);
  std::string out;
  for (const auto& h : hosts) {
    if (!out.empty()) out += ',';
    out += h.host + ":" + std::to_string(h.slots);
  }
  return out;
}

std::string write_hostfile(const std::vector<HostSlots>& hosts) {
  if (auto error = hosts_error(hosts)) throw SpecError(*error);
  std::string out;
  for (const auto& h : hosts) out += h.host + " slots=" + std::to_string(h.slots) + "\n";
  return out;
}

std::vector<HostSlots> parse_hostfile(const std::string& text) {
  if (text.find('\0') != std::string::npos) throw SpecError("hostfile: contains a NUL byte");
  std::vector<HostSlots> hosts;
  std::set<std::string> seen;
  std::istringstream in(text);
  std::string line;
  int number = 0;
  while (std::getline(in, line)) {
    ++number;
    const std::string where = "hostfile line " + std::to_string(number) + ": ";
    auto hash = line.find('#');
    if (hash != std::string::npos) line.erase(hash);
    auto words = split_words(line);
    if (words.empty()) continue;
    HostSlots entry;
    entry.host = words[0];
    if (!is_valid_host(entry.host)) throw SpecError(where + "host " + quoted(entry.host) + " " + kHostRule);
    bool have_slots = false;
    for (std::size_t i = 1; i < words.size(); ++i) {
      const auto& word = words[i];
      auto eq = word.find('=');
      std::string key = word.substr(0, eq);
      std::string value = eq == std::string::npos ? "" : word.substr(eq + 1);
      if (eq == std::string::npos || (key != "slots" && key != "max_slots" && key != "max-slots")) {
        throw SpecError(where + "unexpected " + quoted(word) + " (expected slots=N or max_slots=N)");
      }
      auto count = parse_count(value);
      if (!count) {
        throw SpecError(where + key + " must be an integer in 1.." + std::to_string(kMaxSlots) + ", got " + quoted(value));
      }
      if (key == "slots") {
        if (have_slots) throw SpecError(where + "slots given twice");
        entry.slots = *count;
        have_slots = true;
      }
      // max_slots only caps oversubscription; it does not change our slot count.
    }
    if (!seen.insert(entry.host).second) throw SpecError(where + "host " + entry.host + " is listed twice");
    hosts.push_back(entry);
  }
  return hosts;
}

}  // namespace muster::clusterspec
