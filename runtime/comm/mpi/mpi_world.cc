#include "runtime/comm/mpi/mpi_world.h"

#include <atomic>
#include <cstdlib>
#include <mutex>

#include "api/base/settings.h"
#include "runtime/comm/reduce.h"

namespace muster::runtime::comm::mpi {
namespace {

std::atomic<bool> g_failed{false};
std::once_flag g_init_once;

void finalize_at_exit() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized && !g_failed.load()) MPI_Finalize();
}

// User-defined ops for the 16-bit float types: MPI_User_function signature.
template <DataType kType, ReduceOp kOp>
void reduce_16bit(void* in, void* inout, int* len, MPI_Datatype*) {
  reduce_into(inout, in, static_cast<std::size_t>(*len), kType, kOp);
}

struct HalfOps {
  MPI_Op ops[2][3];  // [half, bf16][sum, min, max]
  HalfOps() {
    MPI_Op_create(&reduce_16bit<DataType::kFloat16, ReduceOp::kSum>, 1, &ops[0][0]);
    MPI_Op_create(&reduce_16bit<DataType::kFloat16, ReduceOp::kMin>, 1, &ops[0][1]);
    MPI_Op_create(&reduce_16bit<DataType::kFloat16, ReduceOp::kMax>, 1, &ops[0][2]);
    MPI_Op_create(&reduce_16bit<DataType::kBFloat16, ReduceOp::kSum>, 1, &ops[1][0]);
    MPI_Op_create(&reduce_16bit<DataType::kBFloat16, ReduceOp::kMin>, 1, &ops[1][1]);
    MPI_Op_create(&reduce_16bit<DataType::kBFloat16, ReduceOp::kMax>, 1, &ops[1][2]);
  }
};

int op_index(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
    case ReduceOp::kAverage: return 0;
    case ReduceOp::kMin: return 1;
    case ReduceOp::kMax: return 2;
  }
  return 0;
}

}  // namespace

bool launched_with_mpi() {
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (initialized) return true;
  const auto env = base::Settings::environment();
  for (const char* name : {"OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_RANK"}) {
    if (env.raw(name)) return true;  // a process manager started this process
  }
  return false;
}

void ensure_initialized() {
  std::call_once(g_init_once, [] {
    int initialized = 0;
    MPI_Initialized(&initialized);
    if (initialized) return;
    int provided = 0;
    int argc = 0;
    char** argv = nullptr;
    check(MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided), "MPI_Init_thread");
    std::atexit(finalize_at_exit);
  });
}

void mark_failed() { g_failed.store(true); }

bool failed() { return g_failed.load(); }

void check(int rc, const std::string& what, int peer) {
  if (rc == MPI_SUCCESS) return;
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(rc, text, &len);
  std::string msg = what + " failed";
  if (peer >= 0) msg += " (peer rank " + std::to_string(peer) + ")";
  msg += ": " + std::string(text, static_cast<std::size_t>(len));
  mark_failed();
  throw CommError(msg, peer);
}

MPI_Datatype datatype(DataType dtype) {
  switch (dtype) {
    case DataType::kFloat32: return MPI_FLOAT;
    case DataType::kFloat64: return MPI_DOUBLE;
    case DataType::kFloat16:
    case DataType::kBFloat16: return MPI_UINT16_T;
    case DataType::kInt32: return MPI_INT32_T;
    case DataType::kInt64: return MPI_INT64_T;
  }
  throw InvalidArgument("no MPI datatype for dtype " + std::to_string(static_cast<int>(dtype)));
}

MPI_Op reduce_op(ReduceOp op, DataType dtype) {
  if (dtype == DataType::kFloat16 || dtype == DataType::kBFloat16) {
    static HalfOps half_ops;  // created after MPI_Init, on first use
    return half_ops.ops[dtype == DataType::kFloat16 ? 0 : 1][op_index(op)];
  }
  switch (op) {
    case ReduceOp::kSum:
    case ReduceOp::kAverage: return MPI_SUM;
    case ReduceOp::kMin: return MPI_MIN;
    case ReduceOp::kMax: return MPI_MAX;
  }
  return MPI_SUM;
}

}  // namespace muster::runtime::comm::mpi
