#include "api/log_capture.h"

#include <limits>

#include "api/base/settings.h"

namespace muster::api {

namespace {

std::optional<uint64_t> whole_number(const std::string& text) {
  if (text.empty() || text.size() > 19 || text.find_first_not_of("0123456789") != std::string::npos) {
    return std::nullopt;
  }
  return std::stoull(text);
}

// Checks `c` as a whole; `path_field`, `bytes_field`, `keep_field` name where each came from.
Status check(const LogCapture& c, const std::string& path_field, const std::string& bytes_field,
             const std::string& keep_field) {
  if (c.path.empty() || c.path.front() != '/') {
    return invalid_argument(path_field + " must be an absolute path, not '" + c.path + "'", path_field);
  }
  if (auto bad = base::validate(c.options)) {
    const bool bytes = bad->rfind("max_bytes", 0) == 0;
    return invalid_argument((bytes ? bytes_field : keep_field) + ": " + *bad, bytes ? bytes_field : keep_field);
  }
  return Status::ok();
}

}  // namespace

void add_log_capture_env(std::map<std::string, std::string>& env, const LogCapture& c) {
  env[kEnvLogFile] = c.path;
  env[kEnvLogMaxBytes] = std::to_string(c.options.max_bytes);
  env[kEnvLogKeep] = std::to_string(c.options.keep);
}

void remove_log_capture_env(std::map<std::string, std::string>& env) {
  env.erase(kEnvLogFile);
  env.erase(kEnvLogMaxBytes);
  env.erase(kEnvLogKeep);
}

Result<std::optional<LogCapture>> parse_log_capture_env(const std::map<std::string, std::string>& env) {
  // The one reader of the agent's environment (api/base/settings.h).
  const auto settings = base::Settings::of(env, "environment variable");
  auto file = settings.raw(kEnvLogFile);
  if (!file) return std::optional<LogCapture>();
  LogCapture c;
  c.path = *file;
  const auto bytes = settings.integer(kEnvLogMaxBytes, static_cast<long long>(c.options.max_bytes), 0,
                                      std::numeric_limits<long long>::max());
  if (!bytes.ok()) return invalid_argument(bytes.error, kEnvLogMaxBytes);
  c.options.max_bytes = static_cast<uint64_t>(bytes.value);
  const auto keep = settings.integer(kEnvLogKeep, c.options.keep, 0, base::kMaxLogKeep);
  if (!keep.ok()) return invalid_argument(keep.error, kEnvLogKeep);
  c.options.keep = static_cast<unsigned>(keep.value);
  if (auto s = check(c, kEnvLogFile, kEnvLogMaxBytes, kEnvLogKeep); !s) return s;
  return std::optional<LogCapture>(c);
}

std::vector<std::string> to_log_relay_argv(const std::string& agent_path, const LogCapture& c) {
  return {agent_path, kLogRelayFlag, c.path, "--max-bytes", std::to_string(c.options.max_bytes),
          "--keep", std::to_string(c.options.keep)};
}

Result<std::optional<LogCapture>> parse_log_relay_argv(const std::vector<std::string>& argv) {
  if (argv.size() < 2 || argv[1] != kLogRelayFlag) return std::optional<LogCapture>();
  if (argv.size() != 7 || argv[3] != "--max-bytes" || argv[5] != "--keep") {
    return invalid_argument("usage: muster-agent --log-relay PATH --max-bytes N --keep K", kLogRelayFlag);
  }
  LogCapture c;
  c.path = argv[2];
  auto bytes = whole_number(argv[4]);
  if (!bytes) return invalid_argument("--max-bytes must be a whole number, not '" + argv[4] + "'", "--max-bytes");
  c.options.max_bytes = *bytes;
  auto keep = whole_number(argv[6]);
  if (!keep || *keep > base::kMaxLogKeep) {
    return invalid_argument("--keep must be a whole number in 0.." + std::to_string(base::kMaxLogKeep) + ", not '" +
                                argv[6] + "'",
                            "--keep");
  }
  c.options.keep = static_cast<unsigned>(*keep);
  if (auto s = check(c, kLogRelayFlag, "--max-bytes", "--keep"); !s) return s;
  return std::optional<LogCapture>(c);
}

}  // namespace muster::api
