#include "runtime/ps/options.h"

#include <climits>

#include "api/base/settings.h"
#include "api/base/worker_env.h"
#include "runtime/error.h"

namespace muster::runtime::ps {

namespace {

int checked(const char* name, long long fallback, long long min, long long max) {
  const auto v = base::Settings::environment().integer(name, fallback, min, max);
  if (!v.ok()) throw InvalidArgument(v.error);
  return static_cast<int>(v.value);
}

}  // namespace

int default_timeout_ms() { return checked("MUSTER_PS_TIMEOUT_MS", 120000, 1, 86'400'000); }

int default_socket_buffer_bytes() { return checked("MUSTER_PS_SOCKET_BUFFER_BYTES", 4 << 20, 0, 1 << 30); }

int default_streams() {
  const auto v = base::Settings::environment().integer("MUSTER_PS_STREAMS", kDefaultStreams, 1, kMaxStreams);
  return v.ok() ? static_cast<int>(v.value) : 0;
}

std::string default_secret() { return base::Settings::environment().text(base::kEnvPsSecret).value; }

}  // namespace muster::runtime::ps
