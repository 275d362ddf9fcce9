// KubernetesBackend's insides, shared by its three files:
// kubernetes_backend.cc (launch, stop, housekeeping, adoption, shutdown),
// kubernetes_watch.cc (the one watch on the daemon's pods, and poll()) and
// kubernetes_logs.cc (each pod's log followed into the daemon's file).
// Not for anyone else.
#pragma once

#include <filesystem>
#include <memory>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "api/base/rotating_log.h"
#include "workers/kubernetes/kubernetes_backend.h"
#include "workers/kubernetes/pod_log.h"

namespace muster::workers::kubernetes {

namespace fs = std::filesystem;
using nlohmann::json;

struct KubernetesBackend::Pod {
  std::string worker_id, name, uid;
  json object;              // the last version the API server gave (null until seen)
  bool known = false;       // launched or adopted by this daemon (else only seen)
  bool created = false;     // its create succeeded (or it was adopted)
  bool held = false;        // in a gang that does not fit yet
  std::string held_reason;
  bool stopping = false;    // muster deleted it
  bool gone = false;        // the API server no longer has it
  bool cleaned = false;     // deleted by housekeeping after it ended
  std::optional<ProcessStatus> final;  // what poll() answers from now on
  fs::path log_path;
  base::RotatingLogOptions log_limits;
  // The log thread's alone (follow_log), but `log_done` and `log_started`.
  LogCursor cursor;
  std::unique_ptr<base::RotatingLog> log;
  bool log_started = false;
  bool log_done = false;
};

namespace detail {
inline constexpr const char* kLabelQuery = "labelSelector=muster.io%2Fdaemon%3D";

inline std::string message_of(const HttpReply& reply) {
  const json status = json::parse(reply.body, nullptr, false);
  if (status.is_object() && status.contains("message") && status["message"].is_string()) {
    return "HTTP " + std::to_string(reply.status) + ": " + status["message"].get<std::string>();
  }
  return "HTTP " + std::to_string(reply.status) + ": " + reply.body.substr(0, 300);
}

inline std::filesystem::path since_file(const std::filesystem::path& state_dir, const std::string& worker_id) {
  return state_dir / "kubernetes" / "logs" / (worker_id + ".since");
}
}  // namespace detail

}  // namespace muster::workers::kubernetes
