#include "api/base/checkpoint_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

namespace muster::base {
namespace {

constexpr char kMagic[8] = {'M', 'U', 'S', 'T', 'E', 'R', 'C', 'K'};
constexpr uint64_t kHeaderBytes = 8 + 4 + 8;
constexpr uint64_t kTrailerBytes = 4;
constexpr bool kLittleEndianHost = __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__;
constexpr std::size_t kSwapChunk = 1 << 14;  // floats converted at a time on a big-endian host

void encode_u32(unsigned char* out, uint32_t v) {
  for (int i = 0; i < 4; ++i) out[i] = static_cast<unsigned char>(v >> (8 * i));
}
void encode_u64(unsigned char* out, uint64_t v) {
  for (int i = 0; i < 8; ++i) out[i] = static_cast<unsigned char>(v >> (8 * i));
}
uint32_t decode_u32(const unsigned char* in) {
  uint32_t v = 0;
  for (int i = 0; i < 4; ++i) v |= uint32_t{in[i]} << (8 * i);
  return v;
}
uint64_t decode_u64(const unsigned char* in) {
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v |= uint64_t{in[i]} << (8 * i);
  return v;
}
uint32_t byte_swapped(uint32_t v) { return __builtin_bswap32(v); }

uint32_t crc_update(uint32_t crc, const void* data, std::size_t n) {
  return static_cast<uint32_t>(crc32_z(crc, static_cast<const Bytef*>(data), n));
}

std::string where(const std::filesystem::path& path) { return "checkpoint " + path.string() + ": "; }

uint64_t body_bytes(const CheckpointContents& c) {
  uint64_t n = 4 + c.kind.size() + 4 + 4;
  for (const auto& [name, value] : c.counters) n += 4 + name.size() + 8;
  for (const auto& t : c.tensors) n += 4 + t.name.size() + 8 + uint64_t{t.size} * 4;
  return n;
}

// Appends the body to the file, little-endian, and keeps its CRC.
class BodyWriter {
 public:
  explicit BodyWriter(AtomicFile& file) : file_(file) {}
  void bytes(const void* data, std::size_t n) {
    crc_ = crc_update(crc_, data, n);
    file_.write(data, n);
  }
  void u32(uint32_t v) {
    unsigned char b[4];
    encode_u32(b, v);
    bytes(b, sizeof b);
  }
  void u64(uint64_t v) {
    unsigned char b[8];
    encode_u64(b, v);
    bytes(b, sizeof b);
  }
  void name(const std::string& s) {
    u32(static_cast<uint32_t>(s.size()));
    bytes(s.data(), s.size());
  }
  void floats(const float* data, std::size_t n) {
    if constexpr (kLittleEndianHost) {
      bytes(data, n * sizeof(float));
    } else {
      std::vector<uint32_t> chunk;
      for (std::size_t off = 0; off < n; off += kSwapChunk) {
        const std::size_t k = std::min(kSwapChunk, n - off);
        chunk.resize(k);
        std::memcpy(chunk.data(), data + off, k * sizeof(float));
        for (auto& w : chunk) w = byte_swapped(w);
        bytes(chunk.data(), k * sizeof(float));
      }
    }
  }
  uint32_t crc() const { return crc_; }

 private:
  AtomicFile& file_;
  uint32_t crc_ = 0;
};

class Fd {
 public:
  explicit Fd(int fd) : fd_(fd) {}
  ~Fd() {
    if (fd_ >= 0) ::close(fd_);
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  int get() const { return fd_; }

 private:
  int fd_;
};

// read() until `n` bytes arrived; false at end of file or on an error (errno set, 0 at EOF).
bool read_exact(int fd, void* data, std::size_t n) {
  auto* p = static_cast<unsigned char*>(data);
  while (n > 0) {
    const ssize_t got = ::read(fd, p, n);
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) {
      if (got == 0) errno = 0;
      return false;
    }
    p += got;
    n -= static_cast<std::size_t>(got);
  }
  return true;
}

// Reads the body, checking each length against what is left of it.
class BodyReader {
 public:
  BodyReader(int fd, uint64_t bytes, std::string prefix) : fd_(fd), left_(bytes), prefix_(std::move(prefix)) {}

  bool bytes(void* data, uint64_t n, const std::string& what) {
    if (n > left_) {
      return fail("size mismatch: " + what + " needs " + std::to_string(n) + " bytes, the body has " +
                  std::to_string(left_) + " left");
    }
    if (!read_exact(fd_, data, static_cast<std::size_t>(n))) {
      return fail(errno ? std::string("read failed: ") + std::strerror(errno) : "truncated while reading " + what,
                  errno == 0);
    }
    crc_ = crc_update(crc_, data, static_cast<std::size_t>(n));
    left_ -= n;
    return true;
  }
  bool u32(uint32_t& v, const std::string& what) {
    unsigned char b[4];
    if (!bytes(b, sizeof b, what)) return false;
    v = decode_u32(b);
    return true;
  }
  bool u64(uint64_t& v, const std::string& what) {
    unsigned char b[8];
    if (!bytes(b, sizeof b, what)) return false;
    v = decode_u64(b);
    return true;
  }
  bool name(std::string& s, const std::string& what) {
    uint32_t n = 0;
    if (!u32(n, "the length of " + what)) return false;
    if (n > kMaxCheckpointName) {
      return fail("size mismatch: " + what + " is " + std::to_string(n) + " bytes long (at most " +
                  std::to_string(kMaxCheckpointName) + ")");
    }
    s.assign(n, '\0');
    return bytes(s.data(), n, what);
  }
  bool floats(std::vector<float>& out, uint64_t n, const std::string& what) {
    if (n > left_ / sizeof(float)) {
      return fail("size mismatch: " + what + " declares " + std::to_string(n) + " floats, the body has " +
                  std::to_string(left_) + " bytes left");
    }
    out.resize(static_cast<std::size_t>(n));
    if (!bytes(out.data(), n * sizeof(float), what)) return false;
    if constexpr (!kLittleEndianHost) {
      for (auto& f : out) {
        uint32_t w;
        std::memcpy(&w, &f, 4);
        w = byte_swapped(w);
        std::memcpy(&f, &w, 4);
      }
    }
    return true;
  }
  bool fail(const std::string& why, bool damaged = true) {
    if (!error_) {
      error_ = prefix_ + why;
      damaged_ = damaged;
    }
    return false;
  }

  uint64_t left() const { return left_; }
  uint32_t crc() const { return crc_; }
  const Failure& error() const { return error_; }
  bool damaged() const { return damaged_; }

 private:
  int fd_;
  uint64_t left_;
  std::string prefix_;
  uint32_t crc_ = 0;
  Failure error_;
  bool damaged_ = true;
};

}  // namespace

std::optional<int64_t> Checkpoint::counter(std::string_view name) const {
  for (const auto& [n, v] : counters) {
    if (n == name) return v;
  }
  return std::nullopt;
}

Failure write_checkpoint(const std::filesystem::path& path, const CheckpointContents& c, AtomicFileOptions options) {
  if (c.kind.empty() || c.kind.size() > kMaxCheckpointName) return where(path) + "the kind must be 1 to 4096 bytes";
  for (const auto& [name, value] : c.counters) {
    if (name.size() > kMaxCheckpointName) return where(path) + "counter name '" + name.substr(0, 64) + "...' is too long";
  }
  for (const auto& t : c.tensors) {
    if (t.name.size() > kMaxCheckpointName) return where(path) + "tensor name '" + t.name.substr(0, 64) + "...' is too long";
    if (t.size > 0 && t.data == nullptr) return where(path) + "tensor '" + t.name + "' has no data";
  }
  AtomicFile file(path, options);
  unsigned char header[kHeaderBytes];
  std::memcpy(header, kMagic, sizeof kMagic);
  encode_u32(header + 8, kCheckpointVersion);
  encode_u64(header + 12, body_bytes(c));
  file.write(header, sizeof header);
  BodyWriter body(file);
  body.name(c.kind);
  body.u32(static_cast<uint32_t>(c.counters.size()));
  for (const auto& [name, value] : c.counters) {
    body.name(name);
    body.u64(static_cast<uint64_t>(value));
  }
  body.u32(static_cast<uint32_t>(c.tensors.size()));
  for (const auto& t : c.tensors) {
    body.name(t.name);
    body.u64(t.size);
    body.floats(t.data, t.size);
  }
  unsigned char trailer[kTrailerBytes];
  encode_u32(trailer, body.crc());
  file.write(trailer, sizeof trailer);
  if (file.failure()) return *file.failure();
  return file.commit();
}

CheckpointRead read_checkpoint(const std::filesystem::path& path, std::string_view kind) {
  CheckpointRead out;
  const std::string prefix = where(path);
  auto damaged = [&](const std::string& why) {
    out.failure = prefix + why;
    out.damaged = true;
    return out;
  };
  Fd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  struct stat st {};
  if (fd.get() < 0 || ::fstat(fd.get(), &st) != 0) {
    out.failure = prefix + "cannot open: " + std::strerror(errno);
    return out;
  }
  const uint64_t size = static_cast<uint64_t>(st.st_size);
  unsigned char header[kHeaderBytes];
  if (size < kHeaderBytes) {
    return damaged("truncated: " + std::to_string(size) + " bytes, shorter than the " + std::to_string(kHeaderBytes) +
                   "-byte header");
  }
  if (!read_exact(fd.get(), header, sizeof header)) return damaged("truncated while reading the header");
  if (std::memcmp(header, kMagic, sizeof kMagic) != 0) return damaged("bad magic (not a muster checkpoint)");
  const uint32_t version = decode_u32(header + 8);
  if (version == 1) {
    return damaged("version 1 (written by an earlier muster: host byte order, no checksum); this build reads version " +
                   std::to_string(kCheckpointVersion) + ", start from scratch or convert it with that muster");
  }
  if (version != kCheckpointVersion) {
    return damaged("unsupported version " + std::to_string(version) + "; this build reads version " +
                   std::to_string(kCheckpointVersion));
  }
  const uint64_t body_len = decode_u64(header + 12);
  const uint64_t rest = size - kHeaderBytes;
  if (body_len > rest || rest - body_len != kTrailerBytes) {
    const bool too_short = body_len > rest || rest - body_len < kTrailerBytes;
    return damaged(std::string(too_short ? "truncated" : "size mismatch") + ": the file has " + std::to_string(size) +
                   " bytes, its header promises " +
                   (body_len > UINT64_MAX - kHeaderBytes - kTrailerBytes
                        ? std::string("more than fit in a file")
                        : std::to_string(kHeaderBytes + body_len + kTrailerBytes)));
  }
  BodyReader body(fd.get(), body_len, prefix);
  auto failed = [&]() {
    out.failure = body.error();
    out.damaged = body.damaged();
    return out;
  };
  Checkpoint c;
  if (!body.name(c.kind, "the kind")) return failed();
  if (c.kind != kind) return damaged("written by '" + c.kind + "', not a '" + std::string(kind) + "' checkpoint");
  uint32_t n = 0;
  if (!body.u32(n, "the counter count")) return failed();
  for (uint32_t i = 0; i < n; ++i) {
    std::string name;
    uint64_t value = 0;
    if (!body.name(name, "counter " + std::to_string(i) + "'s name") || !body.u64(value, "counter '" + name + "'")) {
      return failed();
    }
    c.counters.emplace_back(std::move(name), static_cast<int64_t>(value));
  }
  if (!body.u32(n, "the tensor count")) return failed();
  for (uint32_t i = 0; i < n; ++i) {
    CheckpointTensor t;
    uint64_t elements = 0;
    if (!body.name(t.name, "tensor " + std::to_string(i) + "'s name") ||
        !body.u64(elements, "the size of tensor '" + t.name + "'") ||
        !body.floats(t.values, elements, "tensor '" + t.name + "'")) {
      return failed();
    }
    c.tensors.push_back(std::move(t));
  }
  if (body.left() != 0) {
    return damaged("size mismatch: " + std::to_string(body.left()) + " bytes of the body follow the last tensor");
  }
  unsigned char trailer[kTrailerBytes];
  if (!read_exact(fd.get(), trailer, sizeof trailer)) return damaged("truncated while reading the checksum");
  const uint32_t stored = decode_u32(trailer);
  if (stored != body.crc()) {
    char buf[96];
    std::snprintf(buf, sizeof buf, "checksum mismatch (stored %08x, computed %08x): the file is damaged", stored,
                  body.crc());
    return damaged(buf);
  }
  out.checkpoint = std::move(c);
  return out;
}

}  // namespace muster::base
