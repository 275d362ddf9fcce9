#include "muster/runtime/ps/cluster.h"

#include <cstdlib>

#include <nlohmann/json.hpp>

#include "muster/runtime/error.h"

namespace muster::runtime::ps {
namespace {

std::vector<std::string> tasks_of(const nlohmann::json& cluster, const char* type) {
  std::vector<std::string> out;
  if (!cluster.contains(type)) return out;
  const auto& j = cluster.at(type);
  if (j.is_array()) {
    for (const auto& a : j) out.push_back(a.get<std::string>());
  } else if (j.is_object()) {  // TensorFlow's {"0": "host:port", ...}
    out.resize(j.size());
    for (auto it = j.begin(); it != j.end(); ++it) {
      std::size_t i = std::stoul(it.key());
      if (i >= out.size()) throw InvalidArgument(std::string("TF_CONFIG: cluster.") + type + " index " + it.key() + " out of range");
      out[i] = it.value().get<std::string>();
    }
  } else {
    throw InvalidArgument(std::string("TF_CONFIG: cluster.") + type + " must be a list of \"host:port\"");
  }
  for (const auto& a : out) {
    std::string host;
    unsigned short port;
    split_address(a, &host, &port);
  }
  return out;
}

}  // namespace

int PsCluster::worker_index() const {
  if (task_type == "chief") return 0;
  if (task_type == "worker") return task_index + (has_chief ? 1 : 0);
  return -1;
}

void split_address(const std::string& address, std::string* host, unsigned short* port) {
  auto colon = address.rfind(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 >= address.size()) {
    throw InvalidArgument("address '" + address + "' is not host:port");
  }
  *host = address.substr(0, colon);
  if (host->size() > 2 && host->front() == '[' && host->back() == ']') *host = host->substr(1, host->size() - 2);
  char* end = nullptr;
  long p = std::strtol(address.c_str() + colon + 1, &end, 10);
  if (*end != '\0' || p < 0 || p > 65535) throw InvalidArgument("address '" + address + "' has an invalid port");
  *port = static_cast<unsigned short>(p);
}

PsCluster PsCluster::from_tf_config(const std::string& text) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text);
  } catch (const std::exception& e) {
    throw InvalidArgument(std::string("TF_CONFIG is not valid JSON: ") + e.what());
  }
  if (!j.is_object() || !j.contains("cluster") || !j.at("cluster").is_object()) {
    throw InvalidArgument("TF_CONFIG: missing \"cluster\" object");
  }
  PsCluster c;
  const auto& cl = j.at("cluster");
  try {
    c.ps = tasks_of(cl, "ps");
    auto chief = tasks_of(cl, "chief");
    if (chief.size() > 1) throw InvalidArgument("TF_CONFIG: at most one chief, got " + std::to_string(chief.size()));
    c.has_chief = !chief.empty();
    c.workers = chief;
    for (auto& w : tasks_of(cl, "worker")) c.workers.push_back(w);
    if (j.contains("task")) {
      const auto& t = j.at("task");
      c.task_type = t.value("type", std::string("worker"));
      c.task_index = t.value("index", 0);
    }
  } catch (const nlohmann::json::exception& e) {
    throw InvalidArgument(std::string("TF_CONFIG: ") + e.what());
  }
  std::size_t n = c.task_type == "ps" ? c.ps.size()
                  : c.task_type == "chief" ? (c.has_chief ? 1u : 0u)
                  : c.task_type == "worker" ? c.workers.size() - (c.has_chief ? 1 : 0) : 0;
  if (c.task_index < 0 || static_cast<std::size_t>(c.task_index) >= n) {
    throw InvalidArgument("TF_CONFIG: task " + c.task_type + " index " + std::to_string(c.task_index) +
                          " out of range: cluster has " + std::to_string(n) + " \"" + c.task_type + "\" tasks");
  }
  if (c.ps.empty()) throw InvalidArgument("TF_CONFIG: cluster has no \"ps\" tasks");
  return c;
}

PsCluster PsCluster::from_env() {
  const char* s = std::getenv("TF_CONFIG");
  if (s == nullptr || *s == '\0') throw InvalidArgument("TF_CONFIG is not set: start this task from a muster ps-mode cluster or set it by hand");
  return from_tf_config(s);
}

}  // namespace muster::runtime::ps
