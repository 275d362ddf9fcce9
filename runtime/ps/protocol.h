// The parameter-server wire protocol: one fixed 32-byte frame header, then
// `length` payload bytes. Every integer is little-endian. No protobuf, no
// gRPC: tensor payloads go from the sender's tensor memory to the receiver's
// tensor memory (asio buffer sequences on both sides).
//
//   offset size field
//   0      4    magic     0x5350534d ("MSPS" in memory order)
//   4      2    version   kProtocolVersion (1)
//   6      1    op        Op below
//   7      1    dtype     runtime::DataType (float32 = 1; 0 when no tensor)
//   8      4    slice     variable-slice id (placement order), or worker index (kHello, kDone)
//   12     4    aux       kError: kErrorTimeout when the PS gave up waiting;
//                        kInit/kState: optimizer state buffers in the payload;
//                        kParams: this connection's pushes dropped as stale so far; else 0
//   16     8    step      global/local step (signed)
//   24     8    length    payload bytes that follow the header
//
// Protocol (one TCP connection per worker and PS task; requests are handled
// strictly in order on a connection):
//   a) The worker opens 1..kMaxStreams connections to the PS task (a slice
//      always on connection slice % n) and sends kHello on each, payload =
//      HelloPayload (its worker index, the SyncReplicas options, how many
//      connections it opened, then the cluster's secret:
//      kHelloSize fixed bytes followed by 0..kMaxSecretBytes secret bytes,
//      header.length says how many). A PS with a secret (MUSTER_PS_SECRET)
//      compares it in constant time and answers a wrong or missing one with
//      kError and a close. The hello binds the connection to that worker
//      index: a second hello closes it, and so does a kDone for another
//      worker, or a kInit / kPullState from a worker other than the chief (0).
//      The first hello fixes the options of the PS; a hello with different
//      options closes the connection.
//   b) The chief sends kInit per slice it owns on that PS (payload = initial
//      values, step = starting global step, from a checkpoint or 0; when
//      resuming, aux = the optimizer's state buffers per slice and the
//      payload is the values followed by those buffers). The first init of
//      a slice wins; later inits of it are ignored.
//   c) Every worker sends kPull(slice, step = s) and gets kParams(slice,
//      step = global step, payload = values) once the slice exists and its
//      global step is >= s. Pull(0) therefore waits for the chief's init.
//      Once the chief has sent a frame other than kInit on each of its
//      connections, its inits are over and the slice set is sealed: a pull
//      of a slice that does not exist then gets kError (that connection only).
//   d) Each training step a worker sends kPush(slice, step = its local step,
//      payload = gradient), no reply. Sync mode: accepted only when the step
//      equals the slice's global step (older = stale: dropped and counted);
//      after replicas_to_aggregate accepted pushes the PS averages them,
//      applies the optimizer, advances the slice's global step and answers
//      the pulls waiting for it. Async mode: each push is applied at once.
//      Workers pipeline: all pushes, then all pulls, in one gather write.
//   e) To checkpoint, the chief sends kPullState(slice) and gets
//      kState(slice, step = global step, aux = state buffers, payload =
//      values then the optimizer's state buffers), taken at one instant.
//   f) kDone(slice = worker index) when the worker has finished; the PS exits
//      once every worker is done.
//   g) Whenever the PS cannot serve a request (timeout waiting for missing
//      workers, shutdown) it answers with kError (payload = UTF-8 message)
//      and closes. A malformed frame (bad magic/version/op/dtype, a length
//      that does not fit the op or the slice, oversize, truncated) closes
//      that connection with a logged reason; other connections are unaffected.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>

#include "runtime/dtype.h"

namespace muster::runtime::ps {

inline constexpr uint32_t kMagic = 0x5350534d;
inline constexpr uint16_t kProtocolVersion = 1;
inline constexpr std::size_t kHeaderSize = 32;

enum class Op : uint8_t {
  kHello = 1,
  kInit = 2,
  kPush = 3,
  kPull = 4,
  kParams = 5,  // PS -> worker, answer to kPull
  kDone = 6,
  kError = 7,   // PS -> worker
  kPullState = 8,
  kState = 9,   // PS -> worker, answer to kPullState
};

inline constexpr uint32_t kErrorTimeout = 1;

const char* op_name(Op op);
bool op_valid(uint8_t raw);

struct FrameHeader {
  uint32_t magic = kMagic;
  uint16_t version = kProtocolVersion;
  Op op = Op::kHello;
  uint8_t dtype = 0;
  uint32_t slice = 0;
  uint32_t aux = 0;
  int64_t step = 0;
  uint64_t length = 0;
};

using HeaderBytes = std::array<unsigned char, kHeaderSize>;

// Little-endian encoding, independent of the host's byte order.
void encode_header(const FrameHeader& h, unsigned char* out);
FrameHeader decode_header(const unsigned char* in);
inline HeaderBytes encode_header(const FrameHeader& h) {
  HeaderBytes b{};
  encode_header(h, b.data());
  return b;
}

// Synchronisation modes of the PS.
enum class Mode : uint8_t { kSync = 1, kAsync = 2 };

// kHello payload: who the worker is, the options every worker must agree on
// and the cluster's secret (empty when none is configured).
struct HelloPayload {
  uint32_t worker_index = 0;
  uint32_t replicas_to_aggregate = 1;
  uint32_t total_num_replicas = 1;
  Mode mode = Mode::kSync;
  float learning_rate = 0.01f;
  std::string optimizer = "sgd";  // at most kOptimizerNameBytes - 1 characters
  std::string secret;             // at most kMaxSecretBytes bytes
  // Connections this worker opens to this PS task, 1..kMaxStreams (byte 13;
  // 0, from a client that predates it, reads as 1).
  uint32_t streams = 1;
};
inline constexpr uint32_t kMaxStreams = 16;
inline constexpr std::size_t kOptimizerNameBytes = 16;
inline constexpr std::size_t kHelloSize = 4 + 4 + 4 + 1 + 3 + 4 + kOptimizerNameBytes;  // 36, without the secret
inline constexpr std::size_t kMaxSecretBytes = 256;

// The payload bytes of a hello: kHelloSize + secret.size() (a longer secret
// throws InvalidArgument).
std::size_t hello_size(const HelloPayload& h);
void encode_hello(const HelloPayload& h, unsigned char* out);  // hello_size(h) bytes
// `n` payload bytes, kHelloSize..kHelloSize + kMaxSecretBytes; throws
// InvalidArgument for any other length.
HelloPayload decode_hello(const unsigned char* in, std::size_t n = kHelloSize);

// Constant-time comparison of a configured secret and a presented one (the
// time depends on the configured length only).
bool secrets_equal(const std::string& expected, const std::string& presented);

// True when two hellos carry the same options (worker index aside).
bool same_options(const HelloPayload& a, const HelloPayload& b);

}  // namespace muster::runtime::ps
