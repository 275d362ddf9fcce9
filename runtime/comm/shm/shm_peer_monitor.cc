#include "runtime/comm/shm/shm_peer_monitor.h"

#include <errno.h>
#include <signal.h>
#include <time.h>
#include <unistd.h>

#include <fstream>
#include <sstream>

#include "runtime/error.h"

namespace muster::runtime::comm::shm {
namespace {

// CLOCK_MONOTONIC at its tick's resolution (1-4 ms, which is all a
// heartbeat in milliseconds needs): read at every op's start, where the
// precise clock cost a visible part of a 0.6 us small allreduce. Every
// process on the host reads the same clock.
int64_t monotonic_ms() {
  timespec ts{};
  ::clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1000 + ts.tv_nsec / 1000000;
}

}  // namespace

bool process_exited(int64_t pid) {
  if (pid <= 0) return false;
  if (kill(static_cast<pid_t>(pid), 0) != 0) return errno == ESRCH;
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!std::getline(stat, line)) return false;
  const auto close = line.rfind(')');
  return close != std::string::npos && close + 2 < line.size() && line[close + 2] == 'Z';
}

ShmPeerMonitor::ShmPeerMonitor(ShmSegment* segment, int local_rank, int world_rank)
    : segment_(segment), local_rank_(local_rank) {
  PeerEntry* me = segment_->peer(local_rank_);
  me->world_rank.store(world_rank);
  me->heartbeat_ms.store(monotonic_ms());
  me->pid.store(getpid());
}

void ShmPeerMonitor::begin_op(uint64_t seq) {
  PeerEntry* me = segment_->peer(local_rank_);
  me->op_seq.store(seq, std::memory_order_relaxed);
  me->heartbeat_ms.store(monotonic_ms(), std::memory_order_relaxed);
}

// Release is enough: a peer that reads done_seq (check_alive) only needs
// what this rank wrote before it (its part of the op) to be visible.
void ShmPeerMonitor::end_op(uint64_t seq) {
  segment_->peer(local_rank_)->done_seq.store(seq, std::memory_order_release);
}

void ShmPeerMonitor::heartbeat() {
  segment_->peer(local_rank_)->heartbeat_ms.store(monotonic_ms(), std::memory_order_relaxed);
}

void ShmPeerMonitor::record_failure(int rank) {
  segment_->peer(local_rank_)->blamed.store(rank >= 0 ? rank + 2 : 1);
}

void ShmPeerMonitor::mark_closed() { segment_->peer(local_rank_)->closed.store(1); }

void ShmPeerMonitor::check_alive(const std::string& what) {
  // A peer that completed the op this rank is in may go away: what it had to
  // send is out (in shared memory, or in this rank's socket buffers).
  check_peers_before(segment_->peer(local_rank_)->op_seq.load(), what);
}

void ShmPeerMonitor::check_gone(const std::string& what) {
  check_peers_before(~uint64_t{0}, what);  // every op from here on needs every peer
}

void ShmPeerMonitor::check_peers_before(uint64_t current, const std::string& what) {
  // Among peers gone before completing it (exited, or closed their
  // Communicator while the process lives on) prefer one that did not fail
  // first (the cause, not a survivor that gave up), then the one furthest
  // behind.
  int chosen = -1;
  bool chosen_failed = true, chosen_exited = false;
  uint64_t chosen_seq = 0;
  for (int i = 0; i < segment_->local_size(); ++i) {
    if (i == local_rank_) continue;
    const PeerEntry* p = segment_->peer(i);
    if (p->done_seq.load() >= current) continue;
    const bool exited = process_exited(p->pid.load());
    if (!exited && !p->closed.load()) continue;
    const bool failed = p->blamed.load() != 0;
    const uint64_t seq = p->op_seq.load();
    if (chosen < 0 || (chosen_failed && !failed) || (failed == chosen_failed && seq < chosen_seq)) {
      chosen = i;
      chosen_failed = failed;
      chosen_exited = exited;
      chosen_seq = seq;
    }
  }
  if (chosen < 0) return;
  const PeerEntry* p = segment_->peer(chosen);
  const int rank = static_cast<int>(p->world_rank.load());
  const std::string pid = std::to_string(p->pid.load());
  const char* gone = chosen_exited ? "exited" : "closed its communicator";
  if (chosen_failed) {
    const int64_t blamed = p->blamed.load() - 2;  // see PeerEntry::blamed
    if (blamed >= 0) {
      throw CommError(what + ": rank " + std::to_string(blamed) + " failed (reported by rank " + std::to_string(rank) +
                          ", pid " + pid + ", which " + gone + " after its collective failed). Check rank " +
                          std::to_string(blamed) + "'s log.",
                      static_cast<int>(blamed));
    }
  }
  if (chosen_exited) {
    throw CommError(what + ": rank " + std::to_string(rank) + " (pid " + pid + ", this host) has exited; its last op was #" +
                        std::to_string(p->op_seq.load()) + ". Check that rank's log.",
                    rank);
  }
  throw CommError(what + ": rank " + std::to_string(rank) + " (pid " + pid +
                      ", this host) closed its communicator; its last op was #" + std::to_string(p->op_seq.load()),
                  rank);
}

int ShmPeerMonitor::blame(uint64_t seq, std::chrono::milliseconds timeout, std::string* why) {
  int culprit = -1;
  uint64_t lowest = seq;
  for (int i = 0; i < segment_->local_size(); ++i) {
    const PeerEntry* p = segment_->peer(i);
    const uint64_t s = p->op_seq.load();
    if (i != local_rank_ && s < lowest) {
      lowest = s;
      culprit = static_cast<int>(p->world_rank.load());
    }
  }
  if (culprit >= 0) {
    std::ostringstream os;
    os << "rank " << culprit << " has not started op #" << seq << "; its last op was #" << lowest;
    *why = os.str();
    return culprit;
  }
  const int64_t now = monotonic_ms();
  int64_t stalest = timeout.count() / 2;
  for (int i = 0; i < segment_->local_size(); ++i) {
    if (i == local_rank_) continue;
    const PeerEntry* p = segment_->peer(i);
    const int64_t age = now - p->heartbeat_ms.load();
    if (age > stalest) {
      stalest = age;
      culprit = static_cast<int>(p->world_rank.load());
    }
  }
  if (culprit >= 0) *why = "rank " + std::to_string(culprit) + " has not polled for " + std::to_string(stalest) + " ms";
  return culprit;
}

}  // namespace muster::runtime::comm::shm
