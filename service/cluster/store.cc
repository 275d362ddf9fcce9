#include "service/cluster/store.h"

namespace muster::service {

api::Result<std::unique_ptr<ClusterStore>> ClusterStore::open(const std::string& path) {
  auto table = Store::open(path, "clusters");
  if (!table) return table.status();
  return std::unique_ptr<ClusterStore>(new ClusterStore(std::move(table).value()));
}

api::Status ClusterStore::put(const std::string& id, uint64_t seq, const nlohmann::json& record) {
  return table_->put({StoredRecord{id, seq, record}});
}

api::Status ClusterStore::remove(const std::string& id) { return table_->remove({id}); }

api::Result<std::vector<nlohmann::json>> ClusterStore::load_all(std::vector<std::string>* skipped) {
  auto rows = table_->load_all(skipped);
  if (!rows) return rows.status();
  std::vector<nlohmann::json> out;
  for (auto& r : rows.value()) {
    if (r.record.is_object()) {
      out.push_back(std::move(r.record));
    } else if (skipped) {
      skipped->push_back(r.id + ": its record is not a JSON object");
    }
  }
  return out;
}

}  // namespace muster::service
