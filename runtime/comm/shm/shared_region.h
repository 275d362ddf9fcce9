// SharedRegion: one buffer per rank of a host, each in its own POSIX
// shared-memory object, every one mapped by every rank, so a rank can read
// its peers' buffers in place (the direct allreduce, direct_allreduce.h).
//
// Protocol (create(), collective over the host's ranks, which have already
// agreed on the size through their OpDescriptors):
//   a) each rank creates "/muster-<pid>-r<n>" (O_EXCL, 0600), reserves its
//      pages with posix_fallocate (a full /dev/shm fails here, cleanly,
//      instead of with SIGBUS on first touch) and maps it;
//   b) the names are allgathered among the host's ranks (the Communicator's
//      control plane) and every rank maps the others' objects;
//   c) all agree (a second allgather) whether every rank succeeded, and each
//      unlinks its own name: nothing is left in /dev/shm even if the job is
//      killed; the memory lives until the last rank unmaps it.
// A peer's mapping outlives the peer, so reading it never faults.
//
// adopt() makes one from files the ranks already have: each rank holds open
// a shared-memory file (torch's share_memory_() storages, which keep their
// object's fd and unlink its name) with the op's buffer at the same offset.
// Each rank maps its own file once more, the peers open it through
// /proc/<pid>/fd/<fd> (allowed between processes of one user; the device
// and inode each rank reported must match what it opened) and map it too.
// All or none again; what a rank could not do is told apart from offsets or
// sizes that differ, which a later op may not repeat.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <memory>
#include <mutex>
#include <vector>

namespace muster::runtime::comm::shm {

class SharedRegion {
 public:
  // Every local rank's value in local-rank order (collective over the host).
  using HostAllgather = std::function<std::vector<std::string>(const std::string& mine)>;
  // Null on every rank when any rank could not create or map its part.
  static std::unique_ptr<SharedRegion> create(int local_rank, int local_size, std::size_t bytes,
                                              const HostAllgather& allgather);

  // A file this rank holds open, to adopt (adopt() reads it with fstat).
  struct File {
    int fd = -1;
    uint64_t device = 0;
    uint64_t inode = 0;
    std::size_t size = 0;
    std::size_t offset = 0;  // where the op's buffer starts in it
  };
  enum class AdoptResult {
    kAdopted,
    kDiffers,     // some rank's offset differs or its file is too short for `need` bytes
    kUnavailable  // some rank could not open or map a peer's file (another PID namespace, no
                  // permission, out of memory): adopting will fail again
  };
  // Collective over the host's ranks: the region over every rank's `file`,
  // of the smallest size among them; null unless *result is kAdopted, which
  // is the same on every rank.
  static std::unique_ptr<SharedRegion> adopt(int local_rank, int local_size, const File& file, std::size_t need,
                                             const HostAllgather& allgather, AdoptResult* result);
  // `fd`'s identity and size; false when it is not a regular file.
  static bool stat_file(int fd, File* file);
  ~SharedRegion();
  SharedRegion(const SharedRegion&) = delete;
  SharedRegion& operator=(const SharedRegion&) = delete;

  std::size_t bytes() const { return bytes_; }
  int local_rank() const { return local_rank_; }
  // Local rank `r`'s buffer as mapped in this process (r == local_rank(): ours).
  char* base(int r) const { return bases_[static_cast<std::size_t>(r)]; }
  char* mine() const { return base(local_rank_); }

 private:
  SharedRegion(std::size_t bytes, int local_rank, std::vector<char*> bases);

  std::size_t bytes_;
  int local_rank_;
  std::vector<char*> bases_;
};

// The SharedRegions a Communicator has handed out, by id, for finding the
// one an allreduce's buffer lies in. Thread-safe (buffers come and go on the
// user's threads; lookups run on the progress thread).
class RegionTable {
 public:
  struct Found {
    uint64_t id = 0;  // 0: not in any region
    const SharedRegion* region = nullptr;
    std::size_t offset = 0;
  };
  void add(uint64_t id, const SharedRegion* region);
  void remove(uint64_t id);
  bool empty() const;
  // The region holding all of [data, data + bytes) in this rank's mapping.
  Found find(const void* data, std::size_t bytes) const;

 private:
  mutable std::mutex mu_;
  std::vector<std::pair<uint64_t, const SharedRegion*>> regions_;
};

}  // namespace muster::runtime::comm::shm
