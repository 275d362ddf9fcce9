#include "runtime/ps/placement.h"

#include <algorithm>

#include "runtime/error.h"

namespace muster::runtime::ps {

Placement place(const std::vector<VariableSpec>& variables, int n_ps, const PlacementOptions& options) {
  if (n_ps < 1) throw InvalidArgument("ps placement: need at least one ps task, got " + std::to_string(n_ps));
  std::size_t total = 0;
  for (const auto& v : variables) {
    if (v.size == 0) throw InvalidArgument("ps placement: variable '" + v.name + "' has no elements");
    total += v.size * 4;
  }
  const std::size_t share = (total + n_ps - 1) / static_cast<std::size_t>(n_ps);
  std::size_t max_slice = std::max(std::min(share, options.max_slice_bytes), options.min_slice_bytes);
  max_slice = std::max<std::size_t>(4, max_slice / 4 * 4);

  std::vector<SliceSpec> slices;
  for (std::size_t i = 0; i < variables.size(); ++i) {
    const std::size_t bytes = variables[i].size * 4;
    const std::size_t parts = (bytes + max_slice - 1) / max_slice;
    const std::size_t n = variables[i].size;
    for (std::size_t k = 0; k < parts; ++k) {
      SliceSpec s;
      s.variable = i;
      s.offset = n * k / parts;
      s.size = n * (k + 1) / parts - s.offset;
      slices.push_back(s);
    }
  }
  std::stable_sort(slices.begin(), slices.end(), [](const SliceSpec& a, const SliceSpec& b) {
    return a.size > b.size;  // stable: ties keep variable order, then offset
  });
  Placement p;
  p.bytes_per_ps.assign(static_cast<std::size_t>(n_ps), 0);
  for (std::size_t id = 0; id < slices.size(); ++id) {
    auto& s = slices[id];
    s.id = static_cast<uint32_t>(id);
    auto least = std::min_element(p.bytes_per_ps.begin(), p.bytes_per_ps.end());  // first minimum
    s.ps = static_cast<int>(least - p.bytes_per_ps.begin());
    *least += s.size * 4;
  }
  p.slices = std::move(slices);
  return p;
}

}  // namespace muster::runtime::ps
