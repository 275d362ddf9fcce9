// Options shared by the PS server and the SyncReplicas client.
#pragma once

#include <cstdlib>
#include <string>

#include "runtime/ps/protocol.h"

namespace muster::runtime::ps {

// MUSTER_PS_TIMEOUT_MS, else 120 s: how long anyone waits for a missing peer
// (a worker's gradients, a PS's answer, the chief's init) before failing.
inline int default_timeout_ms() {
  const char* s = std::getenv("MUSTER_PS_TIMEOUT_MS");
  if (s != nullptr && *s != '\0') {
    long v = std::strtol(s, nullptr, 10);
    if (v > 0) return static_cast<int>(v);
  }
  return 120000;
}

// SO_SNDBUF / SO_RCVBUF on every PS connection: MUSTER_PS_SOCKET_BUFFER_BYTES,
// else 4 MiB; 0 leaves the sizes to the kernel's autotuning.
inline int default_socket_buffer_bytes() {
  const char* s = std::getenv("MUSTER_PS_SOCKET_BUFFER_BYTES");
  if (s != nullptr && *s != '\0') {
    long v = std::strtol(s, nullptr, 10);
    if (v >= 0) return static_cast<int>(v);
  }
  return 4 << 20;
}

// Connections from each worker to each PS task: MUSTER_PS_STREAMS, else
// kDefaultStreams (links.h says what they buy). 0 when the variable is not a
// number in 1..kMaxStreams: the client refuses it, naming the variable.
inline constexpr int kDefaultStreams = 2;
inline int default_streams() {
  const char* s = std::getenv("MUSTER_PS_STREAMS");
  if (s == nullptr || *s == '\0') return kDefaultStreams;
  char* end = nullptr;
  const long v = std::strtol(s, &end, 10);
  return *end == '\0' && v >= 1 && v <= static_cast<long>(kMaxStreams) ? static_cast<int>(v) : 0;
}

// MUSTER_PS_SECRET, else "": the per-cluster secret every hello carries and
// every PS checks. musterd generates one per ps cluster and hands it to each
// of its tasks; a PS started by hand without it accepts any client (and
// warns once).
inline std::string default_secret() {
  const char* s = std::getenv("MUSTER_PS_SECRET");
  return s == nullptr ? std::string() : std::string(s);
}

}  // namespace muster::runtime::ps
