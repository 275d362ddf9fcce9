// One worker of the PS benchmark: registers a 25.6 M-parameter float32 model
// (64 variables of 400,000 elements, ResNet-50's size), then times full sync
// steps (push every gradient, pull every parameter). Reads TF_CONFIG; the
// chief prints {"step_s": [...], "bytes_per_step": ...} on stdout.
#include <algorithm>
#include <chrono>
#include <iostream>
#include <vector>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "runtime/ps/client.h"

int main(int argc, char** argv) {
  namespace ps = muster::runtime::ps;
  CLI::App app{"ps_bench_worker"};
  long params = 25600000;
  int variables = 64;
  int steps = 10;
  int warmup = 2;
  app.add_option("--params", params);
  app.add_option("--variables", variables);
  app.add_option("--steps", steps);
  app.add_option("--warmup", warmup);
  CLI11_PARSE(app, argc, argv);
  try {
    ps::SyncReplicasClient client(ps::PsCluster::from_env(), {});
    std::vector<std::vector<float>> values(variables), grads(variables);
    std::vector<ps::Variable> vars;
    std::vector<const float*> grad_ptrs;
    for (int i = 0; i < variables; ++i) {
      const std::size_t n = static_cast<std::size_t>(params / variables + (i < params % variables ? 1 : 0));
      values[i].assign(n, 0.5f);
      grads[i].assign(n, 0.001f);
      vars.push_back({"v" + std::to_string(i), values[i].data(), n});
      grad_ptrs.push_back(grads[i].data());
    }
    client.register_variables(vars);
    client.initialize_or_wait();
    std::vector<double> times;
    for (int s = 0; s < warmup + steps; ++s) {
      auto t0 = std::chrono::steady_clock::now();
      client.step(grad_ptrs);
      double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      if (s >= warmup) times.push_back(dt);
    }
    client.done();
    if (client.is_chief()) {
      nlohmann::json out{{"step_s", times}, {"bytes_per_step", 2.0 * 4.0 * static_cast<double>(params)}};
      std::cout << out.dump() << std::endl;
    }
    return 0;
  } catch (const std::exception& e) {
    std::cerr << "ps_bench_worker: " << e.what() << std::endl;
    return 1;
  }
}
