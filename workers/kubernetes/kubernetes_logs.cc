// KubernetesBackend: each pod's log followed (log?follow=true) into the
// daemon's file, resumed after a break without repeating what was written.
#include <chrono>
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
      std::lock_guard<std::mutex> lock(mu_);
      pod->log_done = true;  // nothing can be written: nothing to wait for
      return;
    }
  }
  std::string path = pods_path() + "/" + name + "/log?container=agent&follow=true&timestamps=true";
  const std::string resume = !pod->cursor.last.empty() ? pod->cursor.last : pod->cursor.resume_after;
  if (!resume.empty()) {
    pod->cursor.resume_after = resume;
    path += "&sinceTime=" + since_time(resume);
  }
  // The resume point is kept after each chunk is in the log file (write(2)
  // returned: a SIGKILL of the daemon loses nothing written), never before.
  CursorFile since(since_file(options_.state_dir, worker_id));
  auto s = client_->stream(path, [&](std::string_view chunk) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (shut_down_) return false;
    }
    if (chunk.empty()) return true;
    pod->log->write(take_log_lines(pod->cursor, chunk));
    since.keep(pod->cursor.last);
    return true;
  });
  std::lock_guard<std::mutex> lock(mu_);
  const bool ended = pod->gone || (!pod->object.is_null() && view_of(pod->object).terminal);
  if (ended) pod->log_done = true;
  if (!s && !ended) spdlog::debug("kubernetes: following worker {}'s log: {}", worker_id, s.message());
}

// A stream that ends before the watch has seen the pod end (the kubelet
// closes it as the container exits) is followed once more as soon as the
// watch has (apply_pod() notifies), so that the worker's held exit
// (log_complete()) waits for the watch, not for a second's retry.
void KubernetesBackend::log_loop(std::string worker_id) {
  for (;;) {
    follow_log(worker_id);
    std::unique_lock<std::mutex> lock(mu_);
    auto it = pods_.find(worker_id);
    if (shut_down_ || it == pods_.end() || it->second->log_done) return;
    cv_.wait_for(lock, 1s, [&] {
      auto p = pods_.find(worker_id);
      return shut_down_ || p == pods_.end() || p->second->gone ||
             (!p->second->object.is_null() && view_of(p->second->object).terminal);
    });
  }
}

bool KubernetesBackend::log_complete(const std::string& worker_id) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = pods_.find(worker_id);
  if (it == pods_.end()) return true;
  const Pod& pod = *it->second;
  // No followed log (a held gang's task, a pod never created): nothing trails.
  if (pod.log_path.empty() || !pod.created) return true;
  return pod.log_done || pod.cleaned;
}

}  // namespace muster::workers::kubernetes
