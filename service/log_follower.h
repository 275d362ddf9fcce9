// LogFollower: streams log files to clients as they grow (GET .../logs?follow=true).
//
// One thread for the whole daemon polls every followed file each `poll`
// (200 ms: a line reaches its readers within about that), never a thread per
// client. Per follow, each pass:
//   a) read what the file gained since the follow's offset (at most
//      `max_chunk_bytes` a pass, so one huge log cannot starve the others or
//      fill memory) and write() it to the follow's Stream;
//   b) a Stream that is closed (client gone, or fallen behind its bound in
//      the server) or whose write() returns false is dropped;
//   c) once `finished()` says the worker/cluster ended, the follow keeps
//      reading until a pass finds nothing new, then closes the stream: the
//      response ends after the last bytes.
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
  size_t max_followers = 256;
  size_t max_chunk_bytes = 256 << 10;
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
    uint64_t offset = 0;               // next byte to send
    std::function<bool()> finished;    // true once no more output will come
    std::shared_ptr<Stream> stream;
    std::shared_ptr<Slot> slot;
  };

  explicit LogFollower(LogFollowerOptions options = {});
  ~LogFollower();
  LogFollower(const LogFollower&) = delete;
  LogFollower& operator=(const LogFollower&) = delete;

  // unavailable (503) when max_followers follows exist.
  api::Result<std::shared_ptr<Slot>> reserve();
  void follow(Follow f);
  // One pass (a)-(c) over every follow.
  void poll_once();
  // Ends every stream and the thread; later reserve() answers unavailable
  // and a late follow() closes its stream at once. The daemon calls it
  // before stopping the HTTP server, so no open stream holds that up.
  void shutdown();
  size_t active() const;

 private:
  struct Entry {
    Follow f;
    bool ending = false;  // finished() was seen; close after a pass with nothing new
  };
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

// Where a follow starts: `offset` when given (clamped to the file's size),
// else the first byte of the last `tail` lines (tail > 0), else 0.
uint64_t follow_start(const std::filesystem::path& path, std::optional<uint64_t> offset, size_t tail);

// The `offset` query of a logs route: a whole number >= 0, or 400 naming it.
api::Result<std::optional<uint64_t>> parse_offset(const Request& req);
// The `follow` query: true/false/1/0 (absent: false), or 400 naming it.
api::Result<bool> parse_follow(const Request& req);

// The streamed response of a followed log: text/plain, X-Log-Offset, the
// follow registered when the server starts the stream.
Response follow_response(LogFollower& follower, std::shared_ptr<LogFollower::Slot> slot,
                         const std::filesystem::path& path, uint64_t start, std::function<bool()> finished);

}  // namespace muster::service
