#include "runtime/comm/ring_collectives.h"

#include <algorithm>
#include <cstring>

#include "runtime/comm/reduce.h"

namespace muster::runtime::comm {
namespace {

int mod(int a, int n) { return ((a % n) + n) % n; }

// What arrives in one step: copied into `dst`, or reduced into it. With
// `init`, the first contribution to dst is init's bytes (dst = init op seg),
// so the caller's input is read, never written.
struct Arrival {
  char* dst = nullptr;
  std::size_t bytes = 0;
  bool reduce = false;
  const char* init = nullptr;
  DataType dtype = DataType::kFloat32;
  ReduceOp op = ReduceOp::kSum;
};

// One ring step: `src_bytes` from `src` to the right while `in` arrives from
// the left, both cut into segments of `seg_bytes`; returns once both are
// done and the sent memory is free again.
void ring_transfer(const char* src, std::size_t src_bytes, const Arrival& in, std::size_t seg_bytes, SendLink& send,
                   RecvLink& recv, Watchdog& watchdog) {
  for (std::size_t off = 0; off < in.bytes; off += seg_bytes) {
    const std::size_t n = std::min(seg_bytes, in.bytes - off);
    if (in.reduce) {
      recv.expect(n);
    } else {
      recv.expect_into(in.dst + off, n);
    }
  }
  std::size_t sent = 0, received = 0;
  bool flushed = false;
  for (;;) {
    watchdog.prepare();
    bool moved = false;
    if (sent < src_bytes) {
      const std::size_t n = std::min(seg_bytes, src_bytes - sent);
      if (send.try_send(src + sent, n)) {
        sent += n;
        moved = true;
      }
    } else if (!flushed) {
      flushed = send.flushed();
    }
    if (received < in.bytes) {
      if (const void* seg = recv.try_recv()) {
        const std::size_t n = std::min(seg_bytes, in.bytes - received);
        char* dst = in.dst + received;
        if (in.reduce) {
          const std::size_t esize = dtype_size(in.dtype);
          if (in.init) std::memcpy(dst, in.init + received, n);
          reduce_into(dst, seg, n / esize, in.dtype, in.op);
        } else if (seg != dst) {
          std::memcpy(dst, seg, n);
        }
        recv.release();
        received += n;
        moved = true;
      }
    }
    if (sent == src_bytes && received == in.bytes && (flushed || send.flushed())) return;
    if (moved) {
      watchdog.progressed();
    } else {
      watchdog.idle(received < in.bytes ? recv.peer() : send.peer());
    }
  }
}

}  // namespace

void ring_broadcast(void* data, std::size_t bytes, int root, const RingPeers& ring, SendLink& send, RecvLink& recv,
                    Watchdog& watchdog) {
  const int n = ring.size;
  if (n == 1 || bytes == 0) return;
  const int d = mod(ring.rank - root, n);  // hops from the root
  const bool receives = d > 0, forwards = d < n - 1;
  char* buf = static_cast<char*>(data);
  const std::size_t seg = ring.segment_bytes;
  if (receives) {
    for (std::size_t off = 0; off < bytes; off += seg) recv.expect_into(buf + off, std::min(seg, bytes - off));
  }
  std::size_t received = receives ? 0 : bytes, sent = 0;
  bool flushed = !forwards;
  for (;;) {
    watchdog.prepare();
    bool moved = false;
    if (received < bytes) {
      if (const void* s = recv.try_recv()) {
        const std::size_t k = std::min(seg, bytes - received);
        if (s != buf + received) std::memcpy(buf + received, s, k);
        recv.release();
        received += k;
        moved = true;
      }
    }
    // Forward what has arrived (the root: everything).
    while (forwards && sent < received) {
      const std::size_t k = std::min(seg, bytes - sent);
      if (!send.try_send(buf + sent, k)) break;
      sent += k;
      moved = true;
    }
    if (forwards && sent == bytes && !flushed) flushed = send.flushed();
    if (received == bytes && (!forwards || (sent == bytes && flushed))) return;
    if (moved) {
      watchdog.progressed();
    } else {
      watchdog.idle(received < bytes ? recv.peer() : send.peer());
    }
  }
}

void ring_allgatherv(char* recv, const std::vector<std::size_t>& block_offsets,
                     const std::vector<std::size_t>& block_bytes, const RingPeers& ring, SendLink& send,
                     RecvLink& recv_link, Watchdog& watchdog) {
  const int n = ring.size, r = ring.rank;
  for (int s = 0; s < n - 1; ++s) {
    const auto out = static_cast<std::size_t>(mod(r - s, n));
    const auto in = static_cast<std::size_t>(mod(r - s - 1, n));
    Arrival a;
    a.dst = recv + block_offsets[in];
    a.bytes = block_bytes[in];
    ring_transfer(recv + block_offsets[out], block_bytes[out], a, ring.segment_bytes, send, recv_link, watchdog);
  }
}

void ring_reducescatter(const void* send, void* recv, const std::vector<std::size_t>& counts, DataType dtype,
                        ReduceOp op, const RingPeers& ring, SendLink& send_link, RecvLink& recv_link,
                        Watchdog& watchdog) {
  const int n = ring.size, r = ring.rank;
  const std::size_t esize = dtype_size(dtype);
  const char* input = static_cast<const char*>(send);
  std::vector<std::size_t> offset(static_cast<std::size_t>(n) + 1, 0);
  std::size_t largest = 0;
  for (int i = 0; i < n; ++i) {
    offset[static_cast<std::size_t>(i) + 1] = offset[static_cast<std::size_t>(i)] + counts[static_cast<std::size_t>(i)];
    largest = std::max(largest, counts[static_cast<std::size_t>(i)]);
  }
  const auto chunk_at = [&](int c) { return offset[static_cast<std::size_t>(c)] * esize; };
  const auto chunk_bytes = [&](int c) { return counts[static_cast<std::size_t>(c)] * esize; };
  const std::size_t mine = chunk_bytes(r);
  if (n == 1) {
    if (mine) std::memcpy(recv, input + chunk_at(r), mine);
    if (op == ReduceOp::kAverage) divide(recv, counts[0], dtype, 1);
    return;
  }
  // Segments hold whole elements.
  const std::size_t seg = std::max<std::size_t>(ring.segment_bytes / esize, 1) * esize;
  std::vector<char> scratch[2];
  scratch[0].resize(largest * esize);
  scratch[1].resize(largest * esize);
  const char* out = nullptr;  // the running copy sent next
  for (int s = 0; s < n - 1; ++s) {
    const int send_chunk = mod(r - s - 1, n), recv_chunk = mod(r - s - 2, n);
    const char* src = s == 0 ? input + chunk_at(send_chunk) : out;
    char* dst = s == n - 2 ? static_cast<char*>(recv) : scratch[s % 2].data();
    Arrival a;
    a.dst = dst;
    a.bytes = chunk_bytes(recv_chunk);
    a.reduce = true;
    a.init = input + chunk_at(recv_chunk);
    a.dtype = dtype;
    a.op = op;
    ring_transfer(src, chunk_bytes(send_chunk), a, seg, send_link, recv_link, watchdog);
    out = dst;
  }
  if (op == ReduceOp::kAverage) divide(recv, counts[static_cast<std::size_t>(r)], dtype, n);
}

}  // namespace muster::runtime::comm
