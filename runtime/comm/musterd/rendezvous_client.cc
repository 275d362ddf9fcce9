#include "runtime/comm/musterd/rendezvous_client.h"

#include <algorithm>
#include <cstdlib>
#include <mutex>
#include <thread>

#include "clusterspec/spec_error.h"
#include "runtime/error.h"

namespace muster::runtime::comm::musterd {

using nlohmann::json;
using Steady = std::chrono::steady_clock;
using namespace std::chrono_literals;

namespace {

std::string env_or(const char* name, const std::string& fallback = "") {
  const char* v = std::getenv(name);
  return v ? std::string(v) : fallback;
}

std::string message_of(const report::HttpResponse& r) {
  const json j = json::parse(r.body, nullptr, false);
  if (j.is_object() && j.contains("error") && j["error"].is_object() && j["error"].contains("message")) {
    return j["error"]["message"].get<std::string>();
  }
  return r.body.empty() ? "HTTP " + std::to_string(r.status) : r.body;
}

}  // namespace

std::optional<RendezvousSettings> RendezvousSettings::from_env() {
  const std::string url = env_or(proto::kEnvRendezvousUrl);
  if (url.empty()) return std::nullopt;
  RendezvousSettings s;
  s.url = url;
  auto target = report::parse_http_url(url);
  if (!target) {
    throw InvalidArgument(std::string(proto::kEnvRendezvousUrl) + "='" + url + "' is not an http(s)://host:port URL");
  }
  s.target = *target;
  s.worker_id = env_or(proto::kEnvWorkerId);
  s.token = env_or(proto::kEnvRendezvousToken);
  s.cluster_id = env_or(proto::kEnvClusterId);
  for (const auto& [name, value] : {std::pair<const char*, const std::string*>{proto::kEnvWorkerId, &s.worker_id},
                                    {proto::kEnvRendezvousToken, &s.token}}) {
    if (value->empty()) {
      throw InvalidArgument(std::string(name) + " is not set, but " + proto::kEnvRendezvousUrl +
                            " is: a rank of an elastic cluster gets both from musterd");
    }
  }
  const std::string timeout = env_or(proto::kEnvRendezvousTimeoutMs);
  if (!timeout.empty()) {
    char* end = nullptr;
    const long long ms = std::strtoll(timeout.c_str(), &end, 10);
    if (*end != '\0' || ms <= 0) {
      throw InvalidArgument(std::string(proto::kEnvRendezvousTimeoutMs) + "='" + timeout +
                            "' must be a positive integer (ms)");
    }
    s.timeout = std::chrono::milliseconds(ms);
  }
  return s;
}

RendezvousClient::RendezvousClient(RendezvousSettings settings) : settings_(std::move(settings)) {}

json RendezvousClient::call(const std::string& method, const std::string& what, const json& body,
                            std::chrono::milliseconds wait, bool refusal_is_fatal) {
  const std::string path = proto::path(settings_.worker_id, what);
  const auto give_up = Steady::now() + settings_.patience;
  auto pause = 50ms;
  for (;;) {
    // The request's own deadline covers the server's long-poll and then some.
    const auto r = report::http_request(settings_.target, method, path, settings_.token, body.dump(), wait + 10s);
    if (r.status == 200) {
      json j = json::parse(r.body, nullptr, false);
      if (j.is_discarded()) throw CommError("musterd's rendezvous answered " + what + " with something not JSON: " + r.body);
      return j;
    }
    if (r.status != 0 && r.status < 500) {
      const std::string text = "musterd's rendezvous refused " + what + " of worker " + settings_.worker_id + " (HTTP " +
                               std::to_string(r.status) + "): " + message_of(r);
      if (r.status == 409 && !refusal_is_fatal) throw CommError(text);
      throw Error(text);
    }
    if (Steady::now() + pause >= give_up) {
      throw CommError("musterd's rendezvous at " + settings_.url + " did not answer " + what + " for " +
                      std::to_string(settings_.patience.count() / 1000) + " s: " +
                      (r.status ? "HTTP " + std::to_string(r.status) + " " + message_of(r) : r.error));
    }
    std::this_thread::sleep_for(pause);
    pause = std::min<std::chrono::milliseconds>(pause * 2, 1s);
  }
}

proto::Assignment RendezvousClient::join(int last_generation) {
  const auto deadline = Steady::now() + settings_.timeout;
  for (;;) {
    try {
      auto a = proto::assignment_from_json(call("POST", "join", proto::to_json(proto::JoinRequest{last_generation}),
                                                std::chrono::milliseconds(proto::kMaxWaitMs), true));
      if (a.ready) return a;
    } catch (const clusterspec::SpecError& e) {
      throw CommError(std::string("musterd's join answer is malformed: ") + e.what());
    }
    if (Steady::now() >= deadline) {
      throw TimeoutError("no generation of cluster " + settings_.cluster_id + "'s world formed with worker " +
                         settings_.worker_id + " within " + std::to_string(settings_.timeout.count() / 1000) +
                         " s (" + proto::kEnvRendezvousTimeoutMs + ")");
    }
  }
}

proto::WorldView RendezvousClient::world(int generation, std::chrono::milliseconds wait) {
  wait = std::clamp<std::chrono::milliseconds>(wait, 0ms, std::chrono::milliseconds(proto::kMaxWaitMs));
  const std::string what = "world?generation=" + std::to_string(generation) + "&wait_ms=" + std::to_string(wait.count());
  try {
    return proto::world_view_from_json(call("GET", what, json::object(), wait, false));
  } catch (const clusterspec::SpecError& e) {
    throw CommError(std::string("musterd's world answer is malformed: ") + e.what());
  }
}

void RendezvousClient::report(const proto::Report& report) {
  call("POST", "report", proto::to_json(report), 0ms, false);
}

void RendezvousClient::set(int generation, const std::string& key, const std::string& value) {
  call("POST", "kv/set", proto::to_json(proto::KvSet{generation, key, value}), 0ms, false);
}

proto::KvValues RendezvousClient::get(int generation, const std::vector<std::string>& keys,
                                      std::chrono::milliseconds wait) {
  proto::KvGet g{generation, keys, static_cast<int>(std::min<int64_t>(wait.count(), proto::kMaxWaitMs))};
  try {
    return proto::kv_values_from_json(call("POST", "kv/get", proto::to_json(g), std::chrono::milliseconds(g.timeout_ms), false));
  } catch (const clusterspec::SpecError& e) {
    throw CommError(std::string("musterd's kv/get answer is malformed: ") + e.what());
  }
}

MusterdKvStore::MusterdKvStore(RendezvousSettings settings, int generation)
    : client_(std::move(settings)), generation_(generation) {}

void MusterdKvStore::set(const std::string& key, const std::string& value) { client_.set(generation_, key, value); }

std::vector<std::string> MusterdKvStore::get(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) {
  const auto deadline = Steady::now() + timeout;
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Steady::now());
    auto v = client_.get(generation_, keys, std::max<std::chrono::milliseconds>(left, 0ms));
    if (v.ready) {
      if (v.values.size() != keys.size()) {
        throw CommError("musterd answered " + std::to_string(v.values.size()) + " values for " +
                        std::to_string(keys.size()) + " keys");
      }
      return v.values;
    }
    if (Steady::now() >= deadline) {
      std::string missing;
      for (const auto& k : v.missing) missing += (missing.empty() ? "" : ", ") + k;
      throw TimeoutError("generation " + std::to_string(generation_) + " of cluster " + client_.settings().cluster_id +
                         ": keys still missing after " + std::to_string(timeout.count()) + " ms: " + missing);
    }
  }
}

}  // namespace muster::runtime::comm::musterd

namespace muster::runtime::comm::musterd {

namespace {
std::mutex g_mu;
proto::Assignment g_last;  // guarded by g_mu
}  // namespace

std::optional<Joined> join_from_env() {
  auto settings = RendezvousSettings::from_env();
  if (!settings) return std::nullopt;
  int last = 0;
  {
    std::lock_guard<std::mutex> lock(g_mu);
    last = g_last.generation;
  }
  RendezvousClient client(*settings);
  proto::Assignment a = client.join(last);
  {
    std::lock_guard<std::mutex> lock(g_mu);
    g_last = a;
  }
  Joined j;
  j.assignment = a;
  j.store = std::make_shared<MusterdKvStore>(*settings, a.generation);
  j.settings = *settings;
  return j;
}

proto::Assignment last_assignment() {
  std::lock_guard<std::mutex> lock(g_mu);
  return g_last;
}

}  // namespace muster::runtime::comm::musterd
