#include "workers/container/net_resources.h"

#include <cstdint>
#include <cstdio>

namespace muster::workers::container {

std::string bridge_mac(const std::string& bridge_name) {
  // FNV-1a of the name: stable across restarts, distinct per bridge.
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : bridge_name) h = (h ^ c) * 1099511628211ull;
  char mac[18];
  std::snprintf(mac, sizeof mac, "02:%02x:%02x:%02x:%02x:%02x", unsigned(h >> 32) & 0xff, unsigned(h >> 24) & 0xff,
                unsigned(h >> 16) & 0xff, unsigned(h >> 8) & 0xff, unsigned(h) & 0xff);
  return mac;
}

api::Status run_ip(Executor& exec, const std::vector<std::string>& args) {
  std::vector<std::string> argv{kIpTool};
  argv.insert(argv.end(), args.begin(), args.end());
  CommandResult r = exec.run(argv);
  if (r.exit_code == 0) return api::Status::ok();
  std::string cmd;
  for (const auto& a : argv) cmd += (cmd.empty() ? "" : " ") + a;
  while (!r.output.empty() && (r.output.back() == '\n' || r.output.back() == ' ')) r.output.pop_back();
  return api::internal_error("`" + cmd + "` failed (exit " + std::to_string(r.exit_code) + "): " + r.output);
}

NetResource& NetResource::operator=(NetResource&& other) noexcept {
  if (this != &other) {
    reset();
    exec_ = other.exec_;
    ledger_ = other.ledger_;
    kind_ = other.kind_;
    name_ = std::move(other.name_);
    other.exec_ = nullptr;
    other.ledger_ = nullptr;
  }
  return *this;
}

void NetResource::reset() {
  if (exec_ == nullptr) return;
  // Best effort: a link may already be gone with its namespace.
  if (kind_ == ResourceKind::kNetns) {
    (void)run_ip(*exec_, {"netns", "delete", name_});
  } else {
    (void)run_ip(*exec_, {"link", "delete", name_});
  }
  if (ledger_ != nullptr) ledger_->remove(kind_, name_);
  exec_ = nullptr;
  ledger_ = nullptr;
}

api::Result<Bridge> Bridge::create(Executor& exec, Ledger* ledger, const std::string& name,
                                   const std::string& address_cidr) {
  if (ledger) ledger->add(ResourceKind::kBridge, name);
  Bridge bridge(&exec, ledger, ResourceKind::kBridge, name);
  if (auto s = run_ip(exec, {"link", "add", name, "type", "bridge"}); !s) {
    if (ledger) ledger->remove(ResourceKind::kBridge, name);
    bridge.disown();  // it is not ours: never delete what we did not create
    return s;
  }
  // A bridge without an address of its own takes the lowest MAC among its
  // ports and changes it as containers come and go; containers that cached
  // the old one then send the daemon frames no port accepts, and their
  // connections to it stall. A fixed address keeps the gateway where it was.
  if (auto s = run_ip(exec, {"link", "set", name, "address", bridge_mac(name)}); !s) return s;
  if (auto s = run_ip(exec, {"addr", "add", address_cidr, "dev", name}); !s) return s;
  if (auto s = run_ip(exec, {"link", "set", name, "up"}); !s) return s;
  return bridge;
}

api::Result<NetNamespace> NetNamespace::create(Executor& exec, Ledger* ledger, const std::string& name) {
  if (ledger) ledger->add(ResourceKind::kNetns, name);
  NetNamespace ns(&exec, ledger, ResourceKind::kNetns, name);
  if (auto s = run_ip(exec, {"netns", "add", name}); !s) {
    if (ledger) ledger->remove(ResourceKind::kNetns, name);
    ns.disown();
    return s;
  }
  if (auto s = run_ip(exec, {"-n", name, "link", "set", "lo", "up"}); !s) return s;
  return ns;
}

api::Result<VethPair> VethPair::create(Executor& exec, Ledger* ledger, const VethOptions& o) {
  std::string peer = o.host_name + "p";
  if (ledger) ledger->add(ResourceKind::kLink, o.host_name);
  VethPair pair(&exec, ledger, ResourceKind::kLink, o.host_name);
  if (auto s = run_ip(exec, {"link", "add", o.host_name, "type", "veth", "peer", "name", peer, "netns", o.netns});
      !s) {
    if (ledger) ledger->remove(ResourceKind::kLink, o.host_name);
    pair.disown();
    return s;
  }
  if (auto s = run_ip(exec, {"link", "set", o.host_name, "master", o.bridge, "up"}); !s) return s;
  if (auto s = run_ip(exec, {"-n", o.netns, "link", "set", peer, "name", o.inside_name}); !s) return s;
  if (auto s = run_ip(exec, {"-n", o.netns, "addr", "add", o.address_cidr, "dev", o.inside_name}); !s) return s;
  if (auto s = run_ip(exec, {"-n", o.netns, "link", "set", o.inside_name, "up"}); !s) return s;
  if (auto s = run_ip(exec, {"-n", o.netns, "route", "add", "default", "via", o.gateway}); !s) return s;
  return pair;
}

}  // namespace muster::workers::container
