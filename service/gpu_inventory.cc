#include "service/gpu_inventory.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <set>
#include <sstream>

#include "api/base/run_capture.h"

namespace muster::service {

GpuInventory::GpuInventory(std::vector<int> devices) : devices_(std::move(devices)) {
  std::sort(devices_.begin(), devices_.end());
  devices_.erase(std::unique(devices_.begin(), devices_.end()), devices_.end());
}

int GpuInventory::free_count_locked() const {
  int n = 0;
  for (int d : devices_) n += held_.count(d) ? 0 : 1;
  return n;
}

api::Result<std::vector<std::vector<int>>> GpuInventory::reserve(const std::vector<Request>& requests) {
  std::lock_guard<std::mutex> lock(mu_);
  int wanted = 0;
  int asking = 0;
  for (const auto& r : requests) {
    wanted += r.count;
    if (r.count > 0) ++asking;
  }
  std::vector<std::vector<int>> out(requests.size());
  if (wanted == 0) return out;
  const int free = free_count_locked();
  if (wanted > free) {
    const std::string each = asking > 1 ? " (" + std::to_string(asking) + " workers x " +
                                              std::to_string(requests.front().count) + ")"
                                        : "";
    return api::Status(api::ErrorCode::kConflict,
                       "nvidia_gpu: the launch needs " + std::to_string(wanted) + " GPU" + (wanted == 1 ? "" : "s") +
                           each + " but only " + std::to_string(free) + " of the " +
                           std::to_string(devices_.size()) + " GPUs of this host " +
                           (free == 1 ? "is" : "are") + " free" +
                           (devices_.empty() ? " (musterd found none: give --gpus 0,1,... or install nvidia-smi)"
                                             : "; wait for GPU workers to end or ask for fewer"),
                       "nvidia_gpu");
  }
  auto next = devices_.begin();
  for (size_t i = 0; i < requests.size(); ++i) {
    for (int k = 0; k < requests[i].count; ++k) {
      while (held_.count(*next)) ++next;
      held_[*next] = requests[i].owner;
      out[i].push_back(*next);
      ++next;
    }
  }
  return out;
}

void GpuInventory::adopt(const std::string& owner, const std::vector<int>& devices) {
  std::lock_guard<std::mutex> lock(mu_);
  for (int d : devices) held_[d] = owner;
}

void GpuInventory::release(const std::string& owner) {
  std::lock_guard<std::mutex> lock(mu_);
  for (auto it = held_.begin(); it != held_.end();) {
    it = it->second == owner ? held_.erase(it) : std::next(it);
  }
}

std::vector<int> GpuInventory::devices() const {
  std::lock_guard<std::mutex> lock(mu_);
  return devices_;
}

int GpuInventory::free_count() const {
  std::lock_guard<std::mutex> lock(mu_);
  return free_count_locked();
}

api::Result<std::vector<int>> parse_gpu_list(const std::string& text) {
  std::vector<int> out;
  if (text.empty()) return out;
  std::set<int> seen;
  std::stringstream in(text);
  std::string item;
  while (std::getline(in, item, ',')) {
    const bool digits = !item.empty() && item.size() <= 4 && item.find_first_not_of("0123456789") == std::string::npos;
    const int v = digits ? std::stoi(item) : -1;
    if (!digits || v > 1023) {
      return api::invalid_argument("--gpus: '" + item + "' is not a device index (expected e.g. 0,1,2)", "gpus");
    }
    if (!seen.insert(v).second) return api::invalid_argument("--gpus: device " + item + " is listed twice", "gpus");
    out.push_back(v);
  }
  return out;
}

std::vector<int> parse_nvidia_smi_list(const std::string& output) {
  std::vector<int> out;
  std::stringstream in(output);
  std::string line;
  while (std::getline(in, line)) {
    int index = -1;
    if (std::sscanf(line.c_str(), "GPU %d:", &index) == 1 && index >= 0) out.push_back(index);
  }
  return out;
}

std::vector<int> discover_gpus() {
  // No nvidia-smi, or one that fails or hangs (a driver without a GPU): no GPUs.
  const base::Captured c = base::run_capture({"nvidia-smi", "-L"}, {std::chrono::seconds(30), false});
  if (c.failure || c.exit_code != 0) return {};
  return parse_nvidia_smi_list(c.out);
}

std::string device_list(const std::vector<int>& devices) {
  std::string out;
  for (int d : devices) out += (out.empty() ? "" : ",") + std::to_string(d);
  return out;
}

std::vector<int> parse_device_list(const std::string& text) {
  std::vector<int> out;
  std::stringstream in(text);
  std::string item;
  while (std::getline(in, item, ',')) {
    try {
      out.push_back(std::stoi(item));
    } catch (const std::exception&) {
    }
  }
  return out;
}

}  // namespace muster::service
