// FakeApi: a tiny Kubernetes API server behind the backend's ApiClient seam
// (workers/kubernetes/api_client.h), for the backend's unit tests
// (kubernetes_backend_test, backend_contract_test). It records every request
// (`calls`), keeps Secrets and Pods by name (a created pod is Pending, with
// a uid and a resourceVersion), lists them, and answers streams (watches,
// logs) with what the test queued, one entry per stream() call. Nodes come
// from `nodes`; `other_pods` are other daemons' pods (a gang's room);
// `refuse` refuses the requests it matches with a 422, `refuse_pods_of` the
// pod creations of those workers.
#pragma once

#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "workers/kubernetes/api_client.h"

namespace muster::testing {

struct Call {
  std::string method, path, body;
};

class FakeApi final : public workers::kubernetes::ApiClient {
 public:
  using json = nlohmann::json;
  using HttpReply = workers::kubernetes::HttpReply;

  api::Result<HttpReply> request(const std::string& method, const std::string& path, const std::string& body,
                                 const std::string&) override {
    std::lock_guard<std::mutex> lock(mu);
    calls.push_back({method, path, body});
    if (refuse && refuse(method, path)) return HttpReply{422, R"({"kind":"Status","message":"refused by the test"})"};
    const std::string ns = "/api/v1/namespaces/ml/";
    if (method == "POST" && path == ns + "secrets") return HttpReply{201, body};
    if (method == "POST" && path == ns + "pods") {
      json pod = json::parse(body);
      if (refuse_pods_of.count(pod.value("/metadata/labels/muster.io~1worker"_json_pointer, std::string()))) {
        return HttpReply{403, R"({"kind":"Status","message":"pods is forbidden: exceeded quota"})"};
      }
      pod["metadata"]["uid"] = "uid-" + pod["metadata"]["name"].get<std::string>();
      pod["metadata"]["resourceVersion"] = std::to_string(++rv);
      pod["status"] = {{"phase", "Pending"}};
      pods[pod["metadata"]["name"]] = pod;
      return HttpReply{201, pod.dump()};
    }
    if (method == "DELETE") {
      const std::string name = path.substr(path.rfind('/') + 1, path.find('?') == std::string::npos
                                                                     ? std::string::npos
                                                                     : path.find('?') - path.rfind('/') - 1);
      const bool had = pods.erase(name) > 0;
      return HttpReply{had || path.find("/secrets/") != std::string::npos ? 200 : 404, "{}"};
    }
    if (method == "GET" && path == "/api/v1/nodes") return HttpReply{200, nodes.dump()};
    if (method == "GET" && path.rfind(ns + "pods?", 0) == 0) {
      ++lists;
      json items = json::array();
      for (const auto& [name, pod] : pods) items.push_back(pod);
      for (const auto& p : other_pods) items.push_back(p);
      return HttpReply{200, json{{"kind", "PodList"}, {"metadata", {{"resourceVersion", std::to_string(rv)}}},
                                 {"items", items}}
                                .dump()};
    }
    if (method == "GET" && path.rfind("/api/v1/pods?", 0) == 0) {
      json items = json::array();
      for (const auto& [name, pod] : pods) items.push_back(pod);
      for (const auto& p : other_pods) items.push_back(p);
      return HttpReply{200, json{{"items", items}}.dump()};
    }
    return HttpReply{404, "{}"};
  }

  api::Status stream(const std::string& path, const std::function<bool(std::string_view)>& on_chunk) override {
    std::deque<std::string> chunks;
    {
      std::lock_guard<std::mutex> lock(mu);
      streams.push_back(path);
      if (!queued.empty()) {
        chunks = std::move(queued.front());
        queued.pop_front();
      }
    }
    for (const auto& c : chunks) {
      if (!on_chunk(c)) break;
    }
    return api::Status::ok();
  }

  std::vector<Call> calls_of(const std::string& method) {
    std::lock_guard<std::mutex> lock(mu);
    std::vector<Call> out;
    for (const auto& c : calls) {
      if (c.method == method) out.push_back(c);
    }
    return out;
  }

  std::mutex mu;
  std::vector<Call> calls;
  std::vector<std::string> streams;
  std::deque<std::deque<std::string>> queued;  // one per stream() call
  std::map<std::string, json> pods;
  std::vector<json> other_pods;  // other daemons' or namespaces' pods (the gang's room)
  json nodes = json{{"items", json::array()}};
  std::function<bool(const std::string&, const std::string&)> refuse;
  std::set<std::string> refuse_pods_of;  // worker ids: their pod's POST is refused (403)
  int rv = 100;
  int lists = 0;
};

}  // namespace muster::testing
