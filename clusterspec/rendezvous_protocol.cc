#include "clusterspec/rendezvous_protocol.h"

#include "api/base/base64.h"
#include "clusterspec/spec_error.h"

namespace muster::clusterspec::rendezvous {

using nlohmann::json;

namespace {

[[noreturn]] void fail(const std::string& field, const std::string& what) {
  throw SpecError("rendezvous: " + field + " " + what);
}

const json& object(const json& j) {
  if (!j.is_object()) throw SpecError("rendezvous: the body must be a JSON object");
  return j;
}

int integer(const json& j, const char* field, int lo, int hi, std::optional<int> fallback = std::nullopt) {
  auto it = j.find(field);
  if (it == j.end() || it->is_null()) {
    if (fallback) return *fallback;
    fail(field, "is required");
  }
  if (!it->is_number_integer()) fail(field, "must be an integer");
  const auto v = it->get<long long>();
  if (v < lo || v > hi) fail(field, "must be in " + std::to_string(lo) + ".." + std::to_string(hi) + ", got " + std::to_string(v));
  return static_cast<int>(v);
}

bool boolean(const json& j, const char* field, std::optional<bool> fallback = std::nullopt) {
  auto it = j.find(field);
  if (it == j.end() || it->is_null()) {
    if (fallback) return *fallback;
    fail(field, "is required");
  }
  if (!it->is_boolean()) fail(field, "must be true or false");
  return it->get<bool>();
}

std::string text(const json& j, const char* field) {
  auto it = j.find(field);
  if (it == j.end() || !it->is_string()) fail(field, "must be a string");
  return it->get<std::string>();
}

std::string key_text(const json& v, const std::string& field) {
  if (!v.is_string()) fail(field, "must be a string");
  std::string k = v.get<std::string>();
  if (k.empty() || k.size() > kMaxKeyBytes) fail(field, "must be 1.." + std::to_string(kMaxKeyBytes) + " bytes");
  return k;
}

std::vector<std::string> strings(const json& j, const char* field, bool base64) {
  auto it = j.find(field);
  if (it == j.end() || !it->is_array()) fail(field, "must be a list of strings");
  std::vector<std::string> out;
  for (size_t i = 0; i < it->size(); ++i) {
    const std::string name = std::string(field) + "[" + std::to_string(i) + "]";
    if (!(*it)[i].is_string()) fail(name, "must be a string");
    if (!base64) {
      out.push_back(key_text((*it)[i], name));
      continue;
    }
    auto bytes = base::base64_decode((*it)[i].get<std::string>());
    if (!bytes) fail(name, "must be base64");
    out.push_back(std::move(*bytes));
  }
  return out;
}

json encoded(const std::vector<std::string>& values) {
  json out = json::array();
  for (const auto& v : values) out.push_back(base::base64_encode(v));
  return out;
}

constexpr int kMaxGeneration = 1 << 30;

}  // namespace

std::string path(const std::string& worker_id, const std::string& call) {
  return "/api/v1/agent/workers/" + worker_id + "/rendezvous/" + call;
}

json to_json(const JoinRequest& r) { return {{"generation", r.generation}}; }

JoinRequest join_request_from_json(const json& j) {
  JoinRequest r;
  r.generation = integer(object(j), "generation", 0, kMaxGeneration, 0);
  return r;
}

json to_json(const Assignment& a) {
  if (!a.ready) return {{"ready", false}};
  return {{"ready", true}, {"generation", a.generation}, {"rank", a.rank}, {"size", a.size}, {"prefix", a.prefix}};
}

Assignment assignment_from_json(const json& j) {
  Assignment a;
  a.ready = boolean(object(j), "ready");
  if (!a.ready) return a;
  a.generation = integer(j, "generation", 1, kMaxGeneration);
  a.size = integer(j, "size", 1, 1 << 20);
  a.rank = integer(j, "rank", 0, a.size - 1);
  a.prefix = text(j, "prefix");
  return a;
}

json to_json(const KvSet& s) {
  return {{"generation", s.generation}, {"key", s.key}, {"value", base::base64_encode(s.value)}};
}

KvSet kv_set_from_json(const json& j) {
  KvSet s;
  s.generation = integer(object(j), "generation", 1, kMaxGeneration);
  if (!j.contains("key")) fail("key", "is required");
  s.key = key_text(j["key"], "key");
  auto bytes = base::base64_decode(text(j, "value"));
  if (!bytes) fail("value", "must be base64");
  s.value = std::move(*bytes);
  return s;
}

json to_json(const KvGet& g) { return {{"generation", g.generation}, {"keys", g.keys}, {"timeout_ms", g.timeout_ms}}; }

KvGet kv_get_from_json(const json& j) {
  KvGet g;
  g.generation = integer(object(j), "generation", 1, kMaxGeneration);
  g.keys = strings(j, "keys", false);
  if (g.keys.empty() || g.keys.size() > kMaxKeysPerGet) {
    fail("keys", "must hold 1.." + std::to_string(kMaxKeysPerGet) + " keys");
  }
  g.timeout_ms = integer(j, "timeout_ms", 0, 24 * 3600 * 1000, 0);
  return g;
}

json to_json(const KvValues& v) {
  if (v.ready) return {{"ready", true}, {"values", encoded(v.values)}};
  return {{"ready", false}, {"missing", v.missing}};
}

KvValues kv_values_from_json(const json& j) {
  KvValues v;
  v.ready = boolean(object(j), "ready");
  if (v.ready) {
    v.values = strings(j, "values", true);
  } else {
    v.missing = strings(j, "missing", false);
  }
  return v;
}

json to_json(const WorldView& v) {
  return {{"generation", v.generation}, {"changed", v.changed}, {"size", v.size}, {"waiting", v.waiting}};
}

WorldView world_view_from_json(const json& j) {
  WorldView v;
  v.generation = integer(object(j), "generation", 0, kMaxGeneration);
  v.changed = boolean(j, "changed");
  v.size = integer(j, "size", 0, 1 << 20);
  v.waiting = integer(j, "waiting", 0, 1 << 20);
  return v;
}

json to_json(const Report& r) {
  return {{"generation", r.generation}, {"batches_redone", r.batches_redone}, {"resumed", r.resumed}};
}

Report report_from_json(const json& j) {
  Report r;
  r.generation = integer(object(j), "generation", 1, kMaxGeneration);
  r.batches_redone = integer(j, "batches_redone", 0, 1 << 30, 0);
  r.resumed = boolean(j, "resumed", true);
  return r;
}

}  // namespace muster::clusterspec::rendezvous
