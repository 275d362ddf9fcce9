// Host: one machine reached over SSH, as the ssh backend's inventory lists
// it and as the container backend's sshd serves it.
#pragma once

#include <filesystem>
#include <string>

namespace muster::workers::remote {

struct Host {
  std::string address;
  int port = 22;
  std::string user;
  std::filesystem::path identity_file;
  int slots = 1;

  std::string label() const { return user + "@" + address + ":" + std::to_string(port); }
};

}  // namespace muster::workers::remote
