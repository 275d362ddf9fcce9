#include "muster/service/agent_routes.h"

#include <arpa/inet.h>

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
                 if (!b["port"].is_number_integer() || b["port"].get<int64_t>() < 1 || b["port"].get<int64_t>() > 65535) {
                   return reply(error_response(api::invalid_argument("port must be an integer in 1..65535", "port")));
                 }
                 port = b["port"].get<int>();
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
               // Range-checked before the cast: 4294967296 must not become 0 ("succeeded").
               const auto fits_int = [](const json& v) {
                 return v.is_number_unsigned() ? v.get<uint64_t>() <= static_cast<uint64_t>(INT32_MAX)
                                               : v.get<int64_t>() >= INT32_MIN && v.get<int64_t>() <= INT32_MAX;
               };
               if (!b.is_object() || !b.contains("exit_code") || !b["exit_code"].is_number_integer() ||
                   !fits_int(b["exit_code"])) {
                 return reply(error_response(api::invalid_argument("exit_code must be a 32-bit integer", "exit_code")));
               }
               auto s = registry.agent_exit(req.params.at("id"), b["exit_code"].get<int>());
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
