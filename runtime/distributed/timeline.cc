#include "runtime/distributed/timeline.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <map>

#include <nlohmann/json.hpp>

#include "runtime/error.h"

namespace muster::runtime::distributed {
namespace {

constexpr char kHead[] = "{\"displayTimeUnit\":\"ms\",\"traceEvents\":[\n";
constexpr char kTail[] = "\n]}\n";

void write_all_at(int fd, const std::string& bytes, int64_t offset, const std::string& path) {
  std::size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = ::pwrite(fd, bytes.data() + done, bytes.size() - done, static_cast<off_t>(offset + done));
    if (n < 0) {
      if (errno == EINTR) continue;
      throw Error("timeline: cannot write " + path + ": " + std::strerror(errno));
    }
    done += static_cast<std::size_t>(n);
  }
}

}  // namespace

std::shared_ptr<Timeline> Timeline::open(const std::string& path) {
  static std::mutex mu;
  static std::map<std::string, std::weak_ptr<Timeline>> open_files;
  std::lock_guard<std::mutex> lock(mu);
  if (auto existing = open_files[path].lock()) return existing;
  auto t = std::make_shared<Timeline>(path);
  open_files[path] = t;
  return t;
}

int Timeline::next_pid() {
  std::lock_guard<std::mutex> lock(mu_);
  return next_pid_++;
}

Timeline::Timeline(const std::string& path) : path_(path) {
  fd_ = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd_ < 0) {
    throw Error("timeline: cannot create " + path + " (MUSTER_TIMELINE): " + std::strerror(errno));
  }
  const std::string head = kHead;
  write_all_at(fd_, head + kTail, 0, path_);
  tail_ = static_cast<int64_t>(head.size());
}

Timeline::~Timeline() { close(); }

void Timeline::close() {
  std::lock_guard<std::mutex> lock(mu_);
  if (fd_ >= 0) {
    ::close(fd_);
    fd_ = -1;
  }
}

void Timeline::append(const std::string& json_object) {
  std::lock_guard<std::mutex> lock(mu_);
  if (fd_ < 0) return;
  const std::string body = (first_ ? "" : ",\n") + json_object;
  // One write puts the event and a fresh closing in place of the old closing.
  write_all_at(fd_, body + kTail, tail_, path_);
  tail_ += static_cast<int64_t>(body.size());
  first_ = false;
}

void Timeline::name_process(int pid, const std::string& name) {
  nlohmann::json e = {{"name", "process_name"}, {"ph", "M"}, {"pid", pid}, {"tid", 0},
                      {"args", {{"name", name}}}};
  append(e.dump());
}

void Timeline::name_row(int pid, int row, const std::string& name) {
  nlohmann::json e = {{"name", "thread_name"}, {"ph", "M"}, {"pid", pid}, {"tid", row},
                      {"args", {{"name", name}}}};
  append(e.dump());
  nlohmann::json order = {{"name", "thread_sort_index"}, {"ph", "M"}, {"pid", pid}, {"tid", row},
                          {"args", {{"sort_index", row}}}};
  append(order.dump());
}

void Timeline::complete(const TimelineEvent& event) {
  nlohmann::json args = nlohmann::json::object();
  for (const auto& [k, v] : event.args) args[k] = v;
  nlohmann::json e = {{"name", event.name}, {"cat", event.category}, {"ph", "X"},
                      {"pid", event.pid},   {"tid", event.row},      {"ts", event.start_us},
                      {"dur", event.duration_us}, {"args", args}};
  append(e.dump());
}

}  // namespace muster::runtime::distributed
