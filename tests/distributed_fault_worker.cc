// Fault-injection worker for distributed_fault_test (run under mpirun by it).
//
//   distributed_fault_worker kill|stall|exit
//
// Every rank trains with a DistributedOptimizer (20 gradients of 64 K floats,
// 1 MB fusion threshold: 5 buckets). At step 3 the last rank marks half of
// its gradients ready, so some buckets are already on the wire, then `kill`
// raises SIGKILL on itself and `stall` sleeps MUSTER_COMM_TIMEOUT_MS + 4 s.
// `exit`: the last rank raises SIGKILL before step 3's first gradient, and
// the others wait 500 ms before theirs (a backward pass being computed).
// Each other rank must see a CommError naming the victim; it prints
//   DIST-FAULT rank <me> blamed <rank> after <ms> ms at <call>: <message>
// (<call>: "grad_ready <t>" or "step"; in `exit` mode the first gradient,
// grad_ready 19, as the optimizer checks its peers before a step begins)
// then destroys the optimizer (whose background thread must not hang it) and
// prints
//   DIST-EXIT rank <me> after <ms> ms
// and exits 3 without MPI_Finalize. Finishing all steps prints NO-FAULT.
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <memory>
#include <thread>
#include <vector>

#include "runtime/comm/communicator.h"
#include "runtime/distributed/distributed_optimizer.h"
#include "runtime/error.h"

using namespace muster::runtime;

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s kill|stall|exit\n", argv[0]);
    return 2;
  }
  const bool kill_mode = std::strcmp(argv[1], "kill") == 0;
  const bool exit_mode = std::strcmp(argv[1], "exit") == 0;
  auto comm = comm::Communicator::create();
  const int victim = comm->size() - 1;
  constexpr int kTensors = 20;
  constexpr std::size_t kSize = 64 * 1024;
  std::vector<std::vector<float>> values(kTensors, std::vector<float>(kSize, 0.0f));
  std::vector<std::vector<float>> grads(kTensors, std::vector<float>(kSize, 1.0f));
  auto fault_start = std::chrono::steady_clock::now();
  auto since = [&] {
    return static_cast<long long>(
        std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - fault_start).count());
  };
  {
    distributed::DistributedOptions options;
    options.fusion_threshold_bytes = 1 << 20;
    auto opt = std::make_unique<distributed::DistributedOptimizer>(*comm, optim::make_sgd({}), options);
    for (int t = 0; t < kTensors; ++t) opt->add_parameter("w" + std::to_string(t), values[t].data(), grads[t].data(), kSize);
    std::string call = "broadcast_parameters";
    try {
      opt->broadcast_parameters(0);
      for (int step = 0; step < 10; ++step) {
        if (step == 3) fault_start = std::chrono::steady_clock::now();
        if (step == 3 && exit_mode) {
          if (comm->rank() == victim) raise(SIGKILL);
          std::this_thread::sleep_for(std::chrono::milliseconds(500));
        }
        for (int t = kTensors - 1; t >= 0; --t) {
          if (step == 3 && comm->rank() == victim && t == kTensors / 2) {
            if (kill_mode) raise(SIGKILL);
            std::this_thread::sleep_for(comm->options().timeout + std::chrono::seconds(4));
            _exit(0);
          }
          call = "grad_ready " + std::to_string(t);
          opt->grad_ready(t);
        }
        call = "step";
        opt->step();
      }
    } catch (const CommError& e) {
      std::fprintf(stderr, "DIST-FAULT rank %d blamed %d after %lld ms at %s: %s\n", comm->rank(), e.rank(), since(),
                   call.c_str(), e.what());
      std::fflush(stderr);
      opt.reset();  // joins (or leaves behind) the communication thread: must not hang
      std::fprintf(stderr, "DIST-EXIT rank %d after %lld ms\n", comm->rank(), since());
      std::fflush(stderr);
      _exit(3);
    }
  }
  std::fprintf(stderr, "NO-FAULT rank %d\n", comm->rank());
  return 0;
}
