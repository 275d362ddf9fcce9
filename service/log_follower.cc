#include "service/log_follower.h"

#include <algorithm>
#include <fstream>
#include <vector>

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
  while (!cv_.wait_for(lock, options_.poll, [this] { return quit_; })) {
    lock.unlock();
    poll_once();
    lock.lock();
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
  std::lock_guard<std::mutex> lock(mu_);
  entries_.push_back(std::move(e));
}

size_t LogFollower::active() const {
  std::lock_guard<std::mutex> lock(mu_);
  return entries_.size();
}

void LogFollower::poll_once() {
  std::lock_guard<std::mutex> pass(poll_mu_);
  std::vector<std::shared_ptr<Entry>> entries;
  {
    std::lock_guard<std::mutex> lock(mu_);
    entries.assign(entries_.begin(), entries_.end());
  }
  std::vector<std::shared_ptr<Entry>> done;
  std::string buf;
  for (const auto& e : entries) {
    Follow& f = e->f;
    if (f.stream->closed()) {
      done.push_back(e);
      continue;
    }
    // Decide "finished" before reading, so bytes written before the end are
    // read in this pass or the next.
    const bool finished_now = e->ending || f.finished();
    bool got = false;
    if (!f.path.empty()) {
      std::ifstream in(f.path, std::ios::binary);
      if (in) {
        in.seekg(0, std::ios::end);
        const auto size = static_cast<uint64_t>(std::max<std::streamoff>(in.tellg(), 0));
        if (size < f.offset) f.offset = size;  // truncated: go on from its end
        const uint64_t n = std::min<uint64_t>(size - f.offset, options_.max_chunk_bytes);
        if (n > 0) {
          buf.resize(static_cast<size_t>(n));
          in.seekg(static_cast<std::streamoff>(f.offset));
          in.read(buf.data(), static_cast<std::streamsize>(n));
          buf.resize(static_cast<size_t>(std::max<std::streamsize>(in.gcount(), 0)));
          if (!buf.empty()) {
            got = true;
            f.offset += buf.size();
            if (!f.stream->write(buf)) {
              done.push_back(e);
              continue;
            }
          }
        }
      }
    }
    if (finished_now && !got && e->ending) {
      f.stream->close();
      done.push_back(e);
      continue;
    }
    e->ending = finished_now;
  }
  if (done.empty()) return;
  std::lock_guard<std::mutex> lock(mu_);
  for (const auto& d : done) entries_.remove(d);
}

uint64_t follow_start(const fs::path& path, std::optional<uint64_t> offset, size_t tail) {
  std::error_code ec;
  const auto size = path.empty() ? 0 : fs::file_size(path, ec);
  const uint64_t end = ec ? 0 : static_cast<uint64_t>(size);
  if (offset) return std::min(*offset, end);
  if (tail == 0 || end == 0) return 0;
  // Scan back from the end for the newline before the last `tail` lines.
  std::ifstream in(path, std::ios::binary);
  if (!in) return 0;
  uint64_t pos = end;
  size_t newlines = 0;
  bool skip_final = true;  // a final newline ends the last line, it does not start one
  std::string block;
  while (pos > 0) {
    const uint64_t n = std::min<uint64_t>(pos, 64 << 10);
    pos -= n;
    block.resize(static_cast<size_t>(n));
    in.seekg(static_cast<std::streamoff>(pos));
    in.read(block.data(), static_cast<std::streamsize>(n));
    for (size_t i = block.size(); i-- > 0;) {
      if (block[i] != '\n') {
        skip_final = false;
        continue;
      }
      if (skip_final) {
        skip_final = false;
        continue;
      }
      if (++newlines == tail) return pos + i + 1;
    }
  }
  return 0;
}

api::Result<std::optional<uint64_t>> parse_offset(const Request& req) {
  auto it = req.query.find("offset");
  if (it == req.query.end()) return std::optional<uint64_t>();
  const std::string& v = it->second;
  // At most 2^63-1, what the document (and a signed 64-bit client) allows.
  if (v.empty() || v.size() > 19 || v.find_first_not_of("0123456789") != std::string::npos ||
      (v.size() == 19 && v > "9223372036854775807")) {
    return api::invalid_argument("offset must be a whole number in 0..9223372036854775807 (a byte offset into the log)", "offset");
  }
  return std::optional<uint64_t>(std::stoull(v));
}

api::Result<bool> parse_follow(const Request& req) {
  auto it = req.query.find("follow");
  if (it == req.query.end()) return false;
  const std::string& v = it->second;
  if (v == "true" || v == "1") return true;
  if (v == "false" || v == "0" || v.empty()) return false;
  return api::invalid_argument("follow must be true or false", "follow");
}

Response follow_response(LogFollower& follower, std::shared_ptr<LogFollower::Slot> slot, const fs::path& path,
                         uint64_t start, std::function<bool()> finished) {
  Response r;
  r.content_type = "text/plain; charset=utf-8";
  r.headers.emplace_back("X-Log-Offset", std::to_string(start));
  r.headers.emplace_back("Cache-Control", "no-cache");
  r.stream = [&follower, slot = std::move(slot), path, start,
              finished = std::move(finished)](std::shared_ptr<Stream> stream) mutable {
    LogFollower::Follow f;
    f.path = path;
    f.offset = start;
    f.finished = std::move(finished);
    f.stream = std::move(stream);
    f.slot = std::move(slot);
    follower.follow(std::move(f));
  };
  return r;
}

}  // namespace muster::service
