#include "runtime/comm/op_descriptor.h"

#include <map>
#include <sstream>

#include "runtime/dtype.h"

namespace muster::runtime::comm {
namespace {

constexpr uint64_t kFnvOffset = 1469598103934665603ULL;
constexpr uint64_t kFnvPrime = 1099511628211ULL;

uint64_t fnv(uint64_t h, const void* data, std::size_t bytes) {
  const auto* p = static_cast<const unsigned char*>(data);
  for (std::size_t i = 0; i < bytes; ++i) {
    h ^= p[i];
    h *= kFnvPrime;
  }
  return h;
}

// "rank 1" / "ranks 0, 2"
std::string ranks_text(const std::vector<int>& ranks) {
  std::string s = ranks.size() == 1 ? "rank " : "ranks ";
  for (std::size_t i = 0; i < ranks.size(); ++i) {
    if (i) s += ", ";
    s += std::to_string(ranks[i]);
  }
  return s;
}

std::string dtype_text(uint8_t raw) {
  return dtype_valid(raw) ? dtype_name(static_cast<DataType>(raw)) : "dtype #" + std::to_string(raw);
}

std::string reduce_text(uint8_t raw) {
  static const char* names[] = {"none", "sum", "average", "min", "max"};
  return raw < 5 ? names[raw] : "op #" + std::to_string(raw);
}

std::string kind_text(uint8_t raw) { return op_kind_name(static_cast<OpKind>(raw)); }

// Groups ranks by the text of one field; "" when all agree. Groups are listed
// by their lowest rank, so every rank words it alike.
template <typename Text>
std::string field_difference(const std::vector<OpDescriptor>& all, const char* field, Text text) {
  std::map<std::string, std::vector<int>> groups;
  std::vector<std::string> order;
  for (std::size_t r = 0; r < all.size(); ++r) {
    const std::string v = text(all[r]);
    if (!groups.count(v)) order.push_back(v);
    groups[v].push_back(static_cast<int>(r));
  }
  if (groups.size() < 2) return "";
  std::string s;
  for (std::size_t i = 0; i < order.size(); ++i) {
    const auto& ranks = groups[order[i]];
    if (i) s += ", ";
    s += ranks_text(ranks) + (ranks.size() == 1 ? " has " : " have ") + field + " " + order[i];
  }
  return s;
}

}  // namespace

const char* op_kind_name(OpKind kind) {
  switch (kind) {
    case OpKind::kAllreduce: return "allreduce";
    case OpKind::kBroadcast: return "broadcast";
    case OpKind::kAllgather: return "allgather";
    case OpKind::kAllgatherv: return "allgatherv";
    case OpKind::kReduceScatter: return "reducescatter";
    case OpKind::kAlltoall: return "alltoall";
    case OpKind::kBarrier: return "barrier";
    case OpKind::kSplit: return "split";
    case OpKind::kAllocateShared: return "allocate_shared";
  }
  return "unknown op";
}

uint64_t op_name_hash(const std::string& name) {
  if (name.empty()) return 0;
  const uint64_t h = fnv(kFnvOffset, name.data(), name.size());
  return h == 0 ? 1 : h;
}

uint64_t shape_hash(const std::vector<int64_t>& shape) {
  if (shape.empty()) return 0;
  const uint64_t n = shape.size();
  uint64_t h = fnv(kFnvOffset, &n, sizeof n);
  h = fnv(h, shape.data(), shape.size() * sizeof(int64_t));
  return h == 0 ? 1 : h;
}

uint64_t counts_hash(const std::vector<uint64_t>& counts) {
  const uint64_t n = counts.size();
  uint64_t h = fnv(kFnvOffset, &n, sizeof n);
  h = fnv(h, counts.data(), counts.size() * sizeof(uint64_t));
  return h == 0 ? 1 : h;
}

std::string describe_mismatch(const std::vector<OpDescriptor>& all, const std::vector<std::string>& names) {
  if (all.empty()) return "";
  const OpDescriptor& first = all[0];
  std::string head = kind_text(first.kind) + " #" + std::to_string(first.seq);
  if (names.size() == all.size() && !names[0].empty()) head += " '" + names[0] + "'";
  auto named = [&](const std::string& s) { return head + ": " + s; };

  // Ranks that refused their own arguments: the rest is moot.
  std::vector<int> invalid;
  for (std::size_t r = 0; r < all.size(); ++r) {
    if (all[r].flags & kInvalidArguments) invalid.push_back(static_cast<int>(r));
  }
  if (!invalid.empty()) {
    return named(ranks_text(invalid) + (invalid.size() == 1 ? " was" : " were") +
                 " given invalid arguments (see " + (invalid.size() == 1 ? "its" : "their") +
                 " InvalidArgument error); no rank ran the op");
  }
  // A different op altogether: say which, and nothing else.
  if (std::string d = field_difference(all, "op", [](const OpDescriptor& o) { return kind_text(o.kind); });
      !d.empty()) {
    return named(d + "; every rank must issue the same collectives in the same order");
  }
  const auto kind = static_cast<OpKind>(first.kind);
  const bool compares_count = kind == OpKind::kAllreduce || kind == OpKind::kBroadcast ||
                              kind == OpKind::kAllgather || kind == OpKind::kReduceScatter ||
                              kind == OpKind::kAllocateShared;
  const bool compares_dtype = kind != OpKind::kBarrier && kind != OpKind::kSplit && kind != OpKind::kAllocateShared;
  const bool compares_op = kind == OpKind::kAllreduce || kind == OpKind::kReduceScatter;
  const bool compares_detail = kind == OpKind::kReduceScatter || kind == OpKind::kSplit;
  const bool compares_shape = kind != OpKind::kBarrier && kind != OpKind::kSplit && kind != OpKind::kAllocateShared;

  std::vector<std::string> diffs;
  auto add = [&](const std::string& d) {
    if (!d.empty()) diffs.push_back(d);
  };
  if (compares_dtype) add(field_difference(all, "dtype", [](const OpDescriptor& o) { return dtype_text(o.dtype); }));
  if (compares_op) add(field_difference(all, "reduce op", [](const OpDescriptor& o) { return reduce_text(o.reduce_op); }));
  if (kind == OpKind::kBroadcast) {
    add(field_difference(all, "root", [](const OpDescriptor& o) { return std::to_string(o.root); }));
  }
  if (compares_count) {
    const char* what = kind == OpKind::kAllocateShared ? "size (bytes)" : "count";
    add(field_difference(all, what, [](const OpDescriptor& o) { return std::to_string(o.count); }));
  }
  if (compares_detail) {
    const char* what = kind == OpKind::kSplit ? "members" : "per-rank counts";
    add(field_difference(all, what, [](const OpDescriptor& o) {
      std::ostringstream os;
      os << "#" << std::hex << o.detail;
      return os.str();
    }));
  }
  if (compares_shape) {
    add(field_difference(all, "shape", [](const OpDescriptor& o) {
      if (o.shape_hash == 0) return std::string("(none given)");
      std::ostringstream os;
      os << "#" << std::hex << o.shape_hash;
      return os.str();
    }));
  }
  const bool names_given = names.size() == all.size();
  add(field_difference(all, "name", [&](const OpDescriptor& o) {
    if (o.name_hash == 0) return std::string("(unnamed)");
    if (names_given) {
      const std::size_t r = static_cast<std::size_t>(&o - all.data());
      return "'" + names[r] + "'";
    }
    std::ostringstream os;
    os << "#" << std::hex << o.name_hash;
    return os.str();
  }));
  if (diffs.empty()) return "";
  std::string s;
  for (std::size_t i = 0; i < diffs.size(); ++i) s += (i ? "; " : "") + diffs[i];
  return named(s);
}

}  // namespace muster::runtime::comm
