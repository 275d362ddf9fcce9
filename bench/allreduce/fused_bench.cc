// Fused-gradient benchmark: a ResNet-50-shaped gradient set (161 float32
// tensors, 25,557,032 parameters, torchvision's layout: 53 convolution
// kernels without bias, 53 batch-norm gamma/beta pairs, the fc weight and
// bias) averaged across the ranks of one `mpirun -np 2` three ways:
//   (a) DistributedOptimizer with the default 64 MB fusion threshold:
//       gradients marked ready in reverse registration order (as backprop
//       produces them) and synchronize() (the optimizer update itself is left
//       out, as in (b) and (c)); measured with gradients owned by the
//       optimizer (zero-copy buckets) as step_s and with separately allocated
//       user buffers (large ones reduced in place, small ones packed into
//       fusion buffers) as step_copy_s;
//   (b) one muster allreduce (average) of all the bytes in a single buffer:
//       in Communicator::allocate_shared memory, as the optimizer's own
//       gradients are (single_buffer_s, the like-for-like reference), and in
//       ordinary memory (single_buffer_private_s: at 2 ranks the small
//       path's 256 KB pieces);
//   (c) one MPI_Allreduce per tensor (161 calls);
//   (d) a memory reference: every rank scales its own buffer of the same
//       size in place by 1 (reads and writes each byte once, all ranks at
//       once; memory_pass_s), and per_tensor_vs_memory_pass says how (c)
//       compares. It is no floor: the direct allreduce reads and writes each
//       byte once too and has measured below it (runtime/comm/README.md).
// FUSED_BENCH_SEGMENT_KB overrides the optimizer's segment size, and
// FUSED_BENCH_IN_PLACE_KB its in_place_min_bytes (tuning).
// The variants run interleaved in each repetition (a shared machine's load
// hits them alike); medians over repetitions; rank 0 writes the figures as
// JSON:  allreduce_fused_bench [out.json (bench/out/allreduce_fused.json)] [reps (9)]
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstdio>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "runtime/comm/communicator.h"
#include "runtime/distributed/distributed_optimizer.h"

namespace rt = muster::runtime;

namespace {

struct Tensor {
  std::string name;
  std::size_t size;
};

// torchvision resnet50: stem, 4 stages of bottlenecks [3, 4, 6, 3], fc.
std::vector<Tensor> resnet50_gradients() {
  std::vector<Tensor> t;
  auto conv = [&](const std::string& name, std::size_t out, std::size_t in, std::size_t k) {
    t.push_back({name + ".weight", out * in * k * k});
  };
  auto bn = [&](const std::string& name, std::size_t c) {
    t.push_back({name + ".gamma", c});
    t.push_back({name + ".beta", c});
  };
  conv("conv1", 64, 3, 7);
  bn("bn1", 64);
  const std::size_t blocks[4] = {3, 4, 6, 3};
  std::size_t in = 64;
  for (int stage = 0; stage < 4; ++stage) {
    const std::size_t width = 64u << stage, out = width * 4;
    for (std::size_t b = 0; b < blocks[stage]; ++b) {
      const std::string p = "layer" + std::to_string(stage + 1) + "." + std::to_string(b);
      conv(p + ".conv1", width, in, 1);
      bn(p + ".bn1", width);
      conv(p + ".conv2", width, width, 3);
      bn(p + ".bn2", width);
      conv(p + ".conv3", out, width, 1);
      bn(p + ".bn3", out);
      if (b == 0) {
        conv(p + ".downsample.0", out, in, 1);
        bn(p + ".downsample.1", out);
      }
      in = out;
    }
  }
  t.push_back({"fc.weight", 1000 * 2048});
  t.push_back({"fc.bias", 1000});
  return t;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// Seconds of one run of `body` on the slowest rank.
template <typename F>
double time_once(rt::comm::Communicator& comm, F&& body) {
  comm.barrier();
  const auto start = std::chrono::steady_clock::now();
  body();
  double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  comm.allreduce(&s, 1, rt::DataType::kFloat64, {rt::comm::ReduceOp::kMax});
  return s;
}

// The optimizer with ResNet-50's gradients, either owned by it (one array,
// zero-copy buckets) or in the caller's separate buffers (packed).
struct OptimizerCase {
  std::vector<std::vector<float>> values, user_grads;
  std::unique_ptr<rt::distributed::DistributedOptimizer> opt;

  OptimizerCase(rt::comm::Communicator& comm, const std::vector<Tensor>& tensors, bool owned) {
    rt::distributed::DistributedOptions options;  // defaults: 64 MB fusion, 1 MB segments
    if (const char* seg = std::getenv("FUSED_BENCH_SEGMENT_KB")) options.segment_bytes = std::stoul(seg) * 1024;
    if (const char* kb = std::getenv("FUSED_BENCH_IN_PLACE_KB")) options.in_place_min_bytes = std::stoul(kb) * 1024;
    opt = std::make_unique<rt::distributed::DistributedOptimizer>(comm, rt::optim::make_sgd({}), options);
    values.resize(tensors.size());
    for (std::size_t i = 0; i < tensors.size(); ++i) {
      values[i].assign(tensors[i].size, 0.0f);
      float* grad = nullptr;
      if (!owned) {
        user_grads.emplace_back(tensors[i].size, 1.0f);
        grad = user_grads.back().data();
      }
      opt->add_parameter(tensors[i].name, values[i].data(), grad, tensors[i].size);
    }
    for (std::size_t i = 0; i < tensors.size(); ++i) {
      float* g = opt->gradient(static_cast<int>(i));
      std::fill(g, g + tensors[i].size, 1.0f);
    }
  }

  // Every gradient element = v (outside the timed region).
  void fill(float v) {
    for (std::size_t i = 0; i < values.size(); ++i) {
      float* g = opt->gradient(static_cast<int>(i));
      std::fill(g, g + values[i].size(), v);
    }
  }
  // True when every gradient element equals v.
  bool all_equal(float v) {
    for (std::size_t i = 0; i < values.size(); ++i) {
      const float* g = opt->gradient(static_cast<int>(i));
      if (!std::all_of(g, g + values[i].size(), [v](float x) { return x == v; })) return false;
    }
    return true;
  }

  // (a): gradients marked ready backwards, as backprop produces them.
  void step() {
    for (int i = static_cast<int>(values.size()) - 1; i >= 0; --i) opt->grad_ready(i);
    opt->synchronize();
  }
};

}  // namespace

int run(int argc, char** argv);

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "allreduce_fused_bench: %s\n", e.what());
    return 1;
  }
}

int run(int argc, char** argv) {
  const std::string out_path = argc > 1 ? argv[1] : "bench/out/allreduce_fused.json";
  const int reps = argc > 2 ? std::stoi(argv[2]) : 9;
  auto comm = rt::comm::Communicator::create();
  const auto tensors = resnet50_gradients();
  std::size_t total = 0;
  for (const auto& t : tensors) total += t.size;

  OptimizerCase owned(*comm, tensors, true), copied(*comm, tensors, false);
  std::vector<float> single_private(total, 1.0f), pass(total, 1.0f);
  auto single_shared = comm->allocate_shared(total * sizeof(float));
  float* single = static_cast<float*>(single_shared->data());
  std::vector<std::vector<float>> per(tensors.size());
  for (std::size_t i = 0; i < tensors.size(); ++i) per[i].assign(tensors[i].size, 1.0f);

  auto run_single = [&] { comm->allreduce(single, total, rt::DataType::kFloat32, {rt::comm::ReduceOp::kAverage}); };
  auto run_single_private = [&] {
    comm->allreduce(single_private.data(), total, rt::DataType::kFloat32, {rt::comm::ReduceOp::kAverage});
  };
  // One (the ranks' count over itself) is not known to the compiler: the loop
  // cannot be dropped, and it vectorizes like reduce_into.
  const float one = static_cast<float>(comm->size()) / static_cast<float>(comm->size());
  auto run_pass = [&, one] {
    float* p = pass.data();
    for (std::size_t i = 0; i < total; ++i) p[i] *= one;
  };
  auto run_per_tensor = [&] {
    for (auto& p : per) {
      MPI_Allreduce(MPI_IN_PLACE, p.data(), static_cast<int>(p.size()), MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    }
  };
  // Warm-up, then the variants interleaved in every repetition so that load
  // changes on a shared machine hit them alike.
  owned.step();
  copied.step();
  run_single();
  run_single_private();
  run_per_tensor();
  run_pass();
  std::vector<double> t_owned, t_copied, t_single, t_private, t_per, t_pass;
  // Rank r contributes r + 1 everywhere: the average is (size + 1) / 2.
  const float mine = static_cast<float>(comm->rank() + 1), expect = (comm->size() + 1) / 2.0f;
  bool correct = true;
  for (int r = 0; r < reps; ++r) {
    owned.fill(mine);
    t_owned.push_back(time_once(*comm, [&] { owned.step(); }));
    correct = correct && owned.all_equal(expect);
    std::fill(single, single + total, mine);
    t_single.push_back(time_once(*comm, run_single));
    correct = correct && std::all_of(single, single + total, [&](float x) { return x == expect; });
    std::fill(single_private.begin(), single_private.end(), mine);
    t_private.push_back(time_once(*comm, run_single_private));
    correct = correct && std::all_of(single_private.begin(), single_private.end(), [&](float x) { return x == expect; });
    copied.fill(mine);
    t_copied.push_back(time_once(*comm, [&] { copied.step(); }));
    correct = correct && copied.all_equal(expect);
    // Filled like the others: each variant starts as after a backward pass,
    // its gradients just written (dirty in the cache), MPI's reference too.
    for (auto& p : per) std::fill(p.begin(), p.end(), mine);
    t_per.push_back(time_once(*comm, run_per_tensor));
    std::fill(pass.begin(), pass.end(), mine);  // dirty in the cache, as the gradients are
    t_pass.push_back(time_once(*comm, run_pass));
    correct = correct && pass.front() == mine && pass.back() == mine;
    const float sum = static_cast<float>(comm->size() * (comm->size() + 1) / 2);
    for (const auto& p : per) correct = correct && std::all_of(p.begin(), p.end(), [&](float x) { return x == sum; });
  }
  int wrong = correct ? 0 : 1;
  comm->allreduce(&wrong, 1, rt::DataType::kInt32, {rt::comm::ReduceOp::kMax});
  if (wrong) {
    std::fprintf(stderr, "allreduce_fused_bench: a result was not the average; figures not written\n");
    return 1;
  }
  const double step_s = median(t_owned), step_copy_s = median(t_copied);
  const double single_s = median(t_single), single_private_s = median(t_private), per_tensor_s = median(t_per);
  const double pass_s = median(t_pass);

  if (comm->rank() == 0) {
    nlohmann::json j = {
        {"ranks", comm->size()},
        {"tensors", tensors.size()},
        {"parameters", total},
        {"bytes", total * sizeof(float)},
        {"repetitions", reps},
        {"per_tensor_repetitions", reps},
        {"segment_bytes", owned.opt->options().segment_bytes},
        {"fusion_threshold_bytes", owned.opt->options().fusion_threshold_bytes},
        {"results_checked", true},
        {"step_s", step_s},
        {"step_copy_s", step_copy_s},
        {"single_buffer_s", single_s},
        {"single_buffer_private_s", single_private_s},
        {"gradients_direct", owned.opt->gradients_direct()},
        {"per_tensor_s", per_tensor_s},
        {"ratio_vs_single_buffer", step_s / single_s},
        {"ratio_copy_vs_single_buffer", step_copy_s / single_s},
        {"speedup_vs_per_tensor", per_tensor_s / step_s},
        {"memory_pass_s", pass_s},
        {"step_vs_memory_pass", step_s / pass_s},
        {"step_copy_vs_memory_pass", step_copy_s / pass_s},
        {"per_tensor_vs_memory_pass", per_tensor_s / pass_s},
    };
    std::ofstream(out_path) << j.dump(2) << "\n";
    std::printf("%s\n", j.dump(2).c_str());
  }
  return 0;
}
