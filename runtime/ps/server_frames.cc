// Connection::on_header: the checks every frame header passes before
// anything is allocated or read for it, then the handling of each op
// (protocol.h steps a) to f)).

#include <cstdio>

#include <spdlog/spdlog.h>

#include "api/base/worker_env.h"
#include "runtime/ps/server_connection.h"

namespace muster::runtime::ps {
namespace {

std::string hex(uint32_t v) {
  char b[16];
  std::snprintf(b, sizeof b, "%08x", v);
  return b;
}

}  // namespace

void Connection::on_header() {
  if (authenticated()) deadline_ = 0;  // payload reads re-arm it
  h_ = decode_header(in_.data());
  if (h_.magic != kMagic) return bad_frame("bad magic 0x" + hex(h_.magic) + " (not a muster ps frame)");
  if (h_.version != kProtocolVersion) {
    return bad_frame("unsupported protocol version " + std::to_string(h_.version) + " (this PS speaks " +
                     std::to_string(kProtocolVersion) + ")");
  }
  const uint8_t raw_op = static_cast<uint8_t>(h_.op);
  if (!op_valid(raw_op) || h_.op == Op::kParams || h_.op == Op::kError || h_.op == Op::kState) {
    return bad_frame("unknown op " + std::to_string(raw_op));
  }
  if (h_.dtype != 0 && !dtype_valid(h_.dtype)) return bad_frame("unknown dtype " + std::to_string(h_.dtype));
  if (h_.length > s_.opt_.max_frame_bytes) {
    return bad_frame("oversize frame: " + std::to_string(h_.length) + " bytes > limit " + std::to_string(s_.opt_.max_frame_bytes));
  }
  const int worker = worker_.load();
  if (worker < 0 && h_.op != Op::kHello) return bad_frame(std::string("first frame must be hello, got ") + op_name(h_.op));
  if (worker >= 0 && h_.op == Op::kHello) return bad_frame("a second hello on the same connection");
  if (worker > 0 && (h_.op == Op::kInit || h_.op == Op::kPullState)) {
    return bad_frame(std::string(op_name(h_.op)) + " from worker " + std::to_string(worker) + "; only the chief (worker 0) sends it");
  }
  if (worker == 0 && h_.op != Op::kInit && h_.op != Op::kHello && !inits_over_) {
    inits_over_ = true;  // the chief's inits on this connection are over
    s_.chief_inits_over();
  }
  switch (h_.op) {
    case Op::kHello:
      if (h_.length < kHelloSize || h_.length > kHelloSize + kMaxSecretBytes) {
        return bad_frame("hello length " + std::to_string(h_.length) + " outside " + std::to_string(kHelloSize) + ".." +
                         std::to_string(kHelloSize + kMaxSecretBytes));
      }
      small_.resize(h_.length);
      return read_payload(small_.data(), h_.length, 0, [this] { on_hello(); });
    case Op::kInit: {
      if (h_.dtype != static_cast<uint8_t>(DataType::kFloat32)) return bad_frame("init: unsupported dtype " + std::to_string(h_.dtype));
      const uint64_t parts = 1 + static_cast<uint64_t>(h_.aux);  // values + optimizer state buffers
      if (h_.aux > 8) return bad_frame("init: " + std::to_string(h_.aux) + " optimizer state buffers (at most 8)");
      if (h_.length == 0 || h_.length % (4 * parts) != 0) {
        return bad_frame("init: length " + std::to_string(h_.length) + " is not a positive multiple of " + std::to_string(4 * parts));
      }
      if (Slice* s = s_.find_slice(h_.slice); s != nullptr && s->size * 4 * parts != h_.length) {
        return bad_frame("init: length " + std::to_string(h_.length) + " does not match slice " + std::to_string(h_.slice) +
                         " (" + std::to_string(s->size * 4 * parts) + " bytes)");
      }
      init_ = std::make_shared<std::vector<float>>();
      return read_init(0);
    }
    case Op::kPush: {
      if (h_.dtype != static_cast<uint8_t>(DataType::kFloat32)) return bad_frame("push: unsupported dtype " + std::to_string(h_.dtype));
      Slice* s = s_.find_slice(h_.slice);
      if (s == nullptr) return bad_frame("push to slice " + std::to_string(h_.slice) + ", which was never initialised");
      if (s->size * 4 != h_.length) {
        return bad_frame("push: length " + std::to_string(h_.length) + " does not match slice " + std::to_string(h_.slice) +
                         " (" + std::to_string(s->size * 4) + " bytes)");
      }
      buf_.resize(s->size);
      return read_payload(reinterpret_cast<unsigned char*>(buf_.data()), h_.length, 0, [this, s] {
        bool stale = false;
        std::string why = s_.push(*s, h_.step, buf_, &stale);
        if (!why.empty()) return bad_frame(why);
        if (stale) ++stale_;
        read_header();
      });
    }
    case Op::kPull:
      if (h_.length != 0) return bad_frame("pull with a payload of " + std::to_string(h_.length) + " bytes");
      return s_.pull(shared_from_this(), h_.slice, h_.step);  // send_params() / send_error() resumes
    case Op::kPullState:
      if (h_.length != 0) return bad_frame("pull_state with a payload of " + std::to_string(h_.length) + " bytes");
      return s_.pull_state(shared_from_this(), h_.slice);
    case Op::kDone:
      if (h_.length != 0) return bad_frame("done with a payload of " + std::to_string(h_.length) + " bytes");
      if (h_.slice != static_cast<uint32_t>(worker)) {
        return bad_frame("done for worker " + std::to_string(h_.slice) + " on the connection of worker " + std::to_string(worker));
      }
      done_ = true;
      s_.worker_done(worker);
      return read_header();
    default:
      return bad_frame("unknown op " + std::to_string(raw_op));
  }
}

// Protocol step a): the secret first (nothing else of the hello is looked
// at without it), then the options.
void Connection::on_hello() {
  HelloPayload hello;
  try {
    hello = decode_hello(small_.data(), small_.size());
  } catch (const std::exception& e) {
    return bad_frame(e.what());
  }
  small_.clear();
  small_.shrink_to_fit();
  if (!s_.opt_.secret.empty() && !secrets_equal(s_.opt_.secret, hello.secret)) {
    ++s_.auth_failures_;
    spdlog::warn("{}: refusing connection from {}: {} secret in its hello", s_.name(), peer_,
                 hello.secret.empty() ? "no" : "a wrong");
    shut_after_error(s_.name() + ": refused: wrong or missing secret; start the task from its muster cluster (which sets " +
                     base::kEnvPsSecret + ") or set " + base::kEnvPsSecret + " to the cluster's secret");
    return;
  }
  std::string why = s_.hello(*this, hello);
  if (!why.empty()) return reject(why);
  read_header();
}

}  // namespace muster::runtime::ps
