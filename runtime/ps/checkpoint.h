// Checkpoints of the PS variables, written by the chief.
//
// File <dir>/ckpt-<step, 12 digits>.bin in the one checkpoint format
// (api/base/checkpoint_file.h: little-endian, length and CRC-32 checked,
// written atomically), kind "ps", counter "step" = the global step, one
// tensor per variable and optimizer slot in the client's order.
//
//   save_checkpoint("/ckpt", 100, {{"w1", w1.data(), w1.size()}});
//   if (auto path = newest_checkpoint("/ckpt")) { auto c = load_checkpoint(*path); c.step; }
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace muster::runtime::ps {

struct CheckpointEntry {
  std::string name;
  const float* data = nullptr;
  std::size_t size = 0;
};

struct LoadedCheckpoint {
  std::string path;
  int64_t step = 0;
  std::vector<std::string> names;
  std::vector<std::vector<float>> values;
};

// Returns the path written. Throws runtime::Error on I/O failure.
std::string save_checkpoint(const std::string& dir, int64_t step, const std::vector<CheckpointEntry>& vars);
// The checkpoint with the highest step in `dir`, if any (temporary files are ignored).
std::optional<std::string> newest_checkpoint(const std::string& dir);
// Throws DataError naming the file and what is wrong with it (truncated, bad
// magic, wrong version or kind, size or checksum mismatch); Error when it
// cannot be read at all.
LoadedCheckpoint load_checkpoint(const std::string& path);

}  // namespace muster::runtime::ps
