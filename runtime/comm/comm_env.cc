#include "runtime/comm/comm_env.h"

#include <algorithm>
#include <climits>
#include <string>

#include "api/base/settings.h"
#include "runtime/error.h"

namespace muster::runtime::comm {
// Every variable through the one settings reader (api/base/settings.h).
int env_int(const char* name, int fallback) {
  const auto v = base::Settings::environment().integer(name, fallback, 0, INT_MAX);
  if (!v.ok()) throw InvalidArgument(v.error);
  return static_cast<int>(v.value);
}

CommOptions apply_env(CommOptions o) {
  if (const auto v = base::Settings::environment().raw("MUSTER_COMM_TIMEOUT_MS")) {
    o.timeout = std::chrono::milliseconds(env_int("MUSTER_COMM_TIMEOUT_MS", 0));
  }
  if (const auto v = base::Settings::environment().raw("MUSTER_COMM_FORMATION_TIMEOUT_MS")) {
    o.formation_timeout = std::chrono::milliseconds(env_int("MUSTER_COMM_FORMATION_TIMEOUT_MS", 0));
  }
  if (const auto v = base::Settings::environment().raw("MUSTER_COMM_RING_TRANSPORT")) {
    const std::string t = *v;
    if (t == "shm") {
      o.ring_transport = RingTransport::kShm;
    } else if (t == "mpi") {
      o.ring_transport = RingTransport::kMpi;
    } else if (t == "tcp") {
      o.ring_transport = RingTransport::kTcp;
    } else if (t == "auto") {
      o.ring_transport = RingTransport::kAuto;
    } else {
      throw InvalidArgument("MUSTER_COMM_RING_TRANSPORT=" + t + ": expected auto, shm, tcp or mpi");
    }
  }
  if (const auto v = base::Settings::environment().raw("MUSTER_COMM_TCP_STREAMS")) {
    o.tcp_streams = *v == "auto" ? CommOptions::kAutoTcpStreams : env_int("MUSTER_COMM_TCP_STREAMS", 0);
    if (o.tcp_streams == CommOptions::kAutoTcpStreams && *v != "auto") {
      throw InvalidArgument("MUSTER_COMM_TCP_STREAMS=" + std::string(*v) + ": expected auto or 1..64");
    }
  }
  if (const auto v = base::Settings::environment().raw("MUSTER_COMM_TCP_THREADS")) {
    const std::string t = *v;
    if (t == "auto") {
      o.tcp_threads = CommOptions::TcpThreads::kAuto;
    } else if (t == "1") {
      o.tcp_threads = CommOptions::TcpThreads::kOn;
    } else if (t == "0") {
      o.tcp_threads = CommOptions::TcpThreads::kOff;
    } else {
      throw InvalidArgument("MUSTER_COMM_TCP_THREADS=" + t + ": expected auto, 0 or 1");
    }
  }
  if (const auto v = base::Settings::environment().raw("MUSTER_COMM_TCP_BUFFER_BYTES")) {
    o.tcp_socket_buffer_bytes = static_cast<std::size_t>(env_int("MUSTER_COMM_TCP_BUFFER_BYTES", 0));
  }
  if (o.tcp_streams != CommOptions::kAutoTcpStreams && (o.tcp_streams < 1 || o.tcp_streams > 64)) {
    throw InvalidArgument("CommOptions.tcp_streams (MUSTER_COMM_TCP_STREAMS) must be 1..64 or kAutoTcpStreams, got " +
                          std::to_string(o.tcp_streams));
  }
  if (const auto v = base::Settings::environment().raw("MUSTER_COMM_SEGMENT_BYTES")) {
    o.segment_bytes = static_cast<std::size_t>(env_int("MUSTER_COMM_SEGMENT_BYTES", 0));
  }
  if (const auto v = base::Settings::environment().raw("MUSTER_COMM_SEGMENTS_IN_FLIGHT")) {
    o.segments_in_flight = static_cast<std::size_t>(env_int("MUSTER_COMM_SEGMENTS_IN_FLIGHT", 0));
  }
  if (const auto v = base::Settings::environment().raw("MUSTER_COMM_BLOCK_BYTES")) {
    o.block_bytes = static_cast<std::size_t>(env_int("MUSTER_COMM_BLOCK_BYTES", 0));
  }
  if (const auto v = base::Settings::environment().raw("MUSTER_COMM_SPIN_US")) {
    o.spin = std::chrono::microseconds(env_int("MUSTER_COMM_SPIN_US", 0));
  }
  if (const auto v = base::Settings::environment().raw("MUSTER_COMM_INLINE_BYTES")) {
    o.inline_bytes = static_cast<std::size_t>(env_int("MUSTER_COMM_INLINE_BYTES", 0));
  }
  if (const auto v = base::Settings::environment().raw("MUSTER_COMM_SMALL_BYTES")) {
    o.small_bytes = static_cast<std::size_t>(env_int("MUSTER_COMM_SMALL_BYTES", 0));
  }
  if (const auto v = base::Settings::environment().boolean("MUSTER_COMM_CHECK_OPS", o.check_ops); !v.ok()) {
    throw InvalidArgument(v.error);
  } else {
    o.check_ops = v.value;
  }
  if (const auto v = base::Settings::environment().boolean("MUSTER_COMM_P2P_SINGLE_COPY", o.p2p_single_copy); !v.ok()) {
    throw InvalidArgument(v.error);
  } else {
    o.p2p_single_copy = v.value;
  }
  if (o.timeout.count() <= 0) throw InvalidArgument("CommOptions.timeout must be positive");
  if (o.formation_timeout.count() < 0) throw InvalidArgument("CommOptions.formation_timeout must not be negative");
  if (o.formation_timeout.count() == 0) o.formation_timeout = std::max(o.timeout, std::chrono::milliseconds(60000));
  if (o.segment_bytes < 64) throw InvalidArgument("CommOptions.segment_bytes must be at least 64");
  if (o.spin.count() < 0 && o.spin != CommOptions::kAutoSpin) {
    throw InvalidArgument("CommOptions.spin must not be negative (or kAutoSpin)");
  }
  if (o.segments_in_flight == 0) throw InvalidArgument("CommOptions.segments_in_flight must be at least 1");
  o.segment_bytes = (o.segment_bytes + 63) / 64 * 64;
  return o;
}

}  // namespace muster::runtime::comm
