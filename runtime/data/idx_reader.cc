#include "runtime/data/idx_reader.h"

#include <zlib.h>

#include <limits>
#include <memory>

#include "runtime/error.h"

namespace muster::runtime::data {
namespace {

struct GzCloser {
  void operator()(gzFile_s* f) const { gzclose(f); }
};
using GzFile = std::unique_ptr<gzFile_s, GzCloser>;

// Reads exactly `n` bytes or throws, telling a short file from a corrupt one.
void read_exact(gzFile f, const std::string& path, void* out, std::size_t n, const char* what) {
  auto* p = static_cast<unsigned char*>(out);
  std::size_t done = 0;
  while (done < n) {
    const std::size_t chunk = std::min<std::size_t>(n - done, 1u << 30);
    const int got = gzread(f, p + done, static_cast<unsigned>(chunk));
    if (got < 0) {
      int code = 0;
      const char* msg = gzerror(f, &code);
      throw DataError(path + ": corrupt or truncated while reading " + what + " (" +
                      (msg ? msg : "zlib error") + ")");
    }
    if (got == 0) {
      throw DataError(path + ": truncated: expected " + std::to_string(n) + " bytes of " + what +
                      ", file ends after " + std::to_string(done));
    }
    done += static_cast<std::size_t>(got);
  }
}

}  // namespace

IdxArray read_idx(const std::string& path, int expected_dims) {
  GzFile f(gzopen(path.c_str(), "rb"));
  if (!f) throw DataError(path + ": cannot open (does the file exist? set --data-dir)");
  gzbuffer(f.get(), 1u << 20);

  unsigned char magic[4];
  read_exact(f.get(), path, magic, sizeof magic, "the header");
  if (magic[0] != 0 || magic[1] != 0) {
    throw DataError(path + ": wrong magic: not an IDX file (first two bytes must be zero)");
  }
  if (magic[2] != 0x08) {
    throw DataError(path + ": unsupported IDX element type 0x" + std::to_string(magic[2]) +
                    " (only unsigned bytes, 0x08, are supported)");
  }
  const int ndims = magic[3];
  if (ndims == 0 || (expected_dims > 0 && ndims != expected_dims)) {
    throw DataError(path + ": bad dimensions: the header gives " + std::to_string(ndims) +
                    " dimensions, expected " +
                    (expected_dims > 0 ? std::to_string(expected_dims) : std::string("at least 1")));
  }

  IdxArray out;
  std::size_t total = 1;
  for (int i = 0; i < ndims; ++i) {
    unsigned char b[4];
    read_exact(f.get(), path, b, sizeof b, "the header");
    const uint32_t d = (uint32_t(b[0]) << 24) | (uint32_t(b[1]) << 16) | (uint32_t(b[2]) << 8) | b[3];
    if (d == 0) throw DataError(path + ": bad dimensions: dimension " + std::to_string(i) + " is zero");
    if (total > std::numeric_limits<uint32_t>::max() / d) {
      throw DataError(path + ": bad dimensions: more than 4 G elements");
    }
    total *= d;
    out.dims.push_back(d);
  }
  out.values.resize(total);
  read_exact(f.get(), path, out.values.data(), total, "the elements");
  return out;
}

}  // namespace muster::runtime::data
