#include "runtime/comm/shm/p2p_ring.h"

#include <linux/futex.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>

#include "runtime/comm/shm/shm_peer_monitor.h"

namespace muster::runtime::comm::shm {

void ring_p2p_bell(P2pBell* bell) {
  bell->bell.fetch_add(1);
  if (bell->sleeping.load()) {
    syscall(SYS_futex, reinterpret_cast<uint32_t*>(&bell->bell), FUTEX_WAKE, 1, nullptr, nullptr, 0);
  }
}

void P2pBellWaiter::sleep(std::chrono::microseconds max) {
  // As DoorbellSleeper: announce, re-read; a ringer either sees `sleeping`
  // and wakes us, or bumped the bell before we looked.
  own_->sleeping.store(1);
  if (own_->bell.load() == seen_) {
    timespec ts{static_cast<time_t>(max.count() / 1000000), static_cast<long>(max.count() % 1000000) * 1000};
    syscall(SYS_futex, reinterpret_cast<uint32_t*>(&own_->bell), FUTEX_WAIT, seen_, &ts, nullptr, 0);
  }
  own_->sleeping.store(0);
}

void P2pBellWaiter::wake() { ring_p2p_bell(own_); }

ShmP2pChannel::ShmP2pChannel(const ByteRingView& out, const ByteRingView& in, P2pBell* peer_bell,
                             const PeerEntry* peer_entry, int peer)
    : out_(out),
      in_(in),
      peer_bell_(peer_bell),
      peer_entry_(peer_entry),
      peer_(peer),
      head_(out.header->head.load(std::memory_order_relaxed)),
      tail_(in.header->tail.load(std::memory_order_relaxed)) {}

std::size_t ShmP2pChannel::write(const void* src, std::size_t bytes) {
  const uint64_t tail = out_.header->tail.load(std::memory_order_acquire);
  const std::size_t room = out_.capacity - static_cast<std::size_t>(head_ - tail);
  const std::size_t n = std::min(room, bytes);
  if (n == 0) return 0;
  const std::size_t at = static_cast<std::size_t>(head_ % out_.capacity);
  const std::size_t first = std::min(n, out_.capacity - at);
  std::memcpy(out_.data + at, src, first);
  if (n > first) std::memcpy(out_.data, static_cast<const char*>(src) + first, n - first);
  head_ += n;
  out_.header->head.store(head_, std::memory_order_release);
  ring_p2p_bell(peer_bell_);
  return n;
}

std::size_t ShmP2pChannel::read(void* dst, std::size_t bytes) {
  const uint64_t head = in_.header->head.load(std::memory_order_acquire);
  const std::size_t n = std::min(static_cast<std::size_t>(head - tail_), bytes);
  if (n == 0) return 0;
  if (dst) {
    const std::size_t at = static_cast<std::size_t>(tail_ % in_.capacity);
    const std::size_t first = std::min(n, in_.capacity - at);
    std::memcpy(dst, in_.data + at, first);
    if (n > first) std::memcpy(static_cast<char*>(dst) + first, in_.data, n - first);
  }
  tail_ += n;
  in_.header->tail.store(tail_, std::memory_order_release);
  ring_p2p_bell(peer_bell_);  // its writer may wait for room
  return n;
}

std::string ShmP2pChannel::gone() {
  const int64_t pid = peer_entry_->pid.load();
  if (peer_entry_->closed.load()) return "closed its communicator (pid " + std::to_string(pid) + ", this host)";
  if (process_exited(pid)) return "exited (pid " + std::to_string(pid) + ", this host)";
  return "";
}

}  // namespace muster::runtime::comm::shm
