// Placement: which PS task holds which slice of which variable.
//
// TensorFlow's replica_device_setter with a greedy byte-size load-balancing
// strategy and a fixed-size partitioner, in one deterministic function: every
// worker computes the same placement from the same variable list (names and
// sizes, in registration order), so no PS needs to be told.
//
//   1. share = ceil(total bytes / n_ps); max_slice = min(share, max_slice_bytes)
//      (never below min_slice_bytes). A variable larger than max_slice is cut
//      into ceil(bytes / max_slice) contiguous slices of near-equal size.
//   2. Slices are taken largest first (ties: variable order, then offset) and
//      each goes to the PS task with the fewest bytes so far (ties: lowest
//      index). So no PS holds more than its share plus one slice.
//   3. Slice ids are assigned in the order of step 2; they are the ids on the
//      wire.
//
// Example:
//   auto p = place({{"w1", 784 * 128}, {"b1", 128}}, /*n_ps=*/2, {});
//   for (const auto& s : p.slices) { s.ps; s.variable; s.offset; s.size; }
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace muster::runtime::ps {

struct VariableSpec {
  std::string name;
  std::size_t size = 0;  // elements (float32)
};

struct PlacementOptions {
  std::size_t max_slice_bytes = 8u << 20;  // smaller slices pipeline better
  std::size_t min_slice_bytes = 64u << 10;
};

struct SliceSpec {
  uint32_t id = 0;
  int ps = 0;
  std::size_t variable = 0;  // index into the variable list
  std::size_t offset = 0;    // first element of the slice in the variable
  std::size_t size = 0;      // elements
};

struct Placement {
  std::vector<SliceSpec> slices;           // by id
  std::vector<std::size_t> bytes_per_ps;   // load of each PS task
};

Placement place(const std::vector<VariableSpec>& variables, int n_ps, const PlacementOptions& options);

}  // namespace muster::runtime::ps
