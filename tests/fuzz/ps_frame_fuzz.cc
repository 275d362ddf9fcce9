// Fuzz target: the parameter-server wire format (runtime/ps/protocol.h):
// a frame header, then a hello payload of any length.
//
// Contract checked: decoding never reads past the bytes given; a header
// re-encodes to the same 32 bytes; a hello of a valid length decodes,
// re-encodes and decodes again to the same values; any other length is an
// InvalidArgument; secrets_equal agrees with ==.
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "runtime/error.h"
#include "runtime/ps/protocol.h"

namespace ps = muster::runtime::ps;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < ps::kHeaderSize) return 0;
  const ps::FrameHeader h = ps::decode_header(data);
  const auto again = ps::encode_header(h);
  if (std::memcmp(again.data(), data, ps::kHeaderSize) != 0) std::abort();
  (void)ps::op_name(h.op);
  (void)ps::op_valid(static_cast<uint8_t>(h.op));

  // The payload as the server gets it: exactly the bytes that arrived.
  const std::vector<unsigned char> payload(data + ps::kHeaderSize, data + size);
  const std::size_t n = payload.size();
  try {
    ps::HelloPayload hello = ps::decode_hello(payload.data(), n);
    if (n < ps::kHelloSize || n > ps::kHelloSize + ps::kMaxSecretBytes) std::abort();  // must have thrown
    std::vector<unsigned char> out(ps::hello_size(hello));
    ps::encode_hello(hello, out.data());
    ps::HelloPayload back = ps::decode_hello(out.data(), out.size());
    if (back.worker_index != hello.worker_index || back.secret != hello.secret || back.optimizer != hello.optimizer) std::abort();
    if (static_cast<uint8_t>(back.mode) != static_cast<uint8_t>(hello.mode)) std::abort();
    if (std::memcmp(&back.learning_rate, &hello.learning_rate, sizeof(float)) != 0) std::abort();
    const std::string other(reinterpret_cast<const char*>(payload.data()), std::min<std::size_t>(n, 8));
    if (ps::secrets_equal(hello.secret, other) != (hello.secret == other)) std::abort();
  } catch (const muster::runtime::InvalidArgument& e) {
    if (n >= ps::kHelloSize && n <= ps::kHelloSize + ps::kMaxSecretBytes) std::abort();  // a valid length must decode
  }
  return 0;
}
