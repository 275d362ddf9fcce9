// Worker for comm_reform_test: one process of a world formed over a file
// store, without mpirun.
//
//   comm_reform_worker <store dir> <rank> <size> <shm|tcp|small>
//
// Generation 0: `size` ranks allreduce 1 MB (float32, average) in a loop
// (small: 64 floats, shared memory's small-message path); at
// iteration 3 the last rank raises SIGKILL on itself. Each survivor prints
//   FAULT rank <r> blamed <b> after <ms> ms: <message>
// destroys its Communicator, and forms generation 1 over the same store (a
// new prefix) with the survivors, renumbered in order; it allreduces again
// (a large and a small buffer), checks the results, destroys that world too and prints
//   REFORMED rank <r> of <n> ok
//   CLEAN rank <r> threads <t> fds <f> shm <s>
// (threads, open descriptors and /dev/shm objects of this process that were
// not there before the first world formed). Exit 0 when the result was right
// and nothing was left; 3 when the fault was never seen; 4 otherwise.
#include <dirent.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "runtime/comm/communicator.h"
#include "runtime/comm/kv_bootstrap.h"

using namespace muster::runtime;
using namespace muster::runtime::comm;

namespace {

long entries(const std::string& dir, const std::string& prefix = "") {
  long n = 0;
  if (DIR* d = opendir(dir.c_str())) {
    while (dirent* e = readdir(d)) {
      if (e->d_name[0] != '.' && std::strncmp(e->d_name, prefix.c_str(), prefix.size()) == 0) ++n;
    }
    closedir(d);
  }
  return n;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 5) {
    std::fprintf(stderr, "usage: %s <store dir> <rank> <size> shm|tcp|small\n", argv[0]);
    return 2;
  }
  const int rank = std::atoi(argv[2]), size = std::atoi(argv[3]);
  CommOptions options;
  options.timeout = std::chrono::milliseconds(10000);
  if (std::strcmp(argv[4], "tcp") == 0) options.ring_transport = RingTransport::kTcp;
  auto store = make_file_kv_store(argv[1]);
  const long threads0 = entries("/proc/self/task"), fds0 = entries("/proc/self/fd");
  const std::string own_shm = "muster-" + std::to_string(getpid()) + "-";
  const int victim = size - 1;

  bool faulted = false;
  {
    auto comm = Communicator::create(std::make_unique<KvBootstrap>(store, rank, size, "gen0"), options);
    std::vector<float> buf(std::strcmp(argv[4], "small") == 0 ? 64 : 1 << 18, 1.0f);
    auto fault_start = std::chrono::steady_clock::now();
    try {
      for (int it = 0; it < 10; ++it) {
        if (it == 3) {
          fault_start = std::chrono::steady_clock::now();
          if (rank == victim) raise(SIGKILL);
        }
        comm->allreduce(buf.data(), buf.size(), DataType::kFloat32, {ReduceOp::kAverage});
      }
    } catch (const CommError& e) {
      const auto ms =
          std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - fault_start);
      std::printf("FAULT rank %d blamed %d after %lld ms: %s\n", rank, e.rank(), static_cast<long long>(ms.count()),
                  e.what());
      std::fflush(stdout);
      faulted = true;
    }
  }  // the broken world is destroyed here
  if (!faulted) {
    std::printf("NO-FAULT rank %d\n", rank);
    return 3;
  }
  bool right = true;
  {
    auto comm = Communicator::create(std::make_unique<KvBootstrap>(store, rank, size - 1, "gen1"), options);
    std::vector<float> buf(300001, static_cast<float>(rank + 1));
    comm->allreduce(buf.data(), buf.size(), DataType::kFloat32, {ReduceOp::kSum});
    const float want = static_cast<float>(size - 1) * static_cast<float>(size) / 2.0f;
    for (float v : buf) right = right && v == want;
    std::vector<float> small(64, static_cast<float>(rank + 1));
    comm->allreduce(small.data(), small.size(), DataType::kFloat32, {ReduceOp::kSum});
    for (float v : small) right = right && v == want;
    comm->barrier();
  }
  std::printf("REFORMED rank %d of %d %s\n", rank, size - 1, right ? "ok" : "WRONG");
  const long threads = entries("/proc/self/task") - threads0, fds = entries("/proc/self/fd") - fds0;
  const long shm = entries("/dev/shm", own_shm);
  std::printf("CLEAN rank %d threads %ld fds %ld shm %ld\n", rank, threads, fds, shm);
  std::fflush(stdout);
  return right && threads == 0 && fds == 0 && shm == 0 ? 0 : 4;
}
