// What travels on a ring stream, after the bootstrap's Hello: frames of a
// fixed 32-byte header and `bytes` of payload.
//
// The ring cuts the buffer the same way on both ends, so the receiver knows
// each segment's size before it arrives; the header is there to check that
// (index and size) and to carry an abort. A rank whose op failed writes an
// abort frame (kind kAbort, `blamed` the rank it blames) on its outgoing
// streams before it closes them, so the neighbour downstream names the
// culprit instead of the messenger.
#pragma once

#include <cstdint>

namespace muster::runtime::comm::tcp {

constexpr uint32_t kFrameMagic = 0x4D525346;  // "MRSF"

enum class FrameKind : uint32_t { kData = 1, kAbort = 2 };

struct FrameHeader {
  uint32_t magic = kFrameMagic;
  uint32_t kind = static_cast<uint32_t>(FrameKind::kData);
  uint64_t index = 0;  // segment number on this link, counted by both ends from 0
  uint64_t bytes = 0;  // payload bytes that follow
  int32_t blamed = -1;  // kAbort: the rank the sender's op failed on
  uint32_t reserved = 0;
};
static_assert(sizeof(FrameHeader) == 32, "the frame header is part of the wire format");

}  // namespace muster::runtime::comm::tcp
