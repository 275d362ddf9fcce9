// Fused broadcast of many float32 buffers (parameters, optimizer state).
//
// Buffers are cut into runs of at most `chunk_bytes` like the gradient
// buckets (fusion_bucket.h); each run is one broadcast, in place when its
// buffers are adjacent in memory, otherwise through a packed copy.
// Collective: every rank passes buffers of the same sizes in the same order.
#pragma once

#include <cstddef>
#include <vector>

#include "runtime/distributed/collectives.h"
#include "runtime/distributed/fusion_bucket.h"

namespace muster::runtime::distributed {

void broadcast_buffers(Collectives& coll, const std::vector<GradientRef>& buffers, int root,
                       std::size_t chunk_bytes);

}  // namespace muster::runtime::distributed
