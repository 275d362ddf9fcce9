// Timeline: a Chrome-trace JSON file ("traceEvents", as chrome://tracing and
// Perfetto load it) of the DistributedOptimizer's bucket phases.
//
// The file is valid JSON after every event, not only after close: each event
// is written with one pwrite() over the closing "]}" and the closing is
// written again behind it. A crash (even SIGKILL between events) leaves a
// loadable trace of everything recorded so far.
//
// Events are complete events (ph "X": ts and dur in microseconds) on a
// "process" pid (each DistributedOptimizer of the process gets its own) and
// a row tid (the optimizer uses row 0 for steps and row b+1 for bucket b);
// name_process() and name_row() label them with metadata events.
//
//   auto t = Timeline::open("/tmp/trace.json");
//   t->name_row(/*pid=*/0, /*row=*/1, "bucket 0 (12 tensors, 4.0 MB)");
//   t->complete({"allreduce", "bucket", 0, 1, start_us, dur_us, {{"step", 3}}});
//
// Thread-safe.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

namespace muster::runtime::distributed {

struct TimelineEvent {
  std::string name;
  std::string category;
  int pid = 0;
  int row = 0;
  int64_t start_us = 0;
  int64_t duration_us = 0;
  std::vector<std::pair<std::string, int64_t>> args;
};

class Timeline {
 public:
  // Creates (truncates) `path`; throws Error when it cannot.
  explicit Timeline(const std::string& path);
  // The writer already open on `path` in this process (so two optimizers
  // share one trace instead of truncating each other's), else a new one.
  static std::shared_ptr<Timeline> open(const std::string& path);
  // A pid not yet handed out by this writer.
  int next_pid();
  ~Timeline();
  Timeline(const Timeline&) = delete;
  Timeline& operator=(const Timeline&) = delete;

  const std::string& path() const { return path_; }
  void name_process(int pid, const std::string& name);
  void name_row(int pid, int row, const std::string& name);
  void complete(const TimelineEvent& event);
  // Stops writing (the file is already complete); later events are dropped.
  void close();

 private:
  void append(const std::string& json_object);

  std::mutex mu_;
  std::string path_;
  int next_pid_ = 0;
  int fd_ = -1;
  int64_t tail_ = 0;  // offset of the closing "]}"
  bool first_ = true;
};

}  // namespace muster::runtime::distributed
