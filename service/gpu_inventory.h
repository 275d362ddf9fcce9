// GpuInventory: the GPU devices of the daemon's host and which worker holds
// which. musterd builds it from --gpus 0,1,... or, without the flag, from
// `nvidia-smi -L` when that program exists; otherwise it is empty and any
// nvidia_gpu > 0 request is refused.
//
// Contract
// - reserve() is all-or-nothing for a batch: either every request gets its
//   devices (the lowest free indices, in request order) or nothing changes
//   and the conflict (409) names how many were asked for and how many are
//   free.
// - A device belongs to at most one owner (worker id) at a time; release()
//   returns an owner's devices and is idempotent. adopt() re-marks devices
//   held by a worker of an earlier daemon (restore), whether or not they are
//   still in the inventory.
// - Every method may be called from any thread (one internal mutex). The
//   registry calls it under its own mutex; it never calls back.
#pragma once

#include <map>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "api/status.h"

namespace muster::service {

class GpuInventory {
 public:
  GpuInventory() = default;
  explicit GpuInventory(std::vector<int> devices);

  struct Request {
    std::string owner;  // worker id
    int count = 0;      // devices wanted (0: none)
  };
  // Device indices per request (same order), or conflict naming the free count.
  api::Result<std::vector<std::vector<int>>> reserve(const std::vector<Request>& requests);
  void adopt(const std::string& owner, const std::vector<int>& devices);
  void release(const std::string& owner);

  std::vector<int> devices() const;
  int free_count() const;

 private:
  int free_count_locked() const;

  mutable std::mutex mu_;
  std::vector<int> devices_;               // sorted, unique
  std::map<int, std::string> held_;        // device -> owner
};

// "0,1,3" -> {0,1,3}; invalid_argument naming --gpus for anything else
// (negative, repeated, not a number). "" -> none.
api::Result<std::vector<int>> parse_gpu_list(const std::string& text);
// The device indices in `nvidia-smi -L` output ("GPU 0: NVIDIA ... (UUID: ...)").
std::vector<int> parse_nvidia_smi_list(const std::string& output);
// Runs `nvidia-smi -L` when it is on PATH; none when absent or failing.
std::vector<int> discover_gpus();

// {0,2} -> "0,2" (CUDA_VISIBLE_DEVICES); parse_device_list is its inverse.
std::string device_list(const std::vector<int>& devices);
std::vector<int> parse_device_list(const std::string& text);

}  // namespace muster::service
