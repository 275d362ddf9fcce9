// Fault-injection worker for comm_fault_test (run under mpirun by that test).
//
//   comm_fault_worker stall|kill ring|mpi|ring-mpi-links|ring-tcp-links|ring-tcp-threads|direct|pieces
//
// (ring-mpi-links / ring-tcp-links: the ring over MPI point-to-point or
// muster's TCP streams instead of shared memory, as between hosts;
// ring-tcp-threads: the TCP streams moved by their I/O threads; direct: the buffer in Communicator::allocate_shared
// memory, so the direct allreduce runs; pieces: Algorithm::kAuto on 16 MB,
// which with more ranks than CPUs runs in the small path's 256 KB pieces.)
// Every rank allreduces a 1 MB float32 buffer (pieces: 16 MB) in a loop. At iteration 3 the
// last rank misbehaves: `stall` sleeps MUSTER_COMM_TIMEOUT_MS + 4 s without
// communicating (then exits 0), `kill` raises SIGKILL on itself. The other ranks must throw; each
// prints one line
//   COMM-FAULT rank <me> blamed <rank> after <ms> ms: <message>
// and exits 3 without MPI_Finalize. A survivor that finishes the loop prints
// NO-FAULT and exits 0, which the test counts as a failure.
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <thread>
#include <vector>

#include "runtime/comm/communicator.h"

using namespace muster::runtime;
using namespace muster::runtime::comm;

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: %s stall|kill ring|mpi|ring-mpi-links|ring-tcp-links|ring-tcp-threads|direct|pieces\n",
                 argv[0]);
    return 2;
  }
  const bool kill_mode = std::strcmp(argv[1], "kill") == 0;
  const bool pieces = std::strcmp(argv[2], "pieces") == 0;
  const Algorithm algorithm = std::strcmp(argv[2], "mpi") == 0 ? Algorithm::kMpi
                              : pieces                        ? Algorithm::kAuto
                                                              : Algorithm::kRing;
  CommOptions options;
  if (std::strcmp(argv[2], "ring-mpi-links") == 0) options.ring_transport = RingTransport::kMpi;
  if (std::strcmp(argv[2], "ring-tcp-links") == 0) {
    options.ring_transport = RingTransport::kTcp;
    options.tcp_threads = CommOptions::TcpThreads::kOff;
  }
  if (std::strcmp(argv[2], "ring-tcp-threads") == 0) {
    options.ring_transport = RingTransport::kTcp;
    options.tcp_threads = CommOptions::TcpThreads::kOn;
  }
  auto comm = Communicator::create(options);
  const int victim = comm->size() - 1;
  std::vector<float> heap(pieces ? 1 << 22 : 1 << 18, 1.0f);
  std::unique_ptr<SharedBuffer> shared;
  float* buf = heap.data();
  if (std::strcmp(argv[2], "direct") == 0) {
    shared = comm->allocate_shared(heap.size() * sizeof(float));
    if (!shared->direct()) {
      std::fprintf(stderr, "comm_fault_worker: allocate_shared gave memory the peers do not map\n");
      return 2;
    }
    buf = static_cast<float*>(shared->data());
    std::fill(buf, buf + heap.size(), 1.0f);
  }
  auto fault_start = std::chrono::steady_clock::now();
  try {
    for (int it = 0; it < 10; ++it) {
      if (it == 3) {
        fault_start = std::chrono::steady_clock::now();
        if (comm->rank() == victim) {
          if (kill_mode) raise(SIGKILL);
          std::this_thread::sleep_for(comm->options().timeout + std::chrono::seconds(4));
          std::fflush(stdout);
          _exit(0);
        }
      }
      comm->allreduce(buf, heap.size(), DataType::kFloat32, {ReduceOp::kAverage, algorithm});
    }
  } catch (const CommError& e) {
    const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - fault_start);
    std::fprintf(stderr, "COMM-FAULT rank %d blamed %d after %lld ms: %s\n", comm->rank(), e.rank(),
                 static_cast<long long>(ms.count()), e.what());
    std::fflush(stderr);
    _exit(3);
  }
  std::fprintf(stderr, "NO-FAULT rank %d\n", comm->rank());
  return 0;
}
