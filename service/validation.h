// Validation: JSON request bodies -> typed api:: requests, or the Status
// naming the bad field, read with the one body reader (api/body_reader.h)
// that the cluster body uses too. Nothing here touches the registry or a backend, so a
// rejected request has launched nothing.
//
// Rules (api/openapi.yaml documents them for callers):
// - unknown fields are rejected (a typo like "memroy" must not be ignored);
// - n is an integer in 1..max_workers; cpu and memory are finite numbers > 0;
//   nvidia_gpu is an integer >= 0;
// - kernel is python3, bash or executable; python, when given, is the
//   absolute path of an executable file (api::check_python);
// - script or code; both: the script runs and the request carries a warning
//   (cdsw's rule); code needs kernel python3 or bash;
// - script resolves (canonically, following symlinks) to an existing regular
//   file inside the project directory: no absolute path, no `..` escape, no
//   symlink pointing out; kernel executable needs the file to be executable;
// - env names match [A-Za-z_][A-Za-z0-9_]*, values are strings; args strings;
// - no string may contain a NUL character;
// - cpu or memory beyond what the workers' host has (when it is the daemon's
//   own) is accepted with a warning (the request's `warnings`).
#pragma once

#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "api/status.h"
#include "api/worker.h"
#include "service/admission.h"

namespace muster::service {

// HostCapacity, host_capacity(): service/admission.h (the host of the local
// and container backends' workers; asks beyond it get a warning here).
// One warning per per-worker ask (cpu, memory in GiB) beyond `host`; none
// without a host (remote backends: their hosts are not this one).
std::vector<std::string> resource_warnings(double cpu, double memory_gb, const std::optional<HostCapacity>& host);

struct ValidationOptions {
  int max_workers = 64;
  std::filesystem::path project_dir;  // canonical
  std::optional<HostCapacity> host{};  // the workers' host, when it is this one (warnings)
};

api::Result<api::LaunchRequest> parse_launch_request(const nlohmann::json& body, const ValidationOptions& options);
api::Result<api::AwaitRequest> parse_await_request(const nlohmann::json& body);
api::Result<api::StopRequest> parse_stop_request(const nlohmann::json& body);

// The script inside the project directory: resolve_script (script_path.h).

}  // namespace muster::service
