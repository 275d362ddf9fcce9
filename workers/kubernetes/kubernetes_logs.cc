// KubernetesBackend: each pod's log followed (log?follow=true) into the
// daemon's file, resumed after a break without repeating what was written.
#include <chrono>
#include <fstream>
#include <mutex>
#include <string>

#include <spdlog/spdlog.h>

#include "workers/kubernetes/backend_pod.h"
#include "workers/kubernetes/pod_state.h"

namespace muster::workers::kubernetes {

using namespace std::chrono_literals;
using detail::kLabelQuery;
using detail::message_of;
using detail::since_file;

// ---- logs

void KubernetesBackend::start_log_locked(Pod& pod) {
  if (!options_.start_threads || shut_down_ || !pod.known || pod.log_started || pod.object.is_null()) return;
  if (!view_of(pod.object).container_started || pod.log_path.empty()) return;
  pod.log_started = true;
  const std::string id = pod.worker_id;
  log_threads_[id] = std::thread([this, id] { log_loop(id); });
}

void KubernetesBackend::follow_log(const std::string& worker_id) {
  Pod* pod = nullptr;
  std::string name;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = pods_.find(worker_id);
    if (it == pods_.end() || it->second->log_path.empty()) return;
    pod = it->second.get();
    name = pod->name;
  }
  if (!pod->log) {
    std::string error;
    pod->log = base::RotatingLog::open(pod->log_path, pod->log_limits, &error);
    if (!pod->log) {
      spdlog::warn("kubernetes: worker {}'s log: {}", worker_id, error);
      return;
    }
  }
  std::string path = pods_path() + "/" + name + "/log?container=agent&follow=true&timestamps=true";
  const std::string resume = !pod->cursor.last.empty() ? pod->cursor.last : pod->cursor.resume_after;
  if (!resume.empty()) {
    pod->cursor.resume_after = resume;
    path += "&sinceTime=" + since_time(resume);
  }
  const fs::path since = since_file(options_.state_dir, worker_id);
  auto last_kept = std::chrono::steady_clock::now();
  std::string kept = pod->cursor.last;
  auto keep_cursor = [&] {
    if (pod->cursor.last == kept) return;
    kept = pod->cursor.last;
    std::ofstream(since, std::ios::trunc) << kept << "\n";
  };
  auto s = client_->stream(path, [&](std::string_view chunk) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (shut_down_) return false;
    }
    if (!chunk.empty()) pod->log->write(take_log_lines(pod->cursor, chunk));
    if (std::chrono::steady_clock::now() - last_kept > 1s) {
      keep_cursor();
      last_kept = std::chrono::steady_clock::now();
    }
    return true;
  });
  keep_cursor();
  std::lock_guard<std::mutex> lock(mu_);
  const bool ended = pod->gone || (!pod->object.is_null() && view_of(pod->object).terminal);
  if (ended) pod->log_done = true;
  if (!s && !ended) spdlog::debug("kubernetes: following worker {}'s log: {}", worker_id, s.message());
}

void KubernetesBackend::log_loop(std::string worker_id) {
  for (;;) {
    follow_log(worker_id);
    std::unique_lock<std::mutex> lock(mu_);
    auto it = pods_.find(worker_id);
    if (shut_down_ || it == pods_.end() || it->second->log_done) return;
    cv_.wait_for(lock, 1s, [this] { return shut_down_; });
  }
}

}  // namespace muster::workers::kubernetes
