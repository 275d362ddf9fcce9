// The /api/v1/clusters routes (see api/openapi.yaml, tag clusters).
#pragma once

#include "service/cluster/manager.h"
#include "service/log_follower.h"
#include "service/router.h"

namespace muster::service {

// Adds POST/GET /api/v1/clusters, GET /api/v1/clusters/{id},
// GET /api/v1/clusters/{id}/logs?tail=N (text: mpi, the launcher's log; ps,
// the chief's), POST /api/v1/clusters/{id}/stop and DELETE
// /api/v1/clusters/{id}. `clusters` outlives the router.
// `follower` serves ?follow=true on the logs route (null: 503).
// `host`: the workers' host when it is the daemon's own (asks beyond it get
// "warnings" in the answer, as for workers).
void register_cluster_routes(Router& router, ClusterManager& clusters, int max_workers,
                             LogFollower* follower = nullptr, std::optional<HostCapacity> host = std::nullopt);

}  // namespace muster::service

namespace muster::service {

struct StartClustersOptions {
  std::filesystem::path state_dir;    // cluster files under <state_dir>/clusters
  std::filesystem::path project_dir;
  int max_workers = 64;
  std::filesystem::path agent_path;   // muster-ps is looked for beside it
  // How mpirun reaches the backend's hosts (workers::mpi_hosts_of(backend));
  // null: the workers run on this host. Borrowed; outlives the manager.
  workers::MpiHosts* mpi_hosts = nullptr;
  LogFollower* follower = nullptr;    // serves ?follow=true on the logs route
  std::optional<HostCapacity> host{};  // the workers' host when it is this one (resource warnings)
  // Finished clusters kept (ClusterManagerOptions::retain_for, max_finished).
  std::chrono::seconds retain_for{std::chrono::hours(24 * 7)};
  size_t max_finished = 1000;
};

// musterd's one call for clusters: builds the manager, registers the routes,
// and returns the manager, which must be destroyed before `registry`. Call
// restore() on it next.
std::unique_ptr<ClusterManager> start_clusters(Router& router, WorkerRegistry& registry, ClusterStore* store,
                                               const Clock& clock, const StartClustersOptions& options);

}  // namespace muster::service
