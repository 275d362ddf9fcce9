// The request target ("/api/v1/workers/x/logs?tail=10") split into the
// percent-decoded path and query parameters. Never fails: an invalid
// escape is kept as written, a parameter without '=' has the value "".
#pragma once

#include <map>
#include <string>
#include <string_view>

namespace muster::service::http {

std::string percent_decode(std::string_view s);

struct Target {
  std::string path;
  std::map<std::string, std::string> query;
};
Target split_target(std::string_view target);

}  // namespace muster::service::http
