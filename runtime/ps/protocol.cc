#include "runtime/ps/protocol.h"

#include <algorithm>

#include "runtime/error.h"

namespace muster::runtime::ps {
namespace {

template <typename T>
void put(unsigned char* out, T v) {
  for (std::size_t i = 0; i < sizeof(T); ++i) out[i] = static_cast<unsigned char>((static_cast<uint64_t>(v) >> (8 * i)) & 0xff);
}

template <typename T>
T get(const unsigned char* in) {
  uint64_t v = 0;
  for (std::size_t i = 0; i < sizeof(T); ++i) v |= static_cast<uint64_t>(in[i]) << (8 * i);
  return static_cast<T>(v);
}

}  // namespace

const char* op_name(Op op) {
  switch (op) {
    case Op::kHello: return "hello";
    case Op::kInit: return "init";
    case Op::kPush: return "push";
    case Op::kPull: return "pull";
    case Op::kParams: return "params";
    case Op::kDone: return "done";
    case Op::kError: return "error";
    case Op::kPullState: return "pull_state";
    case Op::kState: return "state";
  }
  return "unknown";
}

bool op_valid(uint8_t raw) { return raw >= 1 && raw <= 9; }

void encode_header(const FrameHeader& h, unsigned char* out) {
  put<uint32_t>(out + 0, h.magic);
  put<uint16_t>(out + 4, h.version);
  out[6] = static_cast<unsigned char>(h.op);
  out[7] = h.dtype;
  put<uint32_t>(out + 8, h.slice);
  put<uint32_t>(out + 12, h.aux);
  put<uint64_t>(out + 16, static_cast<uint64_t>(h.step));
  put<uint64_t>(out + 24, h.length);
}

FrameHeader decode_header(const unsigned char* in) {
  FrameHeader h;
  h.magic = get<uint32_t>(in + 0);
  h.version = get<uint16_t>(in + 4);
  h.op = static_cast<Op>(in[6]);
  h.dtype = in[7];
  h.slice = get<uint32_t>(in + 8);
  h.aux = get<uint32_t>(in + 12);
  h.step = static_cast<int64_t>(get<uint64_t>(in + 16));
  h.length = get<uint64_t>(in + 24);
  return h;
}

std::size_t hello_size(const HelloPayload& h) {
  if (h.secret.size() > kMaxSecretBytes) {
    throw InvalidArgument("ps secret is " + std::to_string(h.secret.size()) + " bytes; at most " +
                          std::to_string(kMaxSecretBytes) + " (MUSTER_PS_SECRET)");
  }
  return kHelloSize + h.secret.size();
}

void encode_hello(const HelloPayload& h, unsigned char* out) {
  const std::size_t n = hello_size(h);
  std::memset(out, 0, kHelloSize);
  std::memcpy(out + kHelloSize, h.secret.data(), n - kHelloSize);
  put<uint32_t>(out + 0, h.worker_index);
  put<uint32_t>(out + 4, h.replicas_to_aggregate);
  put<uint32_t>(out + 8, h.total_num_replicas);
  out[12] = static_cast<unsigned char>(h.mode);
  out[13] = static_cast<unsigned char>(std::min<uint32_t>(h.streams, 255));
  uint32_t lr_bits;
  std::memcpy(&lr_bits, &h.learning_rate, 4);
  put<uint32_t>(out + 16, lr_bits);
  std::memcpy(out + 20, h.optimizer.data(), std::min(h.optimizer.size(), kOptimizerNameBytes - 1));
}

HelloPayload decode_hello(const unsigned char* in, std::size_t n) {
  if (n < kHelloSize || n > kHelloSize + kMaxSecretBytes) {
    throw InvalidArgument("hello of " + std::to_string(n) + " bytes; expected " + std::to_string(kHelloSize) + ".." +
                          std::to_string(kHelloSize + kMaxSecretBytes));
  }
  HelloPayload h;
  h.worker_index = get<uint32_t>(in + 0);
  h.replicas_to_aggregate = get<uint32_t>(in + 4);
  h.total_num_replicas = get<uint32_t>(in + 8);
  h.mode = static_cast<Mode>(in[12]);
  h.streams = in[13] == 0 ? 1u : in[13];
  uint32_t lr_bits = get<uint32_t>(in + 16);
  std::memcpy(&h.learning_rate, &lr_bits, 4);
  const char* name = reinterpret_cast<const char*>(in + 20);
  h.optimizer.assign(name, strnlen(name, kOptimizerNameBytes - 1));
  h.secret.assign(reinterpret_cast<const char*>(in + kHelloSize), n - kHelloSize);
  return h;
}

bool secrets_equal(const std::string& expected, const std::string& presented) {
  // Every byte of `expected` is compared whatever `presented` holds; a
  // length mismatch is folded into the same accumulator.
  unsigned diff = expected.size() == presented.size() ? 0u : 1u;
  for (std::size_t i = 0; i < expected.size(); ++i) {
    const unsigned char p = i < presented.size() ? static_cast<unsigned char>(presented[i]) : 0;
    diff |= static_cast<unsigned char>(expected[i]) ^ p;
  }
  return diff == 0;
}

bool same_options(const HelloPayload& a, const HelloPayload& b) {
  return a.replicas_to_aggregate == b.replicas_to_aggregate && a.total_num_replicas == b.total_num_replicas &&
         a.mode == b.mode && a.learning_rate == b.learning_rate && a.optimizer == b.optimizer;
}

}  // namespace muster::runtime::ps
