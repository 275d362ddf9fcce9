#include "service/cluster/routes.h"

#include "service/cluster/rendezvous_routes.h"
#include "service/worker_limits.h"
#include "service/log_route.h"

namespace muster::service {

using nlohmann::json;

void register_cluster_routes(Router& router, ClusterManager& clusters, int max_workers, LogFollower* follower,
                             std::optional<HostCapacity> host) {
  router.add("POST", "/api/v1/clusters", AuthKind::kUser,
             [&clusters, max_workers, host](const Request& req, Reply reply) {
               auto parsed = api::parse_cluster_request(req.body, max_workers);
               if (!parsed) return reply(error_response(parsed.status()));
               // New tasks only: the notebook's own workers were asked for already.
               std::vector<std::string> warnings;
               if (parsed->workers.empty()) warnings = resource_warnings(parsed->cpu, parsed->memory, host);
               if (parsed->workers.empty()) {
                 for (auto& w : limit_warnings(parsed->cpu, parsed->memory, host.has_value())) warnings.push_back(std::move(w));
               }
               auto created = clusters.create(parsed.value(), &warnings);  // + admission's
               if (!created) return reply(error_response(created.status()));
               json body = created->to_json();
               if (!warnings.empty()) body["warnings"] = warnings;
               reply(json_response(201, body));
             });

  router.add("GET", "/api/v1/clusters", AuthKind::kUser, [&clusters](const Request&, Reply reply) {
    json out = json::array();
    for (const auto& c : clusters.list()) out.push_back(c.to_json());
    reply(json_response(200, {{"clusters", out}}));
  });

  router.add("GET", "/api/v1/clusters/{id}", AuthKind::kUser, [&clusters](const Request& req, Reply reply) {
    auto c = clusters.get(req.params.at("id"));
    if (!c) return reply(error_response(c.status()));
    reply(json_response(200, c->to_json()));
  });

  // Text, like the worker logs; empty while the cluster has no log yet (or
  // never will: mpi with launch=false), so a notebook can poll it.
  router.add("GET", "/api/v1/clusters/{id}/logs", AuthKind::kUser,
             [&clusters, follower](const Request& req, Reply reply) {
               const std::string id = req.params.at("id");
               serve_log(req, reply, follower, [&clusters, &id] { return clusters.log_path(id); }, [&clusters, id] {
                 auto c = clusters.get(id);
                 return !c || api::is_terminal(c->status);
               });
             });

  router.add("DELETE", "/api/v1/clusters/{id}", AuthKind::kUser, [&clusters](const Request& req, Reply reply) {
    if (auto s = clusters.remove(req.params.at("id")); !s) return reply(error_response(s));
    Response r;
    r.http_status = 204;
    reply(std::move(r));
  });

  router.add("POST", "/api/v1/clusters/{id}/stop", AuthKind::kUser, [&clusters](const Request& req, Reply reply) {
    auto c = clusters.stop(req.params.at("id"));
    if (!c) return reply(error_response(c.status()));
    reply(json_response(200, c->to_json()));
  });
}

}  // namespace muster::service

namespace muster::service {

std::unique_ptr<ClusterManager> start_clusters(Router& router, WorkerRegistry& registry, ClusterStore* store,
                                               const Clock& clock, const StartClustersOptions& o) {
  ClusterManagerOptions options;
  options.state_dir = o.state_dir;
  options.validation = {o.max_workers, o.project_dir};
  options.ps_program = o.agent_path.parent_path() / "muster-ps";
  options.retain_for = o.retain_for;
  options.max_finished = o.max_finished;
  auto manager = std::make_unique<ClusterManager>(
      options, registry, store, clock, make_process_launcher(LauncherOptions{o.agent_path.parent_path() / "muster-launcher", registry.log_limits()}),
      o.mpi_hosts);
  register_cluster_routes(router, *manager, o.max_workers, o.follower, o.host);
  register_rendezvous_routes(router, *manager);
  return manager;
}

}  // namespace muster::service
