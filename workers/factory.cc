#include "muster/workers/factory.h"

#include "muster/workers/local/local_backend.h"

namespace muster::workers {

api::Result<std::unique_ptr<Backend>> create_backend(const BackendOptions& options) {
  if (options.name == "local") {
    local::LocalBackendOptions local;
    for (const auto& [key, value] : options.options) {
      if (key == "stop_on_shutdown") {
        local.stop_on_shutdown = value == "1" || value == "true";
      } else {
        return api::invalid_argument("unknown --backend-opt '" + key + "' for the local backend", "backend-opt");
      }
    }
    return std::unique_ptr<Backend>(std::make_unique<local::LocalBackend>(local));
  }
  return api::invalid_argument("unknown backend '" + options.name + "' (known: local)", "backend");
}

}  // namespace muster::workers
