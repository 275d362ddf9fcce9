#include "service/log_follower.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <limits>
#include <vector>

#include "api/base/rotating_log.h"
#include "service/query.h"

namespace muster::service {

namespace fs = std::filesystem;

LogFollower::LogFollower(LogFollowerOptions options) : options_(options) {
  if (options_.start_thread) thread_ = std::thread([this] { loop(); });
}

LogFollower::~LogFollower() { shutdown(); }

void LogFollower::shutdown() {
  closed_ = true;
  {
    std::lock_guard<std::mutex> lock(mu_);
    quit_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
  std::lock_guard<std::mutex> pass(poll_mu_);
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& e : entries_) e->f.stream->close();
  entries_.clear();
}

void LogFollower::loop() {
  std::unique_lock<std::mutex> lock(mu_);
  bool behind = false;
  while (!cv_.wait_for(lock, behind ? options_.catch_up_poll : options_.poll, [this] { return quit_; })) {
    lock.unlock();
    behind = poll_once();
    lock.lock();
  }
}

LogFollower::Entry::~Entry() {
  if (fd >= 0) ::close(fd);
}

bool LogFollower::open_current(Entry& e) {
  const int fd = ::open(e.f.path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  struct stat st {};
  ::fstat(fd, &st);
  std::string head(512, '\0');
  const ssize_t n = ::pread(fd, head.data(), head.size(), 0);
  head.resize(n > 0 ? static_cast<size_t>(n) : 0);
  const auto marker = base::parse_rotation_marker(head);
  if (e.fd >= 0) {
    ::close(e.fd);
    // A file without a rotation line that replaced ours goes on where ours ended.
    e.base = marker ? marker->base_offset : e.f.offset;
  } else {
    e.base = marker ? marker->base_offset : 0;
  }
  e.fd = fd;
  e.ino = static_cast<uint64_t>(st.st_ino);
  if (e.f.offset < e.base) e.f.offset = e.base;  // rotated away while this follow was behind
  return true;
}

bool LogFollower::advance(Entry& e, std::string& buf, bool& got, bool& behind) {
  Follow& f = e.f;
  if (f.path.empty()) return true;
  if (e.fd < 0 && !open_current(e)) return true;
  size_t budget = options_.max_pass_bytes;
  bool final_read = false;  // `path` names another file: ours is complete
  for (;;) {
    uint64_t want = std::min<uint64_t>(options_.max_chunk_bytes, budget);
    if (f.end) want = std::min<uint64_t>(want, *f.end > f.offset ? *f.end - f.offset : 0);
    if (want == 0) {
      behind = budget == 0;
      return true;
    }
    if (f.stream->queued_bytes() >= options_.max_queued_bytes) {
      behind = true;  // the client reads slower than the file is read: wait for it
      return true;
    }
    buf.resize(static_cast<size_t>(want));
    const ssize_t n = ::pread(e.fd, buf.data(), buf.size(), static_cast<off_t>(f.offset - e.base));
    if (n > 0) {
      buf.resize(static_cast<size_t>(n));
      got = true;
      f.offset += static_cast<uint64_t>(n);
      budget -= static_cast<size_t>(n);
      if (!f.stream->write(buf)) return false;
      continue;
    }
    // The end of our file. Truncated under us: go on from its new end.
    struct stat ours {};
    if (::fstat(e.fd, &ours) == 0 && static_cast<uint64_t>(ours.st_size) < f.offset - e.base) {
      f.offset = e.base + static_cast<uint64_t>(ours.st_size);
    }
    struct stat now {};
    const bool rotated = ::stat(f.path.c_str(), &now) == 0 && static_cast<uint64_t>(now.st_ino) != e.ino;
    if (!rotated) return true;
    if (!final_read) {
      final_read = true;  // the writer may have added a last line before renaming: read once more
      continue;
    }
    if (!open_current(e)) return true;
    final_read = false;
  }
}

api::Result<std::shared_ptr<LogFollower::Slot>> LogFollower::reserve() {
  if (closed_) return api::unavailable("the daemon is shutting down");
  if (++reserved_ > options_.max_followers) {
    --reserved_;
    return api::unavailable("too many followed logs (" + std::to_string(options_.max_followers) +
                            " at once); retry later or read the log without follow");
  }
  return std::make_shared<Slot>(reserved_);
}

void LogFollower::follow(Follow f) {
  if (closed_) {
    f.stream->close();
    return;
  }
  auto e = std::make_shared<Entry>();
  e->f = std::move(f);
  if (!e->f.path.empty()) open_current(*e);  // pins the file the offset lies in
  std::lock_guard<std::mutex> lock(mu_);
  entries_.push_back(std::move(e));
}

size_t LogFollower::active() const {
  std::lock_guard<std::mutex> lock(mu_);
  return entries_.size();
}

bool LogFollower::poll_once() {
  std::lock_guard<std::mutex> pass(poll_mu_);
  std::vector<std::shared_ptr<Entry>> entries;
  {
    std::lock_guard<std::mutex> lock(mu_);
    entries.assign(entries_.begin(), entries_.end());
  }
  std::vector<std::shared_ptr<Entry>> done;
  std::string buf;
  bool any_behind = false;
  for (const auto& e : entries) {
    Follow& f = e->f;
    if (f.stream->closed()) {
      done.push_back(e);
      continue;
    }
    // Decide "finished" before reading, so bytes written before the end are
    // read in this pass or the next.
    const bool finished_now = e->ending || f.finished();
    bool got = false, behind = false;
    if (!advance(*e, buf, got, behind)) {
      done.push_back(e);
      continue;
    }
    any_behind = any_behind || behind;
    const bool reached_end = f.end && f.offset >= *f.end;
    if (reached_end || (finished_now && !got && !behind && e->ending)) {
      f.stream->close();
      done.push_back(e);
      continue;
    }
    e->ending = finished_now;
  }
  if (!done.empty()) {
    std::lock_guard<std::mutex> lock(mu_);
    for (const auto& d : done) entries_.remove(d);
  }
  return any_behind;
}

api::Result<std::optional<uint64_t>> parse_offset(const Request& req) {
  const QueryReader query(req);
  if (!query.given("offset")) return std::optional<uint64_t>();
  // At most 2^63-1, what the document (and a signed 64-bit client) allows.
  auto offset = query.integer("offset", 0, 0, std::numeric_limits<long long>::max());
  if (!offset) {
    return api::invalid_argument(offset.status().message() + " (a byte offset into the log)", "offset");
  }
  return std::optional<uint64_t>(static_cast<uint64_t>(offset.value()));
}

api::Result<bool> parse_follow(const Request& req) {
  return QueryReader(req).boolean("follow");
}

Response follow_response(LogFollower& follower, std::shared_ptr<LogFollower::Slot> slot, const fs::path& path,
                         uint64_t start, std::function<bool()> finished, const std::string& marker,
                         std::optional<uint64_t> end) {
  Response r;
  r.content_type = "text/plain; charset=utf-8";
  r.headers.emplace_back("X-Log-Offset", std::to_string(start));
  r.headers.emplace_back("X-Log-Marker-Bytes", std::to_string(marker.size()));
  r.headers.emplace_back("Cache-Control", "no-cache");
  r.body = marker;
  r.stream = [&follower, slot = std::move(slot), path, start, end,
              finished = std::move(finished)](std::shared_ptr<Stream> stream) mutable {
    LogFollower::Follow f;
    f.path = path;
    f.offset = start;
    f.end = end;
    f.finished = std::move(finished);
    f.stream = std::move(stream);
    f.slot = std::move(slot);
    follower.follow(std::move(f));
  };
  return r;
}

}  // namespace muster::service
