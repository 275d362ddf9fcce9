// make_file_kv_store (kv_bootstrap.h): a directory every process reaches.
//
// Layout: key "a/b/c" is the file <dir>/a/b/c (folders made as needed). A
// value is written to "<file>.tmp-<pid>-<n>" and renamed into place, so a
// reader sees the whole value or nothing; a key that exists already is
// refused (link(2) onto an existing name fails), so two writers cannot both
// win. Keys may not hold "..", empty parts or a leading '/'.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>
#include <thread>

#include "runtime/comm/kv_bootstrap.h"
#include "runtime/error.h"

namespace muster::runtime::comm {
namespace {

std::string errno_text(int err) { return std::strerror(err); }

void make_dirs(const std::string& path) {
  std::size_t pos = 0;
  while ((pos = path.find('/', pos + 1)) != std::string::npos) {
    const std::string part = path.substr(0, pos);
    if (mkdir(part.c_str(), 0700) != 0 && errno != EEXIST) {
      throw CommError("file store: cannot create folder " + part + ": " + errno_text(errno));
    }
  }
  if (mkdir(path.c_str(), 0700) != 0 && errno != EEXIST) {
    throw CommError("file store: cannot create folder " + path + ": " + errno_text(errno));
  }
}

class FileKvStore final : public KvStore {
 public:
  explicit FileKvStore(std::string dir) : dir_(std::move(dir)) {
    if (dir_.empty()) throw InvalidArgument("file store: no directory given");
    while (dir_.size() > 1 && dir_.back() == '/') dir_.pop_back();
    make_dirs(dir_);
  }

  void set(const std::string& key, const std::string& value) override {
    const std::string path = path_of(key);
    const std::string folder = path.substr(0, path.rfind('/'));
    make_dirs(folder);
    static std::atomic<uint64_t> counter{0};
    const std::string tmp = path + ".tmp-" + std::to_string(getpid()) + "-" + std::to_string(counter++);
    {
      const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
      if (fd < 0) throw CommError("file store: cannot write " + tmp + ": " + errno_text(errno));
      std::size_t done = 0;
      while (done < value.size()) {
        const ssize_t w = ::write(fd, value.data() + done, value.size() - done);
        if (w < 0 && errno == EINTR) continue;
        if (w < 0) {
          const int err = errno;
          ::close(fd);
          ::unlink(tmp.c_str());
          throw CommError("file store: writing " + tmp + " failed: " + errno_text(err));
        }
        done += static_cast<std::size_t>(w);
      }
      ::close(fd);
    }
    // link() refuses an existing name: the first writer of a key wins.
    const int rc = ::link(tmp.c_str(), path.c_str());
    const int err = errno;
    ::unlink(tmp.c_str());
    if (rc != 0) {
      if (err == EEXIST) throw InvalidArgument("file store: key '" + key + "' was set before (keys are written once)");
      throw CommError("file store: cannot publish " + path + ": " + errno_text(err));
    }
  }

  std::vector<std::string> get(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) override {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    std::vector<std::string> out(keys.size());
    std::vector<bool> have(keys.size(), false);
    auto pause = std::chrono::microseconds(50);
    for (;;) {
      bool all = true;
      for (std::size_t i = 0; i < keys.size(); ++i) {
        if (have[i]) continue;
        std::ifstream in(path_of(keys[i]), std::ios::binary);
        if (!in) {
          all = false;
          continue;
        }
        std::ostringstream os;
        os << in.rdbuf();
        out[i] = os.str();
        have[i] = true;
      }
      if (all) return out;
      if (std::chrono::steady_clock::now() >= deadline) {
        std::string missing;
        for (std::size_t i = 0; i < keys.size(); ++i) {
          if (!have[i]) missing += (missing.empty() ? "" : ", ") + keys[i];
        }
        throw TimeoutError("file store " + dir_ + ": keys missing after " + std::to_string(timeout.count()) +
                           " ms: " + missing);
      }
      std::this_thread::sleep_for(pause);
      pause = std::min(pause * 2, std::chrono::microseconds(5000));
    }
  }

 private:
  std::string path_of(const std::string& key) const {
    if (key.empty() || key.front() == '/' || key.back() == '/' || key.find("//") != std::string::npos ||
        key.find("..") != std::string::npos || key.find(".tmp-") != std::string::npos) {
      throw InvalidArgument("file store: key '" + key + "' is not a relative path of plain parts");
    }
    return dir_ + "/" + key;
  }

  std::string dir_;
};

}  // namespace

std::shared_ptr<KvStore> make_file_kv_store(const std::string& dir) { return std::make_shared<FileKvStore>(dir); }

}  // namespace muster::runtime::comm
