// TempDir: a fresh directory under /tmp for one test, removed with
// everything in it when the TempDir goes away (also when the test failed).
// The name carries `prefix` and is made unique by mkdtemp, so tests running
// at the same time (ctest -j, other checkouts) never share one.
//
//   muster::testing::TempDir dir("muster-ckpt");
//   write(dir.path() / "a.bin");
#pragma once

#include <stdlib.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <stdexcept>
#include <string>
#include <system_error>

namespace muster::testing {

class TempDir {
 public:
  explicit TempDir(const std::string& prefix = "muster-test") {
    std::string tmpl = (std::filesystem::temp_directory_path() / (prefix + "-XXXXXX")).string();
    if (::mkdtemp(tmpl.data()) == nullptr) {
      throw std::runtime_error("mkdtemp " + tmpl + ": " + std::strerror(errno));
    }
    path_ = tmpl;
  }
  ~TempDir() {
    std::error_code ec;
    // A test may have taken permissions away to provoke a failure.
    std::filesystem::permissions(path_, std::filesystem::perms::owner_all, std::filesystem::perm_options::add, ec);
    std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  const std::filesystem::path& path() const { return path_; }
  std::string str() const { return path_.string(); }
  std::filesystem::path operator/(const std::string& name) const { return path_ / name; }

 private:
  std::filesystem::path path_;
};

}  // namespace muster::testing
