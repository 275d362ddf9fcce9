#include "runtime/distributed/broadcast.h"

#include <string>

#include "runtime/error.h"

namespace muster::runtime::distributed {

void broadcast_buffers(Collectives& coll, const std::vector<GradientRef>& buffers, int root,
                       std::size_t chunk_bytes) {
  if (root < 0 || root >= coll.size()) {
    throw InvalidArgument("broadcast root " + std::to_string(root) + " is not a rank (world size " +
                          std::to_string(coll.size()) + ")");
  }
  std::vector<std::size_t> sizes;
  for (const auto& b : buffers) sizes.push_back(b.size);
  for (const auto& plan : plan_buckets(sizes, chunk_bytes)) {
    if (plan.elements == 0) continue;
    FusionBucket bucket(plan, buffers, /*fp16=*/false);
    if (coll.rank() == root) bucket.pack();
    coll.broadcast(bucket.wire_data(), bucket.wire_count(), DataType::kFloat32, root);
    if (coll.rank() != root) bucket.unpack();
  }
}

}  // namespace muster::runtime::distributed
