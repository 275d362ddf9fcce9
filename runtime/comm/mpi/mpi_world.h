// Process-wide MPI set-up shared by every Communicator: initialisation (once,
// MPI_THREAD_MULTIPLE), finalisation at exit, error conversion, and the MPI
// datatypes and ops for muster's DataTypes and ReduceOps.
//
// float16 and bfloat16 have no MPI type: they travel as MPI_UINT16_T and are
// reduced by user-defined MPI ops (created once) that widen to float, reduce
// and round back, so MPI_Allreduce handles them like any other type.
#pragma once

#include <mpi.h>

#include <string>

#include "runtime/comm/communicator.h"
#include "runtime/dtype.h"

namespace muster::runtime::comm::mpi {

// True when this process was started by mpirun (Open MPI's OMPI_COMM_WORLD_*
// or PMIx variables are set) or MPI is already initialised.
bool launched_with_mpi();

// MPI_Init_thread(MPI_THREAD_MULTIPLE) unless MPI is initialised already;
// MPI_Finalize then runs at exit, unless a collective failed (finalising with
// a dead peer would hang).
void ensure_initialized();

// Remember that communication failed, so exit does not finalise.
void mark_failed();
// Whether mark_failed() was called in this process.
bool failed();

// Throws CommError("<what>: <MPI error string>", peer) when rc != MPI_SUCCESS.
void check(int rc, const std::string& what, int peer = -1);

MPI_Datatype datatype(DataType dtype);
// The MPI op reducing `dtype` with `op` (kAverage reduces as a sum).
MPI_Op reduce_op(ReduceOp op, DataType dtype);

}  // namespace muster::runtime::comm::mpi
