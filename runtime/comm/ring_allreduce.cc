#include "runtime/comm/ring_allreduce.h"

#include <algorithm>
#include <cstring>

#include "runtime/comm/chunking.h"
#include "runtime/comm/reduce.h"

namespace muster::runtime::comm {
namespace {

int mod(int a, int n) { return ((a % n) + n) % n; }

enum class Arrival { kReduce, kCopy };

// One ring step: send chunk `send_chunk` to the right while receiving chunk
// `recv_chunk` from the left, both cut into segments of `seg_elems`.
void ring_step(char* data, std::size_t esize, const Chunking& chunks, int send_chunk, int recv_chunk,
               std::size_t seg_elems, Arrival arrival, DataType dtype, ReduceOp op, SendLink& send,
               RecvLink& recv, Watchdog& watchdog) {
  const std::size_t send_begin = chunks.begin(send_chunk), send_len = chunks.length(send_chunk);
  const std::size_t recv_begin = chunks.begin(recv_chunk), recv_len = chunks.length(recv_chunk);
  for (std::size_t off = 0; off < recv_len; off += seg_elems) {
    const std::size_t bytes = std::min(seg_elems, recv_len - off) * esize;
    if (arrival == Arrival::kCopy) {
      recv.expect_into(data + (recv_begin + off) * esize, bytes);  // TCP receives straight into place
    } else {
      recv.expect(bytes);
    }
  }
  std::size_t sent = 0, received = 0;  // elements
  bool flushed = false;
  for (;;) {
    watchdog.prepare();
    bool moved = false;
    if (sent < send_len) {
      const std::size_t n = std::min(seg_elems, send_len - sent);
      if (send.try_send(data + (send_begin + sent) * esize, n * esize)) {
        sent += n;
        moved = true;
      }
    } else if (!flushed) {
      // Keeps pushing what the link still holds while this rank waits to
      // receive (a TCP link only writes when called).
      flushed = send.flushed();
    }
    if (received < recv_len) {
      if (const void* seg = recv.try_recv()) {
        const std::size_t n = std::min(seg_elems, recv_len - received);
        char* dst = data + (recv_begin + received) * esize;
        if (arrival == Arrival::kReduce) {
          reduce_into(dst, seg, n, dtype, op);
        } else if (seg != dst) {
          std::memcpy(dst, seg, n * esize);
        }
        recv.release();
        received += n;
        moved = true;
      }
    }
    if (sent == send_len && received == recv_len && (flushed || send.flushed())) return;
    if (moved) {
      watchdog.progressed();
    } else {
      watchdog.idle(received < recv_len ? recv.peer() : send.peer());
    }
  }
}

// The ring over one block: chunks, reduce-scatter, average, allgather.
void ring_block(char* bytes, std::size_t count, std::size_t esize, std::size_t seg_elems, DataType dtype,
                ReduceOp op, int r, int n, SendLink& send, RecvLink& recv, Watchdog& watchdog) {
  const Chunking chunks{count, n};
  if (n > 1) {
    for (int s = 0; s < n - 1; ++s) {
      ring_step(bytes, esize, chunks, mod(r - s, n), mod(r - s - 1, n), seg_elems, Arrival::kReduce, dtype, op,
                send, recv, watchdog);
    }
  }
  const int owned = mod(r + 1, n);
  if (op == ReduceOp::kAverage) {
    divide(bytes + chunks.begin(owned) * esize, chunks.length(owned), dtype, n);
  }
  if (n > 1) {
    for (int s = 0; s < n - 1; ++s) {
      ring_step(bytes, esize, chunks, mod(r + 1 - s, n), mod(r - s, n), seg_elems, Arrival::kCopy, dtype, op,
                send, recv, watchdog);
    }
  }
}

std::size_t ring_block_elements(std::size_t count, std::size_t esize, const RingContext& ctx) {
  if (ctx.block_bytes == 0) return count;
  // At least one element per rank, so no block leaves a rank without a chunk.
  const std::size_t per_block = std::max<std::size_t>(ctx.block_bytes / esize, static_cast<std::size_t>(ctx.size));
  return std::min(per_block, count);
}

constexpr std::size_t kLongRoundTripBlockBytes = 4u << 20;
constexpr std::size_t kShortRoundTripBlockBytesPerRank = 256u << 10;
constexpr std::size_t kShortRoundTripMinBlockBytes = 1u << 20;
constexpr uint32_t kShortRoundTripUs = 100;

}  // namespace

std::size_t tcp_inline_block_bytes(uint32_t round_trip_us, int ranks) {
  if (round_trip_us == 0 || round_trip_us > kShortRoundTripUs) return kLongRoundTripBlockBytes;
  const std::size_t per_rank = kShortRoundTripBlockBytesPerRank * static_cast<std::size_t>(std::max(ranks, 1));
  return std::clamp(per_rank, kShortRoundTripMinBlockBytes, kLongRoundTripBlockBytes);
}

void ring_allreduce(void* data, std::size_t count, DataType dtype, ReduceOp op, const RingContext& ctx,
                    SendLink& send, RecvLink& recv, Watchdog& watchdog) {
  const std::size_t esize = dtype_size(dtype);
  const std::size_t seg_elems = std::max<std::size_t>(ctx.segment_bytes / esize, 1);
  const std::size_t block = ring_block_elements(count, esize, ctx);
  char* bytes = static_cast<char*>(data);
  // Every rank has the same count, so every rank cuts the same blocks and the
  // links carry the same segment sequence on both ends.
  for (std::size_t begin = 0; begin < count; begin += block) {
    const std::size_t len = std::min(block, count - begin);
    ring_block(bytes + begin * esize, len, esize, seg_elems, dtype, op, ctx.rank, ctx.size, send, recv, watchdog);
  }
}

}  // namespace muster::runtime::comm
