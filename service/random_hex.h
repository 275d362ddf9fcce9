// random_hex: the daemon's one source of random ids and secrets (worker and
// cluster ids, agent and daemon tokens, a ps cluster's secret, dashboard
// sessions), for auth, the registry and the cluster side alike.
#pragma once

#include <cstddef>
#include <string>

namespace muster::service {

// 2*n_bytes hex characters from the OS random source.
std::string random_hex(size_t n_bytes);

}  // namespace muster::service
