#include "workers/kubernetes/gang.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>

#include "workers/kubernetes/pod_state.h"

namespace muster::workers::kubernetes {

using nlohmann::json;

namespace {

// The quantity times `scale` (1000 for milli), rounded up.
std::optional<long long> quantity(const std::string& q, long double scale) {
  if (q.empty()) return std::nullopt;
  size_t end = 0;
  long double number = 0;
  try {
    number = std::stold(q, &end);
  } catch (...) {
    return std::nullopt;
  }
  const std::string suffix = q.substr(end);
  static const std::map<std::string, long double> kSuffix = {
      {"", 1},          {"n", 1e-9},      {"u", 1e-6},      {"m", 1e-3},      {"k", 1e3},
      {"M", 1e6},       {"G", 1e9},       {"T", 1e12},      {"P", 1e15},      {"E", 1e18},
      {"Ki", 1024.0L},  {"Mi", 1048576.0L}, {"Gi", 1073741824.0L}, {"Ti", 1099511627776.0L},
      {"Pi", 1125899906842624.0L}, {"Ei", 1152921504606846976.0L}};
  auto it = kSuffix.find(suffix);
  // An exponent ("1e3") was read by stold already; anything else is not a quantity.
  if (it == kSuffix.end() || number < 0) return std::nullopt;
  return static_cast<long long>(std::ceil(number * it->second * scale - 1e-9L));
}

std::string str(const json& j, const char* key) {
  auto it = j.find(key);
  return it != j.end() && it->is_string() ? it->get<std::string>() : "";
}

Resources resources_of(const json& list) {
  Resources r;
  if (!list.is_object()) return r;
  if (auto c = parse_milli_quantity(str(list, "cpu"))) r.millicpu = *c;
  if (auto m = parse_quantity(str(list, "memory"))) r.memory = *m;
  if (auto g = parse_quantity(str(list, "nvidia.com/gpu"))) r.gpus = *g;
  return r;
}

std::string cpus(long long milli) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", milli / 1000.0);
  return buf;
}

std::string gib(long long bytes) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3g", bytes / 1073741824.0);
  return buf;
}

}  // namespace

std::optional<long long> parse_milli_quantity(const std::string& q) { return quantity(q, 1000); }
std::optional<long long> parse_quantity(const std::string& q) { return quantity(q, 1); }

Resources pod_requests(const json& pod) {
  Resources total;
  const json& containers = pod.value("/spec/containers"_json_pointer, json::array());
  for (const auto& c : containers) {
    const json res = c.value("resources", json::object());
    Resources req = resources_of(res.value("requests", json::object()));
    const Resources lim = resources_of(res.value("limits", json::object()));
    if (req.millicpu == 0) req.millicpu = lim.millicpu;
    if (req.memory == 0) req.memory = lim.memory;
    req.gpus = std::max(req.gpus, lim.gpus);
    total += req;
  }
  return total;
}

std::vector<NodeRoom> free_room(const json& nodes, const json& pods) {
  std::map<std::string, Resources> used;
  for (const auto& pod : pods.value("items", json::array())) {
    const PodView v = view_of(pod);
    if (v.node.empty() || v.terminal) continue;
    used[v.node] += pod_requests(pod);
  }
  std::vector<NodeRoom> room;
  for (const auto& node : nodes.value("items", json::array())) {
    if (node_not_ready(node)) continue;
    if (node.value("/spec/unschedulable"_json_pointer, false)) continue;
    NodeRoom r;
    r.name = node.value("/metadata/name"_json_pointer, std::string());
    r.free = resources_of(node.value("/status/allocatable"_json_pointer, json::object()));
    const Resources u = used[r.name];
    r.free.millicpu -= u.millicpu;
    r.free.memory -= u.memory;
    r.free.gpus -= u.gpus;
    room.push_back(r);
  }
  return room;
}

bool fits(std::vector<Resources> asks, std::vector<NodeRoom> room) {
  std::sort(asks.begin(), asks.end(), [](const Resources& a, const Resources& b) {
    return a.millicpu != b.millicpu ? a.millicpu > b.millicpu : a.memory > b.memory;
  });
  for (const auto& ask : asks) {
    bool placed = false;
    for (auto& node : room) {
      if (node.free.millicpu >= ask.millicpu && node.free.memory >= ask.memory && node.free.gpus >= ask.gpus) {
        node.free.millicpu -= ask.millicpu;
        node.free.memory -= ask.memory;
        node.free.gpus -= ask.gpus;
        placed = true;
        break;
      }
    }
    if (!placed) return false;
  }
  return true;
}

std::string describe_wait(const std::vector<Resources>& asks, const std::vector<NodeRoom>& room) {
  Resources want, free;
  for (const auto& a : asks) want += a;
  for (const auto& r : room) {
    free.millicpu += std::max(0LL, r.free.millicpu);
    free.memory += std::max(0LL, r.free.memory);
    free.gpus += std::max(0LL, r.free.gpus);
  }
  std::string s = "waiting for the whole group of " + std::to_string(asks.size()) + " to fit: " + cpus(want.millicpu) +
                  " CPUs and " + gib(want.memory) + " GiB";
  if (want.gpus > 0) s += " and " + std::to_string(want.gpus) + " GPUs";
  s += " requested, " + cpus(free.millicpu) + " CPUs and " + gib(free.memory) + " GiB";
  if (want.gpus > 0) s += " and " + std::to_string(free.gpus) + " GPUs";
  s += " free on " + std::to_string(room.size()) + " ready node" + (room.size() == 1 ? "" : "s");
  return s;
}

}  // namespace muster::workers::kubernetes
