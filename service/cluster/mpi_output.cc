#include "service/cluster/mpi_output.h"

#include <cctype>
#include <cstring>
#include <cstdlib>

namespace muster::service {

namespace {

// A tag "[J,R]<stdout>:" (or stderr / stddiag) at the start of `s`: its
// length; 0 when `s` does not start with one; -1 when `s` is a proper prefix
// of one (wait for more bytes).
int tag_length(std::string_view s) {
  size_t i = 0;
  auto at_end = [&] { return i >= s.size(); };
  if (at_end()) return -1;
  if (s[i++] != '[') return 0;
  for (int part = 0; part < 2; ++part) {
    const size_t digits = i;
    while (!at_end() && std::isdigit(static_cast<unsigned char>(s[i]))) ++i;
    if (at_end()) return -1;
    if (i == digits || s[i++] != (part == 0 ? ',' : ']')) return 0;
  }
  for (std::string_view stream : {"<stdout>:", "<stderr>:", "<stddiag>:"}) {
    const std::string_view rest = s.substr(i);
    const size_t common = std::min(rest.size(), stream.size());
    if (rest.substr(0, common) != stream.substr(0, common)) continue;
    if (rest.size() < stream.size()) return -1;
    return static_cast<int>(i + stream.size());
  }
  return 0;
}

// The rank of a tag "[J,R]<...>:".
int rank_of_tag(std::string_view tag) {
  const size_t comma = tag.find(',');
  return std::atoi(std::string(tag.substr(comma + 1)).c_str());
}

int to_int(std::string_view s) { return std::atoi(std::string(s).c_str()); }

std::string_view trim(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  return s;
}

// Calls fn(rank, tag, text) for every whole line of `log` that carries a
// rank's tag ("[1,3]<stderr>:" and what follows it).
template <typename Fn>
void for_each_rank_line(std::string_view log, Fn fn) {
  size_t start = 0;
  while (start < log.size()) {
    size_t end = log.find('\n', start);
    if (end == std::string_view::npos) end = log.size();
    const std::string_view line = log.substr(start, end - start);
    start = end + 1;
    const int tag = tag_length(line);
    if (tag > 0) fn(rank_of_tag(line), line.substr(0, static_cast<size_t>(tag)), line.substr(static_cast<size_t>(tag)));
  }
}

// A rank's own exit report: on its stderr, in kRankExitWrapper's words.
bool is_exit_report(std::string_view tag, std::string_view text) {
  return tag.find("<stderr>") != std::string_view::npos && text.substr(0, kExitReport.size()) == kExitReport;
}

}  // namespace

void RankLines::feed(std::string_view data, std::string& out) {
  pending_.append(data);
  size_t pos = 0;
  while (pos < pending_.size()) {
    const std::string_view rest(pending_.data() + pos, pending_.size() - pos);
    if (rest.front() == '[') {
      const int n = tag_length(rest);
      if (n < 0) break;  // a tag cut short: wait for the rest
      if (n > 0) {
        current_.assign(rest.substr(0, static_cast<size_t>(n)));
        pos += static_cast<size_t>(n);
        continue;
      }
    }
    // Text up to the next newline (included) or the next possible tag.
    size_t take = 1;
    if (rest.front() != '\n') {
      const size_t end = rest.find_first_of("\n[", 1);
      take = end == std::string_view::npos ? rest.size() : rest[end] == '\n' ? end + 1 : end;
    }
    std::string& line = partial_[current_];
    line.append(rest.substr(0, take));
    pos += take;
    if (line.back() == '\n') {
      out += current_;
      out += line;
      partial_.erase(current_);
      current_.clear();  // after a newline: mpirun's own text unless a tag follows
    }
  }
  pending_.erase(0, pos);
}

void RankLines::finish(std::string& out) {
  if (!pending_.empty()) {
    partial_[current_] += pending_;
    pending_.clear();
  }
  for (auto& [tag, line] : partial_) {
    if (line.empty()) continue;
    out += tag;
    out += line;
    out += '\n';
  }
  partial_.clear();
  current_.clear();
}

std::optional<RankExit> first_failed_rank(std::string_view log) {
  // "process rank R with PID P on node H exited on signal S (Name)."
  constexpr std::string_view kSignalled = "process rank ";
  for (size_t at = log.rfind(kSignalled); at != std::string_view::npos;
       at = at == 0 ? std::string_view::npos : log.rfind(kSignalled, at - 1)) {
    const size_t eol = log.find('\n', at);
    const std::string_view line = log.substr(at, eol == std::string_view::npos ? eol : eol - at);
    const size_t on_signal = line.find(" exited on signal ");
    if (on_signal == std::string_view::npos) continue;
    RankExit e;
    e.rank = to_int(line.substr(kSignalled.size()));
    const std::string_view sig = line.substr(on_signal + std::string_view(" exited on signal ").size());
    e.signal = to_int(sig);
    const size_t open = sig.find('('), close = sig.find(')');
    if (open != std::string_view::npos && close != std::string_view::npos && close > open) {
      e.signal_name = std::string(sig.substr(open + 1, close - open - 1));
    }
    e.exit_code = 128 + *e.signal;
    return e;
  }
  // "Process name: [[J,1],R]" then "Exit code: N".
  const size_t name = log.rfind("Process name:");
  if (name != std::string_view::npos) {
    const size_t bracket = log.find("],", name);
    const size_t code = log.find("Exit code:", name);
    if (bracket != std::string_view::npos && code != std::string_view::npos) {
      RankExit e;
      e.rank = to_int(log.substr(bracket + 2));
      e.exit_code = to_int(trim(log.substr(code + std::string_view("Exit code:").size(), 16)));
      return e;
    }
  }
  return first_reported_exit(log);
}

std::vector<RankExit> reported_exits(std::string_view log) {
  constexpr std::string_view kExited = " exited with code ";
  constexpr std::string_view kKilled = " was killed by signal ";
  std::vector<RankExit> exits;
  for_each_rank_line(log, [&](int rank, std::string_view tag, std::string_view text) {
    if (!is_exit_report(tag, text)) return;
    RankExit e;
    e.rank = rank;
    if (const size_t at = text.find(kExited); at != std::string_view::npos) {
      e.exit_code = to_int(text.substr(at + kExited.size()));
    } else if (const size_t at = text.find(kKilled); at != std::string_view::npos) {
      e.signal = to_int(text.substr(at + kKilled.size()));
      if (*e.signal <= 0 || *e.signal > 64) return;
      if (const char* name = ::sigdescr_np(*e.signal)) e.signal_name = name;
      e.exit_code = 128 + *e.signal;
    } else {
      return;
    }
    exits.push_back(e);
  });
  return exits;
}

std::optional<RankExit> first_reported_exit(std::string_view log) {
  auto exits = reported_exits(log);
  if (exits.empty()) return std::nullopt;
  return exits.front();
}

std::map<int, std::vector<std::string>> rank_tails(std::string_view log, size_t n) {
  std::map<int, std::vector<std::string>> tails;
  for_each_rank_line(log, [&](int r, std::string_view tag, std::string_view text) {
    if (tag.find("<stddiag>") != std::string_view::npos || is_exit_report(tag, text)) return;
    auto& lines = tails[r];
    lines.emplace_back(text);
    if (lines.size() > n) lines.erase(lines.begin());
  });
  return tails;
}

std::vector<std::string> rank_tail(std::string_view log, int rank, size_t n) {
  std::vector<std::string> lines;
  for_each_rank_line(log, [&](int r, std::string_view tag, std::string_view text) {
    if (r != rank || tag.find("<stddiag>") != std::string_view::npos || is_exit_report(tag, text)) return;
    lines.emplace_back(text);
    if (lines.size() > n) lines.erase(lines.begin());
  });
  return lines;
}

}  // namespace muster::service
