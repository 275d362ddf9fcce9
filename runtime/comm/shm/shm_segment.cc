#include "runtime/comm/shm/shm_segment.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstring>

namespace muster::runtime::comm::shm {
namespace {

constexpr uint64_t kMagic = 0x6d75737465727368ull;  // "mustersh"
constexpr std::size_t kHeaderBytes = 64;
constexpr std::size_t kChannelHeaderBytes = sizeof(ChannelHeader);
constexpr int kNameBytes = 64;

struct Header {
  uint64_t magic;
  uint64_t local_size;
  uint64_t slots;
  uint64_t slot_bytes;
};

std::size_t round_up(std::size_t n, std::size_t to) { return (n + to - 1) / to * to; }

}  // namespace

char* map_shared_object(const char* name, std::size_t bytes, bool create) {
  const int fd = create ? shm_open(name, O_CREAT | O_EXCL | O_RDWR, 0600) : shm_open(name, O_RDWR, 0600);
  if (fd < 0) return nullptr;
  void* p = MAP_FAILED;
  if (!create || posix_fallocate(fd, 0, static_cast<off_t>(bytes)) == 0) {
    p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  }
  close(fd);
  if (p == MAP_FAILED) {
    if (create) shm_unlink(name);
    return nullptr;
  }
  return static_cast<char*>(p);
}

std::size_t ShmSegment::layout_bytes(int local_size, std::size_t slots, std::size_t slot_bytes) {
  return kHeaderBytes + (sizeof(PeerEntry) + sizeof(DirectEntry)) * static_cast<std::size_t>(local_size) +
         (kChannelHeaderBytes + slots * slot_bytes) * static_cast<std::size_t>(local_size);
}

std::unique_ptr<ShmSegment> ShmSegment::create_shared(MPI_Comm local_comm, std::size_t slots,
                                                      std::size_t slot_bytes) {
  int local_rank = 0, local_size = 1;
  MPI_Comm_rank(local_comm, &local_rank);
  MPI_Comm_size(local_comm, &local_size);
  slot_bytes = round_up(slot_bytes, 64);
  const std::size_t bytes = layout_bytes(local_size, slots, slot_bytes);

  char name[kNameBytes] = {0};
  void* base = nullptr;
  if (local_rank == 0) {
    static std::atomic<int> counter{0};
    std::snprintf(name, sizeof name, "/muster-%d-%d", static_cast<int>(getpid()), counter.fetch_add(1));
    base = map_shared_object(name, bytes, true);
    if (base) {
      auto* h = static_cast<Header*>(base);
      h->local_size = static_cast<uint64_t>(local_size);
      h->slots = slots;
      h->slot_bytes = slot_bytes;
      std::atomic_thread_fence(std::memory_order_release);
      h->magic = kMagic;
    } else {
      name[0] = '\0';
    }
  }
  MPI_Bcast(name, kNameBytes, MPI_CHAR, 0, local_comm);
  if (local_rank != 0 && name[0] != '\0') {
    base = map_shared_object(name, bytes, false);
    if (base && static_cast<Header*>(base)->magic != kMagic) {
      munmap(base, bytes);
      base = nullptr;
    }
  }
  int ok = base != nullptr ? 1 : 0;
  int all_ok = 0;
  MPI_Allreduce(&ok, &all_ok, 1, MPI_INT, MPI_MIN, local_comm);
  if (local_rank == 0 && name[0] != '\0') shm_unlink(name);  // everyone has opened it (or given up)
  if (!all_ok) {
    if (base) munmap(base, bytes);
    return nullptr;
  }
  return std::unique_ptr<ShmSegment>(new ShmSegment(base, bytes, local_size, slots, slot_bytes));
}

ShmSegment::ShmSegment(void* base, std::size_t bytes, int local_size, std::size_t slots, std::size_t slot_bytes)
    : base_(static_cast<char*>(base)), bytes_(bytes), local_size_(local_size), slots_(slots), slot_bytes_(slot_bytes) {}

ShmSegment::~ShmSegment() { munmap(base_, bytes_); }

PeerEntry* ShmSegment::peer(int local_rank) const {
  return reinterpret_cast<PeerEntry*>(base_ + kHeaderBytes + sizeof(PeerEntry) * static_cast<std::size_t>(local_rank));
}

DirectEntry* ShmSegment::direct(int local_rank) const {
  return reinterpret_cast<DirectEntry*>(base_ + kHeaderBytes + sizeof(PeerEntry) * static_cast<std::size_t>(local_size_) +
                                        sizeof(DirectEntry) * static_cast<std::size_t>(local_rank));
}

std::size_t ShmSegment::channel_offset(int local_rank) const {
  return kHeaderBytes + (sizeof(PeerEntry) + sizeof(DirectEntry)) * static_cast<std::size_t>(local_size_) +
         (kChannelHeaderBytes + slots_ * slot_bytes_) * static_cast<std::size_t>(local_rank);
}

ChannelHeader* ShmSegment::channel(int local_rank) const {
  return reinterpret_cast<ChannelHeader*>(base_ + channel_offset(local_rank));
}

char* ShmSegment::slot(int local_rank, std::size_t index) const {
  return base_ + channel_offset(local_rank) + kChannelHeaderBytes + index * slot_bytes_;
}

}  // namespace muster::runtime::comm::shm
