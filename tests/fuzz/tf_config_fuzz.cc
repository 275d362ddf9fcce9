// Fuzz target: TF_CONFIG and ClusterSpec JSON, as every task of a cluster
// parses them (clusterspec::TfConfig / ClusterSpec, and the ps runtime's
// PsCluster on top).
//
// Contract checked: bad input ends in the library's own error (SpecError,
// or InvalidArgument from PsCluster) with a message; anything accepted
// round-trips: dump() parses back to an equal value.
#include <cstdint>
#include <cstdlib>
#include <string>

#include "clusterspec/cluster_spec.h"
#include "clusterspec/spec_error.h"
#include "clusterspec/tf_config.h"
#include "runtime/error.h"
#include "runtime/ps/cluster.h"

namespace cs = muster::clusterspec;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  try {
    cs::TfConfig c = cs::TfConfig::parse(text);
    cs::TfConfig again = cs::TfConfig::parse(c.dump());
    if (again.cluster != c.cluster || again.task_type != c.task_type || again.task_index != c.task_index) std::abort();
    if (c.validate()) std::abort();  // parse() validated it
  } catch (const cs::SpecError& e) {
    if (std::string(e.what()).empty()) std::abort();
  }
  try {
    cs::ClusterSpec s = cs::ClusterSpec::parse(text);
    if (cs::ClusterSpec::parse(s.dump()) != s) std::abort();
  } catch (const cs::SpecError& e) {
    if (std::string(e.what()).empty()) std::abort();
  }
  try {
    auto p = muster::runtime::ps::PsCluster::from_tf_config(text);
    if (p.ps.empty()) std::abort();
    (void)p.worker_index();
    for (const auto& a : p.ps) {
      std::string host;
      unsigned short port = 0;
      try {
        muster::runtime::ps::split_address(a, &host, &port);
      } catch (const muster::runtime::InvalidArgument&) {
      }
    }
  } catch (const muster::runtime::InvalidArgument& e) {
    if (std::string(e.what()).empty()) std::abort();
  }
  return 0;
}
