// Status and Result: the daemon's one error model.
//
// Daemon code (service/, workers/) returns these instead of throwing; the
// service maps a Status to an HTTP response in exactly one place
// (ErrorCode -> 400/401/403/404/409/413/...). Expected outcomes are enum
// values, never strings to parse. Every message names what was wrong and,
// where there is one, `field` names the request field.
#pragma once

#include <optional>
#include <string>
#include <utility>
#include <variant>

namespace muster::api {

enum class ErrorCode {
  kOk,
  kInvalidArgument,    // 400: the request is malformed or a value is out of range
  kUnauthenticated,    // 401: missing or wrong bearer token
  kPermissionDenied,   // 403: the token may not touch this resource
  kNotFound,           // 404
  kConflict,           // 409: the resource is in a state that forbids the call
  kPayloadTooLarge,    // 413
  kUnavailable,        // 503: a backend cannot act right now (e.g. needs root)
  kDeadlineExceeded,   // 504
  kInternal,           // 500: a bug or an OS failure, never bad input
};

// The wire name of a code: "invalid_argument", "not_found", ...
const char* error_code_name(ErrorCode code);

class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(ErrorCode code, std::string message, std::string field = {})
      : code_(code), message_(std::move(message)), field_(std::move(field)) {}

  static Status ok() { return Status(); }

  bool is_ok() const { return code_ == ErrorCode::kOk; }
  explicit operator bool() const { return is_ok(); }
  ErrorCode code() const { return code_; }
  const std::string& message() const { return message_; }
  const std::string& field() const { return field_; }

 private:
  ErrorCode code_ = ErrorCode::kOk;
  std::string message_;
  std::string field_;
};

inline Status invalid_argument(std::string message, std::string field = {}) {
  return Status(ErrorCode::kInvalidArgument, std::move(message), std::move(field));
}
inline Status not_found(std::string message) { return Status(ErrorCode::kNotFound, std::move(message)); }
inline Status conflict(std::string message) { return Status(ErrorCode::kConflict, std::move(message)); }
inline Status unavailable(std::string message) { return Status(ErrorCode::kUnavailable, std::move(message)); }
inline Status internal_error(std::string message) { return Status(ErrorCode::kInternal, std::move(message)); }

// A value or the Status saying why there is none.
template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : value_(std::move(value)) {}            // NOLINT: implicit by design
  Result(Status status) : status_(std::move(status)) {}    // NOLINT: implicit by design

  bool is_ok() const { return value_.has_value(); }
  explicit operator bool() const { return is_ok(); }
  const Status& status() const { return status_; }
  T& value() & { return *value_; }
  const T& value() const& { return *value_; }
  T&& value() && { return std::move(*value_); }
  T* operator->() { return &*value_; }
  const T* operator->() const { return &*value_; }
  T& operator*() { return *value_; }

 private:
  std::optional<T> value_;
  Status status_;
};

}  // namespace muster::api
