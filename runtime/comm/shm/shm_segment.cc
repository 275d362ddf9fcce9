#include "runtime/comm/shm/shm_segment.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstring>

namespace muster::runtime::comm::shm {
namespace {

constexpr uint64_t kMagic = 0x336d737465727368ull;  // "hsretsm3"
constexpr std::size_t kHeaderBytes = 128;
constexpr std::size_t kRecordHeaderBytes = 64;  // control_plane.h's record header

struct Header {
  uint64_t magic;
  uint64_t local_size;
  uint64_t ring_slots;
  uint64_t ring_slot_bytes;
  uint64_t control_bytes;
  uint64_t mesh_slots;
  uint64_t mesh_slot_bytes;
  uint64_t small_bytes;
  uint64_t p2p_bytes;
};
static_assert(sizeof(Header) <= kHeaderBytes, "the header fits its line");

std::size_t round_up(std::size_t n, std::size_t to) { return (n + to - 1) / to * to; }

}  // namespace

SegmentLayout SegmentLayout::rounded() const {
  SegmentLayout l = *this;
  l.ring_slot_bytes = round_up(ring_slot_bytes, 64);
  l.control_bytes = round_up(control_bytes, 64);
  l.mesh_slot_bytes = round_up(mesh_slot_bytes, 64);
  l.small_bytes = round_up(small_bytes, 64);
  l.p2p_bytes = round_up(p2p_bytes, 64);
  return l;
}

std::size_t SegmentLayout::peers_offset() const { return kHeaderBytes; }
std::size_t SegmentLayout::direct_offset() const {
  return peers_offset() + sizeof(PeerEntry) * static_cast<std::size_t>(local_size);
}
std::size_t SegmentLayout::control_offset() const {
  return direct_offset() + sizeof(DirectEntry) * static_cast<std::size_t>(local_size);
}
std::size_t SegmentLayout::control_slot_bytes() const {
  return sizeof(ControlSlot) + kRecordHeaderBytes + control_bytes;
}
std::size_t SegmentLayout::ring_offset() const {
  return control_offset() + 2 * control_slot_bytes() * static_cast<std::size_t>(local_size);
}
std::size_t SegmentLayout::ring_channel_bytes() const { return sizeof(ChannelHeader) + ring_slots * ring_slot_bytes; }
std::size_t SegmentLayout::mesh_offset() const {
  return ring_offset() + ring_channel_bytes() * static_cast<std::size_t>(local_size);
}
std::size_t SegmentLayout::mesh_channel_bytes() const {
  return mesh_slots == 0 ? 0 : sizeof(ChannelHeader) + mesh_slots * mesh_slot_bytes;
}
std::size_t SegmentLayout::small_offset() const {
  const auto n = static_cast<std::size_t>(local_size);
  return mesh_offset() + mesh_channel_bytes() * n * n;
}
std::size_t SegmentLayout::p2p_offset() const { return small_offset() + small_bytes; }
std::size_t SegmentLayout::p2p_ring_bytes() const { return p2p_bytes == 0 ? 0 : sizeof(ChannelHeader) + p2p_bytes; }
std::size_t SegmentLayout::total_bytes() const {
  if (p2p_bytes == 0) return p2p_offset();
  const auto n = static_cast<std::size_t>(local_size);
  return p2p_offset() + sizeof(P2pBell) * n + p2p_ring_bytes() * n * n;
}

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

std::unique_ptr<ShmSegment> ShmSegment::create(const SegmentLayout& requested, std::string* name) {
  const SegmentLayout layout = requested.rounded();
  static std::atomic<int> counter{0};
  char buf[64];
  std::snprintf(buf, sizeof buf, "/muster-%d-%d", static_cast<int>(getpid()), counter.fetch_add(1));
  char* base = map_shared_object(buf, layout.total_bytes(), true);
  if (!base) return nullptr;
  auto* h = reinterpret_cast<Header*>(base);
  h->local_size = static_cast<uint64_t>(layout.local_size);
  h->ring_slots = layout.ring_slots;
  h->ring_slot_bytes = layout.ring_slot_bytes;
  h->control_bytes = layout.control_bytes;
  h->mesh_slots = layout.mesh_slots;
  h->mesh_slot_bytes = layout.mesh_slot_bytes;
  h->small_bytes = layout.small_bytes;
  h->p2p_bytes = layout.p2p_bytes;
  std::atomic_thread_fence(std::memory_order_release);
  h->magic = kMagic;
  *name = buf;
  return std::unique_ptr<ShmSegment>(new ShmSegment(base, layout));
}

std::unique_ptr<ShmSegment> ShmSegment::open(const std::string& name, const SegmentLayout& requested) {
  const SegmentLayout layout = requested.rounded();
  char* base = map_shared_object(name.c_str(), layout.total_bytes(), false);
  if (!base) return nullptr;
  const auto* h = reinterpret_cast<const Header*>(base);
  std::atomic_thread_fence(std::memory_order_acquire);
  if (h->magic != kMagic || h->local_size != static_cast<uint64_t>(layout.local_size) ||
      h->ring_slots != layout.ring_slots || h->ring_slot_bytes != layout.ring_slot_bytes ||
      h->control_bytes != layout.control_bytes || h->mesh_slots != layout.mesh_slots ||
      h->mesh_slot_bytes != layout.mesh_slot_bytes || h->small_bytes != layout.small_bytes ||
      h->p2p_bytes != layout.p2p_bytes) {
    munmap(base, layout.total_bytes());
    return nullptr;
  }
  return std::unique_ptr<ShmSegment>(new ShmSegment(base, layout));
}

void ShmSegment::unlink(const std::string& name) {
  if (!name.empty()) shm_unlink(name.c_str());
}

ShmSegment::ShmSegment(char* base, const SegmentLayout& layout) : base_(base), layout_(layout) {}

ShmSegment::~ShmSegment() { munmap(base_, layout_.total_bytes()); }

PeerEntry* ShmSegment::peer(int local_rank) const {
  return reinterpret_cast<PeerEntry*>(base_ + layout_.peers_offset()) + local_rank;
}

DirectEntry* ShmSegment::direct(int local_rank) const {
  return reinterpret_cast<DirectEntry*>(base_ + layout_.direct_offset()) + local_rank;
}

ControlSlot* ShmSegment::control(int local_rank, int parity) const {
  const std::size_t index = 2 * static_cast<std::size_t>(local_rank) + static_cast<std::size_t>(parity);
  return reinterpret_cast<ControlSlot*>(base_ + layout_.control_offset() + index * layout_.control_slot_bytes());
}

ChannelView ShmSegment::ring_channel(int producer) const {
  char* at = base_ + layout_.ring_offset() + layout_.ring_channel_bytes() * static_cast<std::size_t>(producer);
  return ChannelView{reinterpret_cast<ChannelHeader*>(at), at + sizeof(ChannelHeader), layout_.ring_slots,
                     layout_.ring_slot_bytes};
}

ChannelView ShmSegment::mesh_channel(int producer, int consumer) const {
  if (layout_.mesh_slots == 0) return {};
  const std::size_t index =
      static_cast<std::size_t>(producer) * static_cast<std::size_t>(layout_.local_size) + static_cast<std::size_t>(consumer);
  char* at = base_ + layout_.mesh_offset() + layout_.mesh_channel_bytes() * index;
  return ChannelView{reinterpret_cast<ChannelHeader*>(at), at + sizeof(ChannelHeader), layout_.mesh_slots,
                     layout_.mesh_slot_bytes};
}

void* ShmSegment::small_area() const { return layout_.small_bytes ? base_ + layout_.small_offset() : nullptr; }

P2pBell* ShmSegment::p2p_bell(int local_rank) const {
  if (layout_.p2p_bytes == 0) return nullptr;
  return reinterpret_cast<P2pBell*>(base_ + layout_.p2p_offset()) + local_rank;
}

ByteRingView ShmSegment::p2p_ring(int producer, int consumer) const {
  if (layout_.p2p_bytes == 0) return {};
  const auto n = static_cast<std::size_t>(layout_.local_size);
  const std::size_t index = static_cast<std::size_t>(producer) * n + static_cast<std::size_t>(consumer);
  char* at = base_ + layout_.p2p_offset() + sizeof(P2pBell) * n + layout_.p2p_ring_bytes() * index;
  return ByteRingView{reinterpret_cast<ChannelHeader*>(at), at + sizeof(ChannelHeader), layout_.p2p_bytes};
}

}  // namespace muster::runtime::comm::shm
