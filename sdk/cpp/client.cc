#include "sdk/cpp/client.h"
#include "sdk/cpp/tls.h"

#include <chrono>
#include <system_error>

#include <cpprest/http_client.h>
#include <cpprest/uri.h>

namespace muster::sdk {
namespace {

using nlohmann::json;
namespace http = web::http;

// Extra time an await's HTTP request may take beyond the daemon's own wait.
constexpr double kAwaitSlackSeconds = 30;
// "No limit" for cpprest, which always wants a timeout.
constexpr double kForeverSeconds = 365.0 * 24 * 3600;

std::string code_for_status(int status) {
  switch (status) {
    case 400: return "invalid_argument";
    case 401: return "unauthenticated";
    case 403: return "permission_denied";
    case 404: return "not_found";
    case 409: return "conflict";
    case 413: return "payload_too_large";
    case 500: return "internal";
    case 503: return "unavailable";
    case 504: return "deadline_exceeded";
    default: return "unknown";
  }
}

std::string path_id(const std::string& id) {
  if (id.empty()) throw MusterError("invalid_argument", "empty id", "ids");
  return web::uri::encode_data_string(id);
}

std::vector<Worker> workers_of(const json& answer, const char* key = "workers") {
  std::vector<Worker> out;
  const json& list = answer.is_array() ? answer : answer.value(key, json::array());
  for (const auto& w : list) out.push_back(Worker::from_json(w));
  return out;
}

}  // namespace

MusterError error_from_response(int http_status, const std::string& body) {
  auto j = json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (j.is_object() && j.contains("error") && j["error"].is_object()) {
    const json& e = j["error"];
    std::string message = e.value("message", std::string());
    if (!message.empty()) {
      std::string code = e.contains("code") && e["code"].is_string() ? e["code"].get<std::string>()
                                                                     : code_for_status(http_status);
      std::string field = e.contains("field") && e["field"].is_string() ? e["field"].get<std::string>() : "";
      return MusterError(code, message, field, http_status);
    }
  }
  std::string message = body.substr(0, 500);
  if (message.empty()) message = "HTTP " + std::to_string(http_status) + " with no body";
  return MusterError(code_for_status(http_status), message, "", http_status);
}

Client::Client(ClientOptions options)
    : endpoint_(discover(Endpoint{options.url, options.token, options.ca_file, options.tls_fingerprint})),
      request_timeout_seconds_(options.request_timeout_seconds) {}

Client::Answer Client::send(const std::string& method, const std::string& path_and_query, const json* body,
                            double timeout_seconds) {
  http::client::http_client_config config;
  config.set_proxy(web::web_proxy(web::web_proxy::disabled));
  double limit = timeout_seconds > 0 ? timeout_seconds : kForeverSeconds;
  config.set_timeout(std::chrono::milliseconds(static_cast<long long>(limit * 1000)));
  const auto tls = verify_tls(config, endpoint_);
  try {
    http::client::http_client client(endpoint_.url, config);
    http::http_request request(method);
    request.set_request_uri(path_and_query);
    request.headers().add("Authorization", "Bearer " + endpoint_.token);
    request.headers().add("Accept", "application/json");
    if (body) request.set_body(body->dump(), "application/json");
    http::http_response response = client.request(request).get();
    Answer answer;
    answer.status = response.status_code();
    answer.body = response.extract_utf8string(true).get();
    if (auto h = response.headers().find("X-Log-Offset"); h != response.headers().end()) {
      answer.log_offset = std::stoull(h->second);
    }
    if (auto h = response.headers().find("X-Log-Marker-Bytes"); h != response.headers().end()) {
      answer.marker_bytes = static_cast<std::size_t>(std::stoull(h->second));
    }
    if (on_response_) {
      const auto& headers = response.headers();
      const auto type = headers.find("Content-Type");
      on_response_(Exchange{method, path_and_query, answer.status, type == headers.end() ? "" : type->second,
                            answer.body});
    }
    if (answer.status < 200 || answer.status >= 300) throw error_from_response(answer.status, answer.body);
    return answer;
  } catch (const http::http_exception& e) {
    if (auto refused = certificate_refused(endpoint_, tls.get(), e.what())) throw *refused;
    if (e.error_code() == std::errc::timed_out)
      throw MusterError("deadline_exceeded", method + " " + path_and_query + ": no answer from musterd within " +
                                                 std::to_string(static_cast<long long>(limit)) + " s");
    throw MusterError("unavailable", "cannot reach musterd at " + endpoint_.url + ": " + e.what() +
                                         " (is it running? see MUSTER_URL)");
  } catch (const web::uri_exception& e) {
    throw MusterError("unconfigured", "bad musterd URL " + endpoint_.url + ": " + e.what());
  }
}

json Client::send_json(const std::string& method, const std::string& path, const json* body,
                       double timeout_seconds) {
  Answer answer = send(method, path, body, timeout_seconds);
  if (answer.body.empty()) return json();
  auto j = json::parse(answer.body, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded())
    throw MusterError("internal", method + " " + path + ": musterd answered something that is not JSON: " +
                                      answer.body.substr(0, 200));
  return j;
}

std::vector<Worker> Client::launch_workers(const LaunchOptions& opts) { return launch(opts).workers; }

LaunchResult Client::launch(const LaunchOptions& opts) {
  json body = opts.to_json();
  json answer = send_json("POST", "/api/v1/workers", &body, request_timeout_seconds_);
  return LaunchResult{workers_of(answer), strings(answer, "warnings")};
}

AwaitResult Client::await_workers(const std::vector<std::string>& ids, const AwaitOptions& opts) {
  json body{{"ids", ids}, {"wait_for_completion", opts.wait_for_completion},
            {"timeout_seconds", opts.timeout_seconds}};
  double limit = opts.timeout_seconds > 0 ? opts.timeout_seconds + kAwaitSlackSeconds : 0;
  json answer = send_json("POST", "/api/v1/workers/await", &body, limit);
  return AwaitResult{workers_of(answer, "workers"), workers_of(answer, "failures")};
}

std::vector<Worker> Client::stop_workers(const std::vector<std::string>& ids) {
  if (ids.empty()) return {};
  json body{{"ids", ids}};
  return workers_of(send_json("POST", "/api/v1/workers/stop", &body, request_timeout_seconds_));
}

std::vector<Worker> Client::stop_all_workers() {
  json body{{"ids", json::array()}};
  return workers_of(send_json("POST", "/api/v1/workers/stop", &body, request_timeout_seconds_));
}

// The daemon answers in pages (next_page_token); this follows them to the end.
std::vector<Worker> Client::list_workers() {
  std::vector<Worker> out;
  std::string path = "/api/v1/workers";
  for (;;) {
    const json answer = send_json("GET", path, nullptr, request_timeout_seconds_);
    for (auto& w : workers_of(answer)) out.push_back(std::move(w));
    const auto next = answer.find("next_page_token");
    if (next == answer.end() || !next->is_string()) return out;
    path = "/api/v1/workers?page_token=" + next->get<std::string>();
  }
}

Worker Client::get_worker(const std::string& id) {
  return Worker::from_json(send_json("GET", "/api/v1/workers/" + path_id(id), nullptr, request_timeout_seconds_));
}

namespace {
std::string log_query(std::optional<int> tail, bool from_start) {
  if (from_start && tail) throw MusterError("invalid_argument", "give tail or from_start, not both", "from_start");
  if (from_start) return "?from_start=true";
  return tail ? "?tail=" + std::to_string(*tail) : "";
}
}  // namespace

std::string Client::worker_logs(const std::string& id, std::optional<int> tail, bool from_start) {
  const std::string path = "/api/v1/workers/" + path_id(id) + "/logs" + log_query(tail, from_start);
  return send("GET", path, nullptr, request_timeout_seconds_).body;
}

std::string Client::cluster_logs(const std::string& id, std::optional<int> tail, bool from_start) {
  const std::string path = "/api/v1/clusters/" + path_id(id) + "/logs" + log_query(tail, from_start);
  return send("GET", path, nullptr, request_timeout_seconds_).body;
}

Cluster Client::create_cluster(const ClusterOptions& opts) {
  json body = opts.to_json();
  return Cluster::from_json(send_json("POST", "/api/v1/clusters", &body, request_timeout_seconds_));
}

Cluster Client::get_cluster(const std::string& id) {
  return Cluster::from_json(send_json("GET", "/api/v1/clusters/" + path_id(id), nullptr, request_timeout_seconds_));
}

std::vector<Cluster> Client::list_clusters() {
  json answer = send_json("GET", "/api/v1/clusters", nullptr, request_timeout_seconds_);
  const json& list = answer.is_array() ? answer : answer.value("clusters", json::array());
  std::vector<Cluster> out;
  for (const auto& c : list) out.push_back(Cluster::from_json(c));
  return out;
}

Cluster Client::stop_cluster(const std::string& id) {
  json body = json::object();
  return Cluster::from_json(
      send_json("POST", "/api/v1/clusters/" + path_id(id) + "/stop", &body, request_timeout_seconds_));
}

}  // namespace muster::sdk
