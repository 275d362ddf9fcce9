// The one binary checkpoint format: named 64-bit counters (steps, optimizer
// iterations) and named float32 tensors. The parameter servers' chief
// (runtime/ps/checkpoint.h) and fashion_mnist's single and allreduce modes
// (examples/fashion_mnist/checkpoint.h) both write it; the file says which
// of them wrote it (`kind`), so neither loads the other's.
//
// Layout (version 2). Every integer and float is little-endian whatever the
// host, so a checkpoint moves between machines:
//   header   "MUSTERCK" | u32 version = 2 | u64 body bytes
//   body     u32 kind bytes | kind
//            u32 counters | counters x (u32 name bytes | name | i64 value)
//            u32 tensors  | tensors x (u32 name bytes | name | u64 elements | elements x f32)
//   trailer  u32 CRC-32 (zlib's) of the body
// (Version 1, the PS checkpoints of earlier builds, had no kind, no length
// and no checksum and was written in the host's byte order; it is refused
// with a message that says so.)
//
// Contract
// - write_checkpoint() writes through AtomicFile: a reader (or a restart
//   after a crash) sees the previous file or the whole new one.
// - read_checkpoint() returns the contents only when every check passed:
//   magic, version, kind, the file's size against the header's body length,
//   every length inside the body against what is left of it (nothing is
//   allocated for a length the file cannot hold), and the checksum. A
//   failure is one message beginning "checkpoint <path>: " that says what is
//   wrong (truncated, bad magic, wrong version, another kind, size mismatch,
//   checksum mismatch); `damaged` is false only when the file could not be
//   opened or read (an I/O error, not a bad file).
// - Names are at most kMaxCheckpointName bytes. Thread-safe (no shared state).
//
//   base::CheckpointContents c{"ps", {{"step", 100}}, {{"w1", w1.data(), w1.size()}}};
//   if (auto err = base::write_checkpoint(dir / "ckpt-100.bin", c)) throw Error(*err);
//   auto read = base::read_checkpoint(dir / "ckpt-100.bin", "ps");
//   if (read.failure) throw read.damaged ? DataError(*read.failure) : Error(*read.failure);
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "api/base/atomic_file.h"
#include "api/base/error.h"

namespace muster::base {

inline constexpr uint32_t kCheckpointVersion = 2;
inline constexpr std::size_t kMaxCheckpointName = 4096;

// A tensor to write: the caller's memory, read during write_checkpoint().
struct CheckpointTensorView {
  std::string name;
  const float* data = nullptr;
  std::size_t size = 0;  // elements
};

struct CheckpointContents {
  std::string kind;  // what wrote it: "ps", "fashion_mnist"
  std::vector<std::pair<std::string, int64_t>> counters;
  std::vector<CheckpointTensorView> tensors;
};

struct CheckpointTensor {
  std::string name;
  std::vector<float> values;
};

struct Checkpoint {
  std::string kind;
  std::vector<std::pair<std::string, int64_t>> counters;
  std::vector<CheckpointTensor> tensors;

  // The counter called `name`, if the file has one.
  std::optional<int64_t> counter(std::string_view name) const;
};

struct CheckpointRead {
  Checkpoint checkpoint;  // filled only without failure
  Failure failure;
  bool damaged = false;  // the file is not a valid checkpoint of `kind` (else: I/O error)
};

[[nodiscard]] Failure write_checkpoint(const std::filesystem::path& path, const CheckpointContents& contents,
                                       AtomicFileOptions options = {});

// Reads a checkpoint that `kind` wrote (see the contract).
[[nodiscard]] CheckpointRead read_checkpoint(const std::filesystem::path& path, std::string_view kind);

}  // namespace muster::base
