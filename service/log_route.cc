#include "service/log_route.h"

#include <algorithm>
#include <fstream>

#include "service/log_reader.h"

namespace muster::service {

std::string tail_file(const std::filesystem::path& path, size_t lines) {
  constexpr std::streamoff kMaxBytes = 1 << 20;
  std::ifstream in(path, std::ios::binary);
  if (!in) return "";
  in.seekg(0, std::ios::end);
  const std::streamoff size = in.tellg();
  const std::streamoff start = size > kMaxBytes ? size - kMaxBytes : 0;
  in.seekg(start);
  std::string text(static_cast<size_t>(size - start), '\0');
  in.read(text.data(), static_cast<std::streamsize>(text.size()));
  if (lines == 0) return text;
  size_t pos = text.size();
  if (pos > 0 && text[pos - 1] == '\n') --pos;  // the final newline ends the last line
  for (size_t n = 0; n < lines; ++n) {
    const size_t nl = pos == 0 ? std::string::npos : text.rfind('\n', pos - 1);
    if (nl == std::string::npos) return text;
    pos = nl;
  }
  return text.substr(pos + 1);
}

namespace {

// Bytes [from, to) of `path` ("" for a file that is not there).
std::string read_range(const std::filesystem::path& path, uint64_t from, uint64_t to) {
  if (to <= from) return "";
  std::ifstream in(path, std::ios::binary);
  if (!in) return "";
  std::string text(static_cast<size_t>(to - from), '\0');
  in.seekg(static_cast<std::streamoff>(from));
  in.read(text.data(), static_cast<std::streamsize>(text.size()));
  text.resize(static_cast<size_t>(std::max<std::streamsize>(in.gcount(), 0)));
  return text;
}

}  // namespace

void serve_log(const Request& req, const Reply& reply, LogFollower* follower,
               const std::function<api::Result<std::filesystem::path>()>& resolve, std::function<bool()> finished) {
  auto query = parse_log_query(req);
  if (!query) return reply(error_response(query.status()));
  auto found = resolve();
  if (!found) return reply(error_response(found.status()));
  const std::filesystem::path& path = found.value();
  const LogStart start = plan_log_start(path, query.value());
  const bool stream = query->follow || (query->from_start && follower);
  if (!stream) {
    // A tail (at most kMaxTailBytes), or a whole file where nothing streams.
    Response r;
    r.content_type = "text/plain; charset=utf-8";
    r.headers.emplace_back("X-Log-Offset", std::to_string(start.offset));
    r.headers.emplace_back("X-Log-Marker-Bytes", std::to_string(start.marker.size()));
    r.body = start.marker + read_range(path, start.file_pos, start.file_size);
    return reply(std::move(r));
  }
  if (!follower) return reply(error_response(api::unavailable("this server does not stream logs (follow=true)")));
  auto slot = follower->reserve();
  if (!slot) return reply(error_response(slot.status()));
  if (!query->follow) {
    // from_start without follow: the file as it is now, streamed.
    const uint64_t end = start.offset + (start.file_size - start.file_pos);
    return reply(follow_response(*follower, std::move(slot).value(), path, start.offset, [] { return true; },
                                 start.marker, end));
  }
  reply(follow_response(*follower, std::move(slot).value(), path, start.offset, std::move(finished), start.marker));
}

}  // namespace muster::service
