#include "runtime/comm/control_plane.h"

#include <poll.h>
#include <time.h>

#include <algorithm>
#include <cstring>

#include "runtime/comm/shm/shm_link.h"
#include "runtime/error.h"

namespace muster::runtime::comm {
namespace {

// The largest payload a mesh peer may announce (a corrupt header otherwise
// asks for any size).
constexpr uint64_t kMaxMeshPayload = uint64_t{1} << 34;

char* record_at(shm::ControlSlot* slot) { return reinterpret_cast<char*>(slot) + sizeof(shm::ControlSlot); }

// Waits in ppoll on the mesh streams (every peer is over TCP).
class MeshSleeper final : public Sleeper {
 public:
  explicit MeshSleeper(std::vector<tcp::MeshStream*> streams) : streams_(std::move(streams)) {}
  void prepare() override {}
  void sleep(std::chrono::microseconds max) override {
    fds_.clear();
    for (auto* s : streams_) {
      if (s) s->add_poll(&fds_);
    }
    const timespec ts{static_cast<time_t>(max.count() / 1000000), static_cast<long>(max.count() % 1000000) * 1000};
    if (fds_.empty()) {
      const timespec brief{0, 20000};
      nanosleep(&brief, nullptr);
      return;
    }
    ppoll(fds_.data(), fds_.size(), &ts, nullptr);
  }

 private:
  std::vector<tcp::MeshStream*> streams_;
  std::vector<pollfd> fds_;
};

}  // namespace

ControlPlane::ControlPlane(int rank, int size, shm::ShmSegment* segment, std::vector<int> table_local,
                           std::vector<tcp::MeshStream*> mesh, std::chrono::microseconds spin, shm::SmallOps* small)
    : rank_(rank), size_(size), segment_(segment), table_local_(std::move(table_local)), mesh_(std::move(mesh)),
      records_(static_cast<std::size_t>(size)), received_(static_cast<std::size_t>(size)), spin_(spin),
      small_(small) {
  my_local_ = table_local_[static_cast<std::size_t>(rank_)];
  for (int r = 0; r < size_; ++r) {
    if (r == rank_) continue;
    const bool table = table_local_[static_cast<std::size_t>(r)] >= 0;
    const bool tcp = mesh_[static_cast<std::size_t>(r)] != nullptr;
    MUSTER_CHECK(table != tcp, "rank " << r << " must be reached through exactly one of the control table and the mesh");
    MUSTER_CHECK(!table || (segment_ && my_local_ >= 0), "a control-table peer needs this rank in the table");
  }
  if (size_ > 1 && all_table()) {
    sleeper_ = std::make_unique<shm::DoorbellSleeper>(segment_->peer(my_local_));
  } else if (size_ > 1 && all_mesh()) {
    sleeper_ = std::make_unique<MeshSleeper>(mesh_);
  }
}

bool ControlPlane::all_table() const {
  for (int r = 0; r < size_; ++r) {
    if (r != rank_ && table_local_[static_cast<std::size_t>(r)] < 0) return false;
  }
  return true;
}

bool ControlPlane::all_mesh() const {
  for (int r = 0; r < size_; ++r) {
    if (r != rank_ && !mesh_[static_cast<std::size_t>(r)]) return false;
  }
  return true;
}

std::size_t ControlPlane::payload_capacity() const {
  if (small_) return small_->capacity();
  bool any_table = false;
  for (int r = 0; r < size_; ++r) any_table |= r != rank_ && table_local_[static_cast<std::size_t>(r)] >= 0;
  return any_table ? segment_->layout().control_bytes : static_cast<std::size_t>(kMaxMeshPayload);
}

const std::vector<ControlPlane::Record>& ControlPlane::exchange(const OpDescriptor& desc, const void* payload,
                                                               std::size_t bytes, Watchdog& watchdog) {
  const uint64_t x = ++xseq_;
  const int parity = static_cast<int>(x % 2);
  if (small_ && size_ > 1) {
    // Local rank == rank: the world is this host's ranks, in order.
    const auto& rounds = small_->exchange(desc, payload, bytes, &watchdog);
    for (int r = 0; r < size_; ++r) {
      Record& rec = records_[static_cast<std::size_t>(r)];
      const auto& got = rounds[static_cast<std::size_t>(r)];
      rec.header.desc = got.desc;
      rec.header.payload_bytes = got.bytes;
      rec.header.xseq = x;
      rec.payload = r == rank_ ? static_cast<const char*>(payload) : got.payload;
    }
    // The op's data path waits as it would after a table exchange.
    if (sleeper_) watchdog.set_sleeper(sleeper_.get(), spin_, 64);
    return records_;
  }
  if (bytes > payload_capacity()) {
    throw InvalidArgument("control exchange: a payload of " + std::to_string(bytes) + " bytes exceeds the " +
                          std::to_string(payload_capacity()) + " the control table holds");
  }
  out_header_.desc = desc;
  out_header_.payload_bytes = bytes;
  out_header_.xseq = x;
  Record& self = records_[static_cast<std::size_t>(rank_)];
  self.header = out_header_;
  self.payload = static_cast<const char*>(payload);
  if (size_ == 1) return records_;
  if (sleeper_) watchdog.set_sleeper(sleeper_.get(), all_table() ? spin_ : std::chrono::microseconds(0), 64);

  // Publish: into this rank's table slot (read by the local peers), and on
  // every mesh stream (header frame, then the payload frame).
  bool any_table = false;
  for (int r = 0; r < size_; ++r) any_table |= r != rank_ && table_local_[static_cast<std::size_t>(r)] >= 0;
  if (any_table) {
    shm::ControlSlot* slot = segment_->control(my_local_, parity);
    char* at = record_at(slot);
    std::memcpy(at, &out_header_, sizeof out_header_);
    if (bytes) std::memcpy(at + sizeof(RecordHeader), payload, bytes);
    slot->seq.store(x, std::memory_order_release);
    for (int r = 0; r < size_; ++r) {
      const int l = table_local_[static_cast<std::size_t>(r)];
      if (r != rank_ && l >= 0) shm::ring_doorbell(segment_->peer(l));
    }
  }
  // Per peer: what is still to be received (header, then payload), and per
  // mesh peer how many of this rank's frames (header, payload) are queued.
  enum Step : uint8_t { kHeader, kPayload, kDone };
  const int frames = bytes ? 2 : 1;
  std::vector<uint8_t> step(static_cast<std::size_t>(size_), kDone);
  std::vector<uint8_t> queued(static_cast<std::size_t>(size_), static_cast<uint8_t>(frames));
  int pending = 0;
  for (int r = 0; r < size_; ++r) {
    if (r == rank_) continue;
    ++pending;
    step[static_cast<std::size_t>(r)] = kHeader;
    if (tcp::MeshStream* m = mesh_[static_cast<std::size_t>(r)]) {
      m->recv().expect(sizeof(RecordHeader));
      queued[static_cast<std::size_t>(r)] = 0;
    }
  }
  // Wait for every peer's record, feeding the mesh streams meanwhile.
  for (;;) {
    watchdog.prepare();
    bool moved = false;
    int first_missing = -1;
    for (int k = 1; k < size_; ++k) {
      const int r = (rank_ + k) % size_;
      const auto ur = static_cast<std::size_t>(r);
      tcp::MeshStream* m = mesh_[ur];
      while (m && queued[ur] < frames) {
        const bool ok = queued[ur] == 0 ? m->send().try_send(&out_header_, sizeof out_header_)
                                        : m->send().try_send(payload, bytes);
        if (!ok) break;
        ++queued[ur];
        moved = true;
      }
      if (step[ur] == kDone) continue;
      Record& rec = records_[ur];
      if (!m) {
        shm::ControlSlot* slot = segment_->control(table_local_[ur], parity);
        if (slot->seq.load(std::memory_order_acquire) != x) {
          if (first_missing < 0) first_missing = r;
          continue;
        }
        const char* at = record_at(slot);
        std::memcpy(&rec.header, at, sizeof(RecordHeader));
        rec.payload = at + sizeof(RecordHeader);
        step[ur] = kDone;
        --pending;
        moved = true;
        continue;
      }
      if (step[ur] == kHeader) {
        const void* h = m->recv().try_recv();
        if (!h) {
          if (first_missing < 0) first_missing = r;
          continue;
        }
        std::memcpy(&rec.header, h, sizeof(RecordHeader));
        m->recv().release();
        moved = true;
        if (rec.header.xseq != x || rec.header.payload_bytes > kMaxMeshPayload) {
          throw CommError("control exchange #" + std::to_string(x) + ": rank " + std::to_string(r) +
                              " sent a record for exchange #" + std::to_string(rec.header.xseq) + " of " +
                              std::to_string(rec.header.payload_bytes) + " bytes: the stream is out of step",
                          r);
        }
        if (rec.header.payload_bytes == 0) {
          rec.payload = nullptr;
          step[ur] = kDone;
          --pending;
          continue;
        }
        received_[ur].resize(rec.header.payload_bytes);
        m->recv().expect_into(received_[ur].data(), rec.header.payload_bytes);
        step[ur] = kPayload;
      }
      if (step[ur] == kPayload) {
        const void* p = m->recv().try_recv();
        if (!p) {
          if (first_missing < 0) first_missing = r;
          continue;
        }
        if (p != received_[ur].data()) std::memcpy(received_[ur].data(), p, rec.header.payload_bytes);
        m->recv().release();
        rec.payload = received_[ur].data();
        step[ur] = kDone;
        --pending;
        moved = true;
      }
    }
    if (pending == 0) {
      // Everything received; what this rank sends must be out of its memory
      // (the payload is the caller's) before the exchange returns.
      bool all_sent = true;
      for (int r = 0; r < size_ && all_sent; ++r) {
        if (tcp::MeshStream* m = mesh_[static_cast<std::size_t>(r)]) {
          all_sent = queued[static_cast<std::size_t>(r)] == frames && m->send().flushed();
          if (!all_sent && first_missing < 0) first_missing = r;
        }
      }
      if (all_sent) return records_;
    }
    if (moved) {
      watchdog.progressed();
    } else {
      watchdog.idle(first_missing);
    }
  }
}

}  // namespace muster::runtime::comm
