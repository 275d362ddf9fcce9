// Where the microseconds of a small allreduce go: each cost a latency-bound
// op pays, measured on its own, next to the whole op and MPI_Allreduce.
//
//   mpirun -np 2 allreduce_latency_probe [bytes (4096)] [OUT.json]
//   mpirun -np 2 allreduce_latency_probe BYTES loop N auto|ring|mpi
//       only N synchronous allreduces of BYTES (for `perf stat` to count the
//       system calls and context switches per op against N = 0)
//
// Parts (medians over reps of a batch, per op, in microseconds):
//   in one thread, no peer: building the op's description string as the
//     Communicator does (ostringstream), the closure + shared OpState +
//     queue node, a Watchdog (its name string), steady_clock::now;
//   between two threads of one process: a ProgressThread round trip with an
//     empty task (submit, futex wake of the progress thread, completion,
//     futex wake of the waiter), and a bare condition-variable ping-pong;
//   between the two ranks: a flag ping-pong on one shared cache line (half
//     a round trip = what one published flag costs to be seen), and a
//     `bytes` memcpy into shared memory;
//   whole ops: MPI_Allreduce, the Communicator's allreduce with kMpi (MPI
//     through the progress thread) and kRing, and an op of count 0 (the
//     Communicator's submit/wait path with nothing to move).
// Rank 0 prints a table and, with OUT.json, writes {"bytes", "parts": {name: us}}.
#include <fcntl.h>
#include <mpi.h>
#include <sys/mman.h>
#include <unistd.h>

#include <immintrin.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <deque>
#include <fstream>
#include <functional>
#include <memory>
#include <mutex>
#include <sstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "runtime/comm/communicator.h"
#include "runtime/comm/progress_thread.h"
#include "runtime/comm/watchdog.h"

using muster::runtime::DataType;
using namespace muster::runtime::comm;

namespace {

using Clock = std::chrono::steady_clock;

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// Microseconds per call of `f`, median of `reps` batches of `batch` calls.
template <typename F>
double per_call_us(int reps, int batch, F&& f) {
  std::vector<double> t;
  for (int r = 0; r < reps; ++r) {
    const auto t0 = Clock::now();
    for (int i = 0; i < batch; ++i) f();
    t.push_back(std::chrono::duration<double, std::micro>(Clock::now() - t0).count() / batch);
  }
  return median(t);
}

// The same, for a collective: batches start together and the slowest rank counts.
template <typename F>
double collective_us(int reps, int batch, F&& f) {
  std::vector<double> t;
  for (int r = 0; r < reps; ++r) {
    MPI_Barrier(MPI_COMM_WORLD);
    const auto t0 = Clock::now();
    for (int i = 0; i < batch; ++i) f();
    double us = std::chrono::duration<double, std::micro>(Clock::now() - t0).count() / batch;
    MPI_Allreduce(MPI_IN_PLACE, &us, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    t.push_back(us);
  }
  return median(t);
}

std::string describe_like_the_communicator(std::size_t count, DataType dtype) {
  std::ostringstream os;
  os << "allreduce" << "(" << count << " x " << muster::runtime::dtype_name(dtype) << ", sum, mpi" << ")";
  return os.str();
}

// One shared page between the ranks of this host (rank 0 creates it).
char* shared_page(int rank, std::size_t bytes) {
  char name[64] = {0};
  if (rank == 0) std::snprintf(name, sizeof name, "/muster-probe-%d", static_cast<int>(getpid()));
  MPI_Bcast(name, sizeof name, MPI_CHAR, 0, MPI_COMM_WORLD);
  const int fd = rank == 0 ? shm_open(name, O_CREAT | O_EXCL | O_RDWR, 0600) : -1;
  if (rank == 0 && ftruncate(fd, static_cast<off_t>(bytes)) != 0) std::perror("ftruncate");
  MPI_Barrier(MPI_COMM_WORLD);
  const int fd2 = rank == 0 ? fd : shm_open(name, O_RDWR, 0600);
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd2, 0);
  close(fd2);
  MPI_Barrier(MPI_COMM_WORLD);
  if (rank == 0) shm_unlink(name);
  return static_cast<char*>(p);
}

}  // namespace

int main(int argc, char** argv) {
  const std::size_t bytes = argc > 1 ? std::stoull(argv[1]) : 4096;
  const std::string out = argc > 2 ? argv[2] : "";
  auto comm = Communicator::create();
  const int rank = comm->rank();
  const std::size_t count = bytes / sizeof(float);
  if (out == "loop") {
    const int n = argc > 3 ? std::stoi(argv[3]) : 0;
    const std::string how = argc > 4 ? argv[4] : "auto";
    std::vector<float> data(count, 1.0f);
    MPI_Barrier(MPI_COMM_WORLD);
    for (int i = 0; i < n; ++i) {
      if (how == "mpi") {
        MPI_Allreduce(MPI_IN_PLACE, data.data(), static_cast<int>(count), MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
      } else {
        comm->allreduce(data.data(), count, DataType::kFloat32,
                        {ReduceOp::kSum, how == "ring" ? Algorithm::kRing : Algorithm::kAuto});
      }
    }
    MPI_Barrier(MPI_COMM_WORLD);
    return 0;
  }
  const int reps = 21, batch = 2000;
  std::vector<std::pair<std::string, double>> parts;
  auto add = [&](const std::string& name, double us) { parts.emplace_back(name, us); };

  // --- one thread, no peer ---
  volatile std::size_t sink = 0;
  add("describe string (ostringstream)", per_call_us(reps, batch, [&] {
        sink = sink + describe_like_the_communicator(count, DataType::kFloat32).size();
      }));
  add("closure + shared OpState + queue node", per_call_us(reps, batch, [&] {
        std::deque<std::pair<std::function<void()>, std::shared_ptr<int>>> q;
        std::string what = "allreduce(1024 x float32, sum, mpi)";
        std::function<void(int)> op = [what, count, &sink](int) { sink = sink + count + what.size(); };
        q.emplace_back([op = std::move(op)] { op(0); }, std::make_shared<int>(1));
        q.front().first();
      }));
  add("Watchdog with its name", per_call_us(reps, batch, [&] {
        const uint64_t seq = 12;
        Watchdog w(std::chrono::milliseconds(60000), nullptr, seq,
                   describe_like_the_communicator(count, DataType::kFloat32) + " #" + std::to_string(seq) +
                       " on rank " + std::to_string(rank));
        sink = sink + w.what().size();
      }));
  add("steady_clock::now", per_call_us(reps, batch, [&] { sink = sink + Clock::now().time_since_epoch().count(); }));

  // --- two threads of this process ---
  {
    ProgressThread progress;
    add("ProgressThread round trip, empty task", per_call_us(reps, 500, [&] { progress.submit([] {}).wait(); }));
  }
  {
    std::mutex mu;
    std::condition_variable cv;
    int turn = 0;
    bool stop = false;
    std::thread other([&] {
      std::unique_lock<std::mutex> lock(mu);
      for (;;) {
        cv.wait(lock, [&] { return turn == 1 || stop; });
        if (stop) return;
        turn = 0;
        cv.notify_all();
      }
    });
    add("condition variable ping-pong (2 wake-ups)", per_call_us(reps, 500, [&] {
          std::unique_lock<std::mutex> lock(mu);
          turn = 1;
          cv.notify_all();
          cv.wait(lock, [&] { return turn == 0; });
        }));
    {
      std::lock_guard<std::mutex> lock(mu);
      stop = true;
    }
    cv.notify_all();
    other.join();
  }

  // --- between the ranks ---
  char* page = shared_page(rank, 1 << 20);
  auto* flag = reinterpret_cast<std::atomic<uint64_t>*>(page);
  {
    uint64_t v = 0;
    const int peers = comm->size();
    MPI_Barrier(MPI_COMM_WORLD);
    const double rt = per_call_us(reps, batch, [&] {
      // Rank 0 bumps to odd, rank 1 answers with even (other ranks idle).
      if (rank == 0) {
        flag->store(++v, std::memory_order_release);
        ++v;
        while (flag->load(std::memory_order_acquire) != v) _mm_pause();
      } else if (rank == 1) {
        ++v;
        while (flag->load(std::memory_order_acquire) != v) _mm_pause();
        flag->store(++v, std::memory_order_release);
      }
    });
    (void)peers;
    add("shared cache-line flag, one way (half a ping-pong)", rt / 2);
  }
  {
    std::vector<char> src(bytes, 1);
    char* dst = page + 4096;
    add("memcpy of the op's bytes into shared memory",
        per_call_us(reps, batch, [&] { std::memcpy(dst, src.data(), bytes); sink = sink + dst[bytes / 2]; }));
  }
  munmap(page, 1 << 20);

  std::vector<float> data(count, 1.0f);
  add("MPI_Allreduce", collective_us(reps, 200, [&] {
        MPI_Allreduce(MPI_IN_PLACE, data.data(), static_cast<int>(count), MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
      }));
  add("Communicator allreduce, kMpi", collective_us(reps, 200, [&] {
        comm->allreduce(data.data(), count, DataType::kFloat32, {ReduceOp::kSum, Algorithm::kMpi});
      }));
  add("Communicator allreduce, kRing", collective_us(reps, 200, [&] {
        comm->allreduce(data.data(), count, DataType::kFloat32, {ReduceOp::kSum, Algorithm::kRing});
      }));
  add("Communicator allreduce, kAuto", collective_us(reps, 200, [&] {
        comm->allreduce(data.data(), count, DataType::kFloat32, {ReduceOp::kSum});
      }));
  add("Communicator op of count 0 (submit + wait, no data)", collective_us(reps, 200, [&] {
        comm->allreduce(data.data(), 0, DataType::kFloat32, {ReduceOp::kSum, Algorithm::kRing});
      }));
  add("Communicator barrier", collective_us(reps, 200, [&] { comm->barrier(); }));
  add("MPI_Barrier", collective_us(reps, 200, [&] { MPI_Barrier(MPI_COMM_WORLD); }));

  if (rank == 0) {
    std::printf("%zu B, %d ranks: per-op microseconds (median of %d batches)\n", bytes, comm->size(), reps);
    nlohmann::json j = {{"bytes", bytes}, {"ranks", comm->size()}, {"parts", nlohmann::json::object()}};
    for (const auto& [name, us] : parts) {
      std::printf("  %8.3f  %s\n", us, name.c_str());
      j["parts"][name] = us;
    }
    if (!out.empty()) std::ofstream(out) << j.dump(2) << "\n";
  }
  return 0;
}
