#include "runtime/ps/checkpoint.h"

#include <cstdio>

#include <boost/filesystem.hpp>

#include "api/base/checkpoint_file.h"
#include "runtime/error.h"

namespace muster::runtime::ps {
namespace {

constexpr char kKind[] = "ps";
constexpr char kStep[] = "step";

std::string file_name(int64_t step) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "ckpt-%012lld.bin", static_cast<long long>(step));
  return buf;
}

}  // namespace

std::string save_checkpoint(const std::string& dir, int64_t step, const std::vector<CheckpointEntry>& vars) {
  boost::system::error_code ec;
  boost::filesystem::create_directories(dir, ec);
  const std::string path = dir + "/" + file_name(step);
  base::CheckpointContents contents{kKind, {{kStep, step}}, {}};
  contents.tensors.reserve(vars.size());
  for (const auto& v : vars) contents.tensors.push_back({v.name, v.data, v.size});
  if (auto err = base::write_checkpoint(path, contents)) throw Error(*err);
  return path;
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
  auto read = base::read_checkpoint(path, kKind);
  if (read.failure) {
    if (read.damaged) throw DataError(*read.failure);
    throw Error(*read.failure);
  }
  auto step = read.checkpoint.counter(kStep);
  if (!step) throw DataError("checkpoint " + path + ": no '" + kStep + "' counter");
  LoadedCheckpoint c;
  c.path = path;
  c.step = *step;
  for (auto& t : read.checkpoint.tensors) {
    c.names.push_back(std::move(t.name));
    c.values.push_back(std::move(t.values));
  }
  return c;
}

}  // namespace muster::runtime::ps
