// MusterError: the one exception the C++ SDK throws.
//
// It carries the daemon's error as sent ({"error":{"code","message","field"}})
// plus the HTTP status. Errors that never reached the daemon use the codes
// "unconfigured" (no URL/token found), "unavailable" (connection failed) and
// "deadline_exceeded" (no answer in time, or a client-side wait ran out).
// ClusterFailed is thrown by run_cluster/horovodrun when the cluster failed;
// it names the failing task ("worker:1") where it is known.
#pragma once

#include <stdexcept>
#include <string>

namespace muster::sdk {

class MusterError : public std::runtime_error {
 public:
  MusterError(std::string code, std::string message, std::string field = {}, int http_status = 0)
      : std::runtime_error(format(code, message, field, http_status)),
        code_(std::move(code)), message_(std::move(message)), field_(std::move(field)),
        http_status_(http_status) {}

  const std::string& code() const { return code_; }        // "invalid_argument", "not_found", ...
  const std::string& message() const { return message_; }  // the server's message, unchanged
  const std::string& field() const { return field_; }      // request field at fault, or ""
  int http_status() const { return http_status_; }         // 0 if the daemon was not reached

 private:
  static std::string format(const std::string& code, const std::string& message, const std::string& field,
                            int http_status) {
    std::string s = code + ": " + message;
    if (!field.empty()) s += " (field " + field + ")";
    if (http_status != 0) s += " [HTTP " + std::to_string(http_status) + "]";
    return s;
  }

  std::string code_;
  std::string message_;
  std::string field_;
  int http_status_;
};

class ClusterFailed : public MusterError {
 public:
  ClusterFailed(std::string message, std::string cluster_id, std::string task)
      : MusterError("cluster_failed", std::move(message)), cluster_id_(std::move(cluster_id)),
        task_(std::move(task)) {}

  const std::string& cluster_id() const { return cluster_id_; }
  const std::string& task() const { return task_; }  // "worker:1", or "" if unknown

 private:
  std::string cluster_id_;
  std::string task_;
};

}  // namespace muster::sdk
