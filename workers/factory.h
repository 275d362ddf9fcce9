// create_backend: the one place a backend is chosen by name (musterd
// --backend). musterd creates the backend BEFORE its HTTP listener starts,
// so a backend that must set up networking (a container bridge) has done it
// by the time workers can call in; the agents' MUSTER_URL is built from
// backend->master_address() and the listen port (service/registry/launch.cc).
//
// Adding a backend (container/, ssh/): one `if (options.name == ...)` case in
// factory.cc, reading its settings from `options.options`, which musterd
// fills from repeatable `--backend-opt key=value` flags.
//
// register_backend() adds a backend defined outside the product under a
// name of its own, before musterd starts: bench/fleet's backend that starts
// nothing is one. musterd itself registers none.
#pragma once

#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <string>

#include "api/status.h"
#include "workers/backend.h"
#include "workers/mpi_hosts.h"

namespace muster::workers {

struct BackendOptions {
  std::string name = "local";
  std::filesystem::path state_dir;                // the daemon's --state-dir
  std::map<std::string, std::string> options;     // --backend-opt key=value
};

// invalid_argument (field "backend") for an unknown name or a bad option.
api::Result<std::unique_ptr<Backend>> create_backend(const BackendOptions& options);

// A backend `create_backend` makes for `name` (not one of the built-in
// names), from the same options. Not thread-safe: call before musterd starts.
using BackendMaker = std::function<api::Result<std::unique_ptr<Backend>>(const BackendOptions&)>;
void register_backend(const std::string& name, BackendMaker make);

// How the cluster side's mpirun reaches `backend`'s hosts (mpi_hosts.h),
// handed explicitly to the cluster manager: the backend itself when it
// implements MpiHosts (container, ssh, slurm), else null (workers on the
// daemon's host: mpirun's defaults do). Borrowed from `backend`.
MpiHosts* mpi_hosts_of(Backend& backend);

}  // namespace muster::workers
