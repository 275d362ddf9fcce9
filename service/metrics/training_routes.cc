#include "service/metrics/training_routes.h"

#include <atomic>
#include <chrono>
#include <memory>

#include <spdlog/spdlog.h>

#include "service/query.h"

namespace muster::service {

using nlohmann::json;

namespace {

api::Result<bool> wants_csv(const Request& req) {
  auto format = QueryReader(req).choice("format", "json", {"json", "csv"});
  if (!format) return format.status();
  return format.value() == "csv";
}

Response points_response(const std::vector<ScalarSeries>& series, bool csv, const std::string& name) {
  if (csv) {
    Response r;
    r.content_type = "text/csv; charset=utf-8";
    r.body = training_csv(series);
    r.headers.emplace_back("Content-Disposition", "attachment; filename=\"" + name + "-metrics.csv\"");
    return r;
  }
  json rows = json::array();
  for (const auto& p : training_rows(series)) rows.push_back(to_json(p));
  json curves = json::array();
  for (const auto& s : series) curves.push_back(to_json(s));
  return json_response(200, {{"points", rows}, {"series", curves}});
}

}  // namespace

void register_training_routes(Router& router, WorkerRegistry& registry, ClusterManager& clusters,
                              TrainingSeries& series, PointsListener on_points) {
  auto store_failing = std::make_shared<std::atomic<bool>>(false);
  router.add("POST", "/api/v1/agent/workers/{id}/metrics", AuthKind::kReport,
             [&registry, &series, on_points, store_failing](const Request& req, Reply reply) {
               const std::string& id = req.params.at("id");
               auto worker = registry.get(id);
               if (!worker) return reply(error_response(worker.status()));
               auto points = parse_training_points(req.body, series.options().max_batch);
               if (!points) return reply(error_response(points.status()));
               // Per worker and rank: every rank of an mpi cluster reports through worker 0.
               const auto rank = points->front().rank;
               const std::string key = rank ? id + "/" + std::to_string(*rank) : id;
               if (!series.admit(key, std::chrono::steady_clock::now())) {
                 return reply(json_response(
                     429, {{"error",
                            {{"code", "too_many_requests"},
                             {"message", "worker " + id + (rank ? " rank " + std::to_string(*rank) : "") +
                                             " reports metrics more often than " +
                                             std::to_string(series.options().max_reports_per_second) +
                                             " times a second; batch the points"}}}}));
               }
               const double now =
                   std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
               for (auto& p : points.value()) {
                 if (p.time == 0) p.time = now;
                 p.worker_id = id;
               }
               auto added = series.add(id, worker->cluster_id, points.value());
               if (added.code() == api::ErrorCode::kInvalidArgument) return reply(error_response(added));
               if (!added) {
                 if (!store_failing->exchange(true)) {
                   spdlog::error("training curves are kept in memory only: {}", added.message());
                 }
               } else if (store_failing->exchange(false)) {
                 spdlog::info("training curves are written to their database again");
               }
               if (on_points) on_points(id, worker->cluster_id, points.value());
               reply(json_response(202, {{"accepted", points->size()}}));
             });

  router.add("GET", "/api/v1/workers/{id}/metrics", AuthKind::kUser,
             [&registry, &series](const Request& req, Reply reply) {
               auto csv = wants_csv(req);
               if (!csv) return reply(error_response(csv.status()));
               const std::string& id = req.params.at("id");
               if (auto w = registry.get(id); !w) return reply(error_response(w.status()));
               reply(points_response(series.worker_series(id), csv.value(), "worker-" + id));
             });

  router.add("GET", "/api/v1/clusters/{id}/metrics", AuthKind::kUser,
             [&clusters, &series](const Request& req, Reply reply) {
               auto csv = wants_csv(req);
               if (!csv) return reply(error_response(csv.status()));
               const std::string& id = req.params.at("id");
               if (auto c = clusters.get(id); !c) return reply(error_response(c.status()));
               reply(points_response(series.cluster_series(id), csv.value(), "cluster-" + id));
             });
}

}  // namespace muster::service
