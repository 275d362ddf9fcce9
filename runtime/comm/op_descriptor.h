// What a rank says about a collective before any of its data moves. Ranks
// compare descriptors (Horovod's coordinator does the same with its
// requests): where they differ, every rank throws the same MismatchError
// naming the ranks and the fields that differ, and the Communicator stays
// usable, since no rank has sent or received a byte of the op.
//
// The descriptor travels as 48 raw bytes at the head of the op's first
// exchange (control_plane.h): with the data itself on the small paths (no
// extra round trip), or alone ahead of a large op.
//
// Which fields each kind compares (besides kind itself):
//   allreduce       dtype, reduce_op, count, shape, name
//   broadcast       dtype, root, count, shape, name
//   allgather       dtype, count, shape, name
//   allgatherv      dtype, shape (dims after the first), name
//   reduce-scatter  dtype, reduce_op, count, detail (the per-rank counts), shape, name
//   alltoall        dtype, shape (dims after the first), name
//   barrier         name
//   split           detail (the member ranks), name
//   allocate_shared count (bytes)
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace muster::runtime::comm {

enum class OpKind : uint8_t {
  kAllreduce = 1,
  kBroadcast = 2,
  kAllgather = 3,   // same count on every rank
  kAllgatherv = 4,  // counts may differ: count is not compared
  kReduceScatter = 5,
  kAlltoall = 6,    // counts may differ: count is not compared
  kBarrier = 7,
  kSplit = 8,           // Communicator::split's agreement on the members
  kAllocateShared = 9,  // Communicator::allocate_shared: count is the size in bytes
};

const char* op_kind_name(OpKind kind);

struct OpDescriptor {
  uint8_t kind = 0;       // OpKind
  uint8_t dtype = 0;      // DataType (0 for barrier, split, allocate_shared)
  uint8_t reduce_op = 0;  // ReduceOp + 1 for allreduce and reduce-scatter; else 0
  uint8_t flags = 0;      // kInvalidArguments: this rank's arguments were refused (all ranks then throw)
  int32_t root = -1;      // broadcast's root; else -1
  uint64_t count = 0;     // elements this rank contributes (see OpKind)
  uint64_t name_hash = 0; // FNV-1a of the op's name, 0 for unnamed ops
  uint64_t seq = 0;       // the op's sequence number on this communicator
  uint64_t shape_hash = 0;  // the caller's shape (shape_hash()), 0 when only the count matters
  // Kind-specific, compared where the table above says so: reduce-scatter's
  // per-rank counts and split's members (counts_hash()). For an allreduce it
  // says where the buffer lies (shared buffer id << 48 | offset; 0: private
  // memory), and is not compared: the direct path runs when every rank's is
  // the same and not 0, the ring otherwise.
  uint64_t detail = 0;
};
static_assert(sizeof(OpDescriptor) == 48, "OpDescriptor travels as 48 bytes");

// OpDescriptor::flags. A rank whose arguments are invalid (a null buffer, a
// root outside the world) still takes part in the exchange with this flag,
// so no rank pairs this op with another: that rank throws InvalidArgument,
// the others MismatchError naming it.
constexpr uint8_t kInvalidArguments = 1;
// An allreduce whose buffer lies in a shared-memory file the caller named
// (AllreduceOptions::shared_fd); not compared. When every rank's record has
// it and their details differ, the ranks map each other's files.
constexpr uint8_t kSharedFile = 2;

uint64_t op_name_hash(const std::string& name);
// FNV-1a of the dimensions; 0 for an empty shape.
uint64_t shape_hash(const std::vector<int64_t>& shape);
// FNV-1a of a list of counts or ranks (never 0).
uint64_t counts_hash(const std::vector<uint64_t>& counts);

// Empty when every descriptor agrees with rank 0's on the fields its kind
// compares; else a message naming the ranks and each field that differs
// ("allreduce #12: rank 1 has dtype int32, ranks 0, 2 have float32"). The
// same on every rank that calls it with the same descriptors. `names` may be
// empty, else the op name each rank gave, to quote them.
std::string describe_mismatch(const std::vector<OpDescriptor>& all, const std::vector<std::string>& names = {});

}  // namespace muster::runtime::comm
