#include "workers/factory.h"

#include "api/base/settings.h"

#include "workers/local/local_backend.h"
#include "workers/container/container_backend.h"
#include "workers/ssh/ssh_backend.h"
#include "workers/slurm/slurm_backend.h"
#include "workers/kubernetes/kubernetes_backend.h"

namespace muster::workers {

namespace {

std::map<std::string, BackendMaker>& registered_backends() {
  static std::map<std::string, BackendMaker> makers;
  return makers;
}

}  // namespace

void register_backend(const std::string& name, BackendMaker make) { registered_backends()[name] = std::move(make); }

api::Result<std::unique_ptr<Backend>> create_backend(const BackendOptions& options) {
  if (options.name == "local") {
    local::LocalBackendOptions local;
    const auto settings = base::Settings::of(options.options, "--backend-opt");
    const auto stop = settings.boolean("stop_on_shutdown", local.stop_on_shutdown);
    const auto cgroups = settings.boolean("cgroups", local.cgroups);
    for (const auto* b : {&stop, &cgroups}) {
      if (!b->ok()) return api::invalid_argument(b->error, "backend-opt");
    }
    if (const auto unknown = settings.unread(); !unknown.empty()) {
      return api::invalid_argument("unknown --backend-opt '" + unknown.front() +
                                       "' for the local backend (known: stop_on_shutdown, cgroups)",
                                   "backend-opt");
    }
    local.stop_on_shutdown = stop.value;
    local.cgroups = cgroups.value;
    return std::unique_ptr<Backend>(std::make_unique<local::LocalBackend>(local));
  }
  if (options.name == "container") {
    auto copts = container::ContainerOptions::from_map(options.state_dir, options.options);
    if (!copts) return copts.status();
    auto b = container::ContainerBackend::create(copts.value(), container::make_system_executor());
    if (!b) return b.status();
    return std::unique_ptr<Backend>(std::move(b.value()));
  }
  if (options.name == "ssh") {
    auto sopts = ssh::SshOptions::from_map(options.options);
    if (!sopts) return sopts.status();
    auto connector = ssh::make_libssh2_connector(sopts.value().connect_options());
    auto b = ssh::SshBackend::create(std::move(sopts.value()), std::move(connector));
    if (!b) return b.status();
    return std::unique_ptr<Backend>(std::move(b.value()));
  }
  if (options.name == "slurm") {
    auto sopts = slurm::SlurmOptions::from_map(options.state_dir, options.options);
    if (!sopts) return sopts.status();
    auto b = slurm::SlurmBackend::create(std::move(sopts.value()), slurm::make_command_client());
    if (!b) return b.status();
    return std::unique_ptr<Backend>(std::move(b.value()));
  }
  if (options.name == "kubernetes") {
    auto kopts = kubernetes::KubernetesOptions::from_map(options.state_dir, options.options);
    if (!kopts) return kopts.status();
    auto client = kubernetes::make_beast_api_client(kopts.value().connection);
    if (!client) return client.status();
    auto b = kubernetes::KubernetesBackend::create(std::move(kopts.value()), std::move(client.value()));
    if (!b) return b.status();
    return std::unique_ptr<Backend>(std::move(b.value()));
  }
  if (const auto it = registered_backends().find(options.name); it != registered_backends().end()) {
    return it->second(options);
  }
  std::string known = "local, container, ssh, slurm, kubernetes";
  for (const auto& [name, make] : registered_backends()) known += ", " + name;
  return api::invalid_argument("unknown backend '" + options.name + "' (known: " + known + ")", "backend");
}

MpiHosts* mpi_hosts_of(Backend& backend) { return dynamic_cast<MpiHosts*>(&backend); }

}  // namespace muster::workers
