// SshOptions: the ssh backend's `--backend-opt`s (workers/backend_options.h
// reads their values).
#include <chrono>
#include <cstdlib>
#include <filesystem>

#include "workers/backend_options.h"
#include "workers/ssh/ssh_backend.h"

namespace muster::workers::ssh {
namespace {

bool on_off(const std::string& key, const std::string& value, bool& out, api::Status& error) {
  auto b = bool_option(key, value);
  if (b) out = *b;
  else error = b.status();
  return error.is_ok();
}

bool positive_ms(const std::string& key, const std::string& value, std::chrono::milliseconds& out,
                 api::Status& error) {
  auto v = integer_option(key, value, 1, 24LL * 3600 * 1000, "a positive number of milliseconds");
  if (v) out = std::chrono::milliseconds(*v);
  else error = v.status();
  return error.is_ok();
}

}  // namespace

api::Result<SshOptions> SshOptions::from_map(const std::map<std::string, std::string>& opts) {
  SshOptions o;
  o.mpi_ssh = true;  // the daemon's case
  api::Status error;
  for (const auto& [key, value] : opts) {
    if (key == "inventory") o.inventory = value;
    else if (key == "known_hosts") o.known_hosts = value;
    else if (key == "accept_new") on_off(key, value, o.accept_new, error);
    else if (key == "agent_path") o.agent_path = value;
    else if (key == "copy_agent") on_off(key, value, o.copy_agent, error);
    else if (key == "master") o.master_address = value;
    else if (key == "connect_timeout_ms") positive_ms(key, value, o.connect_timeout, error);
    else if (key == "dead_after_ms") positive_ms(key, value, o.dead_after, error);
    else if (key == "mpi_ssh") on_off(key, value, o.mpi_ssh, error);
    else
      error = api::invalid_argument("unknown ssh backend option '" + key +
                                        "' (known: inventory, known_hosts, accept_new, agent_path, copy_agent, "
                                        "master, connect_timeout_ms, dead_after_ms, mpi_ssh)",
                                    key);
    if (!error.is_ok()) return error;
  }
  if (o.inventory.empty())
    return api::invalid_argument("the ssh backend needs --backend-opt inventory=FILE (one host a line: "
                                 "ADDRESS port=22 user=U identity=KEY slots=N)",
                                 "inventory");
  if (o.known_hosts.empty()) {
    const char* home = std::getenv("HOME");
    o.known_hosts = std::filesystem::path(home ? home : "/root") / ".ssh" / "known_hosts";
  }
  return o;
}

ConnectOptions SshOptions::connect_options() const {
  ConnectOptions c;
  c.known_hosts = known_hosts;
  c.accept_new = accept_new;
  c.timeout = connect_timeout;
  c.dead_after = dead_after;
  return c;
}

}  // namespace muster::workers::ssh
