// Links: a worker's TCP connections to every PS task (`streams` each), and
// the exchange that drives them all at once.
//
// exchange() writes each PS task's frames in one gather write (headers and
// tensor memory, no copies) while reading that task's replies straight into
// the destination tensors; all PS tasks progress concurrently on the
// caller's thread (one io_context), bounded by the timeout. A slice's frames
// and replies use connection slice % streams of its task: the task serves
// each connection on its own, so with several a PS's reads, sums and
// optimizer updates for one worker spread over its threads. Any failure
// closes every link and throws CommError/TimeoutError naming the PS task.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "runtime/ps/protocol.h"

namespace muster::runtime::ps {

struct Outgoing {
  FrameHeader header;
  const void* data = nullptr;  // header.length bytes, or nullptr
  std::vector<std::pair<const void*, std::size_t>> more;  // if set: the payload in parts instead of `data`
};

struct Expected {
  uint32_t slice = 0;
  float* dst = nullptr;
  std::size_t count = 0;
  int64_t step = 0;  // filled in: the global step the PS answered with
  uint32_t aux = 0;  // filled in: the reply's aux (kParams: stale pushes so far)
  Op op = Op::kParams;
};

class Links {
 public:
  Links(std::vector<std::string> ps_addresses, int timeout_ms, int socket_buffer_bytes);
  ~Links();
  Links(const Links&) = delete;
  Links& operator=(const Links&) = delete;

  // Opens streams[i] connections to PS task i (retrying while it starts, up
  // to the timeout) and sends the hello on each, saying how many.
  void connect_all(const HelloPayload& hello, const std::vector<int>& streams);
  // out[i] / in[i]: frames for and replies from PS task i (in order per
  // slice connection). `what` names the operation in errors ("pull of step 5").
  void exchange(const std::vector<std::vector<Outgoing>>& out, std::vector<std::vector<Expected>>& in,
                const std::string& what);
  // Best effort: kDone to every PS, then close.
  void send_done(uint32_t worker);
  std::string name(int ps) const;  // "ps task 1 (127.0.0.1:4001)"
  int size() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace muster::runtime::ps
