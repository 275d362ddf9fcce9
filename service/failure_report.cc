#include "service/failure_report.h"

#include <algorithm>
#include <array>
#include <cctype>
#include <fstream>

#include <nlohmann/json.hpp>

namespace muster::service {

namespace {

std::string_view trim(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  return s;
}

bool is_identifier_char(char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '.'; }

// "KeyError: 'x'", "foo.bar.CommError: ...", "KeyboardInterrupt": a line
// that starts in column 0 with a dotted name ending in Error, Exception,
// Exit, Interrupt, Stopped or Failure, then ":" or the end.
bool looks_like_exception(std::string_view line) {
  if (line.empty() || !(std::isalpha(static_cast<unsigned char>(line[0])) || line[0] == '_')) return false;
  size_t n = 0;
  while (n < line.size() && is_identifier_char(line[n])) ++n;
  if (n < line.size() && line[n] != ':') return false;
  const std::string_view name = line.substr(0, n);
  static constexpr std::array<std::string_view, 6> kEnds = {"Error", "Exception", "Exit", "Interrupt", "Stopped",
                                                            "Failure"};
  return std::any_of(kEnds.begin(), kEnds.end(), [&](std::string_view end) {
    return name.size() >= end.size() && name.substr(name.size() - end.size()) == end;
  });
}

// The number that starts at `at` (after spaces), else nullopt.
std::optional<int> number_after(std::string_view text, size_t at) {
  size_t i = at;
  while (i < text.size() && text[i] == ' ') ++i;
  size_t j = i;
  while (j < text.size() && j - i < 7 && std::isdigit(static_cast<unsigned char>(text[j]))) ++j;
  if (j == i) return std::nullopt;
  return std::stoi(std::string(text.substr(i, j - i)));
}

std::optional<int> rank_before(std::string_view text, std::string_view phrase) {
  // "rank N<phrase>": the rank whose phrase this is.
  for (size_t at = text.find("rank "); at != std::string_view::npos; at = text.find("rank ", at + 1)) {
    auto r = number_after(text, at + 5);
    if (!r) continue;
    size_t end = at + 5;
    while (end < text.size() && std::isdigit(static_cast<unsigned char>(text[end]))) ++end;
    const std::string_view rest = text.substr(end);
    const size_t p = rest.find(phrase);
    // The phrase belongs to this rank when it comes before the next "rank ".
    if (p != std::string_view::npos && rest.substr(0, p).find("rank ") == std::string_view::npos) return r;
  }
  return std::nullopt;
}

}  // namespace

std::vector<std::string> split_lines(std::string_view text) {
  std::vector<std::string> lines;
  size_t start = 0;
  while (start < text.size()) {
    size_t end = text.find('\n', start);
    if (end == std::string_view::npos) end = text.size();
    std::string_view line = text.substr(start, end - start);
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    lines.emplace_back(line);
    start = end + 1;
  }
  return lines;
}

std::string last_exception_line(const std::vector<std::string>& lines) {
  // A traceback's exception line follows "Traceback (most recent call
  // last):" and its indented frames. The last such line, else C++'s
  // "  what():  ..." after "terminate called after throwing".
  std::string found;
  bool in_traceback = false;
  for (const auto& raw : lines) {
    const std::string_view line(raw);
    if (line.rfind("Traceback (most recent call last):", 0) == 0) {
      in_traceback = true;
      continue;
    }
    if (in_traceback) {
      if (!line.empty() && line[0] == ' ') continue;  // a frame, or its source line
      if (looks_like_exception(line)) {
        found = std::string(trim(line));
        in_traceback = false;
        continue;
      }
      // "During handling of the above exception..." and the like: keep
      // reading; the chained traceback's line comes later.
      if (line.empty() || line.rfind("The above exception", 0) == 0 || line.rfind("During handling", 0) == 0) {
        continue;
      }
      in_traceback = false;
    }
    const size_t what = line.find("what():");
    if (what != std::string_view::npos && trim(line.substr(0, what)).empty()) {
      found = std::string(trim(line.substr(what + 7)));
    }
  }
  return found;
}

std::string last_exception_in(const std::filesystem::path& log, size_t max_bytes) {
  std::ifstream in(log, std::ios::binary);
  if (!in) return "";
  in.seekg(0, std::ios::end);
  const std::streamoff size = in.tellg();
  const std::streamoff start = size > static_cast<std::streamoff>(max_bytes) ? size - static_cast<std::streamoff>(max_bytes) : 0;
  in.seekg(start);
  std::string text(static_cast<size_t>(size - start), '\0');
  in.read(text.data(), static_cast<std::streamsize>(text.size()));
  return last_exception_line(split_lines(text));
}

Consequence consequence_of(std::string_view line) {
  Consequence c;
  // Phrases that say "a peer failed", with the rank they name where there is one.
  static constexpr std::array<std::string_view, 6> kRankPhrases = {
      " has exited", " failed (reported by rank", " closed its communicator", " closed its Communicator",
      " was killed", " exited on signal"};
  if (const size_t at = line.find("shut down on rank "); at != std::string_view::npos) {
    c.is = true;
    c.rank = number_after(line, at + std::string_view("shut down on rank ").size());
    return c;
  }
  for (auto phrase : kRankPhrases) {
    if (auto r = rank_before(line, phrase)) {
      c.is = true;
      c.rank = r;
      return c;
    }
  }
  static constexpr std::array<std::string_view, 9> kPeerGone = {
      "Connection closed by peer", "Connection reset by peer", "Broken pipe", "EngineStopped",
      "PeerTimeoutError", "peer process has exited", "remote process exited", "Socket Timeout",
      "the communicator was closed"};
  for (auto phrase : kPeerGone) {
    if (line.find(phrase) != std::string_view::npos) {
      c.is = true;
      return c;
    }
  }
  return c;
}

RankReport read_rank_report(int rank, const std::vector<std::string>& lines) {
  RankReport r;
  r.rank = rank;
  // The first record: the exception that ended the script (a later one
  // would be another interpreter's, e.g. a child's).
  for (const auto& line : lines) {
    if (line.rfind(kFailureRecordPrefix, 0) != 0) continue;
    auto j = nlohmann::json::parse(line.substr(kFailureRecordPrefix.size()), nullptr, false);
    if (!j.is_object()) continue;
    if (j.contains("exception") && j["exception"].is_string()) r.exception = j["exception"].get<std::string>();
    if (j.contains("blames") && j["blames"].is_number_integer()) r.blames = j["blames"].get<int>();
    if (j.contains("unix_ns") && j["unix_ns"].is_number_integer()) r.unix_ns = j["unix_ns"].get<int64_t>();
    if (j.contains("monotonic_ns") && j["monotonic_ns"].is_number_integer()) {
      r.monotonic_ns = j["monotonic_ns"].get<int64_t>();
    }
    break;
  }
  if (r.exception.empty()) r.exception = last_exception_line(lines);
  const Consequence c = consequence_of(r.exception);
  if (r.blames && *r.blames == rank) r.blames.reset();  // its own shutdown is no peer's fault
  r.consequence = r.blames.has_value() || c.is;
  if (!r.blames && c.rank && *c.rank != rank) r.blames = c.rank;
  return r;
}

RootCause root_cause(const std::vector<RankReport>& failed) {
  RootCause out;
  if (failed.empty()) return out;
  // a) A rank whose own code raised: the earliest by the records' clocks
  //    where both have one, else the one that ended first.
  std::optional<size_t> own;
  for (size_t i = 0; i < failed.size(); ++i) {
    if (failed[i].consequence || !failed[i].has_exception()) continue;
    if (!own || (failed[i].unix_ns && failed[*own].unix_ns && *failed[i].unix_ns < *failed[*own].unix_ns)) own = i;
  }
  if (own) {
    out.index = *own;
    return out;
  }
  // b) The rank the first blaming one names, when it is among them (it
  //    exited with a code, or was killed, without a traceback).
  std::optional<int> blamed;
  for (const auto& r : failed) {
    if (r.blames) {
      blamed = r.blames;
      break;
    }
  }
  for (size_t i = 0; blamed && i < failed.size(); ++i) {
    if (failed[i].rank == *blamed) {
      out.index = i;
      return out;
    }
  }
  // c) The first that failed without failing of a peer (killed; exited with
  //    a code): a launcher that kills the rest after it only comes later.
  for (size_t i = 0; i < failed.size(); ++i) {
    if (!failed[i].consequence) {
      out.index = i;
      return out;
    }
  }
  // d) Every one failed of a peer that is not among them.
  out.elsewhere = blamed;
  return out;
}

std::string then_failed_text(const std::vector<RankReport>& failed, size_t root) {
  std::string text;
  for (size_t i = 0; i < failed.size(); ++i) {
    if (i == root) continue;
    if (!text.empty()) text += ", ";
    text += "rank " + std::to_string(failed[i].rank);
    if (failed[i].has_exception()) text += " (" + failed[i].exception + ")";
  }
  return text;
}

}  // namespace muster::service
