// Gang start: a cluster's pods are created all together, only once all of
// them fit on the nodes' free allocatable resources, so a cluster too big to
// fit waits (no pod exists) instead of running half.
//
// The room: every Ready, schedulable node's status.allocatable minus the
// requests of the pods bound to it that have not ended (every namespace's:
// the backend lists them cluster-wide, a ClusterRole's `list pods`). A group
// fits when first-fit-decreasing (by cpu, then memory) places each pod on a
// node with room for its cpu, memory and GPUs. The default scheduler then
// places the pods; it sees the same room, so it binds them all (a pod
// created elsewhere in between can still win a node: the loser stays
// Pending with the scheduler's reason, or is refused by the kubelet and
// reported failed, never silently half-running).
#pragma once

#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace muster::workers::kubernetes {

struct Resources {
  long long millicpu = 0;
  long long memory = 0;  // bytes
  long long gpus = 0;
  Resources& operator+=(const Resources& o) {
    millicpu += o.millicpu;
    memory += o.memory;
    gpus += o.gpus;
    return *this;
  }
};

// A Kubernetes quantity ("500m", "2", "1.5", "3916484Ki", "1Gi", "1e3", "2M")
// in thousandths (cpu: millicores) or units (memory, bytes); nullopt when
// it is not one.
std::optional<long long> parse_milli_quantity(const std::string& q);
std::optional<long long> parse_quantity(const std::string& q);

// What a pod asks for (the sum of its containers' requests; limits where no
// request is given, as the API server defaults them).
Resources pod_requests(const nlohmann::json& pod);

struct NodeRoom {
  std::string name;
  Resources free;
};

// The free room of each Ready, schedulable node (`nodes` and `pods` are the
// API's NodeList and PodList objects).
std::vector<NodeRoom> free_room(const nlohmann::json& nodes, const nlohmann::json& pods);

// True when every one of `asks` finds a node (first-fit decreasing).
bool fits(std::vector<Resources> asks, std::vector<NodeRoom> room);

// "waiting for the whole group of 4 to fit: 4 CPUs and 8 GiB requested, 2
// CPUs and 16 GiB free on 1 node" (the totals; placement may still refuse
// when the totals fit).
std::string describe_wait(const std::vector<Resources>& asks, const std::vector<NodeRoom>& room);

}  // namespace muster::workers::kubernetes
