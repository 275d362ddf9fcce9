#include "service/log_reader.h"

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <limits>

#include "service/log_follower.h"
#include "service/query.h"

namespace muster::service {

namespace fs = std::filesystem;

namespace {

// "/state/workers/w1/output.log (earlier output in output.log.1; 3.0 MiB
// dropped by the 64.0 MiB cap)".
std::string where(const fs::path& path, const base::LogFileInfo& info) {
  std::string text = path.string();
  std::string extra;
  if (!info.rotated.empty()) {
    extra = "earlier output in ";
    for (size_t i = 0; i < info.rotated.size(); ++i) {
      if (i) extra += ", ";
      extra += info.rotated[i].filename().string();
    }
  }
  if (info.dropped > 0) {
    if (!extra.empty()) extra += "; ";
    extra += human_bytes(info.dropped) + " dropped by the size cap (musterd --worker-log-max-size)";
  }
  return extra.empty() ? text : text + " (" + extra + ")";
}

std::string cut_marker(const fs::path& path, const base::LogFileInfo& info, uint64_t before,
                       const std::string& what_follows) {
  return "[muster] " + human_bytes(before) + " (" + std::to_string(before) + " bytes) of earlier output not shown; " +
         what_follows + ". The whole log: " + where(path, info) +
         "; read it from the start with from_start=true (muster logs --from-start).\n";
}

}  // namespace

std::string human_bytes(uint64_t bytes) {
  if (bytes < 1024) return std::to_string(bytes) + (bytes == 1 ? " byte" : " bytes");
  const char* units[] = {"KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(bytes) / 1024;
  int u = 0;
  while (v >= 1024 && u < 3) {
    v /= 1024;
    ++u;
  }
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f %s", v, units[u]);
  return buf;
}

api::Result<LogQuery> parse_log_query(const Request& req) {
  LogQuery q;
  const QueryReader query(req);
  auto tail = query.integer("tail", static_cast<long long>(q.tail), 0, std::numeric_limits<long long>::max());
  if (!tail) return tail.status();
  q.tail = static_cast<size_t>(tail.value());
  q.tail_given = query.given("tail");
  auto follow = parse_follow(req);
  if (!follow) return follow.status();
  q.follow = follow.value();
  auto offset = parse_offset(req);
  if (!offset) return offset.status();
  q.offset = offset.value();
  auto from_start = query.boolean("from_start");
  if (!from_start) return from_start.status();
  q.from_start = from_start.value();
  if (!q.follow && q.offset) return api::invalid_argument("offset needs follow=true", "offset");
  if (q.from_start && (q.tail_given || q.offset)) {
    return api::invalid_argument("from_start=true reads from the first byte: give it without tail and offset",
                                 "from_start");
  }
  return q;
}

uint64_t tail_position(const fs::path& path, uint64_t end, size_t lines, uint64_t max_bytes, uint64_t floor,
                       bool* capped) {
  if (capped) *capped = false;
  if (end <= floor) return end;
  if (lines == 0) return end;
  const uint64_t window = std::max<uint64_t>(floor, end > max_bytes ? end - max_bytes : 0);
  std::string block(static_cast<size_t>(end - window), '\0');
  std::ifstream in(path, std::ios::binary);
  if (!in) return end;
  in.seekg(static_cast<std::streamoff>(window));
  in.read(block.data(), static_cast<std::streamsize>(block.size()));
  block.resize(static_cast<size_t>(std::max<std::streamsize>(in.gcount(), 0)));
  size_t newlines = 0;
  size_t pos = block.size();
  if (pos > 0 && block[pos - 1] == '\n') --pos;  // the final newline ends the last line
  while (pos > 0) {
    const size_t nl = block.rfind('\n', pos - 1);
    if (nl == std::string::npos) break;
    if (++newlines == lines) return window + nl + 1;
    pos = nl;
  }
  // Fewer lines than asked for in the window: all of it when it reaches the
  // floor, else from the first line that starts inside it.
  if (window == floor) return floor;
  if (capped) *capped = true;
  const size_t first = block.find('\n');
  return first == std::string::npos || first + 1 >= block.size() ? window : window + first + 1;
}

LogStart plan_log_start(const fs::path& path, const LogQuery& q) {
  const base::LogFileInfo info = path.empty() ? base::LogFileInfo{} : base::describe_log(path);
  LogStart s;
  s.file_size = info.size;
  if (q.from_start) {
    s.file_pos = 0;  // a rotated file's own first line says what came before it
  } else if (q.offset) {
    if (*q.offset >= info.base_offset) {
      s.file_pos = std::min(*q.offset - info.base_offset, info.size);
    } else {
      s.file_pos = 0;
      s.marker = "[muster] bytes " + std::to_string(*q.offset) + ".." + std::to_string(info.base_offset) +
                 " of this log are no longer in " + where(path, info) + "; going on from byte " +
                 std::to_string(info.base_offset) + ".\n";
    }
  } else {
    // The file's own rotation line is replaced by the marker, which says more.
    bool capped = false;
    s.file_pos = tail_position(path, info.size, q.tail, kMaxTailBytes, info.marker_length, &capped);
    const uint64_t before = info.base_offset + s.file_pos;
    // An explicit tail=N gets exactly its lines (what it always meant); the
    // marker comes with the default read, and whenever the byte bound cut
    // the lines asked for short.
    if (before > 0 && (!q.tail_given || capped)) {
      std::string follows;
      if (q.tail == 0) {
        follows = q.follow ? "new output follows" : "tail=0 shows no earlier lines";
      } else if (s.file_pos < info.size) {
        follows = "the last " + (q.tail == 1 ? std::string("line follows") : std::to_string(q.tail) + " lines follow");
        if (capped) follows += ", as far as they fit in the last " + human_bytes(kMaxTailBytes);
      } else {
        follows = "nothing was written after it";
      }
      s.marker = cut_marker(path, info, before, follows);
    }
  }
  s.offset = info.base_offset + s.file_pos;
  return s;
}

}  // namespace muster::service
