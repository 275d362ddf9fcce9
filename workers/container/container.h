// ContainerBackend::Container: one worker's container, the backend's private
// state, shared by its translation units (container_backend.cc runs the
// lifecycle, container_build.cc builds one). Not for other callers.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <filesystem>
#include <string>

#include "workers/container/container_backend.h"

namespace muster::workers::container {

// Members are declared in the order they are built, so that destruction
// (reverse order) stops sshd before the link and the namespace go away.
struct ContainerBackend::Container {
  std::string worker_id;
  uint32_t index = 0;
  std::string address;
  std::filesystem::path dir;
  NetNamespace netns;
  VethPair veth;
  SshdProcess sshd;
  pid_t agent_pid = 0;
};

}  // namespace muster::workers::container
