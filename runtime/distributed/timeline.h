// Timeline: a Chrome-trace JSON file ("traceEvents", as chrome://tracing and
// Perfetto load it) of the DistributedOptimizer's bucket phases.
//
// The file is valid JSON after every event, not only after close: each event
// is written with one pwrite() over the closing "]}" and the closing is
// written again behind it. A crash (even SIGKILL between events) leaves a
// loadable trace of everything recorded so far.
//
// Events are complete events (ph "X": ts and dur in microseconds) on
// pid = the rank and tid = a row (the optimizer uses row 0 for steps and
// row b+1 for bucket b); name_row() labels a row with a metadata event.
//
//   Timeline t("/tmp/trace.json", /*pid=*/0);
//   t.name_row(1, "bucket 0 (12 tensors, 4.0 MB)");
//   t.complete({"allreduce", "bucket", 1, start_us, dur_us, {{"step", 3}}});
//
// Thread-safe.
#pragma once

#include <cstdint>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

namespace muster::runtime::distributed {

struct TimelineEvent {
  std::string name;
  std::string category;
  int row = 0;
  int64_t start_us = 0;
  int64_t duration_us = 0;
  std::vector<std::pair<std::string, int64_t>> args;
};

class Timeline {
 public:
  // Creates (truncates) `path`; throws Error when it cannot.
  Timeline(const std::string& path, int pid);
  ~Timeline();
  Timeline(const Timeline&) = delete;
  Timeline& operator=(const Timeline&) = delete;

  const std::string& path() const { return path_; }
  void name_process(const std::string& name);
  void name_row(int row, const std::string& name);
  void complete(const TimelineEvent& event);
  // Stops writing (the file is already complete); later events are dropped.
  void close();

 private:
  void append(const std::string& json_object);

  std::mutex mu_;
  std::string path_;
  int pid_;
  int fd_ = -1;
  int64_t tail_ = 0;  // offset of the closing "]}"
  bool first_ = true;
};

}  // namespace muster::runtime::distributed
