// Options shared by the PS server and the SyncReplicas client.
#pragma once

#include <string>

#include "runtime/ps/protocol.h"

namespace muster::runtime::ps {

// Each reads its variable through the one settings reader
// (api/base/settings.h): a bad value is an error naming the variable, never
// a number made of its first digits.

// MUSTER_PS_TIMEOUT_MS (1..86400000), else 120 s: how long anyone waits for a
// missing peer (a worker's gradients, a PS's answer, the chief's init)
// before failing. Throws InvalidArgument naming the variable when bad.
int default_timeout_ms();

// SO_SNDBUF / SO_RCVBUF on every PS connection: MUSTER_PS_SOCKET_BUFFER_BYTES
// (0..1 GiB), else 4 MiB; 0 leaves the sizes to the kernel's autotuning.
// Throws InvalidArgument naming the variable when bad.
int default_socket_buffer_bytes();

// Connections from each worker to each PS task: MUSTER_PS_STREAMS, else
// kDefaultStreams (links.h says what they buy). 0 when the variable is not a
// number in 1..kMaxStreams: the client refuses it, naming the variable.
inline constexpr int kDefaultStreams = 2;
int default_streams();

// MUSTER_PS_SECRET, else "": the per-cluster secret every hello carries and
// every PS checks. musterd generates one per ps cluster and hands it to each
// of its tasks; a PS started by hand without it accepts any client (and
// warns once).
std::string default_secret();

}  // namespace muster::runtime::ps
