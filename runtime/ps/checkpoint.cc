#include "runtime/ps/checkpoint.h"

#include <cstdio>
#include <cstring>
#include <fcntl.h>
#include <unistd.h>

#include <boost/filesystem.hpp>

#include "api/base/atomic_file.h"
#include "runtime/error.h"

namespace muster::runtime::ps {
namespace {

constexpr char kCkptMagic[8] = {'M', 'U', 'S', 'T', 'E', 'R', 'C', 'K'};
constexpr uint32_t kCkptVersion = 1;

std::string file_name(int64_t step) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "ckpt-%012lld.bin", static_cast<long long>(step));
  return buf;
}

class File {
 public:
  File(const std::string& path, const char* mode) : path_(path), f_(std::fopen(path.c_str(), mode)) {
    if (!f_) throw Error("checkpoint: cannot open " + path + ": " + std::strerror(errno));
  }
  ~File() { if (f_) std::fclose(f_); }
  File(const File&) = delete;
  File& operator=(const File&) = delete;
  void write(const void* p, std::size_t n) {
    if (n && std::fwrite(p, 1, n, f_) != n) throw Error("checkpoint: write to " + path_ + " failed: " + std::strerror(errno));
  }
  void read(void* p, std::size_t n) {
    if (n && std::fread(p, 1, n, f_) != n) throw DataError("checkpoint " + path_ + " is truncated");
  }
  void sync_and_close() {
    if (std::fflush(f_) != 0 || ::fsync(fileno(f_)) != 0) throw Error("checkpoint: flush of " + path_ + " failed");
    std::fclose(f_);
    f_ = nullptr;
  }

 private:
  std::string path_;
  std::FILE* f_;
};

}  // namespace

std::string save_checkpoint(const std::string& dir, int64_t step, const std::vector<CheckpointEntry>& vars) {
  boost::system::error_code ec;
  boost::filesystem::create_directories(dir, ec);
  const std::string final_path = dir + "/" + file_name(step);
  {
    base::AtomicFile f(final_path);
    f.write(kCkptMagic, 8);
    f.write(&kCkptVersion, 4);
    f.write(&step, 8);
    uint32_t n = static_cast<uint32_t>(vars.size());
    f.write(&n, 4);
    for (const auto& v : vars) {
      uint32_t len = static_cast<uint32_t>(v.name.size());
      uint64_t count = v.size;
      f.write(&len, 4);
      f.write(v.name.data(), len);
      f.write(&count, 8);
      f.write(v.data, v.size * sizeof(float));
    }
    if (auto err = f.commit()) throw Error("checkpoint: " + *err);
  }
  return final_path;
}

std::optional<std::string> newest_checkpoint(const std::string& dir) {
  boost::system::error_code ec;
  if (!boost::filesystem::is_directory(dir, ec)) return std::nullopt;
  std::optional<std::string> best;
  long long best_step = -1;
  for (boost::filesystem::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    long long step = 0;
    int consumed = 0;
    if (std::sscanf(name.c_str(), "ckpt-%lld.bin%n", &step, &consumed) == 1 &&
        static_cast<std::size_t>(consumed) == name.size() && step > best_step) {
      best_step = step;
      best = it->path().string();
    }
  }
  return best;
}

LoadedCheckpoint load_checkpoint(const std::string& path) {
  LoadedCheckpoint c;
  c.path = path;
  File f(path, "rb");
  char magic[8];
  uint32_t version = 0, n = 0;
  f.read(magic, 8);
  if (std::memcmp(magic, kCkptMagic, 8) != 0) throw DataError("checkpoint " + path + ": bad magic (not a muster checkpoint)");
  f.read(&version, 4);
  if (version != kCkptVersion) throw DataError("checkpoint " + path + ": unsupported version " + std::to_string(version));
  f.read(&c.step, 8);
  f.read(&n, 4);
  if (n > (1u << 20)) throw DataError("checkpoint " + path + ": implausible variable count " + std::to_string(n));
  for (uint32_t i = 0; i < n; ++i) {
    uint32_t len = 0;
    uint64_t count = 0;
    f.read(&len, 4);
    if (len > 4096) throw DataError("checkpoint " + path + ": implausible name length");
    std::string name(len, '\0');
    f.read(name.data(), len);
    f.read(&count, 8);
    if (count > (uint64_t{1} << 34)) throw DataError("checkpoint " + path + ": implausible size of '" + name + "'");
    std::vector<float> values(count);
    f.read(values.data(), count * sizeof(float));
    c.names.push_back(std::move(name));
    c.values.push_back(std::move(values));
  }
  return c;
}

}  // namespace muster::runtime::ps
