// Move-only owners of the kernel objects a container is made of: a bridge, a
// network namespace, a veth pair. Each is created by its static create() (which
// writes it into the Ledger first) and deleted by its destructor (which then
// strikes it from the Ledger). All commands go through the Executor as argv
// vectors for `ip`.
#pragma once

#include <string>

#include "api/status.h"
#include "workers/container/executor.h"
#include "workers/container/ledger.h"

namespace muster::workers::container {

inline constexpr const char* kIpTool = "/usr/sbin/ip";

// A base for the three types: holds the name and deletes it once.
class NetResource {
 public:
  NetResource() = default;
  NetResource(const NetResource&) = delete;
  NetResource& operator=(const NetResource&) = delete;
  NetResource(NetResource&& other) noexcept { *this = std::move(other); }
  NetResource& operator=(NetResource&& other) noexcept;
  ~NetResource() { reset(); }

  const std::string& name() const { return name_; }
  bool valid() const { return exec_ != nullptr; }
  // Deletes the resource now (idempotent).
  void reset();

 protected:
  // Forget the resource without deleting it (it was never ours).
  void disown() { exec_ = nullptr; ledger_ = nullptr; }

  NetResource(Executor* exec, Ledger* ledger, ResourceKind kind, std::string name)
      : exec_(exec), ledger_(ledger), kind_(kind), name_(std::move(name)) {}

 private:
  Executor* exec_ = nullptr;
  Ledger* ledger_ = nullptr;
  ResourceKind kind_ = ResourceKind::kLink;
  std::string name_;
};

// A Linux bridge with the given address (e.g. 10.213.0.1/24), up.
class Bridge : public NetResource {
 public:
  Bridge() = default;
  static api::Result<Bridge> create(Executor& exec, Ledger* ledger, const std::string& name,
                                    const std::string& address_cidr);
 private:
  using NetResource::NetResource;
};

// A named network namespace (/run/netns/NAME) with its loopback up.
class NetNamespace : public NetResource {
 public:
  NetNamespace() = default;
  static api::Result<NetNamespace> create(Executor& exec, Ledger* ledger, const std::string& name);
 private:
  using NetResource::NetResource;
};

struct VethOptions {
  std::string host_name;    // the end that stays on the host, enslaved to the bridge
  std::string bridge;
  std::string netns;        // where the other end goes, renamed to `inside_name`
  std::string inside_name = "eth0";
  std::string address_cidr; // the container's address, e.g. 10.213.0.2/24
  std::string gateway;      // default route inside (the bridge address)
};

// A veth pair: one end on the bridge, the other inside the namespace with the
// container's address. Deleting the host end deletes both.
class VethPair : public NetResource {
 public:
  VethPair() = default;
  static api::Result<VethPair> create(Executor& exec, Ledger* ledger, const VethOptions& options);
 private:
  using NetResource::NetResource;
};

// The fixed, locally administered MAC address given to the bridge NAME
// ("02:..."), derived from the name.
std::string bridge_mac(const std::string& bridge_name);

// Runs `ip args...`; a non-zero exit becomes a Status quoting the output.
api::Status run_ip(Executor& exec, const std::vector<std::string>& args);

}  // namespace muster::workers::container
