#include "service/cluster_store.h"

namespace muster::service {

api::Result<std::unique_ptr<ClusterStore>> ClusterStore::open(const std::string& path) {
  auto table = Store::open(path, "clusters");
  if (!table) return table.status();
  return std::unique_ptr<ClusterStore>(new ClusterStore(std::move(table).value()));
}

api::Status ClusterStore::put(const std::string& id, uint64_t seq, const nlohmann::json& record) {
  return table_->put({StoredRecord{id, seq, record}});
}

api::Result<std::vector<nlohmann::json>> ClusterStore::load_all() {
  auto rows = table_->load_all();
  if (!rows) return rows.status();
  std::vector<nlohmann::json> out;
  for (auto& r : rows.value()) {
    if (r.record.is_object()) out.push_back(std::move(r.record));
  }
  return out;
}

}  // namespace muster::service
