// LogFollower: streams log files to clients as they grow (GET .../logs?follow=true,
// and whole-file reads with from_start=true).
//
// One thread for the whole daemon serves every follow, never a thread per
// client. Each follow holds the log file open from the moment it is
// registered, so the bytes it has yet to send stay readable when the file
// rotates (base::RotatingLog renames it away). Per follow, each pass:
//   a) read what the file gained past the follow's offset, in chunks of at
//      most `max_chunk_bytes`, at most `max_pass_bytes` a pass, and only
//      while the stream's queue holds less than `max_queued_bytes` (a client
//      that reads slowly is waited for, not dropped); write() each chunk;
//   b) at the end of its file: if `path` now names another file (rotated),
//      read what is left of the old one, then go on at the new file's first
//      byte (its rotation line); offsets stay absolute (the log's, across
//      rotations);
//   c) a Stream that is closed (client gone, or fallen behind its bound in
//      the server) or whose write() returns false is dropped;
//   d) a follow with `end` closes its stream once it has sent up to there;
//      otherwise, once `finished()` says the worker/cluster ended, it keeps
//      reading until a pass finds nothing new, then closes the stream: the
//      response ends after the last bytes.
// A pass after which some follow still had bytes to send (a catch-up) is
// followed at once (`catch_up_poll`); otherwise the thread sleeps `poll`
// (200 ms: a new line reaches its readers within about that).
// At most `max_followers` follows exist; reserve() hands out a Slot (or
// unavailable: 503) before the response starts, so a refused client gets an
// error, not an empty stream. A Slot that is dropped unused frees its place.
//
// Threads: reserve()/follow() from any thread (HTTP handlers); finished()
// and Stream::write() run on the follower thread, outside its mutex.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <list>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

#include "api/status.h"
#include "service/router.h"

namespace muster::service {

struct LogFollowerOptions {
  std::chrono::milliseconds poll{200};
  std::chrono::milliseconds catch_up_poll{2};
  size_t max_followers = 256;
  size_t max_chunk_bytes = 256 << 10;
  size_t max_pass_bytes = 8 << 20;    // per follow and pass
  size_t max_queued_bytes = 1 << 20;  // in the stream's queue before a follow waits for its client
  bool start_thread = true;  // false: tests call poll_once()
};

class LogFollower {
 public:
  // A place among the max_followers; frees it when destroyed.
  class Slot {
   public:
    explicit Slot(std::atomic<size_t>& count) : count_(count) {}
    ~Slot() { --count_; }
    Slot(const Slot&) = delete;
    Slot& operator=(const Slot&) = delete;

   private:
    std::atomic<size_t>& count_;
  };

  struct Follow {
    std::filesystem::path path;        // may not exist yet ("" : no log, only wait for the end)
    uint64_t offset = 0;               // absolute offset (base::RotatingLog) of the next byte to send
    std::function<bool()> finished;    // true once no more output will come
    std::shared_ptr<Stream> stream;
    std::shared_ptr<Slot> slot;
    std::optional<uint64_t> end;       // stop at this absolute offset (a whole-file read)
  };

  explicit LogFollower(LogFollowerOptions options = {});
  ~LogFollower();
  LogFollower(const LogFollower&) = delete;
  LogFollower& operator=(const LogFollower&) = delete;

  // unavailable (503) when max_followers follows exist.
  api::Result<std::shared_ptr<Slot>> reserve();
  void follow(Follow f);
  // One pass (a)-(d) over every follow; true when one still has bytes to
  // send that this pass left (its budget, or its client's queue).
  bool poll_once();
  // Ends every stream and the thread; later reserve() answers unavailable
  // and a late follow() closes its stream at once. The daemon calls it
  // before stopping the HTTP server, so no open stream holds that up.
  void shutdown();
  size_t active() const;

 private:
  struct Entry {
    Follow f;
    bool ending = false;  // finished() was seen; close after a pass with nothing new
    int fd = -1;          // the file the offset lies in
    uint64_t ino = 0;
    uint64_t base = 0;    // absolute offset of that file's first byte
    ~Entry();
  };
  // Opens `path` (the current file) into `e`; false when it does not exist.
  static bool open_current(Entry& e);
  // Steps (a) and (b) for one follow: sends what it can; `behind` is set
  // when bytes are left for the next pass. False once the stream refused.
  bool advance(Entry& e, std::string& buf, bool& got, bool& behind);
  void loop();

  LogFollowerOptions options_;
  std::atomic<size_t> reserved_{0};
  mutable std::mutex mu_;
  std::list<std::shared_ptr<Entry>> entries_;
  std::mutex poll_mu_;  // one pass at a time
  std::condition_variable cv_;
  bool quit_ = false;
  std::atomic<bool> closed_{false};
  std::thread thread_;
};

// The `offset` query of a logs route: a whole number >= 0, or 400 naming it.
api::Result<std::optional<uint64_t>> parse_offset(const Request& req);
// The `follow` query: true/false/1/0 (absent: false), or 400 naming it.
api::Result<bool> parse_follow(const Request& req);

// The streamed response of a followed log: text/plain, `marker` as its first
// bytes (X-Log-Marker-Bytes), X-Log-Offset = `start` (the absolute offset
// of the first log byte), the follow registered when the server starts the
// stream; `end` as in Follow.
Response follow_response(LogFollower& follower, std::shared_ptr<LogFollower::Slot> slot,
                         const std::filesystem::path& path, uint64_t start, std::function<bool()> finished,
                         const std::string& marker = "", std::optional<uint64_t> end = std::nullopt);

}  // namespace muster::service
