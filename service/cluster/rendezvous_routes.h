// The world rendezvous routes of elastic clusters, what their ranks call
// (clusterspec/rendezvous_protocol.h; api/openapi.yaml, tag "rendezvous"):
//   POST /api/v1/agent/workers/{id}/rendezvous/join
//   POST /api/v1/agent/workers/{id}/rendezvous/kv/set
//   POST /api/v1/agent/workers/{id}/rendezvous/kv/get
//   GET  /api/v1/agent/workers/{id}/rendezvous/world?generation=G&wait_ms=W
//   POST /api/v1/agent/workers/{id}/rendezvous/report
// {id} is the calling rank's own worker; the bearer is its agent token or
// its script token (MUSTER_RENDEZVOUS_TOKEN, the one that also reports its
// training metrics: AuthKind::kReport), so a rank speaks only for itself.
// join, kv/get and world may park (long-poll) and are answered from the
// World's callbacks; a body the protocol refuses is a 400 naming the field.
#pragma once

#include "service/cluster/manager.h"
#include "service/router.h"

namespace muster::service {

void register_rendezvous_routes(Router& router, ClusterManager& clusters);

}  // namespace muster::service
