#include "runtime/comm/shm/shared_region.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdint>
#include <cstring>
#include <string>

#include "runtime/comm/shm/shm_segment.h"
#include "runtime/error.h"

namespace muster::runtime::comm::shm {
namespace {
constexpr int kNameBytes = 64;
}  // namespace

std::unique_ptr<SharedRegion> SharedRegion::create(MPI_Comm local_comm, std::size_t bytes) {
  int local_rank = 0, local_size = 1;
  MPI_Comm_rank(local_comm, &local_rank);
  MPI_Comm_size(local_comm, &local_size);
  const std::size_t mapped = bytes == 0 ? 1 : bytes;  // mmap refuses 0 bytes

  static std::atomic<int> counter{0};
  char name[kNameBytes] = {0};
  std::snprintf(name, sizeof name, "/muster-%d-r%d", static_cast<int>(getpid()), counter.fetch_add(1));
  char* own = map_shared_object(name, mapped, true);

  // Every rank's object name (empty: it failed) and size: a peer mapped with
  // our size but created smaller would fault on reads past its end.
  struct Entry {
    char name[kNameBytes];
    uint64_t bytes;
  };
  Entry entry{};
  if (own) std::memcpy(entry.name, name, sizeof name);
  entry.bytes = bytes;
  std::vector<Entry> entries(static_cast<std::size_t>(local_size));
  MPI_Allgather(&entry, sizeof(Entry), MPI_BYTE, entries.data(), sizeof(Entry), MPI_BYTE, local_comm);
  for (const Entry& e : entries) {
    if (e.bytes != bytes) {
      if (own) {
        shm_unlink(name);
        munmap(own, mapped);
      }
      throw MismatchError("allocate_shared: this rank asked for " + std::to_string(bytes) +
                          " bytes and another rank of the host for " + std::to_string(e.bytes) +
                          "; every rank must ask for the same size");
    }
  }
  std::vector<char*> bases(static_cast<std::size_t>(local_size), nullptr);
  bases[static_cast<std::size_t>(local_rank)] = own;
  bool ok = own != nullptr;
  for (int r = 0; r < local_size && ok; ++r) {
    if (r == local_rank) continue;
    const char* peer = entries[static_cast<std::size_t>(r)].name;
    bases[static_cast<std::size_t>(r)] = peer[0] ? map_shared_object(peer, mapped, false) : nullptr;
    ok = bases[static_cast<std::size_t>(r)] != nullptr;
  }
  int mine_ok = ok ? 1 : 0, all_ok = 0;
  MPI_Allreduce(&mine_ok, &all_ok, 1, MPI_INT, MPI_MIN, local_comm);
  if (own) shm_unlink(name);  // every rank has mapped it (or given up)
  if (!all_ok) {
    for (char* b : bases) {
      if (b) munmap(b, mapped);
    }
    return nullptr;
  }
  return std::unique_ptr<SharedRegion>(new SharedRegion(bytes, local_rank, std::move(bases)));
}

SharedRegion::SharedRegion(std::size_t bytes, int local_rank, std::vector<char*> bases)
    : bytes_(bytes), local_rank_(local_rank), bases_(std::move(bases)) {}

SharedRegion::~SharedRegion() {
  for (char* b : bases_) munmap(b, bytes_ == 0 ? 1 : bytes_);
}

void RegionTable::add(uint64_t id, const SharedRegion* region) {
  std::lock_guard<std::mutex> lock(mu_);
  regions_.emplace_back(id, region);
}

void RegionTable::remove(uint64_t id) {
  std::lock_guard<std::mutex> lock(mu_);
  regions_.erase(std::remove_if(regions_.begin(), regions_.end(), [id](const auto& r) { return r.first == id; }),
                 regions_.end());
}

bool RegionTable::empty() const {
  std::lock_guard<std::mutex> lock(mu_);
  return regions_.empty();
}

RegionTable::Found RegionTable::find(const void* data, std::size_t bytes) const {
  const auto p = reinterpret_cast<std::uintptr_t>(data);
  std::lock_guard<std::mutex> lock(mu_);
  for (const auto& [id, region] : regions_) {
    const auto begin = reinterpret_cast<std::uintptr_t>(region->mine());
    if (p >= begin && p - begin <= region->bytes() && bytes <= region->bytes() - (p - begin)) {
      return {id, region, static_cast<std::size_t>(p - begin)};
    }
  }
  return {};
}

}  // namespace muster::runtime::comm::shm
