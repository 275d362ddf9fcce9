#include "runtime/ps/cluster.h"

#include <cstdlib>

#include "api/base/settings.h"
#include "clusterspec/tf_config.h"

#include "runtime/error.h"

namespace muster::runtime::ps {

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
  clusterspec::TfConfig config;
  try {
    config = clusterspec::TfConfig::parse(text);  // TensorFlow's rules, messages name the field
  } catch (const std::exception& e) {
    throw InvalidArgument(e.what());
  }
  PsCluster c;
  c.ps = config.cluster.tasks(clusterspec::kPs);
  c.has_chief = config.cluster.has_type(clusterspec::kChief);
  c.workers = config.cluster.tasks(clusterspec::kChief);
  for (const auto& w : config.cluster.tasks(clusterspec::kWorker)) c.workers.push_back(w);
  c.task_type = config.task_type;
  c.task_index = config.task_index;
  if (c.ps.empty()) throw InvalidArgument("TF_CONFIG: cluster has no \"ps\" tasks; parameter-server mode needs at least one");
  return c;
}

PsCluster PsCluster::from_env() {
  const auto s = base::Settings::environment().raw("TF_CONFIG");
  if (!s) throw InvalidArgument("TF_CONFIG is not set: start this task from a muster ps-mode cluster or set it by hand");
  return from_tf_config(*s);
}

}  // namespace muster::runtime::ps
