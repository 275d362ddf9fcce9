#include "service/cluster/rendezvous_routes.h"

#include "clusterspec/rendezvous_protocol.h"
#include "clusterspec/spec_error.h"
#include "service/query.h"

namespace muster::service {

namespace proto = clusterspec::rendezvous;
using nlohmann::json;

namespace {

// The body read by the protocol's own parser; its SpecError is a 400.
template <typename T, typename Parse>
api::Result<T> parse(const Request& req, Parse parse_body) {
  try {
    return parse_body(req.body.is_null() ? json::object() : req.body);
  } catch (const clusterspec::SpecError& e) {
    return api::invalid_argument(e.what());
  }
}

api::Result<int> query_int(const Request& req, const char* name, int lo, int hi, int fallback) {
  auto n = QueryReader(req).integer(name, fallback, lo, hi);
  if (!n) return n.status();
  return static_cast<int>(n.value());
}

// Answers with `to_json(value)` or the error.
template <typename T>
std::function<void(api::Result<T>)> answer(Reply reply) {
  return [reply](api::Result<T> r) {
    if (!r) return reply(error_response(r.status()));
    reply(json_response(200, proto::to_json(r.value())));
  };
}

}  // namespace

void register_rendezvous_routes(Router& router, ClusterManager& clusters) {
  const std::string base = "/api/v1/agent/workers/{id}/rendezvous/";
  router.add("POST", base + "join", AuthKind::kReport, [&clusters](const Request& req, Reply reply) {
    auto body = parse<proto::JoinRequest>(req, proto::join_request_from_json);
    if (!body) return reply(error_response(body.status()));
    auto world = clusters.world_of_worker(req.params.at("id"));
    if (!world) return reply(error_response(world.status()));
    world.value()->join(req.params.at("id"), body.value(), answer<proto::Assignment>(reply));
  });

  router.add("POST", base + "kv/set", AuthKind::kReport, [&clusters](const Request& req, Reply reply) {
    auto body = parse<proto::KvSet>(req, proto::kv_set_from_json);
    if (!body) return reply(error_response(body.status()));
    auto world = clusters.world_of_worker(req.params.at("id"));
    if (!world) return reply(error_response(world.status()));
    if (auto s = world.value()->set(req.params.at("id"), body.value()); !s) return reply(error_response(s));
    reply(json_response(200, json::object()));
  });

  router.add("POST", base + "kv/get", AuthKind::kReport, [&clusters](const Request& req, Reply reply) {
    auto body = parse<proto::KvGet>(req, proto::kv_get_from_json);
    if (!body) return reply(error_response(body.status()));
    auto world = clusters.world_of_worker(req.params.at("id"));
    if (!world) return reply(error_response(world.status()));
    world.value()->get(req.params.at("id"), body.value(), answer<proto::KvValues>(reply));
  });

  router.add("GET", base + "world", AuthKind::kReport, [&clusters](const Request& req, Reply reply) {
    auto generation = query_int(req, "generation", 0, 1 << 30, 0);
    if (!generation) return reply(error_response(generation.status()));
    auto wait = query_int(req, "wait_ms", 0, proto::kMaxWaitMs, 0);
    if (!wait) return reply(error_response(wait.status()));
    auto world = clusters.world_of_worker(req.params.at("id"));
    if (!world) return reply(error_response(world.status()));
    world.value()->world(req.params.at("id"), generation.value(), std::chrono::milliseconds(wait.value()),
                         answer<proto::WorldView>(reply));
  });

  router.add("POST", base + "report", AuthKind::kReport, [&clusters](const Request& req, Reply reply) {
    auto body = parse<proto::Report>(req, proto::report_from_json);
    if (!body) return reply(error_response(body.status()));
    auto world = clusters.world_of_worker(req.params.at("id"));
    if (!world) return reply(error_response(world.status()));
    if (auto s = world.value()->report(req.params.at("id"), body.value()); !s) return reply(error_response(s));
    reply(json_response(200, json::object()));
  });
}

}  // namespace muster::service
