// Routes of the training curves:
//
//   POST /api/v1/agent/workers/{id}/metrics   (the worker's agent or metrics token)
//        {"points": [{"step": 10, "loss": 0.5, "images_per_sec": 900,
//                     "lr": 0.01, "accuracy": 0.8, "time": <epoch s>,
//                     "rank": 0, "total_steps": 1880,
//                     "scalars": {"Train/Loss": 0.5}}, ...]}
//        -> 202 {"accepted": n}; 400 naming the bad field; 429 when the
//        worker (rank) reports more often than allowed (TrainingSeriesOptions)
//   GET  /api/v1/workers/{id}/metrics?format=json|csv
//   GET  /api/v1/clusters/{id}/metrics?format=json|csv
//        json: {"points": [...] (rows, missing scalars null),
//               "series": [{worker_id, rank, name, total_steps,
//                           points: [[step, value, time], ...]}, ...]};
//        csv: step,time,loss,images_per_sec,lr,accuracy,worker,rank,<other names>
//
// Points land in their worker's series (per rank and name; a cluster's
// curves are its workers' series); `on_points` is called with each accepted
// batch (the dashboard's event stream). A failing store is logged once per
// episode; the points are kept in memory and the report is accepted.
#pragma once

#include <functional>

#include "service/cluster/manager.h"
#include "service/metrics/training_series.h"
#include "service/registry/registry.h"
#include "service/router.h"

namespace muster::service {

using PointsListener = std::function<void(const std::string& worker_id, const std::optional<std::string>& cluster_id,
                                          const std::vector<TrainingPoint>& points)>;

void register_training_routes(Router& router, WorkerRegistry& registry, ClusterManager& clusters,
                              TrainingSeries& series, PointsListener on_points);

}  // namespace muster::service
