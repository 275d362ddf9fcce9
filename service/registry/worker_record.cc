#include "service/registry/worker_record.h"

namespace muster::service {

using nlohmann::json;

json record_to_json(const WorkerRecord& r) {
  return {{"worker", api::to_json(r.worker)},
          {"agent_token", r.agent_token},
          {"hold", r.hold},
          {"reserve_port", r.reserve_port},
          {"release", r.release ? api::to_json(*r.release) : json(nullptr)},
          {"log_path", r.log_path.string()},
          {"process", r.process}};
}

api::Result<WorkerRecord> record_from_json(const json& j, uint64_t seq) {
  if (!j.is_object() || !j.contains("worker")) return api::invalid_argument("the row has no \"worker\" object");
  auto worker = api::worker_from_json(j["worker"]);
  if (!worker) return worker.status();
  WorkerRecord r;
  r.worker = std::move(worker).value();
  r.seq = seq;
  try {
    r.agent_token = j.value("agent_token", "");
    r.hold = j.value("hold", false);
    r.reserve_port = j.value("reserve_port", false);
    if (j.contains("release") && j["release"].is_object()) {
      auto release = api::release_from_json(j["release"]);
      if (!release) return release.status();
      r.release = std::move(release).value();
    }
    r.log_path = j.value("log_path", "");
    r.process = j.value("process", "");
  } catch (const json::exception& e) {
    return api::invalid_argument(std::string("a field has the wrong type: ") + e.what());
  }
  return r;
}

}  // namespace muster::service
