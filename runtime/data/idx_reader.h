// IDX files: the format MNIST and Fashion-MNIST ship in.
//
// Layout (all integers big-endian):
//   bytes 0-1  zero
//   byte  2    element type (0x08 = unsigned byte, the only one supported)
//   byte  3    number of dimensions d
//   4*d bytes  the size of each dimension
//   the elements, row-major
// Files may be gzip-compressed or plain; zlib reads both.
//
// read_idx throws runtime::DataError naming the file for a missing file, a
// wrong magic, a dimension count other than expected, a zero dimension, or a
// file shorter than its header promises.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace muster::runtime::data {

struct IdxArray {
  std::vector<uint32_t> dims;   // e.g. {60000, 28, 28}
  std::vector<uint8_t> values;  // product(dims) bytes, row-major
};

// Reads a whole IDX file. `expected_dims` > 0 checks the dimension count.
IdxArray read_idx(const std::string& path, int expected_dims = 0);

}  // namespace muster::runtime::data
