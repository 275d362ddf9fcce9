#include "runtime/comm/alltoall.h"

#include <algorithm>
#include <cstring>

namespace muster::runtime::comm {

void alltoall_pairwise(const AlltoallPlan& plan, const std::vector<PeerLink>& links, Watchdog& watchdog) {
  const int n = static_cast<int>(links.size());
  const int me = plan.rank;
  const auto um = static_cast<std::size_t>(me);
  if (plan.send_bytes[um]) {
    std::memmove(plan.recv + plan.recv_offsets[um], plan.send + plan.send_offsets[um], plan.send_bytes[um]);
  }
  std::vector<std::size_t> sent(links.size(), 0), received(links.size(), 0);
  std::vector<bool> flushed(links.size(), false);
  for (int k = 1; k < n; ++k) {
    const auto p = static_cast<std::size_t>((me + k) % n);
    const PeerLink& l = links[p];
    for (std::size_t off = 0; off < plan.recv_bytes[p]; off += l.segment_bytes) {
      l.recv->expect_into(plan.recv + plan.recv_offsets[p] + off, std::min(l.segment_bytes, plan.recv_bytes[p] - off));
    }
  }
  for (;;) {
    watchdog.prepare();
    bool moved = false, done = true;
    int waiting_on = -1;
    for (int k = 1; k < n; ++k) {
      const auto p = static_cast<std::size_t>((me + k) % n);
      const PeerLink& l = links[p];
      while (sent[p] < plan.send_bytes[p]) {
        const std::size_t len = std::min(l.segment_bytes, plan.send_bytes[p] - sent[p]);
        if (!l.send->try_send(plan.send + plan.send_offsets[p] + sent[p], len)) break;
        sent[p] += len;
        moved = true;
      }
      while (received[p] < plan.recv_bytes[p]) {
        const void* seg = l.recv->try_recv();
        if (!seg) break;
        const std::size_t len = std::min(l.segment_bytes, plan.recv_bytes[p] - received[p]);
        char* dst = plan.recv + plan.recv_offsets[p] + received[p];
        if (seg != dst) std::memcpy(dst, seg, len);
        l.recv->release();
        received[p] += len;
        moved = true;
      }
      if (sent[p] == plan.send_bytes[p] && !flushed[p]) flushed[p] = l.send->flushed();
      const bool peer_done = flushed[p] && received[p] == plan.recv_bytes[p];
      if (!peer_done && waiting_on < 0) waiting_on = static_cast<int>(p);
      done = done && peer_done;
    }
    if (done) return;
    if (moved) {
      watchdog.progressed();
    } else {
      watchdog.idle(waiting_on);
    }
  }
}

}  // namespace muster::runtime::comm
