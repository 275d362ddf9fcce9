#include "runtime/comm/shm/shared_region.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdint>
#include <cstring>
#include <sstream>
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

bool SharedRegion::stat_file(int fd, File* file) {
  struct stat st{};
  if (fd < 0 || fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) return false;
  file->fd = fd;
  file->device = static_cast<uint64_t>(st.st_dev);
  file->inode = static_cast<uint64_t>(st.st_ino);
  file->size = static_cast<std::size_t>(st.st_size);
  return true;
}

namespace {

struct FileRecord {
  long pid = 0;
  int fd = -1;
  uint64_t device = 0, inode = 0;
  std::size_t size = 0, offset = 0;
};

std::string encode(const SharedRegion::File& f) {
  std::ostringstream out;
  out << getpid() << ' ' << f.fd << ' ' << f.device << ' ' << f.inode << ' ' << f.size << ' ' << f.offset;
  return out.str();
}

bool decode(const std::string& s, FileRecord* r) {
  std::istringstream in(s);
  return static_cast<bool>(in >> r->pid >> r->fd >> r->device >> r->inode >> r->size >> r->offset);
}

// The peer's file, opened through its fd and mapped; null when that fails or
// what opened is not the file the peer named.
char* map_peer_file(const FileRecord& peer, std::size_t length) {
  const std::string path = "/proc/" + std::to_string(peer.pid) + "/fd/" + std::to_string(peer.fd);
  const int fd = open(path.c_str(), O_RDWR | O_CLOEXEC);
  if (fd < 0) return nullptr;
  SharedRegion::File opened;
  char* base = nullptr;
  if (SharedRegion::stat_file(fd, &opened) && opened.device == peer.device && opened.inode == peer.inode &&
      opened.size >= length) {
    void* p = mmap(nullptr, length, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (p != MAP_FAILED) base = static_cast<char*>(p);
  }
  close(fd);
  return base;
}

}  // namespace

std::unique_ptr<SharedRegion> SharedRegion::adopt(int local_rank, int local_size, const File& file, std::size_t need,
                                                  const HostAllgather& allgather, AdoptResult* result) {
  *result = AdoptResult::kUnavailable;
  // a) what every rank holds; the smallest file bounds the region.
  const std::vector<std::string> all = allgather(encode(file));
  std::vector<FileRecord> files(static_cast<std::size_t>(local_size));
  bool parsed = true, fits = true;
  std::size_t length = file.size;
  for (int r = 0; r < local_size; ++r) {
    FileRecord& f = files[static_cast<std::size_t>(r)];
    parsed = parsed && decode(all[static_cast<std::size_t>(r)], &f);
    fits = fits && f.offset == file.offset && f.size >= file.offset + need;
    length = std::min(length, f.size);
  }
  // b) every rank maps every file, its own included (the region's memory
  // stays mapped whatever the caller does with its own mapping).
  std::vector<char*> bases(static_cast<std::size_t>(local_size), nullptr);
  char status = !parsed ? 'x' : !fits || length == 0 ? 'd' : '1';
  if (status == '1') {
    for (int r = 0; r < local_size && status == '1'; ++r) {
      FileRecord f = files[static_cast<std::size_t>(r)];
      if (r == local_rank) {
        void* p = mmap(nullptr, length, PROT_READ | PROT_WRITE, MAP_SHARED, file.fd, 0);
        bases[static_cast<std::size_t>(r)] = p == MAP_FAILED ? nullptr : static_cast<char*>(p);
      } else {
        bases[static_cast<std::size_t>(r)] = map_peer_file(f, length);
      }
      if (!bases[static_cast<std::size_t>(r)]) status = 'x';
    }
  }
  auto unmap = [&] {
    for (char* b : bases) {
      if (b) munmap(b, length);
    }
  };
  // c) all or none, and why not.
  std::vector<std::string> statuses;
  try {
    statuses = allgather(std::string(1, status));
  } catch (...) {
    unmap();
    throw;
  }
  bool all_ok = true, unavailable = false;
  for (const auto& s : statuses) {
    all_ok = all_ok && s == "1";
    unavailable = unavailable || (s != "1" && s != "d");
  }
  if (!all_ok) {
    unmap();
    *result = unavailable ? AdoptResult::kUnavailable : AdoptResult::kDiffers;
    return nullptr;
  }
  *result = AdoptResult::kAdopted;
  return std::unique_ptr<SharedRegion>(new SharedRegion(length, local_rank, std::move(bases)));
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
