#include "runtime/comm/shm/p2p_ring.h"

#include <linux/futex.h>
#include <sys/uio.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "runtime/comm/shm/shm_peer_monitor.h"

namespace muster::runtime::comm::shm {
namespace {
constexpr uint64_t kP2pProbe = 0x65626f7270703270ull;  // "p2pprobe"
const volatile uint64_t probe_word = kP2pProbe;       // what peers read to find out whether they can
}  // namespace

void ring_p2p_bell(P2pBell* bell) {
  bell->bell.fetch_add(1);
  if (bell->sleeping.load()) {
    syscall(SYS_futex, reinterpret_cast<uint32_t*>(&bell->bell), FUTEX_WAKE, 1, nullptr, nullptr, 0);
  }
}

void publish_p2p_probe(P2pBell* own) {
  own->probe.store(reinterpret_cast<uint64_t>(&probe_word));
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

ShmP2pChannel::ShmP2pChannel(const ByteRingView& out, const ByteRingView& in, P2pBell* own_bell, P2pBell* peer_bell,
                             const PeerEntry* peer_entry, int local, int peer_local, int peer, bool single_copy)
    : out_(out),
      in_(in),
      own_bell_(own_bell),
      peer_bell_(peer_bell),
      peer_entry_(peer_entry),
      local_(local),
      peer_local_(peer_local),
      peer_(peer),
      single_copy_(single_copy && local < 64 && peer_local < 64),
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

namespace muster::runtime::comm::shm {

bool ShmP2pChannel::peer_pulls() {
  return single_copy_ && (peer_bell_->pulls_from.load(std::memory_order_acquire) >> local_ & 1) != 0;
}

std::size_t ShmP2pChannel::pull(void* dst, uint64_t from, std::size_t bytes, std::string* error) {
  iovec local{dst, bytes};
  iovec remote{reinterpret_cast<void*>(from), bytes};
  const ssize_t n = process_vm_readv(static_cast<pid_t>(peer_entry_->pid.load()), &local, 1, &remote, 1, 0);
  if (n > 0) return static_cast<std::size_t>(n);
  *error = std::string("process_vm_readv: ") + std::strerror(n < 0 ? errno : EFAULT);
  return 0;
}

std::size_t ShmP2pChannel::push(uint64_t to, const void* src, std::size_t bytes, std::string* error) {
  iovec local{const_cast<void*>(src), bytes};
  iovec remote{reinterpret_cast<void*>(to), bytes};
  const ssize_t n = process_vm_writev(static_cast<pid_t>(peer_entry_->pid.load()), &local, 1, &remote, 1, 0);
  if (n > 0) return static_cast<std::size_t>(n);
  *error = std::string("process_vm_writev: ") + std::strerror(n < 0 ? errno : EFAULT);
  return 0;
}

bool ShmP2pChannel::settle() {
  if (!single_copy_) return true;
  const uint64_t probe = peer_bell_->probe.load(std::memory_order_acquire);
  const int64_t pid = peer_entry_->pid.load();
  if (probe == 0 || pid <= 0) return false;  // not there yet
  uint64_t seen = 0;
  std::string error;
  if (pull(&seen, probe, sizeof seen, &error) == sizeof seen && seen == kP2pProbe) {
    own_bell_->pulls_from.fetch_or(uint64_t{1} << peer_local_, std::memory_order_release);
  }
  return true;  // either way: decided
}

}  // namespace muster::runtime::comm::shm
