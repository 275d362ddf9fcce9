// PeerMonitor over the ShmSegment's peer table: the ranks of this host
// publish their pid, the op they are in and a heartbeat, so a rank that
// times out can name the one that stalled, and a rank that exited is noticed
// within 50 ms (kill(pid, 0) / zombie state) instead of after the timeout.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

#include "runtime/comm/shm/shm_segment.h"
#include "runtime/comm/watchdog.h"

namespace muster::runtime::comm::shm {

// True when `pid` no longer runs: gone, or a zombie waiting to be reaped.
bool process_exited(int64_t pid);

class ShmPeerMonitor : public PeerMonitor {
 public:
  ShmPeerMonitor(ShmSegment* segment, int local_rank, int world_rank);
  void begin_op(uint64_t seq) override;
  void end_op(uint64_t seq) override;
  void heartbeat() override;
  void check_alive(const std::string& what) override;
  void check_gone(const std::string& what) override;
  void record_failure(int rank) override;
  void mark_closed() override;
  int blame(uint64_t seq, std::chrono::milliseconds timeout, std::string* why) override;

 private:
  // check_alive / check_gone: among peers that have not completed op
  // `current`, one that is gone.
  void check_peers_before(uint64_t current, const std::string& what);

  ShmSegment* segment_;
  int local_rank_;
};

}  // namespace muster::runtime::comm::shm
