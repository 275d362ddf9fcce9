// World formation: how the ranks of one job learn their rank and size and
// swap the few bytes a Communicator needs to connect (shared-memory segment
// names, TCP endpoints, agreements) before any transport of muster's own
// exists. A Communicator is built over one Bootstrap and uses it only while
// it connects (Communicator::create, Communicator::split); once connected,
// every op runs over muster's own links (shm/, tcp/), never the Bootstrap.
//
// Implementations
// - MPI (mpi/mpi_bootstrap.h): a duplicate of MPI_COMM_WORLD, for jobs that
//   mpirun or horovodrun started. Existing launch lines keep working.
// - KvBootstrap (kv_bootstrap.h): over a KvStore that every rank reaches:
//   musterd's rendezvous (jobs muster launches itself, one generation of an
//   elastic world each), or a torch.distributed Store (the "muster"
//   process-group backend, through the Python extension).
// - The world of one (a script run without any launcher).
// bootstrap_from_env() picks one from the process's environment.
//
// Contract
// - rank() is in [0, size()) and fixed for the Bootstrap's life.
// - allgather() is collective: every rank of this Bootstrap calls it the
//   same number of times, in the same order, and gets every rank's value in
//   rank order. Values may differ in length. `tag` names the exchange in
//   errors ("TCP endpoints"). A rank that does not arrive within `timeout`
//   makes the others throw TimeoutError naming it; an unreachable store
//   throws CommError. After a throw the Bootstrap is not used again.
// - subset(ranks) is called by the members of `ranks` only (sorted, unique,
//   each in [0, size())), all with the same `ranks` and `name`, and returns
//   a Bootstrap among them alone, with rank = index in `ranks`. A name is
//   used once per Bootstrap, also for the same members again
//   (Communicator::split adds a counter of its own). The parent stays usable.
// - One thread at a time uses a Bootstrap.
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <vector>

namespace muster::runtime::comm {

class Bootstrap {
 public:
  virtual ~Bootstrap() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  // What formed this world, for logs and errors: "mpi", "musterd", "store", "single".
  virtual std::string kind() const = 0;
  virtual std::vector<std::string> allgather(const std::string& mine, const std::string& tag,
                                             std::chrono::milliseconds timeout) = 0;
  virtual std::unique_ptr<Bootstrap> subset(const std::vector<int>& ranks, const std::string& name) = 0;
};

// A key-value store that every rank of a job reaches, written once per key.
//
// Contract
// - set() stores `value` under `key`; keys are written once (a second set of
//   the same key may be refused). CommError when the store cannot be reached.
// - get() returns the values of all `keys`, in order, once every one of them
//   exists, waiting up to `timeout`; TimeoutError names the keys still
//   missing. One call for many keys, so a store over HTTP answers a whole
//   allgather in one request.
// - Calls may come from any one thread at a time.
class KvStore {
 public:
  virtual ~KvStore() = default;
  virtual void set(const std::string& key, const std::string& value) = 0;
  virtual std::vector<std::string> get(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) = 0;
};

// The world of one process: rank 0 of 1; allgather returns {mine}.
std::unique_ptr<Bootstrap> single_process_bootstrap();

// The job's own Bootstrap, from the environment (bootstrap_env.cc):
//   launched by mpirun (OMPI_COMM_WORLD_SIZE set, or MPI already initialised) -> MPI;
//   launched by musterd as a rank of a muster-formed world (MUSTER_RENDEZVOUS_URL set) -> musterd;
//   else the world of one.
std::unique_ptr<Bootstrap> bootstrap_from_env();

}  // namespace muster::runtime::comm
