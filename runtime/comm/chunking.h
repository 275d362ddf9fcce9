// How a buffer of `count` elements is cut among `n` ranks: chunk c starts at
// begin(c), and sizes differ by at most one element (the first count % n
// chunks are one longer). The ring and the direct allreduce both use it, so
// every rank agrees on who owns which elements.
#pragma once

#include <algorithm>
#include <cstddef>

namespace muster::runtime::comm {

struct Chunking {
  std::size_t count;
  int n;
  std::size_t begin(int c) const {
    const std::size_t base = count / static_cast<std::size_t>(n);
    const std::size_t extra = count % static_cast<std::size_t>(n);
    const std::size_t cc = static_cast<std::size_t>(c);
    return cc * base + std::min(cc, extra);
  }
  std::size_t length(int c) const { return begin(c + 1) - begin(c); }
};

} // namespace muster::runtime::comm
