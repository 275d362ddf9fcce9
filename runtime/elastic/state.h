// The C++ runtime's elastic training state (Horovod's hvd.elastic.State for
// programs that link the runtime): what a job keeps in step across ranks,
// commits to host memory and rolls back to after a failure.
//
// Contract
// - set_buffers() names the float buffers the state covers (parameters,
//   optimizer slots) and set_counter() the int64 counters (step, epoch).
//   Buffers may move when the world re-forms (an optimizer rebuilt for the
//   new world allocates anew): the job registers them again in its form()
//   (run.h), and the state's copies follow them by name.
// - commit(): save() then check_host_updates(). save() copies every buffer
//   and counter into memory the state allocated once (later commits copy
//   into the same memory). restore() copies the last commit back.
// - check_host_updates() is collective: rank 0's membership view is
//   broadcast (16 bytes), so every rank throws HostsUpdatedInterrupt at the
//   same call or none does. Outside run() (no world) it does nothing.
// - sync() is collective: rank 0's buffers and counters to every rank.
// - step_done() counts the steps since the last commit (the batches a
//   failure makes the ranks redo; run() reports them for the history).
// Threads: the job's one training thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "runtime/distributed/collectives.h"
#include "runtime/error.h"

namespace muster::runtime::elastic {

// A planned membership change (a newcomer waits), raised at commit() or
// check_host_updates() on every rank at once; no rollback. skip_sync: nobody
// new joins, so the state need not be broadcast again.
class HostsUpdatedInterrupt : public Error {
 public:
  explicit HostsUpdatedInterrupt(bool skip_sync)
      : Error("the world's membership changed: re-forming"), skip_sync_(skip_sync) {}
  bool skip_sync() const { return skip_sync_; }

 private:
  bool skip_sync_;
};

// What rank 0 knows about a membership change (membership.h: musterd's
// world route; tests: a fake).
class Membership {
 public:
  virtual ~Membership() = default;
  // The world this process is in is over, or a newcomer waits; `newcomers`
  // says whether someone new will join (then the state must be synced).
  virtual bool changed(bool* newcomers) = 0;
};

class State {
 public:
  struct Buffer {
    std::string name;
    float* data = nullptr;
    std::size_t count = 0;
  };

  void set_buffers(std::vector<Buffer> buffers);
  void set_counter(const std::string& name, int64_t* value);

  void commit();
  void check_host_updates();
  void save();
  void restore();
  void sync();

  void step_done();
  int64_t steps_since_commit() const { return steps_since_commit_; }

  // Set by run() for each world: how to agree, and what rank 0 watches.
  // Null: no world (single process outside run()).
  void attach(distributed::Collectives* collectives, Membership* membership);
  // Called once after the next step_done() (run() reports the recovery).
  void on_next_step(std::function<void()> f) { next_step_ = std::move(f); }

  // The copies, for run(): a snapshot of the live buffers now (before a
  // world is torn down without rollback) and putting copies into the
  // buffers registered since.
  using Copies = std::map<std::string, std::vector<float>>;
  Copies snapshot() const;
  void load(const Copies& copies);
  const Copies& committed() const { return committed_; }

 private:
  void copy_into(Copies& out) const;

  std::vector<Buffer> buffers_;
  std::vector<std::pair<std::string, int64_t*>> counters_;
  Copies committed_;
  std::map<std::string, int64_t> committed_counters_;
  int64_t steps_since_commit_ = 0;
  distributed::Collectives* collectives_ = nullptr;
  Membership* membership_ = nullptr;
  std::function<void()> next_step_;
};

}  // namespace muster::runtime::elastic
