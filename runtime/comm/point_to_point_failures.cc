// PointToPoint (point_to_point.h), when things go wrong: ops past their
// timeout, peers whose channel says they are gone, and failing what waited
// on them. Step c) of the pass in point_to_point.cc.
#include <immintrin.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <map>
#include <utility>

#include "runtime/comm/point_to_point_internal.h"
#include "runtime/comm/progress_thread.h"
#include "runtime/error.h"

namespace muster::runtime::comm {

using namespace p2p_engine;

void PointToPoint::check_timeouts(Clock::time_point now) {
  auto ms = [](std::chrono::milliseconds t) { return std::to_string(t.count()) + " ms"; };
  for (auto it = posted_.begin(); it != posted_.end();) {
    const std::shared_ptr<Op> op = *it;
    if (now - op->since < op->timeout) {
      ++it;
      continue;
    }
    it = posted_.erase(it);
    const std::string who = op->peer == Communicator::kAnySource ? "no rank" : rank_text(op->peer);
    finish(op, std::make_exception_ptr(TimeoutError(describe(*op) + ": timed out: " + who +
                                                        " sent a message with this tag within " + ms(op->timeout),
                                                    op->peer)));
  }
  for (auto& p : peers_) {
    if (p.reader && !p.reader->pinned && now - p.reader->since >= p.reader->timeout) {
      const std::shared_ptr<Op> op = p.reader;
      p.reader = nullptr;
      p.target = nullptr;  // the rest of the message is dropped as it arrives
      finish(op, std::make_exception_ptr(TimeoutError(describe(*op) + ": timed out: rank " + std::to_string(p.rank) +
                                                          " stopped sending it part-way (" + std::to_string(op->done) +
                                                          " bytes arrived) for " + ms(op->timeout),
                                                      p.rank)));
    }
    for (auto it = p.awaiting.begin(); it != p.awaiting.end();) {
      const std::shared_ptr<Op> op = it->second;
      if (now - op->since < op->timeout) {
        ++it;
        continue;
      }
      it = p.awaiting.erase(it);
      finish(op, std::make_exception_ptr(TimeoutError(
                     describe(*op) + ": timed out: rank " + std::to_string(p.rank) + " did not read it within " +
                         ms(op->timeout) + " (is its point-to-point thread running?)",
                     p.rank)));
    }
    while (!p.sends.empty()) {
      const std::shared_ptr<Op> op = p.sends.front();
      if (now - std::max(op->since, p.last_out) < op->timeout) break;
      const bool started = op->staged_done > 0 || op->header_done > 0;
      p.sends.pop_front();
      finish(op, std::make_exception_ptr(TimeoutError(
                     describe(*op) + ": timed out: rank " + std::to_string(p.rank) + " took no bytes for " +
                         ms(op->timeout) + " (is it receiving?)" +
                         (started ? "; part of the message had gone, so nothing more can be sent to it" : ""),
                     p.rank)));
      if (started) {  // its bytes cannot be taken back: the stream's framing is lost
        p.out_broken = true;
        fail_sends(p, kCutOff);
      }
    }
  }
}

void PointToPoint::check_peers(Clock::time_point now) {
  bool any_waits = false;
  for (const auto& op : posted_) any_waits = any_waits || op->peer == Communicator::kAnySource;
  for (auto& p : peers_) {
    if (!p.channel || !p.gone.empty()) continue;
    bool needed = any_waits || !p.sends.empty() || p.reader != nullptr || !p.awaiting.empty() ||
                  !p.pushed_into.empty();
    for (const auto& op : posted_) needed = needed || op->peer == p.rank;
    if (!needed) continue;
    const std::string why = p.channel->gone();
    if (why.empty()) continue;
    if (!p.in_broken) pump_in(p, now);  // what it wrote before it went
    peer_gone(p, why);
  }
}

void PointToPoint::peer_gone(Peer& p, const std::string& why) {
  if (p.gone.empty()) p.gone = why;
  auto error = [&](const Op& op, const std::string& more) {
    return std::make_exception_ptr(CommError(describe(op) + ": rank " + std::to_string(p.rank) + " " + p.gone + more,
                                             p.rank));
  };
  fail_sends(p, p.gone);
  if (p.reader) {
    finish(p.reader, error(*p.reader, " part-way through the message"));
    p.reader = nullptr;
  }
  for (auto& [seq, op] : p.pushed_into) finish(op, error(*op, " before it had written its half of the message"));
  p.pushed_into.clear();
  if (p.to_unexpected) {  // half a message nobody can complete
    unexpected_.erase(p.holder);
    p.to_unexpected = false;
  }
  p.target = nullptr;
  const bool any_left = any_source_possible();
  for (auto it = posted_.begin(); it != posted_.end();) {
    const std::shared_ptr<Op> op = *it;
    if (op->peer == p.rank || (op->peer == Communicator::kAnySource && !any_left)) {
      it = posted_.erase(it);
      finish(op, op->peer == p.rank ? error(*op, "") :
                 std::make_exception_ptr(CommError(describe(*op) + ": every other rank is gone")));
    } else {
      ++it;
    }
  }
}

void PointToPoint::fail_sends(Peer& p, const std::string& why) {
  p.pushes.clear();
  for (auto& [seq, op] : p.awaiting) {
    finish(op, std::make_exception_ptr(CommError(describe(*op) + ": rank " + std::to_string(p.rank) + " " + why, p.rank)));
  }
  p.awaiting.clear();
  while (!p.sends.empty()) {
    const std::shared_ptr<Op> op = p.sends.front();
    p.sends.pop_front();
    finish(op, std::make_exception_ptr(CommError(describe(*op) + ": rank " + std::to_string(p.rank) + " " + why, p.rank)));
  }
}

void PointToPoint::fail_all(const std::string& why) {
  std::vector<std::shared_ptr<Op>> left;
  {
    std::lock_guard<std::mutex> lock(mu_);
    left.swap(incoming_);
  }
  for (auto& p : peers_) {
    for (auto& op : p.sends) left.push_back(op);
    p.sends.clear();
    for (auto& [seq, op] : p.awaiting) left.push_back(op);
    p.awaiting.clear();
    if (p.reader) left.push_back(p.reader);
    p.reader = nullptr;
    for (auto& [seq, op] : p.pushed_into) left.push_back(op);
    p.pushed_into.clear();
  }
  for (auto& op : posted_) left.push_back(op);
  posted_.clear();
  for (auto& op : left) finish(op, std::make_exception_ptr(CommError(describe(*op) + ": " + why)));
}

}  // namespace muster::runtime::comm
