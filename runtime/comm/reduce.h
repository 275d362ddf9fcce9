// Element-wise reduction kernels for the six DataTypes, used by the ring
// (reducing a received segment into the local buffer) and by the float16 /
// bfloat16 user-defined MPI ops.
//
// The loops are written to auto-vectorise (compiled -O3, with AVX2 clones
// chosen at run time); float16 and bfloat16 are widened to float in blocks,
// reduced, and rounded back to nearest even.
#pragma once

#include <cstddef>

#include "runtime/comm/communicator.h"
#include "runtime/dtype.h"

namespace muster::runtime::comm {

// dst[i] = op(dst[i], src[i]) for i < count. kAverage reduces like kSum; the
// caller divides once at the end with divide().
void reduce_into(void* dst, const void* src, std::size_t count, DataType dtype, ReduceOp op);

// The last reduce_into of an op, and for kAverage its divide() by `ranks`,
// in one pass over dst where the type allows: float32 and float64 add and
// then scale (or divide) each element in registers, the same operations in
// the same order as the two calls, so the same bits. Other types, and ops
// but kAverage, make the two calls (float16 and bfloat16 round to 16 bits in
// between, as the two calls do).
void reduce_last_into(void* dst, const void* src, std::size_t count, DataType dtype, ReduceOp op, int ranks);

// data[i] /= divisor; integer types divide toward zero. Floating types
// multiply by the reciprocal when divisor is a power of two (the same bits,
// without the divider's cost); other divisors divide.
void divide(void* data, std::size_t count, DataType dtype, int divisor);

}  // namespace muster::runtime::comm
