#include "service/agent_routes.h"

#include <arpa/inet.h>

#include "api/json_integer.h"

namespace muster::service {

using nlohmann::json;

namespace {
bool is_ipv4(const std::string& s) {
  in_addr a{};
  return ::inet_pton(AF_INET, s.c_str(), &a) == 1;
}
}  // namespace

void register_agent_routes(Router& router, WorkerRegistry& registry) {
  router.add("POST", "/api/v1/agent/workers/{id}/register", AuthKind::kAgent,
             [&registry](const Request& req, Reply reply) {
               const json& b = req.body;
               if (!b.is_object() || !b.contains("ip_address") || !b["ip_address"].is_string() ||
                   !is_ipv4(b["ip_address"].get<std::string>())) {
                 return reply(error_response(api::invalid_argument("ip_address must be an IPv4 address", "ip_address")));
               }
               std::optional<int> port;
               if (b.contains("port") && !b["port"].is_null()) {
                 const auto p = api::json_integer(b["port"]);
                 if (!p || *p < 1 || *p > 65535) {
                   return reply(error_response(api::invalid_argument("port must be an integer in 1..65535", "port")));
                 }
                 port = static_cast<int>(*p);
               }
               auto hold = registry.agent_register(req.params.at("id"), b["ip_address"].get<std::string>(), port);
               if (!hold) return reply(error_response(hold.status()));
               reply(json_response(200, {{"hold", hold.value()}}));
             });

  router.add("POST", "/api/v1/agent/workers/{id}/heartbeat", AuthKind::kAgent,
             [&registry](const Request& req, Reply reply) {
               auto s = registry.agent_heartbeat(req.params.at("id"));
               if (!s) return reply(error_response(s));
               reply(json_response(200, json::object()));
             });

  router.add("POST", "/api/v1/agent/workers/{id}/exit", AuthKind::kAgent,
             [&registry](const Request& req, Reply reply) {
               const json& b = req.body;
               const auto code = b.is_object() && b.contains("exit_code") ? api::json_integer(b["exit_code"])
                                                                          : std::nullopt;
               if (!code || *code < 0 || *code > 255) {
                 return reply(error_response(
                     api::invalid_argument("exit_code must be an integer in 0..255 (128+signal when killed)", "exit_code")));
               }
               auto s = registry.agent_exit(req.params.at("id"), static_cast<int>(*code));
               if (!s) return reply(error_response(s));
               reply(json_response(200, json::object()));
             });

  router.add("POST", "/api/v1/agent/workers/{id}/wait-release", AuthKind::kAgent,
             [&registry](const Request& req, Reply reply) {
               auto s = registry.agent_wait_release(req.params.at("id"), [reply](std::optional<Release> rel) {
                 if (!rel) {
                   Response r;
                   r.http_status = 204;
                   return reply(r);
                 }
                 reply(json_response(200, {{"env", rel->env}, {"files", rel->files}}));
               });
               if (!s) reply(error_response(s));
             });
}

}  // namespace muster::service
