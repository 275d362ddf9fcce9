#include "service/agent_routes.h"

#include "api/agent_protocol.h"

namespace muster::service {

using nlohmann::json;

// The bodies are read and written by api/agent_protocol.h, the one
// definition the agent uses too.
void register_agent_routes(Router& router, WorkerRegistry& registry) {
  router.add("POST", "/api/v1/agent/workers/{id}/register", AuthKind::kAgent,
             [&registry](const Request& req, Reply reply) {
               auto registration = api::registration_from_json(req.body);
               if (!registration) return reply(error_response(registration.status()));
               auto hold = registry.agent_register(req.params.at("id"), registration->ip_address, registration->port,
                                                   registration->limits);
               if (!hold) return reply(error_response(hold.status()));
               reply(json_response(200, api::to_json(hold.value())));
             });

  // Inline (router.h, Lane::kInline): a mutex and a map lookup, every
  // interval from every live worker. The reply gives the interval
  // (registry.h, "Heartbeats at fleet scale").
  router.add_inline("POST", "/api/v1/agent/workers/{id}/heartbeat", AuthKind::kAgent,
             [&registry](const Request& req, Reply reply) {
               // Stamped at arrival: time waited for a handler does not count.
               auto every = registry.agent_heartbeat(req.params.at("id"), std::chrono::steady_clock::now() - req.received);
               if (!every) return reply(error_response(every.status()));
               reply(json_response(200, api::to_json(api::AgentHeartbeatReply{every.value()})));
             });

  router.add("POST", "/api/v1/agent/workers/{id}/exit", AuthKind::kAgent,
             [&registry](const Request& req, Reply reply) {
               auto report = api::exit_from_json(req.body);
               if (!report) return reply(error_response(report.status()));
               auto s = registry.agent_exit(req.params.at("id"), report->exit_code, report->out_of_memory);
               if (!s) return reply(error_response(s));
               reply(json_response(200, json::object()));
             });

  router.add("POST", "/api/v1/agent/workers/{id}/wait-release", AuthKind::kAgent,
             [&registry](const Request& req, Reply reply) {
               auto s = registry.agent_wait_release(req.params.at("id"), [reply](std::optional<api::Release> rel) {
                 if (!rel) {
                   Response r;
                   r.http_status = 204;
                   return reply(r);
                 }
                 reply(json_response(200, api::to_json(*rel)));
               });
               if (!s) reply(error_response(s));
             });
}

}  // namespace muster::service
