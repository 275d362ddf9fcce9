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

std::unique_ptr<SharedRegion> SharedRegion::create(int local_rank, int local_size, std::size_t bytes,
                                                   const HostAllgather& allgather) {
  const std::size_t mapped = bytes == 0 ? 1 : bytes;  // mmap refuses 0 bytes

  static std::atomic<int> counter{0};
  char name[kNameBytes] = {0};
  std::snprintf(name, sizeof name, "/muster-%d-r%d", static_cast<int>(getpid()), counter.fetch_add(1));
  char* own = map_shared_object(name, mapped, true);

  // a) + b): every rank's object name ("" when it failed).
  std::vector<std::string> names;
  try {
    names = allgather(own ? std::string(name) : std::string());
  } catch (...) {
    if (own) {
      shm_unlink(name);
      munmap(own, mapped);
    }
    throw;
  }
  std::vector<char*> bases(static_cast<std::size_t>(local_size), nullptr);
  bases[static_cast<std::size_t>(local_rank)] = own;
  bool ok = own != nullptr;
  for (int r = 0; r < local_size && ok; ++r) {
    if (r == local_rank) continue;
    const std::string& peer = names[static_cast<std::size_t>(r)];
    bases[static_cast<std::size_t>(r)] = peer.empty() ? nullptr : map_shared_object(peer.c_str(), mapped, false);
    ok = bases[static_cast<std::size_t>(r)] != nullptr;
  }
  // c) all or none; then nothing is left in /dev/shm.
  std::vector<std::string> oks;
  try {
    oks = allgather(ok ? "1" : "0");
  } catch (...) {
    if (own) shm_unlink(name);
    for (char* b : bases) {
      if (b) munmap(b, mapped);
    }
    throw;
  }
  if (own) shm_unlink(name);
  const bool all_ok = std::all_of(oks.begin(), oks.end(), [](const std::string& v) { return v == "1"; });
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
