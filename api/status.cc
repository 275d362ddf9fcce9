#include "api/status.h"

namespace muster::api {

const char* error_code_name(ErrorCode code) {
  switch (code) {
    case ErrorCode::kOk: return "ok";
    case ErrorCode::kInvalidArgument: return "invalid_argument";
    case ErrorCode::kUnauthenticated: return "unauthenticated";
    case ErrorCode::kPermissionDenied: return "permission_denied";
    case ErrorCode::kNotFound: return "not_found";
    case ErrorCode::kConflict: return "conflict";
    case ErrorCode::kPayloadTooLarge: return "payload_too_large";
    case ErrorCode::kUnavailable: return "unavailable";
    case ErrorCode::kDeadlineExceeded: return "deadline_exceeded";
    case ErrorCode::kInternal: return "internal";
  }
  return "internal";
}

}  // namespace muster::api
